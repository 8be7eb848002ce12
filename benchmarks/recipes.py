"""Published recipes against pase's layout search: how much faster is the best layout?

    python benchmarks/recipes.py [--time-limit S] [--ids 7,32,...] > benchmarks/results/recipes.md

For every row of benchmarks/data/runs-2024-2026.json that names a recipe layout
(benchmarks/published_runs.py ``row_spec``): the recipe is priced as ``pase evaluate
--layout`` prices it (``row_argv``), then the layout family (pase.perf.search) is searched
with the same model, devices, cluster, global batch, sequence and precision, and the
script prints the speed-up (recipe step / best step) and how the best layout differs from
the recipe in Megatron-LM's terms. Rows that state the same run (model, options, devices,
cluster, batch, precision) share one search. Each search runs under ``--time-limit`` wall
seconds (default 120) and prices the first recipe's neighbourhood first (its micro-batch,
tp, cp, ep and etp, then its pp: ``warm_start``); one that stops there is marked not
exhaustive: its best is the best of the layouts it priced. A recipe outside the family is
named with the feature it lacks.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import published_runs
from provenance import stamp

from pase.api import load_graph
from pase.cluster import get_cluster
from pase.deadline import Deadline, active
from pase.errors import PaseError
from pase.perf.search import LONG, MAX_LAYOUTS, divisors, search_layouts

TIE = 0.005  # speed-ups within half a percent are ties


def megatron(lay: dict) -> dict[str, object]:
    """A layout's JSON (``Estimate.to_dict()["layout"]``) in Megatron-LM's terms."""
    schedule = lay["schedule"]
    vp = int(schedule.split(":")[1]) if schedule.startswith("interleaved:") else 1
    recompute = lay["recompute"]
    if recompute == "full" and lay.get("recompute_layers"):
        recompute = f"full {lay['recompute_layers']} layers/stage"
    return {"tp": lay["tp"], "pp": lay["pp"], "vp": vp, "cp": lay["cp"], "ep": lay["ep"],
            "etp": lay.get("etp") or lay["tp"], "micro-batch": lay["micro_batch"],
            "zero": lay["zero"], "recompute": recompute,
            "schedule": schedule.split(":")[0]}


def differences(recipe: dict, best: dict) -> str:
    a, b = megatron(recipe), megatron(best)
    out = [f"{k} {a[k]}->{b[k]}" for k in a if a[k] != b[k]]
    return ", ".join(out) or "the recipe"


def outside(recipe: dict, graph, devices: int, per_node: int) -> str:
    """Which feature of the recipe the family lacks ('' when it is in the family)."""
    layers = len({op.name.split(".")[0] for op in graph.ops if "." in op.name
                  and op.name.split(".")[0][-1:].isdigit()})
    seq = next((d.size for op in graph.ops for d in op.dims if d.role == "sequence"), 1)
    m = megatron(recipe)
    if m["tp"] > per_node:
        return f"tp {m['tp']} over the {per_node} devices of a node"
    if m["cp"] > 1 and seq < LONG:
        return f"cp at a sequence under {LONG}"
    if m["pp"] > layers or m["pp"] not in divisors(devices):
        return "pp"
    if m["vp"] > 1 and m["pp"] * m["vp"] > layers:
        return "vp"
    if m["etp"] not in (1, m["tp"]):
        return f"etp {m['etp']} (the family has 1 and tp)"
    if m["micro-batch"] > 64:
        return "micro-batch over 64"
    return ""


def rows() -> dict[tuple, list[tuple[dict, dict]]]:
    """Runs (model, options, devices, cluster, batch, precision) -> their (row, spec)s."""
    runs: dict[tuple, list[tuple[dict, dict]]] = {}
    for row in json.loads(published_runs.DATA.read_text())["rows"]:
        spec = published_runs.row_spec(row)
        if isinstance(spec, str):
            continue
        key = (spec["model"], tuple(sorted(spec["options"].items())), spec["devices"],
               spec["cluster"], spec["global_batch"], spec["precision"])
        runs.setdefault(key, []).append((row, spec))
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=120.0,
                    help="wall seconds per search (default 120)")
    ap.add_argument("--ids", default="", help="only the runs holding these row ids (comma list)")
    args = ap.parse_args(argv)
    wanted = {int(i) for i in args.ids.split(",") if i}
    print(stamp())
    print(f"\nsearch time limit: {args.time_limit:g} wall s per run; load average at the start "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    print("| rows | model | GPUs | cluster | recipe (Megatron terms) | recipe step s | best step s "
          "| speed-up | best differs by | family | priced | exhaustive | CPU s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    speedups: list[float] = []
    notes: list[str] = []
    for (model, options, devices, cluster, batch, precision), members in rows().items():
        if wanted and not wanted & {row["id"] for row, _ in members}:
            continue
        recipes: dict[str, tuple[list[int], dict]] = {}
        for row, _ in members:  # the same run may have several recipes
            argv_ = published_runs.row_argv(row)
            priced, error = published_runs.run(argv_)
            if priced is None:
                notes.append(f"row {row['id']}: the recipe is refused: {error}")
                continue
            key = json.dumps(priced["layout"], sort_keys=True)
            recipes.setdefault(key, ([], priced))[0].append(row["id"])
        if not recipes:
            continue
        opts = dict(options)
        # the first recipe's neighbourhood is priced first (a warm start: under the time
        # limit the search has priced it; the order changes nothing else)
        warm = published_runs.row_case(members[0][1])[2]
        start = time.process_time()
        try:
            with active(Deadline(args.time_limit)):
                found = search_layouts(lambda m, o=opts, name=model: load_graph(name, batch=m, **o),
                                       devices, cluster, batch, precision=precision,
                                       max_layouts=MAX_LAYOUTS, warm_start=warm)
        except PaseError as exc:
            notes.append(f"{model} on {devices}: the search is refused: {exc}")
            continue
        cpu = time.process_time() - start
        graph = load_graph(model, batch=1, **opts)
        per_node = get_cluster(cluster, devices).devices_per_node
        for ids, recipe in recipes.values():
            m = megatron(recipe["layout"])
            text = (f"tp{m['tp']} pp{m['pp']} vp{m['vp']} cp{m['cp']} ep{m['ep']} "
                    f"etp{m['etp']} mb{m['micro-batch']} z{m['zero']} {m['recompute']}")
            if found.best is None:
                best_s, speed, diff = "none fits", float("nan"), ""
            else:
                best = found.best.to_dict()
                speed = recipe["step_seconds"] / best["step_seconds"]
                best_s, diff = f"{best['step_seconds']:.4g}", differences(recipe["layout"],
                                                                         best["layout"])
                speedups.append(speed)
                if speed < 1 - 1e-9:
                    why = outside(recipe["layout"], graph, devices, per_node)
                    notes.append(f"rows {ids}: the search is slower than the recipe ("
                                 f"{speed:.3f}x): " + (f"the recipe is outside the family ({why})"
                                                       if why else
                                                       "the time limit stopped the search first"
                                                       if not found.exhaustive else
                                                       "the recipe is in the family: a bug"))
            print(f"| {','.join(map(str, ids))} | {model} | {devices} | {cluster} | {text} | "
                  f"{recipe['step_seconds']:.4g} | {best_s} | {speed:.3f} | {diff} | "
                  f"{found.family:,} | {found.priced:,} | {'yes' if found.exhaustive else 'no'} | "
                  f"{cpu:.0f} |", flush=True)
    if speedups:
        wins = sum(s > 1 + TIE for s in speedups)
        ties = sum(abs(s - 1) <= TIE for s in speedups)
        print(f"\nrecipes: {len(speedups)}; speed-up median {statistics.median(speedups):.3f}x, "
              f"max {max(speedups):.3f}x; pase faster (> {TIE:.1%}) on {wins}, ties on {ties}, "
              f"slower on {len(speedups) - wins - ties}")
    for note in notes:
        print(f"- {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

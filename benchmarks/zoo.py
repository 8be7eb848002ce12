"""The model zoo at p = 8, 64 and 256: sizes, counts, solve time and auto against the baselines.

For each model (default sizes) and device count: vertices, edges and total
configurations; parameters and forward FLOP (``pase.counts``; a multiply-add is
two FLOP, as device peaks count it); the dp's build and solve seconds; and the cost
of the dp's strategy relative to data parallelism and to the megatron baseline
under the calibrated model on ``dgx-a100`` and ``h100-sxm`` (nodes of 8, the
device memory as the cap), with one line describing the dp's strategy. Every cost is
the plan's own price (``price_plan``: the Problem's sum plus the exposed gradient
sync and transient memory), as ``pase solve`` reports it; auto's status is the
certified one (``optimal`` only where the plan's price is the Problem's bound).

Each row is solved by ``auto``, the default solver (the dp, or where the dp's
tables do not fit, the decomposition, marked ``(decompose)``). A (model, p) whose dp
is out of reach and that ``auto`` would still give to the dp is not run: the dry run
(``pase.solvers.auto.dry_run``, no cost arrays; repeated blocks folded at alpha-beta's
rate) predicts its seconds first, and a prediction over ``--max-seconds`` (default 60)
is marked with the prediction instead, as is one whose cost arrays are predicted over
``--max-build-gib`` (default 4, pase's build budget); a solve that still overruns (the memory-capped
dp can be slower than its uncapped prediction) stops at the same time limit and
is marked too.

    python benchmarks/zoo.py [--models gpt2,llama2-7b] [--devices 8,64,256]
                             [--max-seconds 60] [--precision bf16]
                             [--out benchmarks/results/zoo.md]
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from provenance import stamp

from pase.api import build_problem, build_space, certified, make_cost_model, run_solver
from pase.costing import problem_shape
from pase.counts import counts
from pase.errors import PaseError, TimeLimitError
from pase.solvers import auto

ZOO = ["bert-base", "bert-large", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt3",
       "gpt3-175b", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "mixtral-8x7b",
       "switch-base-8", "vit-b16", "vit-l16", "densenet121"]
CLUSTERS = ("dgx-a100", "h100-sxm")
# Ops whose configs describe a strategy: (label, test on the op name or kind).
GROUPS = (("attention", lambda op: op.name.endswith(".scores")),
          ("mlp", lambda op: op.name.endswith((".fc1", ".mlp.gate", ".mlp.wi"))),
          ("experts", lambda op: op.name.endswith((".experts.gate", ".experts.wi"))),
          ("conv", lambda op: op.kind == "Conv"),
          ("head", lambda op: op.name in ("lm_head", "head", "mlm.decoder", "classifier")))
SHORT = {"batch": "batch", "heads": "heads", "parameter": "hidden", "vocabulary": "vocab",
         "sequence": "seq", "channel": "width", "expert": "experts", "other": "other"}


def say(*parts) -> None:
    print(*parts, flush=True)


def describe(graph, space, choice) -> str:
    """``attention: heads 8 x batch 8; experts: experts 8`` (the most common split per group)."""
    out = []
    for label, test in GROUPS:
        seen = Counter()
        for i, op in enumerate(graph.ops):
            if test(op):
                roles: dict[str, int] = {}
                for d, f in zip(op.dims, space.configs[i][choice[i]]):
                    if f > 1:
                        key = SHORT.get(d.role, d.role)
                        roles[key] = roles.get(key, 1) * int(f)
                seen[" x ".join(f"{r} {f}" for r, f in sorted(roles.items(), key=lambda x: -x[1]))
                     or "none"] += 1
        if seen:
            out.append(f"{label}: {seen.most_common(1)[0][0]}")
    return "; ".join(out)


def _ratio(a: float, b: float | None) -> str:
    return "infeasible" if b is None or not math.isfinite(b) else f"{a / b:.3f}"


def _options(precision: str | None) -> dict:
    return {} if precision is None else {"precision": precision}


def solve_on(model: str, p: int, cluster: str, max_seconds: float, precision: str | None) -> dict:
    start = time.perf_counter()
    built = build_problem(model, p, "calibrated", cluster=cluster,
                          cost_options=_options(precision))
    build_s = time.perf_counter() - start
    cap = built.problem.memory_cap

    def priced(sol):  # the plan's own price and the status it supports
        return certified(sol, built.cost_model.price_plan(built.graph, built.problem, sol.choice),
                         cap)

    row = {"build_s": build_s}
    try:
        sol = run_solver("auto", built.problem, time_limit=max_seconds)
    except TimeLimitError:
        row.update(status=f"dp time limit ({max_seconds:g} s)")
        return row
    except PaseError as exc:  # TooLargeError
        row.update(status=f"out of reach: {str(exc)[:80]}")
        return row
    row["solve_s"] = sol.wall_time
    if sol.choice is not None:
        sol = priced(sol)
    if sol.choice is None:
        row["status"] = f"infeasible (least memory {built.problem.min_memory() / 2**30:.1f} GiB)"
        return row
    row["status"] = sol.status.name.lower() + (
        f" ({sol.stats['method']}{f', gap {sol.gap:.2g}' if sol.gap else ''})"
        if sol.stats.get("method") == "decompose" else "")
    row["cost_s"] = sol.cost
    for base in ("data-parallel", "megatron"):
        other = run_solver(base, built.problem)
        if other.choice is not None and math.isfinite(other.cost):
            other = priced(other)
            if cap is not None and other.status.name == "FEASIBLE" and \
                    built.cost_model.price_plan(built.graph, built.problem,
                                                other.choice)["memory_bytes"] > cap:
                other = replace(other, cost=math.inf)  # its transient memory breaks the cap
        row[base] = _ratio(sol.cost, other.cost if other.choice is not None else None)
    row["strategy"] = describe(built.graph, built.space, sol.choice)
    return row


def run_one(model: str, p: int, max_seconds: float, max_build_bytes: float,
            precision: str | None) -> dict:
    graph, space = build_space(model, p)
    # The dry run finds repeated blocks by the paper model's structural keys, prices their
    # fold at alpha-beta's rate (its edges read the placement) and counts no probe (every
    # row is capped at the device memory): what `pase solve --dry-run --cluster C` says.
    shape = replace(problem_shape(graph, space, cost_model=make_cost_model("paper")),
                    port_classes=False)
    # The build budget holds the arrays the calibrated model builds: a matrix shared by its
    # keys counts once.
    built_shape = problem_shape(graph, space, cost_model=make_cost_model(
        "calibrated", cluster=CLUSTERS[0], **_options(precision)).bind(graph, p))
    c = counts(graph)
    row = {"model": model, "p": p, "vertices": shape.num_vertices, "edges": len(shape.edges),
           "configs": int(sum(space.sizes)), "parameters": c.parameters, "flops": c.forward_flops}
    plan = auto.dry_run(shape, capped=True)
    best = next(o for o in plan["orderings"] if o["ordering"] == plan["auto_ordering"])
    decompose = plan["auto"]["method"] == "decompose"  # auto's decomposition: never skipped
    predicted = plan["auto"]["estimated_seconds"]
    row["predicted_s"] = predicted
    if built_shape.array_bytes > max_build_bytes:
        row["skipped"] = (f"cost arrays {built_shape.array_bytes / 2**30:.3g} GiB; auto predicted "
                          f"{predicted:.3g} s")
        return row
    if not decompose and predicted > max_seconds:
        row["skipped"] = (f"predicted {predicted:.3g} s, "
                          f"{best['peak_table_bytes'] / 2**30:.3g} GiB of tables "
                          f"(dependent set {best['max_dependent_set']})")
        return row
    for cluster in CLUSTERS:
        row[cluster] = solve_on(model, p, cluster, max_seconds, precision)
    return row


def _cell(row: dict, cluster: str) -> str:
    r = row.get(cluster)
    if r is None:
        return "-"
    if "cost_s" not in r:
        return r["status"]
    return f"{r['data-parallel']} / {r['megatron']}"


def _seconds(r: dict) -> str:
    if "solve_s" in r:
        return f"{r['solve_s']:.1f}"
    limit = re.search(r"time limit \((\S+) s\)", r.get("status", ""))
    return f"> {limit.group(1)}" if limit else "-"


def markdown(rows: list[dict]) -> str:
    lines = ["| model | p | vertices | edges | configs | params | fwd FLOP | build s (a100 / h100) "
             "| solve s (a100 / h100) | status (a100 / h100) "
             "| dgx-a100: auto/data-par / auto/megatron | h100-sxm: auto/data-par / auto/megatron "
             "| auto's strategy (h100-sxm) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        a100, h100 = row.get("dgx-a100") or {}, row.get("h100-sxm") or {}
        if "skipped" in row:
            times = ("-", f"out of reach: {row['skipped']}", "-")
        else:
            times = (" / ".join(f"{r.get('build_s', 0):.1f}" for r in (a100, h100)),
                     " / ".join(_seconds(r) for r in (a100, h100)),
                     " / ".join(r.get("status", "-") for r in (a100, h100)))
        lines.append(
            f"| {row['model']} | {row['p']} | {row['vertices']} | {row['edges']} | {row['configs']:,} "
            f"| {row['parameters'] / 1e9:.3f}B | {row['flops']:.3g} | {times[0]} | {times[1]} | {times[2]} "
            f"| {_cell(row, 'dgx-a100')} | {_cell(row, 'h100-sxm')} | {h100.get('strategy', '-')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(ZOO))
    ap.add_argument("--devices", default="8,64,256")
    ap.add_argument("--max-seconds", type=float, default=60.0)
    ap.add_argument("--precision", default=None,
                    help="the calibrated model's precision (default: the device's, bf16 on "
                         "A100 and H100: 2-byte activations, 16 bytes of state a parameter)")
    ap.add_argument("--max-build-gib", type=float, default=4.0,
                    help="skip a (model, p) whose cost arrays are predicted larger than this")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "zoo.md"))
    ap.add_argument("--rows", default=None, help="also append each row as JSON to this file")
    ap.add_argument("--from-rows", default=None,
                    help="write the table from these comma-separated row files (runs nothing; "
                         "a later file's row for the same model and p wins)")
    args = ap.parse_args(argv)
    rows = []
    if args.from_rows:
        latest: dict[tuple[str, int], dict] = {}  # a later file's row replaces an earlier one
        for path in args.from_rows.split(","):
            for line in Path(path).read_text().splitlines():
                if line:
                    row = json.loads(line)
                    latest[(row["model"], row["p"])] = row
        order = {m: i for i, m in enumerate(ZOO)}
        rows = sorted(latest.values(), key=lambda r: (order.get(r["model"], len(order)), r["p"]))
        Path(args.out).write_text(HEADER + f"\n{stamp()}.\n\n" + markdown(rows) + FOOTER)
        return 0
    for model in args.models.split(","):
        for p in (int(x) for x in args.devices.split(",")):
            start = time.perf_counter()
            say(f"{model} p={p} ...")
            row = run_one(model, p, args.max_seconds, args.max_build_gib * 2**30,
                          args.precision)
            rows.append(row)
            say(f"  {time.perf_counter() - start:.1f} s: {json.dumps(row, default=str)}")
            if args.rows:
                with open(args.rows, "a") as f:
                    f.write(json.dumps(row, default=str) + "\n")
    text = markdown(rows)
    print(text)
    Path(args.out).write_text(HEADER + f"\n{stamp()}.\n\n" + text + FOOTER)
    return 0


HEADER = """# Model zoo: auto against the baselines

`python benchmarks/zoo.py` on this project's 2-core machine. Default sizes of each model
(`pase models`); the calibrated cost model (`cost_models/calibrated.py`: the performance
model's rules per op; bf16 on A100 and H100, so 2-byte activations, weights and gradients
and 16 bytes of state a parameter with Adam's fp32 moments and master weight; fused
attention; no recomputation, no ZeRO) with the device memory as the cap; clusters of
8-device nodes grown to p. The solver is `auto`, the default: the dp where its plan fits,
otherwise the decomposition (`status` marks its answers `(decompose)`, with the gap when
the answer is feasible rather than proven optimal). Every cost is the plan's own price
(the Problem's sum plus the exposed gradient sync and transient memory, what `pase solve`
reports), and the status is the certified one: `feasible` where that price is above the
Problem's bound. Ratios are auto's price over the baseline's (below 1: auto's strategy is
faster); `infeasible` means the baseline does not fit the memory cap. FLOP: pase's forward
FLOP (a multiply-add is two FLOP; an embedding is a gather, no FLOP). Out-of-reach rows
show the dry run's prediction (`pase solve --dry-run`) instead. The build budget counts
the arrays the calibrated model builds, a shared matrix once.

"""
FOOTER = ""

if __name__ == "__main__":
    sys.exit(main())

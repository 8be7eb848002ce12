"""Scale of the exact search: build and solve seconds, table entries and peak RSS of
the dp on models x device counts, with each technique switched off in turn.

Each row is solved by ``auto``, the default solver (``method``: the dp, or the
decomposition where the dp's tables do not fit; ``gap``: its proven relative gap, 0
when optimal). Every run is its own process (so its peak RSS, ``ru_maxrss``, is its own), niced,
and stopped at ``--time-limit`` seconds (the dp's ``time_limit``; the process is
killed a little later). Variants, each a list of dp ``--option`` flags or
``share=false``:

- ``all``: what ``pase solve`` does (build once, blocks, pruning);
- ``prune=false``, ``blocks=false``: the dp (through ``auto``) with that technique off;
- ``share=false``: the Problem built op by op, edge by edge (no shared arrays);
- ``mesh=AxB``: the mesh-shaped configuration space (``ConfigSpace(mesh=...)``)
  instead of the paper's divisor space, so its cost column shows the trade-off;
  ``powers_of_two=true``: the divisor space's power-of-two factors only.

The ratios are the variant's solve (or build) seconds over the ``all`` row's.
``dry s`` is ``pase solve --dry-run``'s prediction of ``auto`` on the row, with its
cost model and cap (the dp with blocks folded as ``solve`` would; where it announces
a probe, "P or Q": the probe proving at its first step, or all its steps then the dp;
run before the build, outside its timing), ``build s (cpu)`` the build's wall
(CPU) seconds, ``cpu s`` the solve's CPU seconds, ``total cpu`` both (CPU seconds are
robust to a loaded machine). The calibrated model's search may run a bounding solve in
a forked process beside the first (:mod:`pase.cost_models.calibrated_search`): its CPU
seconds count in ``cpu s``, its peak RSS is added to the row's (``peak RSS MiB``, the
sum of the two processes' peaks, which count their shared pages twice).

    nice -n 10 python benchmarks/scale.py [--models transformer,gpt2:layers=12]
        [--devices 64,256,1024] [--variants all,prune=false,blocks=false,mesh=32x32]
        [--cost-model paper] [--cluster h100-sxm] [--memory-cap 80GiB]
        [--time-limit 300] [--out benchmarks/results/scale.md]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from provenance import stamp

HERE = Path(__file__).resolve().parent
DEFAULT_VARIANTS = "all,prune=false,blocks=false"


def parse_model(spec: str) -> tuple[str, dict[str, int]]:
    """``gpt2:layers=12`` -> ("gpt2", {"layers": 12})."""
    name, *opts = spec.split(":")
    return name, {k: int(v) for k, v in (o.split("=", 1) for o in opts)}


def dry_seconds(report: dict) -> str:
    """What ``pase solve --dry-run`` predicts ``auto`` takes: its method's estimate, or
    where it announces a probe before a long dp, both outcomes: the probe's first step
    proving the optimum, or all its steps and then the dp."""
    a = report["auto"]
    if "probe" not in a:
        return _fmt(a["estimated_seconds"])
    probe = a["probe"]
    return (f"{_fmt(probe['estimated_seconds'])} or "
            f"{_fmt(probe['estimated_seconds_at_most'] + a['estimated_seconds'])}")


def _cpu() -> float:
    """CPU seconds of this process and of its reaped children (the certified search runs
    its x = 1 solve in a forked process: its seconds count too)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def worker(spec: str, devices: int, variant: str, cost_model: str, time_limit: float,
           cluster: str | None = None, memory_cap: str | None = None) -> dict:
    """One run, in this process: build, then solve; a dict of figures."""
    from pase import api
    from pase.api import build_space, make_cost_model
    from pase.errors import PaseError, TimeLimitError
    from pase.options import parse_bytes
    from pase.solvers import auto

    name, model_options = parse_model(spec)
    options: dict[str, object] = {}
    share = True
    mesh = None
    powers_of_two = False
    if variant != "all":
        for flag in variant.split("+"):
            key, value = flag.split("=")
            if key == "share":
                share = value != "false"
            elif key == "mesh":
                mesh = value
            elif key == "powers_of_two":
                powers_of_two = value != "false"
            else:
                options[key] = value != "false"
    out: dict[str, object] = {"model": spec, "p": devices, "variant": variant}
    if not options:  # the dry run first, outside the build's timing
        try:
            out["dry_s"] = dry_seconds(api.dry_run(
                name, devices, model_options=model_options, mesh=mesh,
                powers_of_two=powers_of_two, cost_model=cost_model, cluster=cluster,
                memory_cap=memory_cap or "none"))
        except PaseError:
            pass
    start, build_cpu = time.perf_counter(), time.process_time()
    graph, space = build_space(name, devices, model_options=model_options, mesh=mesh,
                               powers_of_two=powers_of_two)
    model = make_cost_model(cost_model, **({"cluster": cluster} if cluster else {}))
    if not share:
        model.vertex_key = lambda *a: None  # every op and edge priced on its own
        model.edge_key = lambda *a: None
    try:
        problem = model.problem(graph, space)
    except PaseError as e:
        out.update(status="refused", error=str(e)[:200])
        return out
    if memory_cap:
        problem = problem.with_memory_cap(parse_bytes(memory_cap))
    out["build_s"] = time.perf_counter() - start
    out["build_cpu_s"] = time.process_time() - build_cpu
    out["configs"] = int(problem.sizes.sum())
    start, cpu = time.perf_counter(), _cpu()
    try:
        if hasattr(model, "search"):  # the calibrated model's certified search (its bounds)
            solution, _ = model.search(graph, problem,
                                       lambda pr: auto.solve(pr, time_limit=time_limit, **options))
        else:
            solution = auto.solve(problem, time_limit=time_limit, **options)
    except TimeLimitError:
        out.update(status="time_limit", solve_s=time.perf_counter() - start)
        return out
    except PaseError as e:
        out.update(status="refused", error=str(e)[:200], solve_s=time.perf_counter() - start)
        return out
    out["solve_s"] = time.perf_counter() - start
    out["cpu_s"] = _cpu() - cpu  # with a bounding solve's forked process, once reaped
    stats = solution.stats
    out.update(status=str(solution.status), cost=solution.cost, gap=solution.gap,
               method=stats.get("method"), bounding_solves=stats.get("bounding_solves"),
               table_entries=stats.get("table_entries"), pruned=stats.get("pruned"),
               blocks=stats.get("blocks_found", 0), removed=stats.get("vertices_removed", 0),
               capped=stats.get("blocks_capped", stats.get("capped")))
    return out


def run_one(spec: str, devices: int, variant: str, cost_model: str, time_limit: float,
            cluster: str | None = None, memory_cap: str | None = None) -> dict:
    """The worker in a niced child process (which reports its own peak RSS)."""
    cmd = [sys.executable, __file__, "--worker", spec, str(devices), variant, cost_model,
           str(time_limit), cluster or "-", memory_cap or "-"]
    started = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=time_limit * 1.5 + 60,
                              preexec_fn=lambda: os.nice(10))
    except subprocess.TimeoutExpired:
        return {"model": spec, "p": devices, "variant": variant, "status": "killed",
                "wall_s": time.perf_counter() - started}
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode or not lines:
        return {"model": spec, "p": devices, "variant": variant, "status": "crashed",
                "error": (done.stderr.strip().splitlines() or ["?"])[-1][:200]}
    row = json.loads(lines[-1])
    row["wall_s"] = time.perf_counter() - started
    return row


def _fmt(x, digits=2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}" if abs(x) < 1e5 else f"{x:.3g}"
    return str(x)


def _method(r: dict) -> str:
    """The solver's method, and "x N" for the calibrated model's N bounding solves."""
    method, solves = r.get("method") or "-", r.get("bounding_solves")
    return f"{method} x{solves}" if solves and solves > 1 else method


def _cap(r: dict) -> str:
    capped = r.get("capped")
    if capped is None:
        return "-"
    return f"{capped}"


def table(rows: list[dict]) -> str:
    head = ("| model | p | variant | status | method | gap | build s (cpu) | solve s | cpu s | total cpu | "
            "dry s | solve ratio | build ratio | table entries | pruned | blocks (vertices removed) | "
            "peak RSS MiB | cost | cap |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    base = {(r["model"], r["p"]): r for r in rows if r["variant"] == "all"}
    for r in rows:
        ref = base.get((r["model"], r["p"]), {})
        ratio = (r.get("solve_s") / ref["solve_s"]) if r.get("solve_s") and ref.get("solve_s") else None
        bratio = (r.get("build_s") / ref["build_s"]) if r.get("build_s") and ref.get("build_s") else None
        blocks = f"{r.get('blocks', 0)} ({r.get('removed', 0)})" if "blocks" in r else "-"
        total = (r["build_cpu_s"] + r["cpu_s"]) if "build_cpu_s" in r and "cpu_s" in r else None
        gap = r.get("gap")
        lines.append(
            f"| {r['model']} | {r['p']} | {r['variant']} | {r['status']} | {_method(r)} | "
            f"{'-' if gap is None else f'{gap:.2g}'} | {_fmt(r.get('build_s'))} "
            f"({_fmt(r.get('build_cpu_s'))}) | "
            f"{_fmt(r.get('solve_s'))} | {_fmt(r.get('cpu_s'))} | {_fmt(total)} | {r.get('dry_s', '-')} | "
            f"{_fmt(ratio)} | {_fmt(bratio)} | "
            f"{_fmt(r.get('table_entries'))} | {_fmt(r.get('pruned'))} | {blocks} | "
            f"{_fmt(r.get('peak_mib'), 0)} | {_fmt(r.get('cost'), 6)} | {_cap(r)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="transformer,gpt2")
    parser.add_argument("--devices", default="64,256,1024")
    parser.add_argument("--variants", default=DEFAULT_VARIANTS)
    parser.add_argument("--cost-model", default="paper")
    parser.add_argument("--cluster", default=None, help="cluster preset (alpha-beta)")
    parser.add_argument("--memory-cap", default=None, help="memory cap per device, e.g. 80GiB")
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--out", default=None, help="markdown file for the table")
    parser.add_argument("--worker", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        spec, devices, variant, cost_model, limit, cluster, cap = args.worker
        row = worker(spec, int(devices), variant, cost_model, float(limit),
                     None if cluster == "-" else cluster, None if cap == "-" else cap)
        # KiB on Linux. A forked bounding solve's own peak (the largest child's) is added:
        # both processes count the pages they share, so the sum bounds what they held.
        row["peak_mib"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                           + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
        print(json.dumps(row), flush=True)
        return 0
    rows = []
    for spec in args.models.split(","):
        for devices in (int(p) for p in args.devices.split(",")):
            for variant in args.variants.split(","):
                print(f"{spec} p={devices} {variant} ...", end=" ", flush=True)
                row = run_one(spec, devices, variant, args.cost_model, args.time_limit,
                              args.cluster, args.memory_cap)
                rows.append(row)
                print(f"{row['status']} ({row.get('method', '-')}) build {_fmt(row.get('build_s'))} s "
                      f"(cpu {_fmt(row.get('build_cpu_s'))}), solve "
                      f"{_fmt(row.get('solve_s'))} s (cpu {_fmt(row.get('cpu_s'))}, dry "
                      f"{row.get('dry_s', '-')}), cost {_fmt(row.get('cost'), 6)}, peak {_fmt(row.get('peak_mib'), 0)} MiB, "
                      f"pruned {_fmt(row.get('pruned'))}, blocks {row.get('blocks', '-')}", flush=True)
    text = table(rows)
    print(text)
    if args.out:
        Path(args.out).write_text(
            f"# Scale of the exact search\n\n{stamp()}.\n\n`{' '.join(['python benchmarks/scale.py'] + (argv if argv is not None else sys.argv[1:]))}`"
            f" ({args.cost_model} cost model, dp time limit {args.time_limit:g} s; ratios are "
            f"over the `all` row)\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

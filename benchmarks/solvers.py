"""Every solver on the paper's graphs: cost and time relative to dp, as one pase sweep.

    python benchmarks/solvers.py [--models ...] [--devices 8 32] [--time-limit 600]
                                 [--workers 1] [--db solvers.sqlite]

The grid (models x device counts x solvers, paper cost model, seed 0) runs
through the sweep engine (:mod:`pase.sweeps`): each run in its own process
under the time limit (killed at twice the limit plus 10 s) and ``--memory-limit``,
recorded in a SQLite store, so an interrupted benchmark resumes with ``--db``.
One worker by default, so no two runs share the cores and times are comparable.
Printed: each solver's status, cost / dp cost, solve time / dp time; solvers that
refuse (an ILP over its size limit) are listed as refused.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from provenance import stamp

import pase

SOLVERS = ["dp", "ilp-highs", "ilp-cpsat", "ilp-cbc", "greedy", "mcmc", "data-parallel", "owt",
           "megatron"]


def spec(models: list[str], devices: list[int], solvers: list[str], time_limit: float,
         memory_limit: str | None) -> dict:
    run = {"time_limit": time_limit, "seed": 0}
    if memory_limit:
        run["memory_limit"] = memory_limit
    return {"grid": {"model": models, "devices": devices, "solver": solvers,
                     "cost_model": ["paper"]}, "run": run}


def table(frame) -> list[str]:
    """The markdown rows, one per run, grid order; ratios against the dp of the same (model, p)."""
    lines = ["| model | p | solver | status | cost / dp | time / dp | seconds |",
             "|---|---|---|---|---|---|---|"]
    for _, r in frame.iterrows():
        dp = frame[(frame.model == r.model) & (frame.devices == r.devices) & (frame.solver == "dp")]
        dp_cost = dp["cost"].iloc[0] if len(dp) else None
        dp_time = dp["solve_seconds"].iloc[0] if len(dp) else None
        if r.cost != r.cost or r.cost is None or dp_cost is None or dp_cost != dp_cost:
            lines.append(f"| {r.model} | {r.devices} | {r.solver} | {r.status} | - | - | - |")
            continue
        time_ratio = r.solve_seconds / dp_time if dp_time else float("inf")
        lines.append(f"| {r.model} | {r.devices} | {r.solver} | {r.status} | "
                     f"{r.cost / dp_cost:.4f} | {time_ratio:,.1f}x | {r.solve_seconds:.3f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+",
                        default=["alexnet", "rnnlm", "inception_v3", "resnet101", "transformer"])
    parser.add_argument("--devices", nargs="+", type=int, default=[8, 32])
    parser.add_argument("--solvers", nargs="+", default=SOLVERS)
    parser.add_argument("--time-limit", type=float, default=600.0)
    parser.add_argument("--memory-limit", default=None, help="per run, e.g. 16GiB")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--db", default=None, help="result store (default: a temporary one)")
    args = parser.parse_args()
    print(f"# {stamp()}; time limit "
          f"{args.time_limit:g} s per solver; command: python {' '.join(sys.argv)}")
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or str(Path(tmp) / "solvers.sqlite")
        frame = pase.sweeps.sweep(spec(args.models, args.devices, args.solvers, args.time_limit,
                                       args.memory_limit),
                                  db, workers=args.workers, quiet=False)
        print("\n".join(table(frame)), flush=True)


if __name__ == "__main__":
    import pase.sweeps  # noqa: F401  (pase.sweeps.sweep; `import pase` alone does not load it)

    main()

"""Every solver on the paper's graphs: cost and time relative to dp, in one process.

    python benchmarks/solvers.py [--models ...] [--devices 8 32] [--time-limit 600]

For each graph and device count the same Problem goes to every solver. Printed:
each solver's status, cost / dp cost, solve time / dp time, and for the ILP
backends whether they proved optimality within the time limit. Solvers that
refuse (exhaustive over its limit) are listed as refused.
"""
from __future__ import annotations

import argparse
import platform
import sys
import time

import pase
from pase.comparison import compare_problem

SOLVERS = ["dp", "ilp-highs", "ilp-cpsat", "ilp-cbc", "greedy", "mcmc", "data-parallel", "owt",
           "megatron"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+",
                        default=["alexnet", "rnnlm", "inception_v3", "resnet101", "transformer"])
    parser.add_argument("--devices", nargs="+", type=int, default=[8, 32])
    parser.add_argument("--solvers", nargs="+", default=SOLVERS)
    parser.add_argument("--time-limit", type=float, default=600.0)
    args = parser.parse_args()
    print(f"# {platform.machine()}, Python {platform.python_version()}, time limit "
          f"{args.time_limit:g} s per solver; command: python {' '.join(sys.argv)}")
    print("| model | p | solver | status | cost / dp | time / dp | seconds |")
    print("|---|---|---|---|---|---|---|")
    for model in args.models:
        for p in args.devices:
            built = pase.build_problem(model, p)
            start = time.perf_counter()
            rows = compare_problem(built, args.solvers, time_limit=args.time_limit, seed=0)
            dp = next(r for r in rows if r.solver == "dp")
            for r in rows:
                if r.total_cost is None:
                    print(f"| {model} | {p} | {r.solver} | {r.status} | - | - | - |")
                    continue
                cost_ratio = r.total_cost / dp.total_cost
                time_ratio = r.solve_seconds / dp.solve_seconds
                print(f"| {model} | {p} | {r.solver} | {r.status} | {cost_ratio:.4f} | "
                      f"{time_ratio:,.1f}x | {r.solve_seconds:.3f} |", flush=True)
            print(f"# {model} p={p}: {time.perf_counter() - start:.1f} s in all", file=sys.stderr)


if __name__ == "__main__":
    main()

"""DP search time per ordering on the paper's graphs, next to the paper's Table I.

    python benchmarks/search_time.py [--devices 4 8 16 32 64] [--models ...] [--repeat 3]

For each graph and device count: the time to build the Problem, the plain dp's
solve time with each ordering (the paper's algorithm: no block folding, no
pruning; best of --repeat), the Python-heap peak during the generateseq solve
(tracemalloc, which sees numpy's buffers, in a separate untimed run), the default dp's time (`pase solve`:
ordering auto, blocks and pruning where they apply), and the ratio of the paper
prototype's time to the plain generateseq dp's. The paper's figures were measured on a Sandy Bridge
Xeon; ours on whatever runs this script, so the ratio is indicative only.
Orderings whose predicted peak exceeds the memory budget are reported as OOM,
as the paper reports its breadth-first variant.
"""
from __future__ import annotations

import argparse
import time
import tracemalloc

from provenance import stamp

import pase
from pase.errors import TooLargeError
from pase.solvers import dp

# Table I of the paper, seconds at p = 4, 8, 16, 32, 64 (also in docs/cost-model.md, "Search times"). AlexNet
# and RNNLM are given only as ranges there: 0.23-0.48 s and 0.06-0.22 s.
PAPER_SECONDS = {
    "inception_v3": {4: 14.0, 8: 20.0, 16: 40.0, 32: 86.0, 64: 196.0},
    "transformer": {4: 9.8, 8: 29.0, 16: 131.0, 32: 553.0, 64: 1883.0},
}
PAPER_RANGES = {"alexnet": "0.23-0.48", "rnnlm": "0.06-0.22"}
ORDERINGS = ("generateseq", "min-fill", "bfs")


def measure(problem, ordering: str, repeat: int, **options) -> tuple[float, int] | str:
    try:
        dp.plan(problem, ordering)
        best = float("inf")
        for _ in range(repeat):  # timed without tracemalloc, which slows numpy down
            start = time.perf_counter()
            dp.solve(problem, ordering=ordering, **options)
            best = min(best, time.perf_counter() - start)
        tracemalloc.start()
        dp.solve(problem, ordering=ordering, **options)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return best, peak
    except TooLargeError:
        tracemalloc.stop()
        plan = dp.plan(problem, ordering)
        at_least = "" if plan.complete else ">= "  # planning stopped at a step too wide to run
        return f"OOM (needs {at_least}{plan.peak_bytes / 2**30:.3g} GiB)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+",
                        default=["alexnet", "resnet101", "inception_v3", "rnnlm", "transformer"])
    parser.add_argument("--devices", nargs="+", type=int, default=[4, 8, 16, 32, 64])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"# {stamp()}")
    header = ["model", "p", "build s"] + [f"{o} s" for o in ORDERINGS] + ["peak MiB", "default s",
                                                                          "paper s", "paper / ours"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for model in args.models:
        for p in args.devices:
            start = time.perf_counter()
            built = pase.build_problem(model, p)
            build = time.perf_counter() - start
            cells = [model, str(p), f"{build:.2f}"]
            best_time, best_peak = None, None
            for ordering in ORDERINGS:
                result = measure(built.problem, ordering, args.repeat, blocks=False, prune=False)
                if isinstance(result, str):
                    cells.append(result)
                    continue
                seconds, peak = result
                cells.append(f"{seconds:.3f}")
                if ordering == "generateseq":
                    best_time, best_peak = seconds, peak
            paper = PAPER_SECONDS.get(model, {}).get(p)
            cells.append(f"{best_peak / 2**20:.1f}" if best_peak is not None else "-")
            default = measure(built.problem, "auto", args.repeat)
            cells.append(default if isinstance(default, str) else f"{default[0]:.3f}")
            cells.append(f"{paper:g}" if paper else PAPER_RANGES.get(model, "-"))
            cells.append(f"{paper / best_time:,.0f}x" if paper and best_time else "-")
            print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()

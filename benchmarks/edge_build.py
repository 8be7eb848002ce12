"""How much wall time does pricing the edge matrices on two CPUs save in a large build?

    python benchmarks/edge_build.py [--model gpt3-175b] [--devices 1024] [--repeats 2]

A Problem's distinct edge matrices are priced half in a forked child where they hold
many entries (`pase.costing.edge_sums`). This script builds the same Problem (the
calibrated model on h100-sxm with the 80 GiB cap, as `pase solve MODEL -p N --cluster
h100-sxm` does) in one process and on two CPUs, in turn in this process, and prints the
wall seconds of each build (the best of `--repeats`), their ratio, and whether every
edge matrix is equal entry for entry. The gain needs a second idle CPU: run it alone.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from provenance import stamp

from pase import api
from pase.costing import edge_sums


def build(model: str, devices: int, parallel_from: int | float) -> tuple[float, list]:
    edge_sums.PARALLEL_MIN_ENTRIES = parallel_from
    start = time.perf_counter()
    problem = api.build_problem(model, devices, cluster="h100-sxm", memory_cap="80GiB").problem
    return time.perf_counter() - start, problem.edge_costs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="gpt3-175b")
    parser.add_argument("--devices", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    print(stamp())
    default = edge_sums.PARALLEL_MIN_ENTRIES
    runs: dict[str, list[float]] = {"one process": [], "two CPUs": []}
    kept: dict[str, list] = {}
    for _ in range(args.repeats):
        for name, threshold in (("one process", float("inf")), ("two CPUs", default)):
            seconds, kept[name] = build(args.model, args.devices, threshold)
            runs[name].append(seconds)
    edge_sums.PARALLEL_MIN_ENTRIES = default
    same = all(np.array_equal(a, b) for a, b in zip(kept["one process"], kept["two CPUs"]))
    base = min(runs["one process"])
    print(f"{args.model} on {args.devices} h100-sxm, calibrated, build of the whole Problem "
          f"(best of {args.repeats})\n")
    print("| edges priced | wall s | ratio |")
    print("|---|---|---|")
    for name, seconds in runs.items():
        print(f"| {name} | {min(seconds):.1f} | {min(seconds) / base:.3f} |")
    print(f"\nevery edge matrix equal: {same}")


if __name__ == "__main__":
    main()

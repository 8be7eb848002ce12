"""A mixed A100/V100 cluster: balanced splits, even splits, and the A100s alone.

    python benchmarks/hetero.py [--cluster dgx-a100x2+dgx1-v100x2] [--cost-model calibrated]
                                [--models gpt2:16 gpt2:512:layers=2 ...] [--output FILE.md]

For each model (``NAME:BATCH``, then optional ``:KEY=INT`` model options) it solves with dp under the cost model
(``--cost-model``: ``calibrated``, the default, or ``alpha-beta``) and simulates one training
step (pase.sim) on the same cluster:

- ``A100s alone``: the cluster's fastest group only (``-p`` = its size; the
  baseline of the ratios);
- ``dp, even``: every device, even tiles (an op whose split fits in the A100
  group runs there, a wider one on all devices at the V100's pace);
- ``dp, balanced``: every device, batch shares proportional to device speed;
- ``data-parallel, balanced``: for reference, the batch split over every device
  with balanced shares (the data-parallel baseline solver).

Ratios are simulated step times (the simulator's own rules, efficiency 0.5, for every
row) against the baseline run in the same process.
``ops on all`` counts the ops dp placed on both device types. Powers-of-two
splits keep the search small (a few minutes in all on two CPU cores).
"""
from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from pathlib import Path

from provenance import stamp

import pase
from pase.api import load_graph
from pase.cluster import get_cluster
from pase.sim import simulate

MODELS = ("gpt2:256", "gpt2:512:layers=2", "transformer:1024", "alexnet:8192")


def run_one(model: str, batch: int, options: dict, cluster_name: str, devices: int, split: str,
            solver: str = "dp", cost_model: str = "calibrated") -> dict:
    start = time.perf_counter()
    strategy = pase.solve(model, devices, solver, cost_model=cost_model, cluster=cluster_name,
                          batch=batch, cost_options={"split": split}, powers_of_two=True,
                          model_options=options)
    solved = time.perf_counter() - start
    graph = load_graph(model, batch=batch, **options)
    # the simulator's own rules for every row (a calibrated plan's carried prices would
    # time the A100-only baseline but not a mixed-cluster run): one yardstick for all
    sim = simulate(graph, strategy, cluster_name, devices, split=split, timeline=False,
                   own_prices=False)
    first = get_cluster(cluster_name).prefixes(devices)
    wide = sum(math.prod(c.values()) > first[0] for c in strategy.configs.values()) if first else 0
    return {"predicted": strategy.total_cost, "simulated": sim.step_time, "ops": len(graph.ops),
            "wide": wide, "seconds": time.perf_counter() - start, "solve_seconds": solved,
            "peak_gib": float(sim.peak_memory.max()) / 2**30}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="dgx-a100x2+dgx1-v100x2")
    ap.add_argument("--models", nargs="+", default=list(MODELS), metavar="NAME:BATCH[:KEY=INT]")
    ap.add_argument("--cost-model", default="calibrated", choices=("calibrated", "alpha-beta"),
                    help="the model dp solves with (default calibrated, as pase solve --cluster)")
    ap.add_argument("--output", default=None, help="also write the table (markdown) to this file")
    args = ap.parse_args(argv)
    cluster = get_cluster(args.cluster)
    if not cluster.groups:
        print(f"{args.cluster} has one device type; give a mixed cluster", file=sys.stderr)
        return 2
    fast = cluster.groups[0]
    alpha = args.cost_model == "alpha-beta"
    described = "alpha-beta (efficiency 0.5)" if alpha else "calibrated"
    lines = [stamp() + ".", "", f"Cluster {args.cluster}: {', '.join(f'{g.devices} x {g.device.name}' for g in cluster.groups)}; "
             f"{described}, dp, powers-of-two splits; simulated one step.", "",
             "| model | batch | setting | devices | predicted ms | simulated ms | vs A100s alone "
             "| ops on all | peak GiB | CPU s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    total = time.perf_counter()
    for spec in args.models:
        model, _, rest = spec.partition(":")
        batch, *pairs = rest.split(":") if rest else [""]
        batch_n = int(batch) if batch else None
        options = {k: int(v) for k, _, v in (pair.partition("=") for pair in pairs)}
        runs = [("A100s alone" if "A100" in fast.device.name else "fastest group alone", fast.devices,
                 "even", "dp"),
                ("dp, even", cluster.devices, "even", "dp"), ("dp, balanced", cluster.devices, "balanced", "dp"),
                ("data-parallel, balanced", cluster.devices, "balanced", "data-parallel")]
        base = None
        for label, devices, split, solver in runs:
            r = run_one(model, batch_n, options, args.cluster, devices, split, solver,
                        args.cost_model)
            base = r["simulated"] if base is None else base
            row = (f"| {model}{''.join(f' {k}={v}' for k, v in options.items())} | {batch_n} | {label} | {devices} | {r['predicted'] * 1e3:.2f} | "
                   f"{r['simulated'] * 1e3:.2f} | {r['simulated'] / base:.3f} | {r['wide']}/{r['ops']} | "
                   f"{r['peak_gib']:.1f} | {r['seconds']:.1f} |")
            lines.append(row)
            print(row, flush=True)
    lines += ["", f"Total {time.perf_counter() - total:.0f} s on {platform.processor() or platform.machine()}, "
              f"Python {platform.python_version()}. Reproduce: `python benchmarks/hetero.py"
              + (f" --cluster {args.cluster}" if args.cluster != "dgx-a100x2+dgx1-v100x2" else "")
              + (f" --cost-model {args.cost_model}" if alpha else "")
              + (f" --models {' '.join(args.models)}" if list(args.models) != list(MODELS) else "") + "`."]
    print(lines[-1])
    if args.output:
        Path(args.output).write_text("# Heterogeneous cluster benchmark\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

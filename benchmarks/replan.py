"""Re-planning when the cluster or the workload changes mid-training: migrate-and-replan
against keeping the old layout, moving the least, a fresh optimum, and a restart.

    python benchmarks/replan.py [--model gpt2] [--steps 1 10 100 1000] [--layers N]

Three scenarios, each starting from the dp optimum of the old setting (the calibrated
model, the default with a cluster; ``--cost-model alpha-beta`` for the older one; DGX
A100 nodes of 8 GPUs):

- fail: a node fails, 64 -> 56 devices (ranks 0..55 keep their state);
- grow: the job grows, 32 -> 64 devices (ranks 32..63 start empty);
- seq:  the sequence length doubles, 512 -> 1024, on the same 16 devices.

For each remaining step count N, every plan is priced as N x step time + migration
time (docs/replan.md): ``replan`` minimises it exactly; ``keep`` keeps every old
config (when each is still valid); ``least`` is the fastest strategy moving the
least state; ``fresh`` is the fresh optimum of the new setting with its state
moved from the old layout; ``restart`` is the fresh optimum with every device
reading its state from the checkpoint. Ratios are plan total / replan total
(>= 1; "-" where the plan does not exist). Break-even: steps after which the
re-plan beats ``least``.
"""
from __future__ import annotations

import argparse
import sys
import time

from provenance import stamp

import pase
from pase.replan import prepare

PLANS = ("keep", "least", "fresh", "restart")


def scenarios() -> list[tuple[str, str, dict]]:
    """(name, description, arguments): the old setting (devices, cluster, seq) and the new."""
    return [
        ("fail", "a node fails: 64 -> 56 devices",
         dict(old=(64, "dgx-a100", {}), new=dict(cluster="dgx-a100x7"), model={})),
        ("grow", "the job grows: 32 -> 64 devices",
         dict(old=(32, "dgx-a100", {}), new=dict(devices=64, cluster="dgx-a100"), model={})),
        ("seq", "the sequence doubles: 512 -> 1024 on 16 devices",
         dict(old=(16, "dgx-a100", {"seq": 512}), new=dict(devices=16, cluster="dgx-a100"),
              model={"seq": 1024})),
    ]


def run(model: str, name: str, spec: dict, steps: list[float], base: dict,
        restore: float | None, cost_model: str) -> list[list[str]]:
    devices, cluster, old_options = spec["old"]
    start = time.perf_counter()
    old = pase.solve(model, devices, cost_model=cost_model, cluster=cluster,
                     model_options={**base, **old_options})
    prep = prepare(model, old, **spec["new"], cost_model=cost_model,
                   model_options={**base, **spec["model"]},
                   old_model_options=old_options or None, restore_bandwidth=restore)
    rows = []
    for n in steps:
        r = prep.replan(n)
        c = r.chosen
        ratios = [f"{r.baselines[p].total_seconds / c.total_seconds:.3f}" if p in r.baselines
                  and c.total_seconds > 0 else "-" for p in PLANS]
        be = r.break_even_steps
        rows.append([name, f"{r.old_devices}->{r.devices}", f"{n:g}", f"{c.step_seconds * 1e3:.3f}",
                     f"{c.migration_seconds * 1e3:.3f}", f"{c.total_seconds:.4g}", *ratios,
                     "-" if be is None else f"{be:.3g}",
                     str(sum(1 for ch in r.changes if ch.old != ch.new))])
    print(f"# {name}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2")
    parser.add_argument("--layers", type=int, help="model option layers (default: the model's)")
    parser.add_argument("--steps", nargs="+", type=float, default=[1, 10, 100, 1000])
    parser.add_argument("--scenarios", nargs="+", default=["fail", "grow", "seq"],
                        choices=["fail", "grow", "seq"])
    parser.add_argument("--cost-model", choices=("calibrated", "alpha-beta"), default="calibrated",
                        help="the model pricing every step (default: calibrated)")
    parser.add_argument("--restore-bandwidth", type=float, metavar="GBPS",
                        help="checkpoint read speed per device (default: the inter-node link's)")
    args = parser.parse_args()
    specs, layers = scenarios(), args.layers
    base = {} if layers is None else {"layers": layers}
    print(f"# {stamp()}")
    print(f"# command: python benchmarks/replan.py {' '.join(sys.argv[1:])}".rstrip())
    restore = f"{args.restore_bandwidth:g} GB/s" if args.restore_bandwidth else "the inter-node link"
    print(f"# model {args.model}{f' layers={layers}' if layers else ''}; seconds from the "
          f"{args.cost_model} model; checkpoint read at {restore}; ratio = plan total / replan total")
    print()
    header = ["scenario", "p", "N", "step ms", "migration ms", "replan total s",
              *(f"{p} / replan" for p in PLANS), "break-even N", "ops changed"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, _, spec in specs:
        if name in args.scenarios:
            for row in run(args.model, name, spec, args.steps, base, args.restore_bandwidth,
                           args.cost_model):
                print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()

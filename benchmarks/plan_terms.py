"""How fast is a per-op plan priced when the layers' ops share their terms?

    python benchmarks/plan_terms.py [--devices 1024] [--layout tp=8,dp=128]

The calibrated model's price of a per-op plan (`price_plan`: the certified search prices
each bounding solve's plan with it; `pase evaluate --strategy`; a pipeline stage's tally)
adds up each op's terms: kernels, collectives by role, states, kept activations. An op
of another layer in the same config and variant has the same terms, so the tally works
them out once per kind of op (`calibrated_plan.terms_key`: the cost model's own
`vertex_key`, by which the layers already share their cost vectors, and the variant).
This script builds GPT-3 175B on 1,024 H100s (80 GiB cap), writes a Megatron-style
layout as per-op configs and prices it in this process, after one pricing that warms
the caches both share: first with every op worked out on its own (the key made unique
per op, as before), then shared. It prints CPU seconds, their ratio and both prices
(which must be equal).
"""
from __future__ import annotations

import argparse
import time
from unittest import mock

from provenance import stamp

from pase import api
from pase.cost_models import calibrated_plan
from pase.perf import make_layout
from pase.perf.plan import layout_configs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="gpt3-175b")
    parser.add_argument("--devices", type=int, default=1024)
    parser.add_argument("--layout", default="tp=8,dp=128")
    args = parser.parse_args()
    print(stamp())
    lay = make_layout(args.layout, devices=args.devices, micro_batch=1, global_batch=128,
                      sequence_parallel=True)
    built = api.build_problem(args.model, args.devices, cluster="h100-sxm", memory_cap="80GiB",
                              batch=lay.micro_batch * lay.dp)
    configs = layout_configs(built.graph, lay, padded_roles=built.cost_model.padded_roles)
    choice = api.choice_of(built, configs)
    built.cost_model.price_plan(built.graph, built.problem, choice)  # warm the memos both use
    prices = {}
    alone = lambda *args: object()  # noqa: E731 (no two ops share a key)
    shared = calibrated_plan.terms_key
    for name, patch in (("each op alone", mock.patch.object(calibrated_plan, "terms_key", alone)),
                        ("shared by the layers", mock.patch.object(calibrated_plan, "terms_key",
                                                                    shared))):
        with patch:
            start = time.process_time()
            prices[name] = built.cost_model.price_plan(built.graph, built.problem, choice)
            prices[name]["cpu"] = time.process_time() - start
    print(f"{args.model} on {args.devices} devices, {args.layout}, {len(built.graph.ops)} ops\n")
    print("| terms | CPU s | ratio | step s | memory bytes |")
    print("|---|---|---|---|---|")
    base = prices["each op alone"]["cpu"]
    for name, p in prices.items():
        print(f"| {name} | {p['cpu']:.2f} | {p['cpu'] / base:.3f} | {p['step_seconds']!r} | "
              f"{p['memory_bytes']!r} |")
    a, b = prices.values()
    same = all(a[k] == b[k] for k in ("step_seconds", "memory_bytes", "breakdown", "memory"))
    print(f"\nsame step, memory and breakdown: {same}")


if __name__ == "__main__":
    main()

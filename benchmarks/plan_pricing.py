"""How fast is a pipeline plan priced on a space of its own configs, against the whole space?

    python benchmarks/plan_pricing.py [--devices 1024] [--layout tp=8,pp=2,dp=64]

The one price of a pipeline plan (`pase evaluate --strategy`, the whole-plan search's final
price and its start from the layout family) prices each stage on a Problem. Before, that
Problem held every candidate config of every op on the stage's devices; now it holds
only the plan's own (`cost_models.calibrated_pipeline.one_plan_problem`), with edges only
between the stage's own ops, the graph's op contexts are computed once, not at each
binding of the model (twice a stage), and on a homogeneous cluster one build memo
(`pase.costing.keys`) serves every stage, as one build serves its layers. This script
writes GPT-3 175B's layout as a plan (the layout family's best on 1,024 H100s at global
batch 1,536 by default: tp 8, pp 2, dp 64, interleaved with V = 11, ZeRO-2), prices it
four ways in this process (the whole space; the plan's configs with every edge and the
contexts computed at each binding; with a memo per stage; as now), and prints the CPU seconds, their ratios, and
the steps and memories (they must be equal).
"""
from __future__ import annotations

import argparse
import contextlib
import time

import numpy as np
from provenance import stamp

from pase import api
from pase.cost_models import calibrated_pipeline
from pase.perf import context, make_layout
from pase.pipeline.layout_plan import layout_pipeline


def whole_space(graph, devices, model, configs, variants, among=None):
    """The Problem of every candidate and edge (what priced a stage first), at the plan's
    choice."""
    built = api.build_problem(graph, devices, model, variants=variants or None)
    return built.cost_model, built.problem, np.asarray(api.choice_of(built, configs))


def every_edge(graph, devices, model, configs, variants, among=None):
    """The plan's configs with every edge of the graph (what priced a stage before)."""
    return OWN(graph, devices, model, configs, variants)


OWN = calibrated_pipeline.one_plan_problem


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="gpt3-175b")
    parser.add_argument("--devices", type=int, default=1024)
    parser.add_argument("--layout", default="tp=8,pp=2,dp=64")
    parser.add_argument("--micro-batch", type=int, default=6)
    parser.add_argument("--global-batch", type=int, default=1536)
    parser.add_argument("--schedule", default="interleaved:11")
    args = parser.parse_args()
    print(stamp())
    lay = make_layout(args.layout, devices=args.devices, micro_batch=args.micro_batch,
                      global_batch=args.global_batch, schedule=args.schedule, zero=2, recompute="none", sequence_parallel=True)
    graph = api.load_graph(args.model, batch=lay.micro_batch * lay.dp)
    plan = layout_pipeline(graph, lay, args.model, {}, {"cluster": "h100-sxm"})
    model = api.make_cost_model("calibrated", cluster="h100-sxm")
    prices = {}
    kept = context.CONTEXTS_KEPT
    shared = calibrated_pipeline.build_memo
    for name, build, keep, memo in (
            ("whole space", whole_space, 0, contextlib.nullcontext),
            ("the plan's configs, every edge", every_edge, 0, contextlib.nullcontext),
            ("the plan's configs, the stage's edges", OWN, kept, contextlib.nullcontext),
            ("the same, one memo across the stages", OWN, kept, shared)):
        calibrated_pipeline.one_plan_problem, calibrated_pipeline.build_memo = build, memo
        context.CONTEXTS_KEPT = keep  # 0: each binding computes the graph's contexts again
        context._CONTEXTS.clear()
        start = time.process_time()
        prices[name] = model.price_pipeline(plan, graph=graph)
        prices[name]["cpu"] = time.process_time() - start
    calibrated_pipeline.one_plan_problem, context.CONTEXTS_KEPT = OWN, kept
    calibrated_pipeline.build_memo = shared
    print(f"{args.model} on {args.devices} devices, {args.layout} mb{args.micro_batch} "
          f"{args.schedule}, {len(plan.stages)} stages\n")
    print("| priced on | CPU s | ratio | step s | memory bytes |")
    print("|---|---|---|---|---|")
    base = prices["whole space"]["cpu"]
    for name, p in prices.items():
        print(f"| {name} | {p['cpu']:.1f} | {p['cpu'] / base:.3f} | {p['step_seconds']!r} | "
              f"{p['memory_bytes']!r} |")
    same = all(prices["whole space"][k] == p[k] for p in prices.values()
               for k in ("step_seconds", "memory_bytes", "stage_seconds", "stage_memory_bytes"))
    print(f"\nsame step, memory and stage figures: {same}")


if __name__ == "__main__":
    main()

"""One price: named layouts priced as layouts and as per-op plans, side by side.

Each row is a Megatron-LM/FSDP layout priced twice by pase: by the performance model's
layout path (``pase.perf.evaluate_layout``, what ``pase evaluate --layout`` runs) and
as a per-op plan by the calibrated cost model (``pase.perf.plan.layout_configs`` and
``pase.api.evaluate``, what the solvers search). The ratio plan / layout of step time,
memory and MFU is the check that the search optimises the model that prices runs.
A pipeline layout becomes a pipeline plan (``pase.pipeline.layout_plan.layout_pipeline``, the
format ``pase solve --pipeline`` writes) priced stage by stage
(``pase.cost_models.calibrated_pipeline``). Rows the per-op plan cannot hold yet are
priced by the layout path alone and say why.

    python benchmarks/one_price.py            # prints the table (about 1 CPU minute)
    python benchmarks/one_price.py --write    # and writes benchmarks/results/one_price.md
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from provenance import stamp

from pase import api
from pase.cost_models.calibrated_pipeline import price_pipeline
from pase.errors import PaseError
from pase.perf import evaluate_layout, make_layout
from pase.perf.plan import layout_configs, layout_variants, plan_cost_options
from pase.pipeline.layout_plan import layout_pipeline

GPT2 = {"layers": 2, "vocab": 50304}  # a vocabulary tp divides, as Megatron-LM pads it
LLAMA = {"layers": 2}
# (model, model options, devices, layout, cluster, micro-batch, global batch, options)
ROWS = [
    ("gpt2", GPT2, 8, "tp=1,dp=8", "dgx-a100-80gb", 4, 32, {}),
    ("gpt2", GPT2, 8, "tp=2,dp=4", "dgx-a100-80gb", 2, 16, {}),
    ("gpt2", GPT2, 16, "tp=2,dp=8", "dgx-a100-80gb", 4, 64, {}),
    ("gpt2", GPT2, 16, "tp=4,dp=4", "dgx-a100-80gb", 4, 32, {"zero": 1}),
    ("gpt2", GPT2, 16, "tp=1,dp=16", "dgx-a100-80gb", 4, 64, {"zero": 2}),
    ("gpt2", GPT2, 16, "tp=4,dp=4", "dgx-a100-80gb", 4, 32, {"zero": 3}),
    ("gpt2", GPT2, 8, "tp=2,dp=4", "dgx-a100-80gb", 2, 16, {"recompute": "full"}),
    ("gpt2", GPT2, 8, "tp=2,dp=4", "dgx-a100-80gb", 2, 16, {"recompute": "selective"}),
    ("gpt2", GPT2, 8, "tp=4,dp=2", "h100-sxm", 2, 8, {"sequence_parallel": True}),
    ("llama2-7b", LLAMA, 16, "tp=4,dp=4", "h100-sxm", 1, 16, {}),
    ("llama2-7b", {"layers": 8}, 16, "tp=4,dp=4", "h100-sxm", 1, 16, {}),
    ("llama2-7b", LLAMA, 64, "tp=1,dp=64", "h100-sxm", 1, 128, {"zero": 3}),
    ("llama2-7b", LLAMA, 16, "tp=8,dp=2", "h100-sxm", 1, 8,
     {"zero": 1, "recompute": "selective", "sequence_parallel": True}),
    ("mixtral-8x7b", {"layers": 2}, 16, "tp=2,dp=8", "dgx-a100-80gb", 1, 8, {}),
    ("mixtral-8x7b", {"layers": 2}, 16, "tp=2,dp=8,ep=8", "dgx-a100-80gb", 1, 8, {}),
    ("llama2-7b", LLAMA, 16, "tp=4,cp=2,dp=2", "h100-sxm", 1, 8, {}),
    ("llama2-7b", {"layers": 4}, 16, "tp=4,pp=2,dp=2", "h100-sxm", 1, 8, {}),
    # the grid: grouped-query attention, context, expert and pipeline parallelism with
    # ZeRO and recomputation (tests/test_one_price_grid.py checks these within 2%)
    ("llama3.1-8b", LLAMA, 16, "tp=4,dp=4", "h100-sxm", 1, 16, {}),
    ("llama3.1-8b", LLAMA, 16, "tp=8,dp=2", "h100-sxm", 1, 8, {"zero": 2, "recompute": "full"}),
    ("llama3.1-8b", LLAMA, 16, "tp=8,dp=2", "h100-sxm", 1, 8,
     {"zero": 2, "recompute": "full", "sequence_parallel": True}),
    ("llama3.1-8b", LLAMA, 16, "tp=1,cp=2,dp=8", "h100-sxm", 1, 16, {"zero": 1}),
    ("llama2-7b", LLAMA, 16, "tp=1,cp=2,dp=8", "h100-sxm", 1, 16, {}),
    ("gpt2", GPT2, 8, "tp=1,cp=2,dp=4", "dgx-a100-80gb", 2, 16, {"recompute": "selective"}),
    ("gpt2", {"layers": 4, "vocab": 50304}, 8, "tp=2,pp=2,dp=2", "dgx-a100-80gb", 2, 16, {}),
    ("gpt2", {"layers": 4, "vocab": 50304}, 8, "tp=2,pp=2,dp=2", "dgx-a100-80gb", 2, 16,
     {"zero": 1, "recompute": "full"}),
    ("gpt2", {"layers": 4, "vocab": 50304}, 8, "tp=1,pp=4,dp=2", "dgx-a100-80gb", 2, 16,
     {"schedule": "gpipe", "zero": 2}),
    ("gpt2", {"layers": 4, "vocab": 50304}, 8, "tp=2,pp=2,dp=2", "dgx-a100-80gb", 2, 16,
     {"schedule": "interleaved:2"}),
    ("llama3.1-8b", {"layers": 4}, 16, "tp=4,pp=2,dp=2", "h100-sxm", 1, 8,
     {"zero": 1, "recompute": "selective"}),
    ("mixtral-8x7b", {"layers": 2}, 8, "tp=1,dp=8,ep=8", "dgx-a100-80gb", 1, 16, {}),
    ("mixtral-8x7b", {"layers": 2}, 16, "tp=2,dp=8,ep=4", "dgx-a100-80gb", 1, 16,
     {"zero": 1}),
    ("mixtral-8x7b", {"layers": 2}, 16, "tp=2,dp=8,ep=8", "dgx-a100-80gb", 1, 8,
     {"zero": 3}),
    ("mixtral-8x7b", {"layers": 4}, 16, "tp=2,pp=2,dp=4,ep=4", "dgx-a100-80gb", 1, 16,
     {"recompute": "full"}),
    # MoE parallel folding (ep over tensor-parallel ranks, etp=1), without and with
    # sequence parallelism (what the layout family search runs when tp > 1)
    ("mixtral-8x7b", {"layers": 2}, 8, "tp=2,dp=4,ep=8", "h100-sxm", 1, 16, {}),
    ("mixtral-8x7b", {"layers": 2}, 8, "tp=2,dp=4,ep=8", "h100-sxm", 1, 16,
     {"sequence_parallel": True}),
    ("qwen3-30b-a3b", {"layers": 2}, 16, "tp=2,dp=8,ep=16", "h100-sxm", 1, 16,
     {"sequence_parallel": True}),
    # unfolded experts under sequence parallelism: the dispatch's capacity would split
    ("mixtral-8x7b", {"layers": 2}, 16, "tp=2,dp=8,ep=8", "dgx-a100-80gb", 1, 8,
     {"sequence_parallel": True}),
    # zero-bubble schedules: each stage's backward split, its weight gradients put off
    ("gpt2", {"layers": 4, "vocab": 50304}, 8, "tp=1,pp=4,dp=2", "dgx-a100-80gb", 2, 32,
     {"schedule": "zb-h1", "zero": 1}),
    ("gpt2", {"layers": 4, "vocab": 50304}, 8, "tp=2,pp=2,dp=2", "dgx-a100-80gb", 2, 16,
     {"schedule": "dualpipe", "zero": 3}),
    ("llama2-7b", {"layers": 4}, 16, "tp=4,pp=2,dp=2", "h100-sxm", 1, 8,
     {"schedule": "zb-h1", "recompute": "selective"}),
    # DeepSeek-V3 (MLA attention, 256 experts) folded under sequence parallelism: the
    # dispatch's buffer is held whole by both tensor-parallel ranks in the per-op form
    ("deepseek-v3", {"layers": 4, "dense_layers": 1, "seq": 4096}, 64, "tp=2,dp=32,ep=8,etp=1",
     "h100-sxm", 1, 64, {"zero": 2, "sequence_parallel": True}),
]


def price(model, opts, p, degrees, cluster, micro, gb, options) -> dict:
    lay = make_layout(degrees, devices=p, micro_batch=micro, global_batch=gb, **options)
    est = evaluate_layout(api.load_graph(model, batch=micro, **opts), cluster, lay)
    row = {"layout": est, "plan": None, "why": ""}
    graph = api.load_graph(model, batch=micro * lay.dp, **opts)
    try:
        row["plan"] = price_as_plan(graph, lay, model, opts, cluster)
    except PaseError as exc:  # what a per-op plan cannot hold yet
        row["why"] = str(exc).split(";")[0][:90]
    return row


def price_as_plan(graph, lay, model, opts, cluster) -> dict:
    """The layout as a per-op plan (a pipeline plan when pp > 1), priced by the calibrated
    model: what `pase evaluate --strategy` of `pase evaluate --layout --output`'s file runs."""
    costs = plan_cost_options(lay)
    if lay.pp > 1:
        plan = layout_pipeline(graph, lay, model, opts, {"cluster": cluster, **costs})
        return price_pipeline(plan, graph=graph)
    return api.evaluate(graph, {"strategy": layout_configs(graph, lay),
                                "variants": layout_variants(graph, lay)}, lay.devices,
                        "calibrated", cluster=cluster, cost_options=costs).meta


def table(rows: list[tuple]) -> str:
    out = ["| model | p | layout | options | cluster | layout step (s) | plan step (s) | step ratio "
           "| memory ratio | MFU ratio |", "|" + "---|" * 10]
    for spec, r in rows:
        model, opts, p, degrees, cluster, micro, gb, options = spec
        est, plan = r["layout"], r["plan"]
        name = model + ("" if opts in (GPT2, LLAMA) else f" ({', '.join(f'{k}={v}' for k, v in opts.items())})")
        extra = ", ".join(f"{k}={v}" for k, v in options.items()) or "-"
        if plan is None:
            out.append(f"| {name} | {p} | {degrees} | {extra} | {cluster} | {est.step_seconds:.4g} | "
                       f"not a per-op plan yet ({r['why']}) | - | - | - |")
            continue
        out.append(f"| {name} | {p} | {degrees} | {extra} | {cluster} | {est.step_seconds:.4g} | "
                   f"{plan['step_seconds']:.4g} | {plan['step_seconds'] / est.step_seconds:.3f} | "
                   f"{plan['memory_bytes'] / est.memory_bytes:.3f} | {plan['mfu'] / est.mfu:.3f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write benchmarks/results/one_price.md")
    args = parser.parse_args(argv)
    print(stamp())
    start = time.process_time()
    rows = [(spec, price(*spec)) for spec in ROWS]
    text = table(rows)
    ratios = [(r["plan"]["step_seconds"] / r["layout"].step_seconds,
               r["plan"]["memory_bytes"] / r["layout"].memory_bytes) for _, r in rows if r["plan"]]
    within = sum(abs(x - 1) <= 0.02 and abs(y - 1) <= 0.02 for x, y in ratios)
    summary = (f"{len(ratios)} rows priced both ways: step and memory within 2% on {within}, "
               f"worst step {max(abs(x - 1) for x, _ in ratios):.1%}, worst memory "
               f"{max(abs(y - 1) for _, y in ratios):.1%}; {len(rows) - len(ratios)} rows by "
               f"the layout path only; {time.process_time() - start:.0f} CPU s")
    print(text + "\n\n" + summary)
    if args.write:
        path = Path(__file__).parent / "results" / "one_price.md"
        path.write_text(f"# One price: layouts priced as layouts and as per-op plans\n\n{stamp()}\n\n"
                        f"Produced by `python benchmarks/one_price.py --write`.\n\n{text}\n\n{summary}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

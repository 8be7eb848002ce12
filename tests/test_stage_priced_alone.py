"""A pipeline stage is priced on a Problem with only its own edges, and the graph's op
contexts are computed once: the same figures as the Problem with every edge of the graph
and contexts computed at each binding (what priced a stage before)."""
from __future__ import annotations

import pytest

from pase import api
from pase.cost_models import calibrated_pipeline
from pase.cost_models.calibrated_pipeline import price_pipeline
from pase.perf import context, make_layout
from pase.perf.plan import plan_cost_options
from pase.pipeline.layout_plan import layout_pipeline

KEYS = ("step_seconds", "memory_bytes", "stage_seconds", "stage_tail_seconds",
        "stage_memory_bytes", "breakdown", "link_seconds")
CASES = [  # a tied head on the last stage, interleaving, ZeRO-3, experts with ep overlap
    ("gpt2", {"layers": 4, "vocab": 50304}, 8, "tp=2,pp=2,dp=2", "dgx-a100-80gb",
     {"schedule": "interleaved:2", "zero": 3, "sequence_parallel": True}),
    ("llama2-7b", {"layers": 4}, 16, "tp=2,pp=2,dp=2,cp=2", "h100-sxm",
     {"recompute": "selective"}),
    ("mixtral-8x7b", {"layers": 4}, 16, "tp=2,pp=2,dp=4,ep=8", "h100-sxm",
     {"sequence_parallel": True, "ep_overlap": True, "recompute": "full"}),
]


@pytest.mark.parametrize("model, opts, p, degrees, cluster, options", CASES)
def test_a_stage_priced_alone_gives_the_figures_of_the_whole_graphs_problem(
        model, opts, p, degrees, cluster, options, monkeypatch):
    lay = make_layout(degrees, devices=p, micro_batch=1, global_batch=16, **options)
    graph = api.load_graph(model, batch=lay.dp, **opts)
    plan = layout_pipeline(graph, lay, model, opts, {"cluster": cluster, **plan_cost_options(lay)})
    seen = []
    alone = calibrated_pipeline.one_plan_problem

    def watched(*args):
        out = alone(*args)
        seen.append((set(args[-1]), out[1].edges))
        return out

    monkeypatch.setattr(calibrated_pipeline, "one_plan_problem", watched)
    now = price_pipeline(plan, graph=graph)
    assert len(seen) == len(plan.stages)
    for ops, edges in seen:  # only the stage's own edges were built
        assert edges and all(u in ops and v in ops for u, v in edges)
    every = lambda g, d, m, c, v, among: alone(g, d, m, c, v)  # noqa: E731
    monkeypatch.setattr(calibrated_pipeline, "one_plan_problem", every)
    monkeypatch.setattr(context, "CONTEXTS_KEPT", 0)
    context._CONTEXTS.clear()
    before = price_pipeline(plan, graph=graph)
    assert {k: now[k] for k in KEYS} == {k: before[k] for k in KEYS}


def test_op_contexts_are_each_graphs_own():
    small = api.load_graph("gpt2", layers=1)
    large = api.load_graph("gpt2", layers=2)
    a, b = context.op_contexts(small), context.op_contexts(large)
    assert set(a) == {op.name for op in small.ops} and set(b) == {op.name for op in large.ops}
    assert context.op_contexts(small) == a and context.op_contexts(small, "unfused") != a
    context.op_contexts(small)["wte"] = None  # a caller's copy: the memo keeps its own
    assert context.op_contexts(small) == a

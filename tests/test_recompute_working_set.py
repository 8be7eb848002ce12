"""A layer rebuilt in the backward pass holds what its ops make while it is rebuilt (the
working set, as the layout path counts it). The plan's memory counted it only under the
cost option ``recompute=full``; under ``recompute=auto``, the option the whole-plan
search prices with, the same plan (the same per-op variants) came out that much lighter:
DeepSeek-V3 on 1,024 H100s, the search's start, 78.35 GiB against 79.54 GiB as a layout."""
from __future__ import annotations

from dataclasses import replace

import pytest

from pase import api
from pase.cost_models.calibrated_pipeline import price_pipeline
from pase.perf import evaluate_layout, make_layout
from pase.perf.plan import layout_configs, layout_variants, plan_cost_options
from pase.pipeline.layout_plan import layout_pipeline

CLUSTER = "dgx-a100-80gb"
GPT2 = {"layers": 4, "vocab": 50304}  # tp divides it: the head split as the layout splits it


def _layout(degrees: str, layers: int | None):
    lay = make_layout(degrees, devices=8, micro_batch=2, global_batch=16, recompute="full")
    return replace(lay, recompute_layers=layers) if layers else lay


@pytest.mark.parametrize("layers", [None, 1])
def test_a_per_op_plan_holds_the_working_set_under_recompute_auto(layers):
    lay = _layout("tp=2,dp=4", layers)
    est = evaluate_layout(api.load_graph("gpt2", batch=2, **GPT2), CLUSTER, lay)
    graph = api.load_graph("gpt2", batch=2 * lay.dp, **GPT2)
    plan = {"strategy": layout_configs(graph, lay), "variants": layout_variants(graph, lay)}
    costs = plan_cost_options(lay)
    full = api.evaluate(graph, plan, 8, "calibrated", cluster=CLUSTER, cost_options=costs).meta
    auto = api.evaluate(graph, plan, 8, "calibrated", cluster=CLUSTER,
                        cost_options={**costs, "recompute": "auto", "zero": "auto"}).meta
    assert auto["step_seconds"] == pytest.approx(full["step_seconds"], rel=1e-12)
    assert auto["memory_bytes"] == pytest.approx(full["memory_bytes"], rel=1e-12)
    assert full["memory_bytes"] == pytest.approx(est.memory_bytes, rel=0.02)


def test_a_pipeline_plan_holds_the_working_set_under_recompute_auto():
    lay = _layout("tp=2,pp=2,dp=2", 1)
    est = evaluate_layout(api.load_graph("gpt2", batch=2, **GPT2), CLUSTER, lay)
    graph = api.load_graph("gpt2", batch=2 * lay.dp, **GPT2)
    costs = plan_cost_options(lay)
    plan = layout_pipeline(graph, lay, "gpt2", GPT2, {"cluster": CLUSTER, **costs})
    searched = replace(plan, cost_options={"cluster": CLUSTER, "recompute": "auto", "zero": "auto"})
    full, auto = price_pipeline(plan, graph=graph), price_pipeline(searched, graph=graph)
    assert auto["memory_bytes"] == pytest.approx(full["memory_bytes"], rel=1e-12)
    assert full["memory_bytes"] == pytest.approx(est.memory_bytes, rel=0.02)

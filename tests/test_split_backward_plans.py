"""A ZB-H1 layout written as a pipeline plan: priced, replayed and read back alike.

The plan's stages split each backward pass into the input gradient and the weight gradient
that ZB-H1 puts off (docs/pipelines.md, "ZB-H1 plans"). Its price is checked against the
layout path's (which prices the same layout from its own per-layer rules) and against the
event replay of the ZB-H1 program (which runs the schedule task by task, not the closed
form); tests/test_one_price_grid.py holds ZB-H1 rows of the one-price grid too.
"""
from __future__ import annotations

import json

import pytest

from pase import api
from pase.cli import main
from pase.errors import StrategyError
from pase.perf import evaluate_layout, make_layout
from pase.perf.plan import plan_cost_options
from pase.pipeline import PipelinePlan
from pase.pipeline.layout_plan import layout_pipeline
from pase.sim.pipeline import simulate_pipeline

GPT2 = {"layers": 4, "vocab": 50304}
CLUSTER = "dgx-a100-80gb"


def _plan(schedule: str, degrees: str = "tp=1,pp=4,dp=2", **options):
    """(layout estimate, its plan, the plan's price) of GPT-2 (4 layers) on 8 A100s."""
    lay = make_layout(degrees, devices=8, micro_batch=2, global_batch=32, schedule=schedule,
                      **options)
    estimate = evaluate_layout(api.load_graph("gpt2", batch=2, **GPT2), CLUSTER, lay)
    graph = api.load_graph("gpt2", batch=2 * lay.dp, **GPT2)
    plan = layout_pipeline(graph, lay, "gpt2", GPT2, {"cluster": CLUSTER, **plan_cost_options(lay)})
    model = api.make_cost_model("calibrated", cluster=CLUSTER)
    price = model.price_pipeline(plan, graph=graph)
    return estimate, plan.take_price(price), price


def test_each_stage_defers_the_weight_gradients_the_layout_path_counts():
    """The per-op rules' weight-gradient kernels of each stage are the layout path's (two
    implementations: the layout's per-layer sums and the calibrated model's per-op prices),
    and each is a real part of the stage's time."""
    estimate, _, price = _plan("zb-h1")
    layout_w = estimate.details["stage_weight_seconds"]
    assert price["stage_weight_seconds"] == pytest.approx(layout_w, rel=1e-9)
    for w, t in zip(price["stage_weight_seconds"], price["stage_seconds"]):
        assert 0.1 * t < w < 0.5 * t  # dW is one of a GEMM's three products


@pytest.mark.parametrize("options", [{}, {"zero": 1, "recompute": "full"}, {"zero": 3}])
def test_the_plan_prices_as_the_layout(options):
    estimate, _, price = _plan("zb-h1", **options)
    assert price["step_seconds"] == pytest.approx(estimate.step_seconds, rel=0.01)
    assert price["memory_bytes"] == pytest.approx(estimate.memory_bytes, rel=0.01)


def test_the_replayed_program_meets_the_closed_form_and_beats_1f1b():
    """The event replay of ZB-H1's program (each stage's forward, input gradient and put-off
    weight gradient as tasks) ends within 1% of the closed form the plan is priced by, and
    sooner than the same layout under 1F1B, whose bubbles the weight gradients fill. (Two
    stages, the second twice the first with the head: the closed form reads the slowest
    stage's slot, which the replay meets here; at pp = 4, a last stage four times the
    others, the replay is 6% slower, docs/pipelines.md.)"""
    _, plan, price = _plan("zb-h1", "tp=2,pp=2,dp=2")
    _, plain, plain_price = _plan("1f1b", "tp=2,pp=2,dp=2")
    ran, ran_plain = simulate_pipeline(plan), simulate_pipeline(plain)
    assert ran.step_time == pytest.approx(price["step_seconds"], rel=0.01)
    assert ran_plain.step_time == pytest.approx(plain_price["step_seconds"], rel=0.01)
    assert ran.step_time < ran_plain.step_time and price["step_seconds"] < plain_price["step_seconds"]
    # every stage holds min(m, s) micro-batches, as the layout path counts them
    assert [st.in_flight for st in plan.stages] == [2, 2]


def test_evaluate_writes_the_plan_and_prices_it_back(tmp_path, capsys):
    path = tmp_path / "zb.json"
    args = ["evaluate", "gpt2", "-p", "8", "--model-option", "layers=4", "--model-option",
            "vocab=50304", "--cluster", CLUSTER, "--layout", "tp=2,pp=2,dp=2", "--micro-batch",
            "2", "--global-batch", "16", "--schedule", "ZB-H1", "--format", "json"]
    assert main([*args, "--output", str(path)]) == 0
    layout = json.loads(capsys.readouterr().out)
    assert layout["pipeline"]["schedule"] == "zb-h1"
    assert main(["evaluate", "gpt2", "-p", "8", "--strategy", str(path), "--format", "json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["step_seconds"] == pytest.approx(layout["step_seconds"], rel=0.01)
    assert again["step_seconds"] == pytest.approx(layout["pipeline"]["step_time"], rel=1e-9)


def test_a_plan_with_fewer_microbatches_than_stages_is_refused():
    _, plan, _ = _plan("zb-h1")
    data = plan.to_dict()
    data.update(microbatches=2, microbatch_size=plan.batch // 2)
    with pytest.raises(StrategyError, match="zb-h1 needs at least as many microbatches as stages"):
        PipelinePlan.from_dict(data)

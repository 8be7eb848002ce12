"""ZB-H1 and DualPipe layouts written as pipeline plans: priced, replayed and read back alike.

Their stages split each backward pass into the input gradient and the weight gradient
that these schedules put off (docs/pipelines.md, "ZB-H1 and DualPipe plans"). A plan's price
is checked against the layout path's (which prices the same layout from its own
per-layer rules) and against the event replay of the schedule's program (which runs it
task by task, not by the closed form); tests/test_one_price_grid.py holds such rows of
the one-price grid too.
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

# the default suite keeps its ten minutes on two cores; CI runs these with -m slow
pytestmark = pytest.mark.slow

GPT2 = {"layers": 4, "vocab": 50304}
CLUSTER = "dgx-a100-80gb"
SPLIT = ["zb-h1", "dualpipe"]


def _plan(schedule: str, degrees: str = "tp=1,pp=4,dp=2", **options):
    """(layout estimate, its plan, the plan's price) of GPT-2 (4 layers) on 8 A100s, 32
    sequences a step in micro-batches of 2 per data-parallel rank."""
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


@pytest.mark.parametrize("schedule", SPLIT)
@pytest.mark.parametrize("options", [{}, {"zero": 1, "recompute": "full"}, {"zero": 3}])
def test_the_plan_prices_as_the_layout(schedule, options):
    estimate, _, price = _plan(schedule, **options)
    assert price["step_seconds"] == pytest.approx(estimate.step_seconds, rel=0.01)
    assert price["memory_bytes"] == pytest.approx(estimate.memory_bytes, rel=0.01)


@pytest.mark.parametrize("schedule, held", [("zb-h1", [2, 2]), ("dualpipe", [3, 3])])
def test_the_replayed_program_meets_the_closed_form_and_beats_1f1b(schedule, held):
    """The event replay of the schedule's program (each stage's forwards, input gradients
    and put-off weight gradients as tasks; DualPipe's two directions) ends within 1% of the
    closed form the plan is priced by, and sooner than the same layout under 1F1B, whose
    bubbles the weight gradients fill. (Two stages, the second twice the first with the
    head: the closed form reads the slowest stage's slot, which the replay meets here;
    docs/pipelines.md has pp = 4, a last stage four times the others.)"""
    _, plan, price = _plan(schedule, "tp=2,pp=2,dp=2")
    _, plain, plain_price = _plan("1f1b", "tp=2,pp=2,dp=2")
    ran, ran_plain = simulate_pipeline(plan), simulate_pipeline(plain)
    assert ran.step_time == pytest.approx(price["step_seconds"], rel=0.01)
    assert ran_plain.step_time == pytest.approx(plain_price["step_seconds"], rel=0.01)
    assert ran.step_time < ran_plain.step_time and price["step_seconds"] < plain_price["step_seconds"]
    # micro-batches held per stage as the layout path counts them: min(m, s), s + 1
    assert [st.in_flight for st in plan.stages] == held


def test_a_dualpipe_group_holds_both_its_stages_states():
    """DualPipe's device group i runs stage i of one direction and stage s - 1 - i of the
    other, so it holds the states of both (GPT-2's tied embedding, on the first stage, is
    held by the first and the last group). Each stage's own states ``h`` and one
    micro-batch's activations ``a`` come from two other plans of the same layout, GPipe
    (``h + m a``, m = 8) and ZB-H1 (``h + s a``, s = 4); DualPipe holds ``s + 1``."""
    dual, gpipe, zb = (_plan(schedule, zero=1)[2]["stage_memory_bytes"]
                       for schedule in ("dualpipe", "gpipe", "zb-h1"))
    acts = [(g - z) / 4 for g, z in zip(gpipe, zb)]
    own = [z - 4 * a for z, a in zip(zb, acts)]
    assert min(acts) > 0 and min(own) > 0
    assert dual == pytest.approx([own[i] + own[3 - i] + 5 * acts[i] for i in range(4)], rel=1e-9)
    assert dual[0] != pytest.approx(own[0] * 2 + 5 * acts[0], rel=0.01)  # not its own twice


def test_evaluate_writes_the_plan_and_prices_it_back(tmp_path, capsys):
    for schedule in ("ZB-H1", "dualpipe"):
        path = tmp_path / f"{schedule}.json"
        args = ["evaluate", "gpt2", "-p", "8", "--model-option", "layers=4", "--model-option",
                "vocab=50304", "--cluster", CLUSTER, "--layout", "tp=2,pp=2,dp=2",
                "--micro-batch", "2", "--global-batch", "16", "--schedule", schedule,
                "--format", "json"]
        assert main([*args, "--output", str(path)]) == 0
        layout = json.loads(capsys.readouterr().out)
        assert layout["pipeline"]["schedule"] == schedule.lower()
        assert main(["evaluate", "gpt2", "-p", "8", "--strategy", str(path), "--format", "json"]) == 0
        again = json.loads(capsys.readouterr().out)
        assert again["step_seconds"] == pytest.approx(layout["step_seconds"], rel=0.01)
        assert again["step_seconds"] == pytest.approx(layout["pipeline"]["step_time"], rel=1e-9)


@pytest.mark.parametrize("schedule, microbatches, error", [
    ("zb-h1", 2, "zb-h1 needs at least as many microbatches as stages"),
    ("dualpipe", 6, "dualpipe needs an even number of stages and an even number of "
                    "microbatches, at least twice the stages; the plan has 4 stages and 6"),
    ("dualpipe", 4, "at least twice the stages")])
def test_a_plan_its_schedule_cannot_run_is_refused(schedule, microbatches, error):
    _, plan, _ = _plan(schedule)
    data = plan.to_dict()
    data.update(microbatches=microbatches, microbatch_size=plan.batch // microbatches)
    data["batch"] = microbatches * (plan.batch // microbatches)
    with pytest.raises(StrategyError, match=error):
        PipelinePlan.from_dict(data)


def test_an_alpha_beta_plan_under_a_split_schedule_is_refused():
    # the alpha-beta model prices a stage as one number: an edited schedule failed with
    # "a zb-h1 plan's step reads each stage's Work, sends included"
    _, plan, _ = _plan("1f1b")
    data = {**plan.to_dict(), "cost_model": "alpha-beta", "schedule": "zb-h1"}
    with pytest.raises(StrategyError, match="schedule zb-h1 splits each stage's backward pass, "
                                            "which only the calibrated cost model prices"):
        PipelinePlan.from_dict(data)

"""Simulating calibrated pipeline plans: the plan's precision and element size, the memory
cap said out loud, a pipeline layout's `evaluate --layout` output, the viewer's header."""
from __future__ import annotations

import json
import math

import pytest

from pase import api
from pase.cli import main
from pase.counts import parameters
from pase.errors import OptionError
from pase.pipeline import PipelinePlan
from pase.sim.pipeline import simulate_pipeline

# a GPT-2 small enough to simulate op by op in a fraction of a second
OPTS = {"layers": 1, "seq": 64, "width": 64, "heads": 2, "ff": 128, "vocab": 256, "positions": 64}
CLI_OPTS = [a for k, v in OPTS.items() if k != "layers" for a in ("--model-option", f"{k}={v}")]
GIB = 2**30


def _graph():
    return api.load_graph("gpt2", batch=2, **OPTS)


def _plan(precision: str | None = None, cap: float | None = None, **costs) -> dict:
    """One stage on one device, every op unsplit, priced (by hand) at 1 ms and 1 MB;
    ``precision`` None: none recorded (the calibrated model's default, bf16 on an H100)."""
    g = _graph()
    if precision is not None:
        costs["precision"] = precision
    return {"version": 1, "kind": "pipeline", "model": "gpt2", "model_options": OPTS,
            "devices": 1, "batch": 2, "microbatches": 1, "schedule": "1f1b",
            "cost_model": "calibrated",
            "cost_options": {"cluster": "h100-sxm", **costs},
            "step_time": 1e-3, "status": "optimal", "memory_cap_bytes": cap, "links": [],
            "stages": [{"ops": [g.ops[0].name, g.ops[-1].name], "op_range": [0, len(g.ops)],
                        "device_range": [0, 1], "in_flight": 1, "seconds_per_microbatch": 1e-3,
                        "memory_bytes": 1e6, "configs": {}}]}


def _simulated(precision: str | None, cap: float | None = None, **costs):
    return simulate_pipeline(PipelinePlan.from_dict(_plan(precision, cap, **costs)))


@pytest.mark.parametrize("precision,element", [(None, 2), ("bf16", 2), ("fp8", 2),
                                               ("fp32", 4)])
def test_memory_is_at_the_plans_element_size(precision, element):
    # Adam keeps 16 bytes a parameter either way (4 + 4 + 8 in fp32; 2 + 2 + 12 mixed), and
    # one unsplit device keeps every op's whole output at the element size: bf16 and fp8
    # keep 2-byte activations, fp32 4. The old simulator read no precision (fp8 raised
    # "could not convert string to float") and kept 4 bytes for every plan, the default
    # (bf16, no precision recorded) too.
    g = _graph()
    outputs = sum(math.prod(port.shape) for op in g.ops for port in op.outputs)
    result = _simulated(precision)
    assert result.peak_memory == [16 * parameters(g) + element * outputs]


def test_kernels_run_at_the_plans_precision():
    # roofline kernels at each precision's peak, not a flat 50% of one peak for all
    steps = {p: _simulated(p).step_time for p in ("bf16", "fp8", "fp32")}
    assert steps["fp32"] > 1.5 * steps["bf16"]  # H100's fp32 peak is far under its bf16
    assert steps["fp8"] != steps["bf16"]


def test_calibrated_models_simulator_options():
    from pase.sim.pipeline import simulator_options

    model = api.make_cost_model("calibrated", cluster="h100-sxm", precision="fp8")
    got = simulator_options(model, {"precision": "fp8"})
    assert (got["compute"], got["precision"], got["bytes_per_element"]) == ("roofline", "fp8", 2)
    # alpha-beta: only what the plan set (its defaults are the simulator's)
    ab = api.make_cost_model("alpha-beta", cluster="h100-sxm", bytes_per_element=2)
    assert simulator_options(ab, {"bytes_per_element": "2"}) == {"bytes_per_element": 2.0}


def test_a_precision_the_device_lacks_is_refused_naming_it():
    plan = PipelinePlan.from_dict(_plan("fp8"))
    with pytest.raises(OptionError, match=r"precision=fp8.*dgx-a100.*no fp8 peak; it has: bf16"):
        simulate_pipeline(plan, "dgx-a100")  # A100 has no fp8 tensor cores


def test_fp8_plan_file_simulates_from_the_cli(tmp_path, capsys):
    path = tmp_path / "fp8.json"
    path.write_text(json.dumps(_plan("fp8")))
    assert main(["simulate", "gpt2", "-p", "1", "--cluster", "h100-sxm", "--strategy",
                 str(path), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "pipeline" and out["step_time"] > 0


def test_over_the_cap_is_said_in_the_summary_and_json():
    over = _simulated(None, cap=1.0)  # one byte: nothing fits
    assert over.fits_memory is False
    assert "over the" in over.summary() and "memory cap" in over.summary()
    # GPT-2's scores -> softmax -> context is one fused kernel in the calibrated model
    assert "fused attention" in over.memory_note and "priced at" in over.memory_note
    data = over.to_dict()
    assert (data["fits_memory"], data["memory_cap_bytes"]) == (False, 1.0)
    assert data["priced_memory_bytes"] == 1e6 and data["memory_note"] == over.memory_note
    under = _simulated(None, cap=1e12)
    assert under.fits_memory is True and under.memory_note is None
    assert "memory cap" not in under.summary() and under.to_dict()["fits_memory"] is True


def test_no_cap_is_the_devices_memory_and_unfused_says_no_fusion():
    assert _simulated(None).memory_cap == 80 * GIB  # an H100 SXM holds 80 GiB
    unfused = _simulated(None, cap=1.0, attention="unfused")
    assert unfused.fits_memory is False and "fused attention" not in unfused.memory_note


def _layout_file(tmp_path, capsys) -> tuple[str, dict]:
    """`pase evaluate --layout` of a two-stage pipeline layout, written as JSON."""
    path = str(tmp_path / "layout.json")
    assert main(["evaluate", "gpt2", "-p", "2", "--cluster", "h100-sxm", "--layout",
                 "tp=1,pp=2,dp=1", "--micro-batch", "1", "--global-batch", "4",
                 "--model-option", "layers=2", *CLI_OPTS, "--format", "json",
                 "--output", path]) == 0
    capsys.readouterr()
    return path, json.loads(open(path).read())


def test_simulate_reads_a_pipeline_layouts_output(tmp_path, capsys):
    # it used to fail: "strategy entry for op 'version' must be a {dim: factor} object"
    path, _ = _layout_file(tmp_path, capsys)
    argv = ["gpt2", "-p", "2", "--cluster", "h100-sxm", "--strategy", path, "--format", "json"]
    assert main(["evaluate", *argv]) == 0
    priced = json.loads(capsys.readouterr().out)
    assert main(["simulate", *argv]) == 0
    simulated = json.loads(capsys.readouterr().out)
    assert simulated["kind"] == "pipeline" and len(simulated["stages"]) == 2
    assert simulated["microbatches"] == 4  # global batch 4 of micro-batch 1, dp = 1
    # the layout's plan records no price; it is priced as evaluate prices it
    assert simulated["priced_memory_bytes"] == pytest.approx(priced["memory_bytes"])
    assert main(["simulate", *argv[:-2]]) == 0
    text = capsys.readouterr().out
    assert f"priced step {priced['step_seconds'] * 1e3:.4g} ms" in text


def test_view_reads_a_pipeline_layouts_output_and_fills_the_simulation(tmp_path, capsys):
    path, _ = _layout_file(tmp_path, capsys)
    html = tmp_path / "plan.html"
    assert main(["view", "gpt2", "-p", "2", "--cluster", "h100-sxm", "--strategy", path,
                 "-o", str(html)]) == 0
    assert html.stat().st_size > 0


def test_viewer_header_carries_the_simulated_step_and_memory():
    from pase.viewer.pipeline import pipeline_model

    plan = PipelinePlan.from_dict(_plan())
    sim = simulate_pipeline(plan)
    summary = pipeline_model(plan)["summary"]
    assert summary["simulated_step"] == pytest.approx(sim.step_time)
    assert summary["simulated_memory"] == pytest.approx(max(sim.peak_memory))
    skipped = pipeline_model(plan, simulate=False)["summary"]
    assert skipped["simulated_step"] is None and skipped["simulated_memory"] is None


def test_a_calibrated_stage_replays_the_plans_own_prices():
    # one device, no collectives, no re-layout: the forward is its ops' priced kernels one
    # after another, the backward theirs (the first op's input gradient is not computed:
    # its input comes from outside the stage)
    from pase.pipeline.recorded import stage_prices

    plan = PipelinePlan.from_dict(_plan())
    prices = stage_prices(plan, api.load_graph("gpt2", batch=plan.microbatch_size,
                                               **plan.model_options))[0]
    result = simulate_pipeline(plan)
    assert result.timing == "the plan's own per-op prices (calibrated)"
    assert result.to_dict()["timing"] == result.timing
    forward = sum(p["forward"] for p in prices.values())
    assert result.stages[0].forward == pytest.approx(forward, rel=1e-9)
    backward = sum(p["backward"] for p in prices.values())
    assert 0.5 * backward < result.stages[0].backward <= backward * (1 + 1e-9)


def test_a_searched_calibrated_plan_simulates_near_its_price():
    # the two-stage mlp plan simulated at the simulator's own kernels took 39% less than
    # its price; at the plan's own prices the replay is within a few percent of it
    from pase.pipeline import solve_pipeline

    plan = solve_pipeline("mlp", 8, batch=256, cluster="h100-sxm", cost_model="calibrated")
    assert len(plan.stages) == 2
    result = simulate_pipeline(plan)
    assert result.step_time == pytest.approx(plan.step_time, rel=0.1)
    ab = solve_pipeline("mlp", 8, batch=256, cluster="h100-sxm", cost_model="alpha-beta")
    assert simulate_pipeline(ab).timing == "the simulator's rules"


def test_a_plan_with_a_variant_its_search_prunes_is_replayed():
    # the layout family's plan a search answers with (`search.answer: "start"`) may hold a
    # variant the search's Problem prunes (ZeRO 1 where ZeRO 2 costs the same and holds
    # less): simulate and view refused pase's own file ("not among its candidates")
    from pase.pipeline.recorded import stage_prices

    data = _plan(zero="auto", recompute="auto")
    g = _graph()
    data["devices"], data["stages"][0]["device_range"] = 2, [0, 2]
    data["stages"][0]["configs"] = {op.name: {op.dims[0].name: 2} for op in g.ops
                                    if op.dims[0].role == "batch"}
    data["stages"][0]["variants"] = {"h0.mlp.fc1": {"zero": 1, "recompute": False}}
    plan = PipelinePlan.from_dict(data)
    fc1 = stage_prices(plan, g)[0]["h0.mlp.fc1"]
    assert [c[2] for c in fc1["collectives"] if c[0] == "gradient"][0] == "w0 gradient (zero)"
    result = simulate_pipeline(plan)
    assert result.timing == "the plan's own per-op prices (calibrated)"

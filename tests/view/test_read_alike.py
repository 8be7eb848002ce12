"""A plan file reads the same in every command: the micro-batches and precision it was
priced at, its gap and its stages' micro-batches in flight (a smoke test found `pase view`
and `pase simulate` of an `evaluate --layout --output` file at one micro-batch of the
two it was priced at, half the step; the page's MFU at the bf16 peak for an fp32 plan; a
pipeline page without its gap, and 1.25 micro-batches in flight read back as 1)."""
from __future__ import annotations

import json

import pytest

from pase.cli import main
from pase.pipeline import PipelinePlan
from view.test_page import page_data  # tests/ is on sys.path (rootdir-relative import)

# a GPT-2 small enough to solve and simulate in a second or two
OPTS = ["--model-option", "seq=64", "--model-option", "width=64", "--model-option", "heads=2",
        "--model-option", "ff=128", "--model-option", "vocab=256", "--model-option",
        "positions=64"]
BASE = ["gpt2", "-p", "8", "--cluster", "h100-sxm", "--model-option", "layers=1", *OPTS]


def _json(capsys, *argv) -> dict:
    main([*argv, "--format", "json"])
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def layout_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("layout") / "l2.json"
    main(["evaluate", *BASE, "--layout", "tp=2,dp=4", "--global-batch", "16", "--micro-batch",
          "2", "--output", str(path)])
    return path


def test_a_layouts_file_simulates_at_its_micro_batches(layout_file, capsys):
    priced = json.loads(layout_file.read_text())
    assert priced["layout"]["microbatches"] == 2
    sim = _json(capsys, "simulate", *BASE, "--strategy", str(layout_file))
    assert sim["stats"]["microbatches"] == 2
    assert sim["stats"]["timing"] == "the strategy's own prices (calibrated)"
    # the replay of both micro-batches, near the price (it was half of it)
    assert 0.9 * priced["step_seconds"] < sim["step_time"] < 1.2 * priced["step_seconds"]


def test_a_layouts_file_is_drawn_at_its_price(layout_file, tmp_path, capsys):
    # the page prices the file's per-op plan as `evaluate --strategy` does (within 2% of
    # the layout's own price: the one price, checked elsewhere)
    priced = _json(capsys, "evaluate", *BASE, "--strategy", str(layout_file))
    page = tmp_path / "l2.html"
    main(["view", *BASE, "--strategy", str(layout_file), "-o", str(page)])
    summary = page_data(page.read_text())["summary"]
    assert summary["step"] == pytest.approx(priced["step_seconds"], rel=1e-9)
    assert summary["mfu"] == pytest.approx(priced["mfu"], rel=1e-9)
    layout = json.loads(layout_file.read_text())
    assert summary["step"] == pytest.approx(layout["step_seconds"], rel=0.02)


def test_an_fp32_plans_page_gives_its_own_mfu(tmp_path, capsys):
    # MFU at the fp32 peak, as the solve's price says, not at the device's bf16 peak
    plan = tmp_path / "f32.json"
    solved = _json(capsys, "solve", *BASE, "--precision", "fp32", "--output", str(plan))
    page = tmp_path / "f32.html"
    main(["view", *BASE, "--strategy", str(plan), "-o", str(page)])
    assert page_data(page.read_text())["summary"]["mfu"] == pytest.approx(solved["mfu"], rel=1e-9)


def test_a_pipeline_plan_keeps_its_gap_and_fractional_in_flight():
    data = {"version": 1, "kind": "pipeline", "model": "gpt2", "devices": 8, "batch": 16,
            "microbatches": 2, "schedule": "1f1b", "step_time": 1e-3,
            "status": "feasible", "lower_bound": 0.9e-3, "links": [],
            "stages": [{"ops": ["wte", "loss"], "op_range": [0, 1], "device_range": [0, 8],
                        "in_flight": 1.25, "seconds_per_microbatch": 1e-4, "memory_bytes": 1.0,
                        "configs": {}}]}
    plan = PipelinePlan.from_dict(data)
    assert plan.stages[0].in_flight == 1.25
    assert plan.gap == pytest.approx(0.1)
    assert PipelinePlan.from_dict(plan.to_dict()).stages[0].in_flight == 1.25


def test_a_pipeline_page_carries_the_plans_gap(tmp_path):
    from test_sim_calibrated_plans import OPTS as SMALL
    from test_sim_calibrated_plans import _plan

    data = {**_plan(), "status": "feasible", "lower_bound": 1e-9}
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps(data))
    page = tmp_path / "p.html"
    main(["view", "gpt2", "-p", "1", "--cluster", "h100-sxm", "--strategy", str(plan),
          "-o", str(page)])
    summary = page_data(page.read_text())["summary"]
    assert SMALL["layers"] == 1 and summary["status"] == "feasible"
    assert (summary["solver"], summary["method"]) == ("pipeline search", "1 stage")
    assert summary["gap"] == pytest.approx((summary["step"] - 1e-9) / summary["step"])


def test_a_second_file_is_named_by_its_own_flag(tmp_path, capsys):
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    main(["solve", *BASE, "--output", str(one)])
    data = json.loads(one.read_text())
    data["model_options"]["layers"] = 2
    two.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["view", *BASE, "--strategy", str(one), "--compare", str(two), "-o",
                 str(tmp_path / "c.html")]) == 2
    assert f"--compare {two} records layers=2" in capsys.readouterr().err


def test_a_vocabulary_split_that_pads_names_the_model_that_prices_it(tmp_path, capsys):
    plan = tmp_path / "v.json"
    plan.write_text(json.dumps({"lm_head": {"v": 2}}))
    assert main(["evaluate", "gpt2", "-p", "2", "--model-option", "layers=1", *OPTS[:-4],
                 "--model-option", "vocab=255", "--model-option", "positions=64",
                 "--strategy", str(plan)]) == 2
    err = capsys.readouterr().err
    assert "has size 255, which 2 does not divide" in err and "give --cluster" in err


def test_a_page_drawn_from_a_layout_names_that_layout(tmp_path):
    # the page matched the plan to a layout by its splits and, for experts, tried one with no
    # per-op form (ep=1 with sequence parallelism), saying it could not tell
    page = tmp_path / "moe.html"
    main(["view", "mixtral-8x7b", "-p", "8", "--model-option", "layers=1", "--model-option",
          "seq=64", "--cluster", "h100-sxm", "--layout", "tp=2,dp=4,ep=4", "--micro-batch", "2",
          "-o", str(page)])
    line = page_data(page.read_text())["layout"]
    assert line["flag"] == "tp=2,dp=4,ep=4" and line["why"] is None


@pytest.mark.parametrize("command", ["simulate", "view"])
def test_a_pipeline_plan_is_not_drawn_on_another_cluster(tmp_path, capsys, command):
    # its stages replay the prices of the cluster it was priced on: simulate and view of an
    # H100 plan with --cluster dgx-a100 gave the H100 step under the A100's name
    from test_sim_calibrated_plans import _plan

    plan = tmp_path / "p.json"
    plan.write_text(json.dumps(_plan()))
    out = ["-o", str(tmp_path / "p.html")] if command == "view" else []
    assert main([command, "gpt2", "-p", "1", "--cluster", "dgx-a100", "--strategy", str(plan),
                 *out]) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        f"pase: error: --cluster dgx-a100: --strategy {plan} was priced on h100-sxm; "
        "give --cluster h100-sxm, or solve it again there")


def test_a_plain_mapping_is_replayed_at_its_calibrated_price(tmp_path, capsys):
    # {op: {dim: factor}} with --cluster: evaluate prices it with the calibrated model, and
    # simulate ran it at its own rules and 4-byte elements (44% under the price, twice the
    # memory); now both price it alike and the replay runs those prices
    solved = tmp_path / "s.json"
    main(["solve", *BASE, "--output", str(solved)])
    capsys.readouterr()
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(json.loads(solved.read_text())["strategy"]))
    priced = _json(capsys, "evaluate", *BASE, "--strategy", str(plain))
    sim = _json(capsys, "simulate", *BASE, "--strategy", str(plain))
    assert sim["stats"]["timing"] == "the strategy's own prices (calibrated)"
    assert 0.9 * priced["step_seconds"] < sim["step_time"] < 1.1 * priced["step_seconds"]


def test_a_plan_solved_under_a_cap_is_priced_against_that_cap(tmp_path, capsys):
    # evaluate --strategy of a plan solved with --memory-cap said "within the cap of 80 GiB"
    # (the device's) where view drew the file's own cap
    capped = tmp_path / "capped.json"
    main(["solve", *BASE, "--memory-cap", "64MiB", "--output", str(capped)])
    capsys.readouterr()
    assert json.loads(capped.read_text())["memory_cap_bytes"] == 64 * 2**20
    assert _json(capsys, "evaluate", *BASE, "--strategy", str(capped))["memory_cap_bytes"] \
        == 64 * 2**20
    given = _json(capsys, "evaluate", *BASE, "--strategy", str(capped), "--memory-cap", "1GiB")
    assert given["memory_cap_bytes"] == 2**30  # the command's own cap wins
    solved = tmp_path / "free.json"  # a plan solved without a cap: the device's memory
    main(["solve", *BASE, "--output", str(solved)])
    capsys.readouterr()
    assert _json(capsys, "evaluate", *BASE[:3], "--cluster", "dgx-a100", *BASE[5:],
                 "--strategy", str(solved))["memory_cap_bytes"] == 40 * 2**30


@pytest.mark.parametrize("layout, options, flag", [
    ("tp=2,dp=4,ep=4", ["--model-option", "seq=64"], "tp=2,dp=4,ep=4"),
    ("tp=2,dp=4", ["--model-option", "seq=64", "--recompute", "selective"], "tp=2,dp=4")])
def test_a_layouts_file_is_drawn_as_that_layout(tmp_path, capsys, layout, options, flag):
    # view of an `evaluate --layout` file matched the plan to a layout by its splits: a MoE
    # layout's to ep=1 with sequence parallelism ("cannot tell"), selective recomputation
    # to a plan whose recomputed ops "differ"; the file names its layout
    model = "mixtral-8x7b" if "ep" in layout else "llama2-7b"
    base = [model, "-p", "8", "--model-option", "layers=1", "--cluster", "h100-sxm"]
    path, page = tmp_path / "layout.json", tmp_path / "layout.html"
    main(["evaluate", *base, *options, "--layout", layout, "--micro-batch", "1",
          "--global-batch", "8", "--output", str(path)])
    capsys.readouterr()
    main(["view", model, "-p", "8", "--cluster", "h100-sxm", "--strategy", str(path), "-o",
          str(page)])  # the model options the file records
    line = page_data(page.read_text())["layout"]
    assert line["flag"] == flag and line["why"] is None


def test_a_pipeline_layouts_page_says_it_is_a_layout(tmp_path, capsys):
    # its summary said "solver: pipeline search" for a plan no search made
    base = ["gpt2", "-p", "8", "--cluster", "h100-sxm", *OPTS]
    path, page = tmp_path / "pp.json", tmp_path / "pp.html"
    main(["evaluate", *base, "--model-option", "layers=2", "--layout", "tp=1,pp=2,dp=4",
          "--micro-batch", "1", "--global-batch", "8", "--output", str(path)])
    capsys.readouterr()
    main(["view", "gpt2", "-p", "8", "--cluster", "h100-sxm", "--strategy", str(path), "-o",
          str(page)])
    summary = page_data(page.read_text())["summary"]
    assert (summary["solver"], summary["method"], summary["status"]) == \
        ("layout", "2 stages", "layout")


def test_a_capped_pipeline_plan_prices_against_its_cap(tmp_path, capsys):
    # evaluate's JSON gave no memory_cap_bytes and the cap as device_memory_bytes
    from test_sim_calibrated_plans import _plan

    plan = tmp_path / "p.json"
    plan.write_text(json.dumps(_plan(cap=3e8)))
    price = _json(capsys, "evaluate", "gpt2", "-p", "1", "--cluster", "h100-sxm",
                  "--strategy", str(plan))
    assert (price["memory_cap_bytes"], price["device_memory_bytes"]) == (3e8, 80 * 2**30)
    assert price["fits_memory"] == (price["memory_bytes"] <= 3e8)


@pytest.mark.parametrize("command", ["evaluate", "simulate", "view"])
def test_a_pipeline_plans_own_model_options_may_be_given_again(tmp_path, capsys, command):
    # a per-op plan took its own options given again; a pipeline plan refused even those,
    # in three wordings; now as for a per-op plan: the same accepted, another refused
    from test_sim_calibrated_plans import _plan

    plan = tmp_path / "p.json"
    plan.write_text(json.dumps(_plan()))
    out = ["-o", str(tmp_path / "p.html")] if command == "view" else []
    argv = [command, "gpt2", "-p", "1", "--cluster", "h100-sxm", "--strategy", str(plan), *out]
    assert main([*argv, "--model-option", "layers=1", "--model-option", "seq=64"]) == 0
    capsys.readouterr()
    assert main([*argv, "--model-option", "layers=2"]) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        f"pase: error: --model-option layers: --strategy {plan} records layers=1, the command "
        "gives layers=2; drop --model-option to price it at the file's model options")


@pytest.mark.parametrize("command", ["evaluate", "simulate", "view"])
@pytest.mark.parametrize("change, error", [
    (["gpt2", "-p", "2"], "-p 2: --strategy {plan} was planned for 1 devices; give -p 1"),
    (["bert-base", "-p", "1"], "--strategy {plan} is a plan for model 'gpt2', not 'bert-base'"),
    (["gpt2", "-p", "1", "--cluster", "dgx-a100"],
     "--cluster dgx-a100: --strategy {plan} was priced on h100-sxm; give --cluster h100-sxm, "
     "or solve it again there")])
def test_a_pipeline_plan_for_another_target_is_refused_alike(tmp_path, capsys, command, change,
                                                             error):
    # evaluate and simulate/view refused another model, device count or cluster each in
    # their own words (evaluate: "is a plan for 1 devices, not -p 2")
    from test_sim_calibrated_plans import _plan

    plan = tmp_path / "p.json"
    plan.write_text(json.dumps(_plan()))
    out = ["-o", str(tmp_path / "p.html")] if command == "view" else []
    assert main([command, *change, "--strategy", str(plan), *out]) == 2
    assert capsys.readouterr().err.splitlines()[0] == "pase: error: " + error.format(plan=plan)


def test_simulate_reads_a_pipeline_plans_cluster_and_asks_for_one_otherwise(tmp_path, capsys):
    # simulate required --cluster even for a pipeline plan, which records the cluster its
    # stages were priced on (evaluate and view read it from the plan)
    from test_sim_calibrated_plans import _plan

    plan = tmp_path / "p.json"
    plan.write_text(json.dumps(_plan()))
    assert main(["simulate", "gpt2", "-p", "1", "--strategy", str(plan), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time"] > 0
    assert main(["simulate", "gpt2", "-p", "1"]) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        "pase: error: --cluster: give the cluster to simulate on (`pase clusters`); only a "
        "pipeline plan's --strategy brings its own")

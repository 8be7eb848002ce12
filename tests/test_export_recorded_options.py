"""`pase export --strategy FILE` builds the model the plan file records (its model options
and batch), as `pase evaluate --strategy FILE` does: a plan written for two layers is
exported, and priced in the header, at two layers, not the model's default; a
--model-option that differs from the file's is refused as evaluate refuses it."""
import json

import pytest

from pase.cli import main

GPT2 = ["gpt2", "-p", 8]
LAYOUT = ["--cluster", "h100-sxm", "--global-batch", 16, "--micro-batch", 1]


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _layout_plan(capsys, tmp_path, layout, model=GPT2, *extra):
    """An `evaluate --layout` output at two layers, and its predicted step."""
    plan = tmp_path / "lay.json"
    code, _, err = _run(capsys, "evaluate", *model, "--model-option", "layers=2", *LAYOUT,
                        "--layout", layout, *extra, "--output", plan)
    assert code == 0, err
    return plan, json.loads(plan.read_text())["step_seconds"]


@pytest.fixture
def solved(capsys, tmp_path):
    """A solve's per-op plan of gpt2 at two layers and batch 8 (not the model's 12 and 16)."""
    plan = tmp_path / "plan.json"
    code, _, err = _run(capsys, "solve", "gpt2", "-p", 4, "--model-option", "layers=2",
                        "--batch", 8, "--output", plan)
    assert code == 0, err
    return plan


@pytest.mark.parametrize("layout", ["tp=2,pp=2,dp=2", "tp=2,dp=4"])
def test_a_layout_plan_is_exported_and_priced_at_its_model_options(capsys, tmp_path, layout):
    plan, step = _layout_plan(capsys, tmp_path, layout)
    code, out, err = _run(capsys, "export", *GPT2, "--strategy", plan, "--engine", "megatron",
                          "--cluster", "h100-sxm")
    assert code == 0, err
    assert "\n--num-layers 2\n" in out
    assert f"# pase predicts on h100-sxm: step {step:.4g} s," in out
    # the file's own option given again is no conflict
    code, again, err = _run(capsys, "export", *GPT2, "--strategy", plan, "--engine", "megatron",
                            "--cluster", "h100-sxm", "--model-option", "layers=2")
    assert code == 0, err
    assert again.splitlines()[1:] == out.splitlines()[1:]  # all but the command line


@pytest.mark.parametrize("layout", ["tp=2,pp=2,dp=2", "tp=2,dp=4"])
def test_a_model_option_other_than_the_layout_plans_is_refused(capsys, tmp_path, layout):
    plan, _ = _layout_plan(capsys, tmp_path, layout)
    code, out, err = _run(capsys, "export", *GPT2, "--strategy", plan, "--engine", "megatron",
                          "--model-option", "layers=3")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"--model-option layers: --strategy {plan} records layers=2, the command gives " \
           f"layers=3" in err


def test_torchtitan_refuses_the_plans_sizes_as_it_refuses_a_model_option(capsys, tmp_path):
    model = ["llama3-8b", "-p", 8]
    plan, _ = _layout_plan(capsys, tmp_path, "tp=2,pp=2,dp=2", model, "--sequence-parallel")
    code, out, err = _run(capsys, "export", *model, "--strategy", plan, "--engine", "torchtitan",
                          "--cluster", "h100-sxm")
    code_given, _, err_given = _run(capsys, "export", *model, "--strategy", plan, "--engine",
                                    "torchtitan", "--model-option", "layers=2")
    assert code == code_given == 2 and out == "" and err == err_given, err
    assert "a flavor fixes the model's sizes" in err and "not layers" in err


def test_a_solved_plan_is_exported_at_its_model_options_and_batch(capsys, solved):
    code, out, err = _run(capsys, "export", "gpt2", "-p", 4, "--strategy", solved,
                          "--engine", "megatron")
    assert code == 0, err
    assert "\n--num-layers 2\n" in out and "\n--global-batch-size 8\n" in out
    code, out, err = _run(capsys, "export", "gpt2", "-p", 4, "--strategy", solved,
                          "--engine", "jax")
    assert code == 0, err
    assert "'h1.mlp.fc2'" in out and "'h2." not in out and "(8, 1024" in out


@pytest.mark.parametrize("engine, flags", [
    ("megatron", ["--model-option", "layers=3"]),
    ("jax", ["--model-option", "layers=3"]),
    ("megatron", ["--model-option", "batch=16"]),
    ("jax", ["--batch", 16]),
])
def test_a_solved_plans_other_options_are_refused_as_evaluate_refuses_them(capsys, solved,
                                                                            engine, flags):
    code, _, want = _run(capsys, "evaluate", "gpt2", "-p", 4, "--strategy", solved, *flags)
    assert code == 2, want
    code, out, err = _run(capsys, "export", "gpt2", "-p", 4, "--strategy", solved,
                          "--engine", engine, *flags)
    assert code == 2 and out == "" and err == want

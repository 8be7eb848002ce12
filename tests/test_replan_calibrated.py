"""pase.replan prices the step with the calibrated model whenever a cluster is given (as
``pase solve`` does), moves the state that model keeps, and refuses what it cannot price."""
from __future__ import annotations

import pytest

import pase
from pase.cli import main
from pase.errors import OptionError, UnknownNameError
from pase.replan import prepare, replan

pytest.importorskip("highspy")

SMALL = {"layers": 1, "width": 256, "heads": 4, "ff": 1024, "vocab": 2048, "seq": 64,
         "positions": 128, "batch": 32}


@pytest.fixture(scope="module")
def old8():
    return pase.solve("gpt2", 8, "dp", cost_model="alpha-beta", cluster="dgx-a100",
                      model_options=SMALL)


def test_a_cluster_selects_the_calibrated_model(old8):
    got = replan("gpt2", old8, cluster="dgx-a100", devices=16, steps=100, model_options=SMALL)
    assert got.strategy.cost_model == "calibrated"
    # the step is the calibrated Problem's sum at the chosen plan, built independently
    built = pase.build_problem("gpt2", 16, cluster="dgx-a100", model_options=SMALL)
    assert built.cost_model.name == "calibrated"
    choice = pase.api.choice_of(built, got.strategy.configs)
    assert got.chosen.step_seconds == pytest.approx(built.problem.evaluate(choice), rel=1e-9)
    # the Strategy carries its plan's price (the calibrated step, at least the Problem's sum)
    assert got.strategy.meta["step_seconds"] >= got.chosen.step_seconds * (1 - 1e-9)


def test_without_a_cluster_or_when_named_alpha_beta(old8):
    bare = replan("gpt2", old8, devices=16, steps=100, model_options=SMALL)
    named = replan("gpt2", old8, devices=16, cluster="dgx-a100", cost_model="alpha-beta",
                   steps=100, model_options=SMALL)
    assert bare.strategy.cost_model == named.strategy.cost_model == "alpha-beta"
    assert bare.chosen.total_seconds == pytest.approx(named.chosen.total_seconds, rel=1e-12)


def test_the_calibrated_state_is_14_bytes_a_parameter(old8):
    # The same move (8 -> 16, each op keeping its config where it can) carries the weight,
    # the fp32 master and Adam's two fp32 moments under mixed precision (2 + 4 + 8 bytes),
    # against alpha-beta's fp32 weight and two moments (4 + 8): 14 / 12 the bytes.
    def keep(cost_model, **options):
        prep = prepare("gpt2", old8, devices=16, cluster="dgx-a100", cost_model=cost_model,
                       model_options=SMALL, cost_options=options)
        assert prep.keep is not None and all(k is not None for k in prep.keep)
        return sum(float(m.total_bytes[k]) for m, k in zip(prep.migrations, prep.keep))

    ab, mixed, fp32 = keep("alpha-beta"), keep("calibrated"), keep("calibrated", precision="fp32")
    assert ab > 0
    assert mixed == pytest.approx(ab * 14 / 12, rel=1e-12)
    assert fp32 == pytest.approx(ab, rel=1e-12)


@pytest.mark.parametrize("kwargs, says", [
    ({"cost_model": "paper"}, "does not price seconds; allowed: calibrated, alpha-beta"),
    ({"cost_model": "nope"}, "nope"),
    ({"cost_options": {"zero": "1"}}, "replan does not model zero=1"),
    ({"cost_options": {"recompute": "auto"}}, "replan prices configs only"),
    ({"cost_options": {"precision": "fp7"}}, "unknown precision 'fp7'"),
])
def test_refusals(old8, kwargs, says):
    with pytest.raises((OptionError, UnknownNameError), match=says.replace("(", r"\(").replace(")", r"\)")):
        replan("gpt2", old8, devices=16, cluster="dgx-a100", model_options=SMALL, **kwargs)


def test_cli_cost_model_and_options(tmp_path, capsys):
    opts = [f"--model-option={k}={v}" for k, v in SMALL.items() if k != "batch"]
    old = tmp_path / "old.json"
    assert main(["solve", "gpt2", "-p", "8", *opts, "--batch", "32", "--cost-model", "alpha-beta",
                 "--output", str(old)]) == 0
    capsys.readouterr()
    argv = ["replan", "gpt2", "--from", str(old), *opts, "--batch", "32", "--cluster", "dgx-a100",
            "-p", "16", "--format", "json"]
    assert main(argv + ["--cost-option", "precision=fp32"]) == 0
    fp32 = __import__("json").loads(capsys.readouterr().out)
    assert main(argv) == 0
    bf16 = __import__("json").loads(capsys.readouterr().out)
    assert fp32["cost_model"] == bf16["cost_model"] == "calibrated"
    assert fp32["step_seconds"] > bf16["step_seconds"]
    assert main(argv + ["--cost-model", "paper"]) == 2
    assert "invalid choice: 'paper'" in capsys.readouterr().err


def test_recomputation_is_priced_and_moves_nothing_more(old8):
    # recomputation changes the step (activations made again), not the state that moves
    plain = prepare("gpt2", old8, devices=16, cluster="dgx-a100", model_options=SMALL)
    full = prepare("gpt2", old8, devices=16, cluster="dgx-a100", model_options=SMALL,
                   cost_options={"recompute": "full"})
    assert [m.total_bytes.tolist() for m in full.migrations] == \
        [m.total_bytes.tolist() for m in plain.migrations]
    a, b = plain.replan(10), full.replan(10)
    assert any(v.recompute for v in b.strategy.variants.values())
    assert b.chosen.step_seconds > a.chosen.step_seconds

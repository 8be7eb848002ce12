"""Files pase writes that hold no per-op plan are refused saying what they are, not as a
strategy whose op 'version' is not a {dim: factor} object."""
from __future__ import annotations

import json

import pytest

from pase.cli import main

GPT2 = ["gpt2", "-p", "8", "--cluster", "h100-sxm", "--model-option", "layers=2"]


def _write(tmp_path, capsys, name: str, argv: list[str]) -> str:
    path = str(tmp_path / name)
    assert main([*argv, "--output", path]) == 0
    capsys.readouterr()
    return path


def _refused(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "'version'" not in err
    return err


def test_an_infeasible_solve_is_said_to_hold_no_strategy(tmp_path, capsys):
    path = _write(tmp_path, capsys, "inf.json", ["solve", *GPT2, "--memory-cap", "1MiB"])
    assert json.loads(open(path).read())["status"] == "infeasible"
    for command in ("evaluate", "simulate"):
        err = _refused(capsys, [command, *GPT2, "--strategy", path])
        assert "infeasible solve" in err and "holds no strategy" in err
    assert "infeasible solve" in _refused(capsys, ["export", *GPT2[:3], "--strategy", path,
                                                   "--engine", "jax"])


def test_a_layout_ranking_points_at_its_best_layout(tmp_path, capsys):
    path = _write(tmp_path, capsys, "ranked.json",
                  ["solve", *GPT2, "--global-batch", "16", "--layouts"])
    for argv in (["evaluate", *GPT2, "--strategy", path],
                 ["replan", *GPT2[:1], "--cluster", "h100-sxm", "--from", path, "-p", "4"]):
        err = _refused(capsys, argv)
        assert "--layouts` ranking" in err and "--layout L" in err


def test_a_pipeline_plan_is_not_exported_as_one_per_op_plan(tmp_path, capsys):
    path = _write(tmp_path, capsys, "pipe.json",
                  ["solve", "mlp", "-p", "8", "--cluster", "h100-sxm", "--pipeline",
                   "--global-batch", "256"])
    err = _refused(capsys, ["export", "mlp", "-p", "8", "--strategy", path, "--engine", "jax"])
    assert "is a pipeline plan" in err


def test_a_bad_entry_of_a_solve_output_is_named(tmp_path, capsys):
    path = _write(tmp_path, capsys, "plan.json", ["solve", *GPT2])
    data = json.loads(open(path).read())
    data["strategy"] = {"wte": None}
    (tmp_path / "plan.json").write_text(json.dumps(data))
    err = _refused(capsys, ["evaluate", *GPT2[:5], "--strategy", path])
    assert "op 'wte' must be a {dim: factor} object" in err


@pytest.mark.parametrize("data", [{"version": 1, "status": "infeasible", "strategy": {}},
                                  {"version": 1, "kind": "pipeline"},
                                  {"version": 1, "ranked": [], "best": None}])
def test_the_check_itself(data):
    from pase.errors import StrategyError
    from pase.strategy import strategy_mapping

    with pytest.raises(StrategyError, match="strategy file"):
        strategy_mapping(data)

"""A plan file's recorded fields are checked, not trusted, and alike in every command
(smoke test: a hand-edited step, micro-batch count or device count)."""
from __future__ import annotations

import json

import pytest

from pase.cli import main

MLP = ["mlp", "-p", "8", "--cluster", "h100-sxm"]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("plans") / "pipe.json"
    assert main(["solve", *MLP, "--pipeline", "--global-batch", "256", "--output",
                 str(path)]) == 0
    return json.loads(path.read_text())


def _file(tmp_path, data: dict, name: str = "plan.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_simulate_prints_the_plans_price_not_its_recorded_step(tmp_path, capsys, pipeline):
    capsys.readouterr()
    path = _file(tmp_path, {**pipeline, "step_time": 1e-9})
    assert main(["evaluate", *MLP, "--strategy", path, "--format", "json"]) == 0
    step = json.loads(capsys.readouterr().out)["step_seconds"]
    assert step > 1e-6
    assert main(["simulate", *MLP, "--strategy", path]) == 0
    assert f"(priced step {step * 1e3:.4g} ms)" in capsys.readouterr().out


def test_microbatches_edited_alone_are_refused(tmp_path, capsys, pipeline):
    path = _file(tmp_path, {**pipeline, "microbatches": 2 * pipeline["microbatches"]})
    for command in ("evaluate", "simulate"):
        assert main([command, *MLP, "--strategy", path]) == 2
        assert "microbatch_size" in capsys.readouterr().err


def test_a_per_op_plan_of_another_device_count_is_refused_alike(tmp_path, capsys):
    path = str(tmp_path / "p8.json")
    assert main(["solve", *MLP, "--output", path]) == 0
    capsys.readouterr()
    for command in ("evaluate", "simulate"):
        assert main([command, "mlp", "-p", "16", "--cluster", "h100-sxm", "--strategy",
                     path]) == 2
        err = capsys.readouterr().err
        assert "was planned for 8 devices; give -p 8" in err and "pase replan" in err

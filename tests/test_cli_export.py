"""``pase export`` and ``pase verify`` from the command line."""
from __future__ import annotations

import json

import pytest

from pase.cli import main


@pytest.fixture
def strategy(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"fc1": {"n": 8}, "fc2": {"b": 8}}))
    return str(path)


SMALL = ["--model-option", "width=64", "--batch", "32"]


def test_export_writes_the_program(tmp_path, strategy, capsys):
    out = tmp_path / "step.py"
    assert main(["export", "mlp", "-p", "8", "--strategy", strategy, "--engine", "jax",
                 "-o", str(out), *SMALL]) == 0
    text = out.read_text()
    assert "def forward(params, batch, pin):" in text and "'edge/fc1->fc2'" in text
    compile(text, str(out), "exec")
    assert capsys.readouterr().out == f"wrote {out}\n"  # -o: the program goes to the file only
    assert main(["export", "mlp", "-p", "8", "--strategy", strategy, "--engine", "jax", *SMALL]) == 0
    assert capsys.readouterr().out == text


@pytest.mark.parametrize("argv, words", [
    (["--engine", "tensorflow"], ["unknown engine 'tensorflow'", "allowed: jax"]),
    (["--engine", "jax", "--dtype", "int8"], ["dtype must be one of"]),
    (["--engine", "jax", "--model-option", "depth=2"], ["depth"]),
])
def test_bad_input_is_one_line_exit_2(argv, words, strategy, capsys):
    for command in ("export", "verify"):
        assert main([command, "mlp", "-p", "8", "--strategy", strategy, *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        for w in words:
            assert w in err


def test_verify_refuses_unknown_cost_options(strategy, capsys):
    assert main(["verify", "mlp", "-p", "8", "--strategy", strategy, "--engine", "jax",
                 "--cost-option", "alpha=1"]) == 2
    assert "allowed: reduce_scatter" in capsys.readouterr().err


def test_verify_json_and_run(strategy, capsys):
    pytest.importorskip("jax")
    assert main(["verify", "mlp", "-p", "8", "--strategy", strategy, "--engine", "jax", *SMALL,
                 "--format", "json", "--run"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["total"]["within"] and report["rows_within"] == report["rows_total"] == 3
    # n|b: fc1's (32, 64) f32 output re-laid by an all-to-all over 8 devices, each way
    edge = next(r for r in report["rows"] if r["row"] == "edge/fc1->fc2")
    assert edge["compiled_forward"] == edge["compiled_backward"] == 32 * 64 * 4 / 8 * 7 / 8
    assert report["run"]["equal"]

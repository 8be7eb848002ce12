"""``pase solve --precision P``: the compute precision of every solve, one flag."""
from __future__ import annotations

import json

from pase.cli import main

TINY = ["--model-option", "layers=2", "--model-option", "width=64", "--model-option", "heads=4",
        "--model-option", "ff=128", "--model-option", "vocab=256", "--model-option", "seq=64"]


def _json(capsys, args):
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_the_layout_search_runs_at_the_given_precision(capsys):
    args = ["solve", "gpt3", "-p", "8", "--cluster", "h100-sxm", "--layouts",
            "--global-batch", "8", "--format", "json", *TINY]
    plain, fp8 = _json(capsys, args), _json(capsys, args + ["--precision", "fp8"])
    assert plain["best"]["layout"]["precision"] == "bf16"
    assert fp8["best"]["layout"]["precision"] == "fp8"
    assert fp8["best"]["step_seconds"] != plain["best"]["step_seconds"]


def test_a_per_op_solve_takes_it_as_the_cost_option(capsys):
    args = ["solve", "gpt3", "-p", "4", "--cluster", "h100-sxm", "--format", "json", *TINY]
    flag = _json(capsys, args + ["--precision", "fp8"])
    option = _json(capsys, args + ["--cost-option", "precision=fp8"])
    plain = _json(capsys, args)
    assert flag["total_cost"] == option["total_cost"] != plain["total_cost"]
    assert flag["strategy"] == option["strategy"]


def test_given_twice_or_unknown_is_one_line(capsys):
    args = ["solve", "gpt3", "-p", "4", "--cluster", "h100-sxm", *TINY]
    assert main(args + ["--precision", "fp8", "--cost-option", "precision=bf16"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--precision and --cost-option precision=... are both given; use one")
    assert len(err.splitlines()) == 1
    assert main(args + ["--precision", "fp4"]) == 2
    assert "invalid choice: 'fp4'" in capsys.readouterr().err

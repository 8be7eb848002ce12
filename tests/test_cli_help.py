"""Every command's --help ends with examples that parse; option dumps live in the listings,
and the listings fit 100 columns."""
import json
import shlex

import pytest

from pase.cli import main
from pase.cli.parser import EXAMPLES, build

PARSER = build({})
WIDTH = 100


def _run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_every_command_has_examples(capsys):
    code, _, err = _run(capsys, "no-such-command")  # the usage error lists every command
    choices = err.partition("choose from")[2].partition(")")[0]
    commands = [c.strip(" '") for c in choices.split(",")]  # quoted or not, by Python version
    assert code == 2 and len(commands) == 17 and set(commands) == set(EXAMPLES)


@pytest.mark.parametrize("command", sorted(EXAMPLES))
def test_help_ends_with_two_or_three_examples_that_parse(capsys, command):
    code, out, _ = _run(capsys, command, "--help")
    head, sep, tail = out.partition("\nexamples:\n")
    assert code == 0 and sep, f"pase {command} --help has no examples: section"
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    assert 2 <= len(lines) <= 3, lines
    assert any(line.split()[1] == command for line in lines), lines  # the command itself is shown
    for line in lines:
        argv = shlex.split(line)
        assert argv[0] == "pase", line
        args = PARSER.parse_args(argv[1:])  # a usage error would exit
        assert args.command == argv[1]


def test_solve_help_points_to_the_option_listings_instead_of_dumping_them(capsys):
    code, out, _ = _run(capsys, "solve", "--help")
    assert code == 0
    for pointer in ("`pase models --options`", "`pase solvers --options`",
                    "`pase cost-models --options`"):
        assert pointer in " ".join(out.split()), pointer
    assert "ordering='auto'" not in out and "efficiency=0.5" not in out  # no dumps
    assert len(out.splitlines()) < 100


@pytest.mark.parametrize("listing, flag, dump", [
    ("models", "--model-option", "transformer: "),
    ("solvers", "--option", "dp: ordering='auto'"),
    ("cost-models", "--cost-option", "alpha-beta: cluster='dgx-a100'"),
])
def test_options_listings_hold_the_dumps(capsys, listing, flag, dump):
    code, out, _ = _run(capsys, listing, "--options")
    assert code == 0 and dump in out and f"Set one with {flag} KEY=VALUE" in out
    code, out, _ = _run(capsys, listing, "--options", "--format", "json")
    rows = json.loads(out)
    assert code == 0 and all(set(r) == {"name", "options"} for r in rows)


def test_options_json_keeps_the_defaults(capsys):
    _, out, _ = _run(capsys, "solvers", "--options", "--format", "json")
    dp = next(r for r in json.loads(out) if r["name"] == "dp")
    assert dp["options"]["ordering"] == "auto" and dp["options"]["prune"] is True


@pytest.mark.parametrize("argv", [("models",), ("solvers",), ("cost-models",), ("clusters",),
                                  ("models", "--options"), ("solvers", "--options"),
                                  ("cost-models", "--options")])
def test_listings_fit_100_columns(capsys, argv):
    code, out, _ = _run(capsys, *argv)
    long = [line for line in out.splitlines() if len(line) > WIDTH]
    assert code == 0 and out and not long, long


def test_models_json_still_lists_each_models_options(capsys):
    _, out, _ = _run(capsys, "models", "--format", "json")
    mlp = next(r for r in json.loads(out) if r["name"] == "mlp")
    assert mlp["options"] and mlp["status"] == "ok"

"""The README's examples run as shown: Python blocks, and every `pase` command it names."""
import re
import shlex
from pathlib import Path

import pytest

from pase.cli import main
from pase.cli.parser import build
from pase.registry import SOLVERS
from pase.testing import check_solver

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)
# Every `pase ...` command: inline code, and lines of plain code blocks.
COMMANDS = sorted({c.replace(r"\|", "|") for c in re.findall(r"`(pase [^`]*)`", README)}
                  | set(re.findall(r"^(pase .*)$", README, flags=re.M)))
LISTINGS = ("models", "solvers", "cost-models", "clusters")
# Complete commands: no MODEL, N or [options] placeholders, and a model with -p (or a listing).
CONCRETE = [c for c in COMMANDS if not re.search(r"[A-Z]{2,}|\bN\b|\[", c)
            and (" -p " in c or c.split()[1] in LISTINGS)]
# Too slow for a unit test (every ILP backend), a plug-in the README defines in Python, or
# refused on purpose (tests/test_build_guard.py checks that refusal and its speed).
# A code block whose commands read what an earlier one writes runs in order, in one folder.
def _fenced_blocks(text: str) -> list[str]:
    """The contents of the ``` blocks, fences paired in order."""
    blocks, current = [], None
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append("\n".join(current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


SEQUENCE = next(b for b in _fenced_blocks(README) if "gpt2_p8.json --engine jax" in b)
# Blocks whose commands read files an earlier line of the block writes: run in order below
# (the marker picks the block; a slow one is marked slow).
IN_ORDER = {"mlp-zero3.json": False, "pase replan": True, "--pipeline": True}
ORDERED = {marker: next(b for b in _fenced_blocks(README) if marker in b) for marker in IN_ORDER}
# The PyTorch block's commands read and write files in order, with paths from the repository
# root: tests/test_torch_cli.py runs them, in order, from the README.
TORCH = next(b for b in _fenced_blocks(README) if "--engine torch" in b)
NOT_RUN = ("pase compare alexnet -p 8", "pase solve alexnet -p 8 --solver cheapest-alone",
           "pase solve gpt3-175b -p 32768",
           *(line for line in SEQUENCE.splitlines() if line.startswith("pase verify")),
           *TORCH.splitlines(),
           *(line for b in ORDERED.values() for line in b.splitlines() if line.startswith("pase ")))


def test_quick_start_python_block():
    block = next(b for b in BLOCKS if "pase.solve(" in b)
    exec(compile(block, "README quick start", "exec"), {})


def test_adding_a_solver_block_registers_a_conforming_solver():
    block = next(b for b in BLOCKS if "SOLVERS.register" in b)
    namespace: dict = {}
    try:
        exec(compile(block, "README solver", "exec"), namespace)
        check_solver("cheapest-alone")
        check_solver(namespace["solve"])
    finally:
        SOLVERS.remove("cheapest-alone")


def _subparser(command: str):
    parser = build({})
    for action in parser._subparsers._group_actions:
        if command in action.choices:
            return action.choices[command]
    raise AssertionError(f"README names an unknown command: pase {command}")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_flag_the_readme_names_exists(command):
    sub = _subparser(command.split()[1])
    for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", command):
        assert flag in sub._option_string_actions, f"{flag} in `{command}`"


@pytest.mark.parametrize("command", [
    pytest.param(c, marks=(pytest.mark.slow,) if " simulate " in f" {c} " else ())
    for c in CONCRETE if c not in NOT_RUN])
def test_concrete_readme_commands_run(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # --plot and --out paths land here, not in the repository
    argv = shlex.split(command)[1:]
    for i, arg in enumerate(argv):
        if "/" in arg or arg.endswith(".png"):
            argv[i] = Path(arg).name
    if argv[0] == "reproduce":
        pytest.skip("pase reproduce takes minutes; tests/test_reproduce.py covers it")
    code = main(argv)
    assert code == 0, capsys.readouterr().err


@pytest.mark.parametrize("command", NOT_RUN)
def test_commands_not_run_still_parse(command):
    build({}).parse_args(shlex.split(command)[1:])


def test_readme_solve_then_verify_sequence_runs_in_order(tmp_path, monkeypatch, capsys):
    pytest.importorskip("jax", reason="jax is not installed (pip install \"pase[jax]\")")
    monkeypatch.chdir(tmp_path)
    for line in SEQUENCE.splitlines():
        assert main(shlex.split(line)[1:]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "pase's prediction vs XLA's compiled HLO" in out and "op/h0.attn.qkv" in out


def test_readme_torch_block_runs_in_order(tmp_path, monkeypatch, capsys):
    """The PyTorch section's commands as written (paths from the repository root), then
    its Python block."""
    pytest.importorskip("torch")
    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(tmp_path)
    for line in TORCH.splitlines():
        argv = [str(root / a) if a.startswith("tests/") else a for a in shlex.split(line)[1:]]
        assert main(argv) == 0, capsys.readouterr().err
    assert "DeviceMesh" in capsys.readouterr().out
    block = next(b for b in BLOCKS if "import_torch" in b)
    exec(compile(block, "README torch", "exec"), {})
    assert "parameter" in capsys.readouterr().out


@pytest.mark.parametrize("marker", [pytest.param(m, marks=(pytest.mark.slow,) if slow else ())
                                    for m, slow in IN_ORDER.items()])
def test_readme_blocks_run_in_order(marker, tmp_path, monkeypatch, capsys):
    """A block whose later lines read what earlier ones write, run line by line in one folder."""
    lines = [line for line in ORDERED[marker].splitlines() if line.startswith("pase ")]
    if any("--engine jax" in line for line in lines):
        pytest.importorskip("jax", reason="jax is not installed (pip install \"pase[jax]\")")
    monkeypatch.chdir(tmp_path)
    for line in lines:
        assert main(shlex.split(line)[1:]) == 0, f"{line}: {capsys.readouterr().err}"


def test_readme_replan_python_block(tmp_path, monkeypatch):
    """The replan section's Python block, after the block's first solve wrote old64.json."""
    monkeypatch.chdir(tmp_path)
    first = next(line for line in ORDERED["pase replan"].splitlines() if "old64.json" in line)
    assert main(shlex.split(first)[1:]) == 0
    block = next(b for b in BLOCKS if "from pase.replan import replan" in b)
    exec(compile(block, "README replan", "exec"), {})

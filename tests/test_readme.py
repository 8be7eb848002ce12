"""The README's and the guides' examples run as shown: Python blocks, and every `pase`
command they name.

The README is a user's guide; the measured sections it once held live in docs/, so the
commands of README.md and of every docs/*.md page are checked alike: every flag they name
exists, every complete command runs (or, where listed in NOT_RUN with its reason, parses),
and the blocks whose lines read what earlier lines write run in order.
"""
import re
import shlex
from pathlib import Path

import pytest

from pase.cli import main
from pase.cli.parser import build
from pase.registry import SOLVERS
from pase.testing import check_solver

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PAGES = {path.relative_to(ROOT).as_posix(): path.read_text()
         for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
TEXT = "\n".join(PAGES.values())
BLOCKS = re.findall(r"```python\n(.*?)```", TEXT, flags=re.S)


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


def _commands(text: str) -> set[str]:
    """Every `pase ...` command: inline code, and lines of plain code blocks (a line
    continued with a backslash joined to the next); trailing ``# comments`` dropped."""
    inline = {c.replace(r"\|", "|") for c in re.findall(r"`(pase [^`\n]*)`", text)}
    code = "\n".join(_fenced_blocks(re.sub(r"\\\n\s*", " ", text)))
    code = re.sub(r" && ", "\n", code)  # `pip install -e . && pase solve ...`
    lines = {re.sub(r"\s+#.*$", "", line).strip() for line in re.findall(r"^(pase .*)$", code, flags=re.M)}
    return inline | lines


COMMANDS = sorted(set().union(*(_commands(t) for t in PAGES.values())))
# The plug-in guides' commands use the plug-ins they define: tests/test_docs.py runs them.
PLUGIN_GUIDES = ("docs/writing-a-solver.md", "docs/writing-a-cost-model.md", "docs/graph-schema.md")
RUNNABLE = sorted(set().union(*(_commands(t) for name, t in PAGES.items() if name not in PLUGIN_GUIDES)))
LISTINGS = ("models", "solvers", "cost-models", "clusters")
# Complete commands: no MODEL, N or [options] placeholders, and a model with -p (or a listing).
CONCRETE = [c for c in RUNNABLE if not re.search(r"[A-Z]{2,}|\bN\b|\[|\$", c)
            and (" -p " in c or c.split()[1] in LISTINGS)]


FENCED = [b for text in PAGES.values() for b in _fenced_blocks(text)]
SEQUENCE = next(b for b in FENCED if "gpt2_p8.json --engine jax" in b)
# Blocks whose commands read files an earlier line of the block writes: run in order below
# (the marker picks the block; a slow one is marked slow).
IN_ORDER = {"mlp-zero3.json": False, "old64.json": True,
            "--schedule gpipe --output plan.json": True, "--compare mlp.json -o mlp.html": False}
ORDERED = {marker: next(b for b in FENCED if marker in b) for marker in IN_ORDER}
# The PyTorch guide's commands read and write files in order, with paths from the repository
# root: tests/test_torch_cli.py runs them, in order, from the guide.
TORCH = next(b for b in FENCED if "gpt2.py:small -o gpt2_torch.json" in b)
# Shown but not run here, each for its reason; they must still parse.
NOT_RUN = (
    "pase compare alexnet -p 8",  # every ILP backend: too slow for a unit test
    "pase solve alexnet -p 8 --solver cheapest-alone",  # a plug-in the README defines in Python
    "pase solve gpt3-175b -p 32768",  # refused on purpose: tests/test_build_guard.py
    # they read old.json / s.json / model.py, files the prose describes, not writes
    *(c for c in COMMANDS if re.search(r"\b(old|s)\.json\b|model\.py:", c)),
    # minutes each on 2 cores: the guides' measured rows, rerun by their benchmarks
    *(c for c in CONCRETE if "--pipeline" in c),  # the slow in-order block below runs one
    *(c for c in CONCRETE if c.startswith(("pase solve gpt3-175b -p 16384", "pase solve gpt3-175b -p 256",
                                           "pase solve gpt2 -p 32 --cost-model alpha-beta --cluster dgx-a100x2+dgx1-v100x2",
                                           "pase solve gpt2-xl",
                                           "pase solve gpt3-175b -p 128 --cluster h100-sxm --model-option layers=12"))),
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
        writes = i > 0 and argv[i - 1] in ("--plot", "--output", "-o", "--out")
        path, colon, function = arg.partition(":")  # a FILE.py:FUNCTION model reference too
        if not writes and (ROOT / path).is_file():  # an input file the repository ships
            argv[i] = str(ROOT / path) + colon + function
        elif "/" in arg or arg.endswith(".png"):
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
    block = next(b for b in BLOCKS if "pase.import_torch(" in b)
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
    first = next(line for line in ORDERED["old64.json"].splitlines() if "old64.json" in line)
    assert main(shlex.split(first)[1:]) == 0
    block = next(b for b in BLOCKS if "from pase.replan import replan" in b)
    exec(compile(block, "README replan", "exec"), {})


def _written_paths(command: str) -> list[str]:
    """The relative files or folders a command writes (``-o``, ``--output``, ``--out``)."""
    words = shlex.split(command)
    return [after for flag, after in zip(words, words[1:])
            if flag in ("-o", "--output", "--out") and not after.startswith(("/", "-", "$"))
            and not after.isupper()]  # DIR, PLAN: placeholders


WRITTEN = sorted({path for c in RUNNABLE for path in _written_paths(c)})


def test_readme_commands_have_outputs_to_check():
    assert "plan.html" in WRITTEN  # the viewer's example: the check below covers it


@pytest.mark.parametrize("path", WRITTEN)
def test_what_the_guides_write_into_a_clone_is_ignored(path):
    """A guide's command run from the clone leaves nothing for ``git status`` to show
    (issue 39: the README's ``pase view ... -o plan.html`` wrote an untracked file): what
    it writes is ignored, or is a committed example the command writes again (a test
    keeps those equal to what the command writes)."""
    import subprocess

    ignored = subprocess.run(["git", "check-ignore", "--no-index", "-q", path], cwd=ROOT)
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", path], cwd=ROOT,
                             capture_output=True)
    assert ignored.returncode == 0 or tracked.returncode == 0, \
        f"{path} (written by a guide's command) is neither in .gitignore nor a committed file"

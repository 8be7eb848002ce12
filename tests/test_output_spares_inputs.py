"""An output file that is one of the command's inputs is refused before anything is
written: `pase view --strategy p.json -o p.json` left HTML where the plan was, and
`pase export ... -o` the exported program (smoke test, stop 49)."""
from __future__ import annotations

import hashlib
import os

import pytest

from pase.cli import main

MLP = ["mlp", "-p", "4"]


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def plan(tmp_path, capsys, monkeypatch):
    """A solved plan, and the folder as the working directory (for ./ spellings)."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "solve", *MLP, "--format", "json", "--output", "plan.json")
    assert code == 0, err
    return tmp_path / "plan.json"


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("argv, flag", [
    (["view", *MLP, "--strategy", "plan.json", "-o", "plan.json"], "--output"),
    (["view", *MLP, "--strategy", "plan.json", "-o", "./plan.json"], "--output"),
    (["export", *MLP, "--strategy", "plan.json", "--engine", "jax", "-o", "plan.json"], "--output"),
    (["evaluate", *MLP, "--strategy", "plan.json", "--output", "plan.json"], "--output"),
    (["simulate", *MLP, "--cluster", "dgx-a100", "--strategy", "plan.json", "--plot", "plan.json"],
     "--plot"),
    (["replan", "mlp", "--from", "plan.json", "--from-devices", "4", "-p", "2",
      "--output", "plan.json"], "--output"),
    (["view", *MLP, "--strategy", "plan.json", "--compare", "other.json", "-o", "other.json"],
     "--output"),
], ids=["view", "view-dot-slash", "export", "evaluate", "simulate-plot", "replan", "view-compare"])
def test_an_output_naming_an_input_is_refused(plan, capsys, argv, flag):
    (plan.parent / "other.json").write_bytes(plan.read_bytes())
    before = {p.name: _digest(p) for p in plan.parent.iterdir()}
    code, out, err = run(capsys, *argv)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"pase: error: {flag} ") and "input" in lines[0]
    assert {p.name: _digest(p) for p in plan.parent.iterdir()} == before


def test_a_link_to_the_input_is_the_input(plan, capsys):
    os.symlink("plan.json", plan.parent / "link.json")
    before = _digest(plan)
    code, _, err = run(capsys, "evaluate", *MLP, "--strategy", "plan.json", "--output", "link.json")
    assert code == 2 and "--output link.json is the file --strategy reads" in err
    assert _digest(plan) == before


def test_a_graph_file_model_is_an_input(tmp_path, capsys):
    from pase import api

    graph = tmp_path / "g.json"
    api.load_graph("mlp").to_json(graph)
    before = _digest(graph)
    code, _, err = run(capsys, "solve", graph, "-p", "4", "--output", graph)
    assert code == 2 and "is the file the model reads" in err
    assert _digest(graph) == before
    code, _, err = run(capsys, "solve", graph, "-p", "4", "--output", tmp_path / "plan.json")
    assert code == 0, err  # another file: written


def test_a_reference_models_python_file_is_an_input(tmp_path, capsys, monkeypatch):
    """``FILE.py:FUNCTION`` reads FILE.py: writing over it would replace the user's source."""
    monkeypatch.chdir(tmp_path)
    source = tmp_path / "m.py"
    source.write_text("def build():\n    raise RuntimeError('never built: refused first')\n")
    before = _digest(source)
    for argv in (["import", "m.py:build", "-o", "m.py"],
                 ["solve", "m.py:build", "-p", "4", "--output", "m.py"]):
        code, _, err = run(capsys, *argv)
        assert code == 2 and "is the file the model reads (m.py)" in err, err
    assert _digest(source) == before


def test_a_registered_name_reads_no_file_of_that_name(tmp_path, capsys, monkeypatch):
    """`pase solve mlp` builds the registered model, never a file named mlp in the folder:
    writing the output there replaces nothing the command reads."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mlp").write_text("an old output\n")
    code, _, err = run(capsys, "solve", *MLP, "--format", "json", "--output", "mlp")
    assert code == 0, err
    assert (tmp_path / "mlp").read_text().startswith("{")


def test_a_hugging_face_folders_config_is_an_input(tmp_path, capsys):
    folder = tmp_path / "tiny"
    folder.mkdir()
    config = folder / "config.json"
    config.write_text('{"model_type": "llama"}\n')
    code, _, err = run(capsys, "solve", folder, "-p", "4", "--output", config)
    assert code == 2 and "is the file the model reads" in err, err
    assert config.read_text() == '{"model_type": "llama"}\n'

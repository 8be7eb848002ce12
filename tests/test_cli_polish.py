"""The command says `wrote FILE` for every file it writes, `--cluster` means alpha-beta on every
command, and a strategy table ends with a legend of its dim letters."""
import json
from pathlib import Path

import pytest

from pase.cli import main
from pase.schema import DIM_LETTERS

TORCH_MLP = str(Path(__file__).resolve().parent / "torch_models" / "mlp.py") + ":build"


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    """A `pase solve --format json` output for mlp on 8 devices (alpha-beta)."""
    path = tmp_path_factory.mktemp("plan") / "mlp.json"
    assert main(["solve", "mlp", "-p", "8", "--cluster", "dgx-a100", "--output", str(path),
                 "--format", "json"]) == 0
    return path


# -- wrote FILE: on stderr when stdout carries the table or JSON, else on stdout -----------

@pytest.mark.parametrize("fmt", ["table", "json"])
def test_solve_output_says_wrote_on_stderr(capsys, tmp_path, fmt):
    path = tmp_path / "s.json"
    code, out, err = run(capsys, "solve", "mlp", "-p", "4", "--output", path, "--format", fmt)
    assert code == 0 and f"wrote {path}" in err.splitlines() and path.is_file()
    assert "wrote" not in out
    if fmt == "json":
        json.loads(out)  # stdout stays pure JSON


def test_evaluate_output_says_wrote(capsys, tmp_path, plan):
    path = tmp_path / "e.json"
    code, _, err = run(capsys, "evaluate", "mlp", "-p", "8", "--cluster", "dgx-a100",
                       "--strategy", plan, "--output", path)
    assert code == 0 and f"wrote {path}" in err.splitlines() and path.is_file()


def test_pipeline_output_says_wrote(capsys, tmp_path):
    path = tmp_path / "pp.json"
    code, out, err = run(capsys, "solve", "chain", "-p", "4", "--batch", "8", "--pipeline",
                         "--output", path, "--format", "json")
    assert code == 0 and f"wrote {path}" in err.splitlines() and json.loads(out)["kind"] == "pipeline"


def test_replan_output_says_wrote(capsys, tmp_path, plan):
    path = tmp_path / "r.json"
    code, _, err = run(capsys, "replan", "mlp", "--from", plan, "-p", "4", "--output", path)
    assert code == 0 and f"wrote {path}" in err.splitlines() and path.is_file()


def test_compare_plot_says_wrote(capsys, tmp_path):
    png = tmp_path / "c.png"
    code, out, err = run(capsys, "compare", "mlp", "-p", "4", "--solvers", "dp,greedy", "--plot", png,
                         "--format", "json")
    assert code == 0 and f"wrote {png}" in err.splitlines() and png.stat().st_size > 0
    json.loads(out)


def test_simulate_plot_says_wrote(capsys, tmp_path, plan):
    png = tmp_path / "t.png"
    code, out, err = run(capsys, "simulate", "mlp", "-p", "8", "--cluster", "dgx-a100",
                         "--strategy", plan, "--plot", png)
    assert code == 0 and f"wrote {png}" in err.splitlines() and png.stat().st_size > 0
    assert "written" not in out and "wrote" not in out


def test_export_says_wrote_on_stdout(capsys, tmp_path, plan):
    path = tmp_path / "step.py"
    code, out, err = run(capsys, "export", "mlp", "-p", "8", "--strategy", plan, "--engine", "jax",
                         "-o", path)
    assert code == 0 and out == f"wrote {path}\n" and path.read_text().startswith('"""')


def test_import_says_wrote_on_stdout(capsys, tmp_path):
    pytest.importorskip("torch")
    path = tmp_path / "g.json"
    code, out, _ = run(capsys, "import", TORCH_MLP, "-o", path)
    assert code == 0 and out == f"wrote {path}\n" and json.loads(path.read_text())["ops"]


# pase report's `wrote` lines: tests/test_sweep.py (it needs a sweep's store).


# -- --cluster alone selects alpha-beta ------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["solve", "mlp", "-p", "8", "--cluster", "dgx-a100"],
    ["compare", "mlp", "-p", "8", "--cluster", "dgx-a100", "--solvers", "dp"],
])
def test_cluster_alone_selects_the_calibrated_model(capsys, argv):
    code, out, _ = run(capsys, *argv, "--format", "json")
    assert code == 0 and json.loads(out)["cost_model"] == "calibrated"


def test_evaluate_with_cluster_alone_is_calibrated(capsys, plan):
    code, out, _ = run(capsys, "evaluate", "mlp", "-p", "8", "--cluster", "dgx-a100x2",
                       "--strategy", plan, "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["cost_model"] == "calibrated" and data["cost_unit"] == "s"
    assert data["step_seconds"] > 0 and data["fits_memory"] in (True, False)


def test_cluster_with_another_cost_model_is_refused_in_one_line(capsys):
    code, out, err = run(capsys, "solve", "mlp", "-p", "8", "--cost-model", "paper",
                         "--cluster", "dgx-a100")
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "--cluster does not apply to cost model 'paper'" in err


# -- the dim legend under a strategy table ----------------------------------------------------

def test_solve_table_ends_with_a_legend_of_the_split_letters(capsys):
    code, out, _ = run(capsys, "solve", "alexnet", "-p", "8")
    last = out.splitlines()[-1]
    assert code == 0 and last.startswith("dims: ") and last.endswith(" (docs/glossary.md)")
    table = out.split("\n\n", 1)[1].splitlines()[2:-2]  # the op rows
    split = {part.split("=")[0] for row in table for part in row.split()[1:] if "=" in part}
    shown = [item.split()[0] for item in last[len("dims: "):-len(" (docs/glossary.md)")].split(", ")
             if item.split()[0] in DIM_LETTERS]
    assert split and set(shown) == {s.rstrip(",") for s in split}
    assert f"n {DIM_LETTERS['n']}" in last


def test_json_has_no_legend(capsys):
    code, out, _ = run(capsys, "solve", "alexnet", "-p", "8", "--format", "json")
    assert code == 0 and "glossary" not in out and json.loads(out)["strategy"]


def test_no_split_no_legend(capsys):
    code, out, _ = run(capsys, "solve", "mlp", "-p", "1")
    assert code == 0 and "dims:" not in out


def test_every_letter_of_the_built_in_models_has_a_meaning():
    from pase.registry import MODELS

    letters = set()
    for name in MODELS.names():
        letters |= {d.name for op in MODELS.get(name)().ops for d in op.dims}
    assert letters and letters <= set(DIM_LETTERS), sorted(letters - set(DIM_LETTERS))

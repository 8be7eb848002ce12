"""``pase view``: pages from a file, a solver, a layout and a pipeline plan; bad input is one
line and exit 2."""
import json

import pytest

from pase.cli import main
from view.test_page import page_data  # tests/ is on sys.path (rootdir-relative import)


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def mlp_file(tmp_path_factory):
    import pase

    path = tmp_path_factory.mktemp("view") / "mlp.json"
    pase.solve("mlp", 8, solver="dp").to_json(path)
    return path


def test_view_from_a_solver_writes_the_page(capsys, tmp_path):
    out = tmp_path / "plan.html"
    code, stdout, err = run(capsys, "view", "mlp", "-p", "8", "--solver", "dp", "-o", out)
    assert code == 0 and stdout.strip() == f"wrote {out}" and not err
    data = page_data(out.read_text())
    assert data["summary"]["solver"] == "dp" and data["summary"]["devices"] == 8


def test_view_from_a_file_with_compare(capsys, tmp_path, mlp_file):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"fc1": {"b": 8}}))
    out = tmp_path / "cmp.html"
    code, _, err = run(capsys, "view", "mlp", "-p", "8", "--strategy", mlp_file,
                       "--compare", other, "-o", out)
    assert code == 0, err
    data = page_data(out.read_text())
    strategy = json.loads(mlp_file.read_text())["strategy"]
    expected = {op for op, cfg in strategy.items()
                if {d: f for d, f in cfg.items() if f > 1} != ({"b": 8} if op == "fc1" else {})}
    names = [r["n"] for r in data["ops"]]
    assert {names[i] for i, _ in data["compare"]["ops"]} == expected


def test_view_of_a_layout_splits_as_megatron(capsys, tmp_path):
    out = tmp_path / "lay.html"
    code, _, err = run(capsys, "view", "gpt2", "-p", "8", "--model-option", "layers=1",
                       "--layout", "tp=4,dp=2", "--micro-batch", "1", "--cluster", "dgx-a100",
                       "--no-timeline", "-o", out)
    assert code == 0, err
    rows = {r["n"]: {d[0]: d[3] for d in r["d"]} for r in page_data(out.read_text())["ops"]}
    fc1 = rows["h0.mlp.fc1"]
    assert fc1["b"] == 2 and max(f for d, f in fc1.items() if d != "b") == 4  # dp 2, tp 4


def test_view_of_a_pipeline_plan(capsys, tmp_path):
    from pase.pipeline import solve_pipeline

    plan = solve_pipeline("chain", 4, batch=256, microbatches=16, stage_sizes=[1])
    path = tmp_path / "plan.json"
    plan.to_json(path)
    out = tmp_path / "pipe.html"
    code, _, err = run(capsys, "view", "chain", "-p", "4", "--strategy", path, "-o", out)
    assert code == 0, err
    data = page_data(out.read_text())
    assert data["kind"] == "pipeline" and len(data["pipeline"]["stages"]) == len(plan.stages)
    assert [r["s"] for r in data["ops"]] == [i for i, st in enumerate(plan.stages)
                                            for _ in range(st.op_range[1] - st.op_range[0])]
    assert data["timeline"]["rows"][:len(plan.stages)] == [f"stage{i}" for i in range(len(plan.stages))]
    code, _, err = run(capsys, "view", "chain", "-p", "4", "--strategy", path, "--compare", path)
    assert code == 2 and "pipeline plan" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, message", [
    ("view alexnet -p 8 --strategy {mlp}", "is a plan for model 'mlp', not 'alexnet'"),
    ("view mlp -p 8 --strategy {tmp}/missing.json", "cannot read strategy file .*missing.json"),
    ("view mlp -p 8 --solver dp -o {tmp}/no/such/folder/plan.html", "folder .* does not exist"),
    ("view mlp -p 8 --solver dp -o {tmp}", "is a folder"),
    ("view mlp -p 8 --solver nosuch", "unknown solver 'nosuch'"),
    ("view mlp -p 8 --strategy {mlp} --seed 3", "--seed steers --solver"),
    ("view mlp -p 8 --solver dp --micro-batch 2", "--micro-batch applies only with --layout"),
    ("view gpt2 -p 8 --layout tp=4,pp=2 --micro-batch 1", "pp=2.*pipeline plan"),
    ("view mlp -p 8", "one of the arguments --strategy --solver --layout is required"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, mlp_file, argv, message):
    import re

    code, _, err = run(capsys, *argv.format(mlp=mlp_file, tmp=tmp_path).split())
    lines = err.strip().splitlines()
    assert code == 2 and lines[0].startswith("pase: error: ") and re.search(message, lines[0]), err
    assert len(lines) == 1 or lines[1].startswith("see `pase")


def test_a_read_only_output_is_refused(capsys, tmp_path):
    import os

    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        code, _, err = run(capsys, "view", "mlp", "-p", "8", "--solver", "dp", "-o", folder / "x.html")
    finally:
        folder.chmod(0o700)
    assert code == 2 and "not writable" in err and len(err.strip().splitlines()) == 1


def test_a_calibrated_file_is_drawn_from_its_own_prices(capsys, tmp_path, monkeypatch):
    plan = tmp_path / "plan.json"
    assert main(["solve", "mlp", "-p", "8", "--cluster", "dgx-a100", "--output", str(plan)]) == 0
    # asking for other pricing (here the same precision, named) prices the file again
    again = tmp_path / "again.html"
    code, _, err = run(capsys, "view", "mlp", "-p", "8", "--cluster", "dgx-a100", "--strategy",
                       plan, "--cost-option", "precision=bf16", "--no-timeline", "-o", again)
    assert code == 0, err

    def refuse(*args, **kwargs):
        raise AssertionError("pase view built a Problem")

    monkeypatch.setattr("pase.api.build_problem", refuse)
    own = tmp_path / "own.html"
    code, _, err = run(capsys, "view", "mlp", "-p", "8", "--cluster", "dgx-a100", "--strategy",
                       plan, "--no-timeline", "-o", own)
    assert code == 0, err
    a, b = page_data(own.read_text()), page_data(again.read_text())
    assert a["ops"] == b["ops"] and a["devices"] == b["devices"]
    for key in ("total", "compute", "communication", "memory", "cluster", "mfu"):
        assert a["summary"][key] == b["summary"][key], key
    assert a["summary"]["status"] == "optimal"  # the file's own solve

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pase.cli import main
from pase.registry import MODELS


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_listings(capsys):
    code, out, _ = run(capsys, "models")
    assert code == 0 and "alexnet" in out and "transformer" in out
    code, out, _ = run(capsys, "solvers", "--format", "json")
    names = [row["name"] for row in json.loads(out)]
    assert "exhaustive" in names
    code, out, _ = run(capsys, "cost-models")
    assert code == 0 and "paper" in out


def test_inspect_json_matches_the_structure_table(capsys):
    code, out, _ = run(capsys, "inspect", "alexnet", "-p", "8", "--format", "json")
    data = json.loads(out)
    assert code == 0
    assert (data["vertices"], data["edges"]) == (14, 13)
    assert sum(op["configs"] for op in data["ops"]) == 234
    assert max(op["configs"] for op in data["ops"]) == 28


def test_inspect_table(capsys):
    code, out, _ = run(capsys, "inspect", "rnnlm", "-p", "8", "--batch", "64")
    assert code == 0 and "b=64" in out and "4 vertices, 3 edges" in out


def test_solve_json_fields(capsys, tmp_path):
    target = tmp_path / "out.json"
    code, out, _ = run(capsys, "solve", "chain", "-p", "4", "--solver", "exhaustive",
                       "--format", "json", "--output", str(target))
    assert code == 0
    data = json.loads(out)
    for key in ("model", "devices", "solver", "cost_model", "total_cost", "cost_unit", "status",
                "solve_seconds", "strategy"):
        assert key in data
    assert data["status"] == "optimal" and data["solver"] == "exhaustive"
    assert json.loads(target.read_text())["total_cost"] == data["total_cost"]
    # The output file is itself a valid strategy file for `pase evaluate`.
    code, out, _ = run(capsys, "evaluate", "chain", "-p", "4", "--strategy", str(target),
                       "--format", "json")
    assert code == 0 and json.loads(out)["total_cost"] == data["total_cost"]


def test_graph_json_file_as_model(capsys, tmp_path):
    path = tmp_path / "g.json"
    MODELS.get("diamond")().to_json(path)
    code, out, _ = run(capsys, "solve", str(path), "-p", "2", "--solver", "exhaustive")
    assert code == 0 and "diamond on 2 devices" in out


@pytest.mark.parametrize("argv, message", [
    (["solve", "nope", "-p", "8"], "unknown model 'nope'"),
    (["solve", "chain", "-p", "8", "--solver", "magic"], "unknown solver 'magic'; known: "),
    (["solve", "chain", "-p", "8", "--cost-model", "magic"], "unknown cost model 'magic'; known: alpha-beta, calibrated, paper"),
    (["solve", "alexnet", "-p", "8", "--solver", "exhaustive"], "exceeds max_strategies"),
    (["solve", "chain", "-p", "8", "--solver", "exhaustive", "--option", "bogus=1"],
     "solver 'exhaustive' has no option 'bogus'; allowed: max_strategies"),
    (["solve", "chain", "-p", "4", "--tflops", "-1"], "argument --tflops: must be a number > 0"),
])
def test_errors_exit_nonzero_with_a_clear_message(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert message in err
    assert "Traceback" not in err


def test_bad_strategy_files(capsys, tmp_path):
    cases = {
        "unknown_op.json": ({"convX": {"b": 2}}, "unknown op 'convX'"),
        "unknown_dim.json": ({"conv1": {"q": 2}}, "unknown dim 'q'"),
        "too_many.json": ({"conv1": {"b": 4, "n": 4}}, "16 ways"),
        "bad_factor.json": ({"conv1": {"b": 0}}, "factors must be integers >= 1"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / name
        path.write_text(json.dumps(content))
        code, _, err = run(capsys, "evaluate", "alexnet", "-p", "8", "--strategy", str(path))
        assert code == 2 and message in err, (name, err)
    path = tmp_path / "broken.json"
    path.write_text("{")
    code, _, err = run(capsys, "evaluate", "alexnet", "-p", "8", "--strategy", str(path))
    assert code == 2 and "not valid JSON" in err


def test_cyclic_graph_file(capsys, tmp_path):
    data = MODELS.get("chain")().to_dict()
    data["ops"][0]["inputs"][0]["source"] = {"op": data["ops"][-1]["name"], "output": 0}
    path = tmp_path / "cyclic.json"
    path.write_text(json.dumps(data))
    code, _, err = run(capsys, "inspect", str(path), "-p", "2")
    assert code == 2 and "cycle" in err


def test_device_count_must_be_positive(capsys):
    code, _, err = run(capsys, "solve", "chain", "-p", "0")
    assert code == 2
    assert err.splitlines() == ["pase: error: argument -p/--devices: must be an integer >= 1, got '0'",
                                "see `pase solve --help`"]


def test_python_dash_m():
    out = subprocess.run([sys.executable, "-m", "pase", "models", "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    assert "alexnet" in [row["name"] for row in json.loads(out)]


def test_a_full_disk_is_one_line(capsys, tmp_path, monkeypatch):
    import errno
    import os

    def full(fd):  # the flush of the finished file finds the disk full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    out = tmp_path / "out.json"
    code, _, err = run(capsys, "solve", "chain", "-p", "4", "--output", str(out))
    assert code == 2 and not out.exists()
    assert err == f"pase: error: cannot write --output {out}: No space left on device\n"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_device_is_not_an_output(capsys):
    code, _, err = run(capsys, "solve", "chain", "-p", "4", "--output", "/dev/full")
    assert code == 2
    assert err == ("pase: error: --output /dev/full is a character device; pase writes only "
                   "regular files: give a file name\n")


def test_a_reader_that_leaves_is_not_an_error():
    proc = subprocess.Popen([sys.executable, "-m", "pase", "inspect", "transformer", "-p", "8"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0 and err == "", err


def test_a_reader_that_leaves_stderr_stops_no_work(monkeypatch, tmp_path):
    """`pase solve ... --pipeline --output f 2>&1 | head -1`: the search's progress met a
    closed pipe, the command exited 0 and never wrote its file."""
    class Gone:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stderr", Gone())
    out = tmp_path / "plan.json"
    assert main(["solve", "mlp", "-p", "8", "--cluster", "h100-sxm", "--pipeline",
                 "--global-batch", "256", "--output", str(out), "--format", "json"]) == 0
    assert json.loads(out.read_text())["kind"] == "pipeline"
    assert isinstance(sys.stderr, Gone)  # given back as it was


def test_inspect_reports_parameters_and_forward_flops(capsys):
    # Hugging Face's GPT2LMHeadModel (gpt2) has 124,439,808 parameters, the LM head tied.
    code, out, _ = run(capsys, "inspect", "gpt2", "-p", "8", "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["parameters"] == 124_439_808
    assert data["forward_flops"] == pytest.approx(sum(o["forward_flops"] for o in data["ops"]))
    assert data["matmul_flops"] == pytest.approx(sum(o["matmul_flops"] for o in data["ops"]))
    # The mlp's first FC by hand: batch x in x out multiply-adds at 2 FLOP each plus one
    # point-wise op (pw=1) per output element; in x out weights.
    code, out, _ = run(capsys, "inspect", "mlp", "-p", "4", "--format", "json")
    fc = json.loads(out)["ops"][0]
    b, k, n = (fc["dims"][d] for d in ("b", "k", "n"))
    assert fc["parameters"] == k * n and fc["forward_flops"] == 2 * b * k * n + b * n
    assert fc["matmul_flops"] == 2 * b * k * n
    # The table shows both per op: fc1 is 64 x 1024 x 1024.
    code, out, _ = run(capsys, "inspect", "mlp", "-p", "4")
    row = next(line.split() for line in out.splitlines() if line.startswith("fc1 "))
    assert [float(v) for v in row[-2:]] == pytest.approx(
        [2 * 64 * 1024 * 1024 + 64 * 1024, 2 * 64 * 1024 * 1024], rel=1e-3)


def test_models_listing_shows_options_and_defaults(capsys):
    code, out, _ = run(capsys, "models", "--format", "json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert code == 0 and rows["gpt2"]["options"]["layers"] == 12
    assert rows["alexnet"]["options"]["batch"] == 128

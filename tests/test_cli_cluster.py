"""The cluster side of the command line: clusters, alpha-beta solves, memory caps, simulate."""
import json

import pytest

from pase.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_clusters_listing(capsys):
    code, out, _ = run(capsys, "clusters", "--format", "json")
    names = {c["name"] for c in json.loads(out)}
    assert code == 0 and {"gtx1080ti", "rtx2080ti", "dgx1-v100", "dgx-a100", "h100-sxm"} <= names


def test_alpha_beta_solve_with_memory_cap(capsys):
    code, out, _ = run(capsys, "solve", "inception_v3", "-p", "16", "--cost-model", "alpha-beta",
                       "--cluster", "dgx-a100x2", "--memory-cap", "40GiB", "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["cost_unit"] == "s" and data["status"] == "optimal"
    assert data["memory_cap_bytes"] == 40 * 2**30
    assert data["min_memory_bytes"] <= data["memory_bytes"] <= data["memory_cap_bytes"]


def test_a_cap_nothing_fits_says_so(capsys):
    code, out, _ = run(capsys, "solve", "transformer", "-p", "8", "--cost-model", "alpha-beta",
                       "--cluster", "gtx1080ti", "--memory-cap", "1GiB")
    assert code == 0
    assert "infeasible" in out
    assert "the least memory any strategy needs is" in out


def test_default_cap_is_the_device_memory(capsys):
    code, out, _ = run(capsys, "solve", "alexnet", "-p", "8", "--cost-model", "alpha-beta",
                       "--cluster", "gtx1080ti", "--format", "json")
    assert code == 0 and json.loads(out)["memory_cap_bytes"] == 11 * 2**30


@pytest.mark.parametrize("argv, message", [
    (["solve", "alexnet", "-p", "8", "--memory-cap", "16GiB"], "has no memory model"),
    (["solve", "alexnet", "-p", "8", "--cost-model", "paper", "--cluster", "dgx-a100"],
     "--cluster does not apply to cost model 'paper' (its options: tflops, bandwidth); "
     "it applies to alpha-beta"),
    (["solve", "alexnet", "-p", "8", "--cost-model", "alpha-beta", "--cluster", "tpu"],
     "unknown cluster 'tpu'; presets: "),
    (["solve", "alexnet", "-p", "8", "--cost-model", "alpha-beta", "--memory-cap", "lots"],
     "cannot read 'lots' as a memory size"),
    (["solve", "alexnet", "-p", "32", "--cost-model", "alpha-beta", "--cluster", "dgx-a100x2"],
     "has 16 devices (2 x 8); 32 requested"),
    (["simulate", "alexnet", "-p", "8", "--cluster", "dgx-a100", "--strategy", "/nonexistent.json"],
     "cannot read strategy file"),
])
def test_cluster_errors(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err, err


def test_simulate_solver_json_and_plot(capsys, tmp_path):
    png = tmp_path / "timeline.png"
    code, out, _ = run(capsys, "simulate", "alexnet", "-p", "8", "--cluster", "gtx1080ti",
                       "--format", "json", "--plot", str(png))
    data = json.loads(out)
    assert code == 0 and data["devices"] == 8 and data["step_time"] > 0
    assert data["step_time"] >= max(data["compute_busy"])
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


def test_simulate_strategy_file(capsys, tmp_path):
    path = tmp_path / "dp.json"
    path.write_text(json.dumps({"conv1": {"b": 8}, "fc6": {"n": 8}}))
    code, out, _ = run(capsys, "simulate", "alexnet", "-p", "8", "--cluster", "dgx-a100",
                       "--strategy", str(path))
    assert code == 0 and "step" in out and f"strategy file {path}" in out

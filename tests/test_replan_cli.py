"""``pase replan``: the command's answers and its one-line refusals (exit 2)."""
from __future__ import annotations

import json

import pytest

from pase import api
from pase.cli import main

TINY = ["--model-option", "layers=1", "--model-option", "width=64", "--model-option", "heads=2",
        "--model-option", "ff=128", "--model-option", "vocab=512", "--model-option", "seq=64",
        "--model-option", "positions=128", "--batch", "16"]


def run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("replan")
    for devices in (8, 16):
        assert main(["solve", "gpt2", "-p", str(devices), *TINY, "--cost-model", "alpha-beta",
                     "--output", str(tmp / f"gpt2-{devices}.json")]) == 0
    assert main(["solve", "chain", "-p", "4", "--output", str(tmp / "chain.json")]) == 0
    (tmp / "zero.json").write_text(json.dumps({"model": "chain", "devices": 4, "strategy": {},
                                               "variants": {"fc2": {"zero": 2, "recompute": False}}}))
    (tmp / "pipeline.json").write_text(json.dumps({"version": 1, "kind": "pipeline", "stages": []}))
    (tmp / "mapping.json").write_text(json.dumps({"fc1": {"n": 2}}))
    (tmp / "too-wide.json").write_text(json.dumps({"model": "chain", "devices": 4,
                                                   "strategy": {"fc1": {"n": 8}}}))
    (tmp / "bad-dim.json").write_text(json.dumps({"model": "chain", "devices": 8,
                                                  "strategy": {"fc1": {"n": 3}}}))
    return tmp


def test_json_answer(files, capsys):
    code, out, err = run(capsys, ["replan", "chain", "--from", str(files / "chain.json"), "-p", "8",
                                  "--steps", "50", "--format", "json"])
    assert code == 0, err
    data = json.loads(out)
    assert (data["devices"], data["old_devices"], data["survivors"], data["steps"]) == (8, 4, 4, 50)
    assert data["status"] == "optimal"
    assert data["total_seconds"] == pytest.approx(50 * data["step_seconds"] + data["migration"]["seconds"])
    assert set(data["baselines"]) >= {"least", "fresh", "restart"}
    assert data["break_even"]["against"] == "least"
    assert data["strategy"] and data["changed_ops"]  # ranks 4..7 receive every parameter
    assert data["migration"]["bytes"] == pytest.approx(sum(c["bytes"] for c in data["changed_ops"]))


def test_table_answer_and_output_file(files, capsys, tmp_path):
    code, out, err = run(capsys, ["replan", "gpt2", "--from", str(files / "gpt2-8.json"),
                                  "--cluster", "dgx-a100x2", *TINY, "--steps", "10",
                                  "--output", str(tmp_path / "r.json")])
    assert code == 0, err
    assert out.startswith("gpt2: 8 -> 16 devices on dgx-a100x2 (8 surviving ranks, calibrated "
                          "model), 10 steps")
    assert "break-even against least" in out and "ops change layout" in out
    assert json.loads((tmp_path / "r.json").read_text())["devices"] == 16


def test_the_old_model_is_the_one_its_file_records(files, capsys, tmp_path):
    """A 1-layer plan re-planned without --model-option: the 1-layer model, as with its
    options given again (it was the 12-layer default, its migration priced for 1 layer)."""
    answers = []
    for extra in ([], TINY):
        out = tmp_path / f"r{len(extra)}.json"
        code, _, err = run(capsys, ["replan", "gpt2", "--from", str(files / "gpt2-8.json"),
                                    "-p", "16", "--cost-model", "alpha-beta", *extra,
                                    "--output", str(out), "--format", "json"])
        assert code == 0, err
        answers.append(json.loads(out.read_text()))
    bare, given = answers
    ops = api.load_graph("gpt2", layers=1, width=64, heads=2, ff=128, vocab=512, seq=64,
                         positions=128, batch=16).ops
    assert len(bare["strategy"]) == len(given["strategy"]) == len(ops) == 17  # 149: 12 layers
    assert bare["step_seconds"] == given["step_seconds"]
    assert bare["migration"] == given["migration"]
    # the answer records its model in turn: evaluate prices it without the options again
    assert (bare["model_options"]["layers"], bare["batch"]) == ("1", 16)
    code, out, err = run(capsys, ["evaluate", "gpt2", "-p", "16", "--cost-model", "alpha-beta",
                                  "--strategy", str(tmp_path / "r0.json"), "--format", "json"])
    assert code == 0, err
    assert json.loads(out)["total_cost"] == pytest.approx(bare["step_seconds"], rel=1e-12)


def test_plain_mapping_with_from_devices(files, capsys):
    code, out, err = run(capsys, ["replan", "chain", "--from", str(files / "mapping.json"),
                                  "--from-devices", "4", "-p", "8", "--format", "json"])
    assert code == 0, err
    assert json.loads(out)["old_devices"] == 4


@pytest.mark.parametrize("argv, message", [
    (["gpt2", "--from", "{tmp}/chain.json", "-p", "8"], r"--from strategy is for model 'chain', not 'gpt2'"),
    (["chain", "--from", "{tmp}/too-wide.json", "-p", "8"],
     r"--from strategy is not valid on its own 4 devices: strategy splits op 'fc1' 8 ways"),
    (["chain", "--from", "{tmp}/bad-dim.json", "-p", "8"],
     r"not valid on its own 8 devices: strategy splits dim 'n' of op 'fc1' 3 ways"),
    (["chain", "--from", "{tmp}/mapping.json", "-p", "8"], r"does not record its device count"),
    (["chain", "--from", "{tmp}/chain.json"], r"give the new device count or the new cluster"),
    (["chain", "--from", "{tmp}/chain.json", "--cluster", "tpu-v9"], r"unknown cluster 'tpu-v9'"),
    (["chain", "--from", "{tmp}/chain.json", "--cluster", "dgx-a100x2+tpu-v9x2"],
     r"unknown cluster 'tpu-v9x2'"),
    (["chain", "--from", "{tmp}/chain.json", "-p", "64", "--cluster", "dgx-a100x2"],
     r"cluster 'dgx-a100x2' has 16 devices"),
    (["chain", "--from", "{tmp}/chain.json", "-p", "8", "--survivors", "6"],
     r"survivors must be at most min\(old devices, new devices\) = 4, got 6"),
    (["chain", "--from", "{tmp}/chain.json", "-p", "8", "--steps", "-1"],
     r"argument --steps: must be a finite number >= 0"),
    (["chain", "--from", "{tmp}/chain.json", "-p", "8", "--cost-option", "zero=3"],
     r"replan does not model zero=3"),
    (["chain", "--from", "{tmp}/pipeline.json", "-p", "8"], r"--from strategy is a pipeline plan"),
    (["chain", "--from", "{tmp}/zero.json", "-p", "8"],
     r"--from strategy shards optimizer state with ZeRO \(op 'fc2', stage 2\)"),
    (["chain", "--from", "/nonexistent.json", "-p", "8"], r"cannot read strategy file /nonexistent\.json"),
    (["chain", "--from", "{tmp}/chain.json", "-p", "8", "--option", "seed=1"], r"--option seed: use --seed"),
    (["chain", "--from", "{tmp}/chain.json", "-p", "8", "--solver", "nope"], r"unknown solver 'nope'"),
    (["chain", "--from", "{tmp}/mapping.json", "--from-devices", "4", "-p", "8",
      "--from-model-option", "length=3"], r"the old and the new model 'chain' have different ops"),
    # the file records the model it was planned for: a flag that says otherwise is refused
    (["chain", "--from", "{tmp}/chain.json", "-p", "8", "--from-model-option", "length=3"],
     r"--from-model-option length=3: --from strategy records length=4, the model it was "
     r"planned for"),
    (["chain", "--from", "{tmp}/chain.json", "-p", "8", "--from-model-option", "nope=3"],
     r"--from-model-option nope: the model has no option 'nope'"),
    (["gpt2", "--from", "{tmp}/gpt2-8.json", "-p", "8", "--model-option", "layers=2"],
     r"the old and the new model 'gpt2' have different ops"),
])
def test_bad_input_is_one_line(files, capsys, argv, message):
    import re

    code, out, err = run(capsys, ["replan", *(a.replace("{tmp}", str(files)) for a in argv)])
    lines = err.strip().splitlines()
    assert code == 2, err
    assert lines and lines[0].startswith("pase: error: ")
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("see `pase"))
    assert re.search(message, lines[0]), lines[0]

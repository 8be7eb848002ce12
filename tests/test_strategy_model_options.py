"""A per-op plan records the model options and batch it was solved for, and `pase evaluate
--strategy` prices it on that graph: never silently on another one."""
import json

import pytest

from pase.cli import main

# mlp: batch 64, layers 3 by default (its builder's signature); layers=1 has these ops
ONE_LAYER_OPS = ["fc1", "classifier", "loss"]
MLP = ["mlp", "-p", "4"]


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def solved(tmp_path, capsys):
    """A one-layer mlp solved on 4 devices (the paper's model), written as JSON."""
    path = tmp_path / "plan.json"
    code, _, _ = run(capsys, "solve", *MLP, "--model-option", "layers=1", "--format", "json",
                     "--output", path)
    assert code == 0
    return path, json.loads(path.read_text())


def evaluate(capsys, path, *extra):
    code, out, err = run(capsys, "evaluate", *MLP, "--strategy", path, "--format", "json", *extra)
    return code, (json.loads(out) if code == 0 else None), err


def test_a_solve_records_its_model_options_and_batch(solved):
    _, data = solved
    assert data["model_options"] == {"layers": "1"}
    assert data["batch"] == 64  # not given: the model's own
    assert list(data["strategy"]) == ONE_LAYER_OPS


def test_evaluate_prices_the_recorded_graph_when_no_option_is_given(solved, capsys):
    path, data = solved
    code, out, err = evaluate(capsys, path)
    assert code == 0, err
    assert out["total_cost"] == pytest.approx(data["total_cost"])  # the solve's own price
    assert list(out["strategy"]) == ONE_LAYER_OPS
    assert out["model_options"] == {"layers": "1"} and out["batch"] == 64
    assert "unnamed_ops" not in out


def test_the_same_options_given_again_are_accepted(solved, capsys):
    path, data = solved
    code, out, err = evaluate(capsys, path, "--model-option", "layers=01", "--batch", "64")
    assert code == 0, err
    assert out["total_cost"] == pytest.approx(data["total_cost"])


@pytest.mark.parametrize("extra, words", [
    (["--batch", "32"], ["--batch 32", "batch 64"]),
    (["--model-option", "batch=32"], ["--model-option batch=32", "batch 64"]),
    (["--model-option", "layers=3"], ["--model-option layers", "layers=1", "layers=3"]),
    (["--model-option", "width=512"], ["--model-option layers", "layers=1",
                                        "the default layers=3"]),
])
def test_different_options_are_refused_in_one_line(solved, capsys, extra, words):
    path, _ = solved
    code, _, err = evaluate(capsys, path, *extra)
    assert code == 2
    assert err.count("\n") == 1 and str(path) in err
    for word in words:
        assert word in err, err


def test_an_older_file_without_the_record_loads_as_before(solved, tmp_path, capsys):
    path, data = solved
    old = tmp_path / "old.json"
    old.write_text(json.dumps({k: v for k, v in data.items() if k not in ("model_options",
                                                                            "batch")}))
    code, out, err = evaluate(capsys, old, "--model-option", "layers=1")
    assert code == 0, err
    assert out["total_cost"] == pytest.approx(data["total_cost"])
    # on the default three layers it names too few ops: refused, naming the first missing
    code, _, err = evaluate(capsys, old)
    assert code == 2 and err.count("\n") == 1
    assert "does not name 2 of the 5 ops" in err and "fc2, fc3" in err


def test_a_plain_mapping_may_leave_ops_unsplit_and_the_output_says_which(tmp_path, capsys):
    partial, full = tmp_path / "partial.json", tmp_path / "full.json"
    partial.write_text(json.dumps({"fc1": {"b": 4}}))
    full.write_text(json.dumps({"fc1": {"b": 4}, "classifier": {}, "loss": {}}))
    code, out, err = evaluate(capsys, partial, "--model-option", "layers=1")
    assert code == 0, err
    assert out["unnamed_ops"] == ["classifier", "loss"]
    code, whole, err = evaluate(capsys, full, "--model-option", "layers=1")
    assert code == 0, err
    assert "unnamed_ops" not in whole and whole["total_cost"] == pytest.approx(out["total_cost"])
    code, text, _ = run(capsys, "evaluate", *MLP, "--strategy", partial, "--model-option",
                        "layers=1")
    assert code == 0 and "2 ops the strategy does not name are unsplit: classifier, loss" in text


@pytest.mark.parametrize("field, value", [("batch", "64"), ("batch", 0),
                                          ("model_options", ["layers=1"])])
def test_a_bad_record_is_a_clear_error(solved, tmp_path, capsys, field, value):
    path, data = solved
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**data, field: value}))
    code, _, err = evaluate(capsys, bad)
    assert code == 2 and err.count("\n") == 1 and f'"{field}" must be' in err, err


def test_a_layout_plan_refuses_another_batch(tmp_path, capsys):
    """`evaluate --layout` records its batch (micro-batch 2 x dp 4) in its plan block."""
    out = tmp_path / "layout.json"
    common = ["gpt2", "-p", "8", "--cluster", "h100-sxm", "--model-option", "layers=1"]
    code, _, err = run(capsys, "evaluate", *common, "--layout", "tp=2,dp=4", "--micro-batch", 2,
                       "--global-batch", 8, "--format", "json", "--output", out)
    assert code == 0, err
    code, _, err = run(capsys, "evaluate", *common, "--strategy", out, "--batch", 16)
    assert code == 2 and "--batch 16" in err and "batch 8" in err, err
    code, _, err = run(capsys, "evaluate", "gpt2", "-p", 8, "--cluster", "h100-sxm",
                       "--strategy", out, "--format", "json")
    assert code == 0, err


def test_simulate_and_view_run_the_recorded_graph(solved, capsys, tmp_path):
    """`pase simulate` and `pase view` of the file build the one-layer graph it was solved
    for (before, the default three layers, two of them unsplit), and refuse another."""
    path, _ = solved
    sim = ["simulate", *MLP, "--cluster", "dgx-a100", "--strategy", path]
    code, out, err = run(capsys, *sim, "--format", "json", "--timeline")
    assert code == 0, err
    ran = {e["label"].rsplit(" ", 1)[0] for e in json.loads(out)["timeline"]}
    assert ran == set(ONE_LAYER_OPS)  # before: fc1, fc2, fc3, classifier, loss
    code, _, err = run(capsys, *sim, "--model-option", "layers=3")
    assert code == 2 and "--model-option layers" in err and "layers=1" in err
    page = tmp_path / "plan.html"
    code, _, err = run(capsys, "view", *MLP, "--strategy", path, "-o", page)
    assert code == 0, err
    assert "fc2" not in page.read_text() and "fc1" in page.read_text()
    code, _, err = run(capsys, "view", *MLP, "--strategy", path, "--batch", "32", "-o", page)
    assert code == 2 and "--batch 32" in err


def test_a_solve_records_its_cost_options_and_evaluate_prices_at_them(tmp_path, capsys):
    """A plan solved at fp8 is priced at fp8 again (before: at the bf16 default, silently);
    a cost flag given to evaluate still sets its own what-if price."""
    path = tmp_path / "fp8.json"
    common = ["gpt2", "-p", "8", "--cluster", "h100-sxm", "--model-option", "layers=1"]
    code, _, err = run(capsys, "solve", *common, "--cost-option", "precision=fp8",
                       "--format", "json", "--output", path)
    assert code == 0, err
    solved = json.loads(path.read_text())
    assert solved["cost_options"] == {"precision": "fp8"}
    code, out, err = run(capsys, "evaluate", *common[:5], "--strategy", path, "--format", "json")
    assert code == 0, err
    again = json.loads(out)
    assert again["total_cost"] == pytest.approx(solved["total_cost"], rel=1e-9)
    assert again["cost_options"] == {"precision": "fp8"}
    code, out, err = run(capsys, "evaluate", *common[:5], "--strategy", path,
                         "--cost-option", "precision=bf16", "--format", "json")
    assert code == 0, err
    bf16 = json.loads(out)["total_cost"]
    assert bf16 > solved["total_cost"] * 1.01  # fp8 kernels run faster on an H100


def test_a_plan_saved_from_python_is_priced_at_its_own_options(tmp_path, capsys):
    """``pase.solve(...).to_json()`` records what the CLI's solve records: evaluated from
    the command line without flags, the file is priced on its 2-layer graph at fp8, as
    solved, not on the default 12 layers at bf16."""
    import pase

    solved = pase.solve("gpt2", 8, cluster="h100-sxm", layers=2, batch=8,
                        cost_options={"precision": "fp8"})
    path = tmp_path / "python.json"
    solved.to_json(path)
    data = json.loads(path.read_text())
    assert (data["model_options"], data["batch"]) == ({"layers": 2}, 8)
    assert data["cost_options"] == {"precision": "fp8"}
    code, out, err = run(capsys, "evaluate", "gpt2", "-p", "8", "--cluster", "h100-sxm",
                         "--strategy", path, "--format", "json")
    assert code == 0, err
    assert out and json.loads(out)["step_seconds"] == pytest.approx(data["step_seconds"])
    plain = pase.evaluate("gpt2", data, 8, cluster="h100-sxm", model_options={"layers": 2},
                          batch=8)
    assert plain.meta["step_seconds"] > data["step_seconds"]  # the same plan at bf16 is slower


def test_a_plan_of_another_model_is_refused_as_such_first(tmp_path, capsys):
    # an mlp plan given to gpt2 with --model-option was refused for its layers ("records
    # the default layers"); dropping the option then said "unknown op 'fc1'"
    path = str(tmp_path / "mlp.json")
    assert main(["solve", "mlp", "-p", "8", "--cluster", "h100-sxm", "--output", path]) == 0
    capsys.readouterr()
    for extra in (["--model-option", "layers=2"], []):
        for command in ("evaluate", "export"):
            tail = ["--engine", "jax"] if command == "export" else ["--cluster", "h100-sxm"]
            assert main([command, "gpt2", "-p", "8", "--strategy", path, *tail, *extra]) == 2
            err = capsys.readouterr().err
            assert "is a plan for model 'mlp', not 'gpt2'" in err, err

"""``pase solve --explain``: a plan's step in categories beside the best layout's."""
import json

import pytest

from pase.cli import main
from pase.errors import InternalError
from pase.perf.explain import CATEGORIES, explanation, render, side

GPT2 = ("gpt2", "-p", "8", "--model-option", "layers=2", "--cluster", "dgx-a100-80gb")
LLAMA = ("llama2-7b", "-p", "16", "--model-option", "layers=2", "--cluster", "h100-sxm")


def _json(capsys, *argv):
    code = main([*argv, "--format", "json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def _adds_up(s):
    assert set(s["seconds"]) == set(CATEGORIES)
    assert sum(s["seconds"].values()) == pytest.approx(s["step_seconds"], rel=1e-9)
    assert min(s["seconds"].values()) >= -1e-12


def test_recomputation_is_moved_out_of_compute_and_the_sides_add_up():
    price = {"step_seconds": 10.0, "memory_bytes": 2**30, "recompute_seconds": 2.0,
             "breakdown": {"compute": 7.0, "communication": 1.5, "bubble": 1.0,
                           "optimizer": 0.25, "tp_overlap_tax": 0.25}}
    s = side(price, "plan")
    assert s["seconds"] == {"compute": 5.0, "communication": 1.5, "bubble": 1.0,
                            "recomputation": 2.0, "optimizer": 0.25, "other": 0.25}
    _adds_up(s)


def test_a_breakdown_that_misses_its_step_is_an_internal_error():
    price = {"step_seconds": 10.0, "breakdown": {"compute": 7.0, "communication": 1.0}}
    with pytest.raises(InternalError, match="sum to 8 s"):
        side(price, "plan")


def test_a_pipeline_plan_splits_its_step_into_stage_work_bubble_and_links():
    # step = sum t + 2 sum x + (m - 1) P with t = (3, 4), one link x = 0.5, m = 4, 1F1B:
    # P = 4 + 2 * 0.5 = 5, so step = 7 + 1 + 15 = 23
    plan = {"kind": "pipeline", "step_seconds": 23.0, "microbatches": 4, "memory_bytes": 1.0,
            "stages": [{"seconds_per_microbatch": 3.0}, {"seconds_per_microbatch": 4.0}]}
    s = side(plan, "plan")
    assert s["seconds"]["other"] == 16.0  # the slowest stage's 4 micro-batches
    assert s["seconds"]["bubble"] == 3.0  # the other stage's fill and drain
    assert s["seconds"]["communication"] == 4.0  # 2 x 0.5 once, 2 x 0.5 per later period
    _adds_up(s)


def test_the_table_shows_both_sides_their_difference_and_memory():
    a = side({"step_seconds": 3.0, "memory_bytes": 2 * 2**30,
              "breakdown": {"compute": 2.0, "communication": 1.0}}, "plan")
    b = side({"step_seconds": 2.5, "memory_bytes": 2**30,
              "breakdown": {"compute": 2.0, "communication": 0.5}}, "best layout")
    text = render(explanation(a, b))
    rows = {line.split("  ")[0]: line.split() for line in text.splitlines()}
    assert rows["exposed communication"][-1] == "+0.5"
    assert rows["step"][-1] == "+0.5"
    assert rows["memory per device, GiB"][-1] == "+1.00"
    assert "bubble" not in rows  # zero on both sides: left out


def test_per_op_plan_against_the_best_layout_which_evaluate_layout_prices_the_same(capsys):
    data = _json(capsys, "solve", *GPT2, "--explain")
    ex = data["explain"]
    assert ex["version"] == 1 and ex["categories"] == list(CATEGORIES) and ex["note"] is None
    plan, best = ex["plan"], ex["against"]
    _adds_up(plan)
    _adds_up(best)
    assert plan["step_seconds"] == data["step_seconds"]
    assert ex["difference"]["step_seconds"] == pytest.approx(
        plan["step_seconds"] - best["step_seconds"])
    # the layout side is `pase evaluate --layout` of that layout
    lay = dict(kv.split("=") for kv in best["layout"].split() if "=" in kv)
    degrees = ",".join(f"{k}={lay.get(k, 1)}" for k in ("tp", "pp", "dp"))
    ev = _json(capsys, "evaluate", *GPT2, "--layout", degrees, "--micro-batch", lay["mb"],
               "--global-batch", "16", "--zero", lay["zero"], "--recompute", lay["recompute"])
    assert best["step_seconds"] == pytest.approx(ev["step_seconds"], rel=1e-12)
    assert best["memory_bytes"] == pytest.approx(ev["memory_bytes"], rel=1e-12)
    assert best["seconds"]["compute"] + best["seconds"]["recomputation"] == \
        pytest.approx(ev["breakdown"]["compute"], rel=1e-12)


def test_layouts_best_against_second_and_the_text_table(capsys):
    data = _json(capsys, "solve", *LLAMA, "--layouts", "--global-batch", "32", "--explain")
    ex = data["explain"]
    _adds_up(ex["plan"])
    _adds_up(ex["against"])
    assert ex["plan"]["step_seconds"] == data["ranked"][0]["step_seconds"]
    assert ex["against"]["step_seconds"] == data["ranked"][1]["step_seconds"]
    assert ex["difference"]["step_seconds"] <= 0  # the best is never slower
    code = main(["solve", *LLAMA, "--layouts", "--global-batch", "32", "--explain"])
    out = capsys.readouterr().out
    assert code == 0 and "where the step goes:" in out and "best layout s" in out
    assert "second s" in out and out.index("rank") < out.index("where the step goes:")


def test_output_file_gets_the_explain_key_and_no_private_file_is_mentioned(capsys, tmp_path):
    path = tmp_path / "plan.json"
    code = main(["solve", *GPT2, "--explain", "--output", str(path)])
    out = capsys.readouterr()
    assert code == 0
    assert "explain" in json.loads(path.read_text())
    lines = out.err.splitlines()
    assert lines[-1] == f"wrote {path}" and not [x for x in lines if "result.json" in x]
    assert [x for x in lines if x.startswith("wrote")] == [f"wrote {path}"]


def test_a_pipeline_plan_is_explained_against_the_best_layout(capsys):
    data = _json(capsys, "solve", *GPT2, "--global-batch", "16", "--microbatches", "2",
                 "--option", "stage_sizes=4", "--explain")  # two stages of 4 devices
    ex = data["explain"]
    assert data["kind"] == "pipeline" and len(data["stages"]) == 2 and ex["against"] is not None
    _adds_up(ex["plan"])
    assert ex["plan"]["seconds"]["bubble"] > 0
    assert ex["plan"]["step_seconds"] == data["step_seconds"]


def test_a_pipeline_layouts_plan_splits_its_step_as_the_layout_path_does(capsys, tmp_path):
    # tp2 pp2 dp2: the layout path's breakdown (its own code) against the one price of the
    # pipeline plan it writes: kernels, bubble and optimizer alike; the plan's sends are a
    # hop per tensor where the layout path sends them as one (docs/cost-model.md), so its
    # communication is a little more. Before, the plan's stage work was one "other" number.
    run = ("gpt2", "-p", "8", "--model-option", "layers=4", "--model-option", "vocab=50304",
           "--cluster", "dgx-a100-80gb")
    path = tmp_path / "plan.json"
    layout = _json(capsys, "evaluate", *run, "--layout", "tp=2,pp=2,dp=2", "--micro-batch",
                   "1", "--global-batch", "16", "--output", str(path))
    plan = json.loads(path.read_text())
    price = _json(capsys, "evaluate", "gpt2", "-p", "8", "--strategy", str(path))
    s = side({**plan, **price, "kind": "pipeline"}, "plan")
    _adds_up(s)
    ours, theirs = s["seconds"], layout["breakdown"]
    for key in ("compute", "bubble", "optimizer"):
        assert ours[key] == pytest.approx(theirs[key], rel=1e-6), key
    assert theirs["communication"] <= ours["communication"] <= 1.1 * theirs["communication"]
    assert ours["other"] == 0 and ours["recomputation"] == 0


@pytest.mark.parametrize("argv, needs", [
    (("solve", "gpt2", "-p", "8", "--explain"), "--explain needs --cluster"),
    (("solve", *GPT2, "--explain", "--dry-run"), "--explain does not apply to --dry-run"),
    (("solve", *GPT2, "--explain", "--cost-model", "alpha-beta"), "calibrated"),
])
def test_a_bad_combination_is_one_line(capsys, argv, needs):
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    assert code == 2 and needs in err and len(err.splitlines()) == 1


def test_a_layouts_recomputation_is_what_full_recomputation_adds_to_its_compute():
    from pase import api

    def price(recompute):
        return api.evaluate_layout("gpt2", 8, "tp=2,pp=2,dp=2", cluster="h100-sxm", micro_batch=2,
                                   global_batch=16, model_options={"layers": 2},
                                   recompute=recompute)

    none, full = price("none"), price("full")
    assert none.details["recompute_seconds"] == 0.0
    added = full.breakdown["compute"] - none.breakdown["compute"]
    assert added > 0 and full.details["recompute_seconds"] == pytest.approx(added, rel=1e-9)
    s = side(full.to_dict(), "layout")
    assert s["seconds"]["compute"] == pytest.approx(none.breakdown["compute"], rel=1e-9)
    _adds_up(s)


def test_a_per_op_plans_recomputation_is_the_forwards_of_the_ops_it_recomputes(capsys):
    data = _json(capsys, "solve", *LLAMA, "--recompute", "all", "--explain")
    again = [op for op, v in data["variants"].items() if v.get("recompute")]
    forwards = sum(data["op_prices"][op]["forward"] for op in again) * data["microbatches"]
    plan = data["explain"]["plan"]
    assert again and plan["seconds"]["recomputation"] == pytest.approx(forwards, rel=1e-9)
    _adds_up(plan)
    assert data["explain"]["against"]["layout"]  # the best layout of the family, named


def test_with_no_layout_family_the_plan_is_explained_alone_and_a_note_says_why(capsys):
    # 12 devices, global batch 1: every layout's data-parallel degree is 3 or more
    data = _json(capsys, "solve", "gpt2", "-p", "12", "--batch", "1", "--model-option",
                 "layers=2", "--cluster", "dgx-a100-80gb", "--explain")
    ex = data["explain"]
    assert ex["against"] is None and ex["difference"] is None
    assert "no layout family" in ex["note"] and "the plan alone" in ex["note"]
    _adds_up(ex["plan"])
    assert "note: no layout family" in render(ex)

"""A page that tells the truth: the plan in one line, every split of a folded block, one
step time, communication where it happens, the dim key, and what made the page.

The tensor-parallel example is the new user's (gpt2, 2 layers, 8 A100s) as Megatron-LM's
tp=2, dp=4 layout (conftest.GPT2_TP).
"""
from collections import defaultdict

import pytest

import pase
from pase.errors import NoPlanFormError
from pase.perf.layout import make_layout
from pase.perf.plan import layout_configs
from view.test_page import page_data  # tests/ is on sys.path (rootdir-relative import)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def tp(gpt2_tp_page):
    path, argv = gpt2_tp_page
    return page_data(path.read_text()), argv


def block(data):
    return next(f for f in data["folds"] if f[2] > 1)


def test_a_layout_plan_says_its_layout(tp):
    data, _ = tp
    assert data["layout"]["layout"] == "dp 4 \u00d7 tp 2"
    assert data["layout"]["flag"] == "tp=2,dp=4" and data["layout"]["why"] is None


def test_a_plan_that_is_no_layout_says_which_ops_differ():
    from pase import api

    graph = api.load_graph("gpt2", layers=2, batch=16)
    lay = make_layout("tp=2,dp=4", devices=8, micro_batch=4, global_batch=16)
    configs = layout_configs(graph, lay)
    configs["h0.mlp.fc1"] = {"b": 8}  # one op leaves tensor parallelism for data parallelism
    html = pase.view({"devices": 8, "strategy": configs}, model="gpt2", cluster="dgx-a100",
                     model_options={"layers": 2}, batch=16, cutoff=2, simulate=False)
    line = page_data(html)["layout"]
    assert line["layout"] is None
    assert "not a layout" in line["why"] and "h0.mlp.fc1" in line["why"]
    assert "h1.mlp.fc1" not in line["why"]  # only the op that differs is named


def test_the_block_carries_every_split_its_ops_use(tp):
    data, _ = tp
    start, period, _ = block(data)
    splits = {(d[0], d[3]) for r in data["ops"][start:start + period] for d in r["d"] if d[3] > 1}
    assert {("b", 4), ("h", 2), ("f", 2)} <= splits
    from pase.viewer.plan import block_splits

    assert block_splits(data["ops"][start:start + period]) == "b=4 \u00b7 h=2 / f=2"


def test_the_blocks_communication_is_the_timelines(tp):
    """Per op, its collectives (tp all-reduces, gradient syncs) and incoming re-layouts;
    summed over the folded block's copies it is what gpu0's ports run for those ops."""
    data, _ = tp
    start, period, count = block(data)
    ops = data["ops"][start:start + period * count]
    names = {r["n"] for r in ops}
    tl = data["timeline"]
    comm = defaultdict(float)
    for r, row in enumerate(tl["rows"]):
        if not row.startswith("gpu0."):
            continue
        events = tl["events"][r] if tl["events"][r] is not None else tl["events"][tl["same"][r]]
        for j in range(0, len(events), 4):
            label, kind = tl["labels"][events[j + 2]], tl["kinds"][events[j + 3]]
            head, _, rest = label.partition(" ")
            if "->" in head:  # a re-layout: the consumer's (forward: after ->; backward: before)
                u, _, v = head.partition("->")
                head = v if rest == "activation" else u
            if head in names:
                comm[kind] += events[j + 1] * tl["tick"]
    total = comm["communication"] + comm["gradient-sync"]
    assert comm["gradient-sync"] > 0 and total > 0
    rounding = 1e-4 * tl["step"]  # ticks of a millionth of the step, and 6 digits per row
    assert sum(r["cm"] for r in ops) == pytest.approx(total, abs=rounding)
    assert sum(r["cs"] for r in ops) == pytest.approx(comm["gradient-sync"], abs=rounding)


def test_one_step_time_with_its_parts(tp):
    data, _ = tp
    s = data["summary"]
    b = s["breakdown"]
    assert s["step"] == pytest.approx(b["compute"] + b["communication"] + b["optimizer"], rel=1e-6)
    assert 0 < b["exposed_sync"] <= b["communication"]
    assert s["simulated_step"] > 0


def test_the_dim_key_names_the_letters_the_model_uses(tp):
    data, _ = tp
    key = {d[0]: d for d in data["summary"]["dims"]}
    used = {d[0] for r in data["ops"] for d in r["d"]}
    assert set(key) == used
    assert "heads" in key["h"][1] and key["h"][2] == ["heads"]
    assert "feed-forward" in key["f"][1] and key["f"][2] == ["hidden"]


def test_the_page_names_its_command_and_version(tp):
    data, argv = tp
    assert data["made"]["command"].split() == ["pase", *argv]
    from importlib.metadata import version

    assert data["made"]["version"] == pase.__version__ == version("pase")


def test_a_plain_mapping_without_devices_is_one_clear_error():
    from pase.errors import OptionError

    with pytest.raises(OptionError, match="no device count"):
        pase.view({"fc1": {"b": 2}}, model="mlp")


def test_a_page_from_python_says_so():
    data = page_data(pase.view(pase.solve("mlp", 4, solver="dp")))
    assert data["made"]["command"] is None and data["made"]["version"] == pase.__version__
    assert data["attributed"] is None  # the paper's model: no seconds to attribute


def test_a_pipeline_page_prices_stages_with_the_plans_own_model():
    """Each stage's rows add up to the stage's searched price (one micro-batch), which is
    the calibrated model's, not alpha-beta's."""
    from pase.pipeline import solve_pipeline
    from pase.viewer.pipeline import pipeline_model

    plan = solve_pipeline("chain", 4, batch=256, microbatches=1, stage_sizes=[1])
    assert plan.cost_model == "calibrated"
    data = pipeline_model(plan, simulate=False)
    assert data["summary"]["cost_model"] == "calibrated"
    stages = len(plan.stages)
    assert stages > 1 and {st.device_range[1] - st.device_range[0] for st in plan.stages} == {1}
    assert data["layout"]["layout"] == f"pp {stages}"  # one device a stage: pipelining only
    for i, st in enumerate(plan.stages):
        rows = [r for r in data["ops"] if r["s"] == i]
        # the stage's time holds the activations it receives, both ways; its once-a-step
        # tail (gradient syncs, the optimizer) is apart, and m = 1 here
        sends = 2 * plan.links[i - 1] if i else 0.0
        assert st.tail_seconds > 0
        assert sum(r["c"] + r["x"] for r in rows) + sends == pytest.approx(
            st.seconds_per_microbatch + st.tail_seconds, rel=1e-5)
        assert all("cm" in r for r in rows)


def test_without_a_timeline_a_calibrated_plan_is_attributed_at_its_prices(tp, tmp_path):
    """Each collective alone, as priced: no more than the timeline, where collectives that
    share a port slow each other, and not far below it on this small plan."""
    from pase.cli import main
    from view.conftest import GPT2_TP

    data, _ = tp
    out = tmp_path / "plain.html"
    assert main(GPT2_TP + ["--no-timeline", "-o", str(out)]) == 0
    plain = page_data(out.read_text())
    assert plain["attributed"] == "prices" and data["attributed"] == "timeline"
    start, period, count = block(data)
    span = slice(start, start + period * count)
    alone = sum(r["cm"] for r in plain["ops"][span])
    shared = sum(r["cm"] for r in data["ops"][span])
    assert 0.8 * shared <= alone <= shared * (1 + 1e-6)


def test_a_pipeline_whose_stage_is_no_layout_names_the_stage_and_op():
    import dataclasses

    from pase.pipeline import solve_pipeline
    from pase.viewer.pipeline import pipeline_model

    plan = solve_pipeline("gpt2", 8, batch=16, microbatches=4, model_options={"layers": 4},
                          stage_sizes=[4])
    first = plan.stages[0]
    configs = dict(first.configs, wte={"d": 4})  # the table's width, not the batch
    plan = dataclasses.replace(plan, stages=[dataclasses.replace(first, configs=configs),
                                             *plan.stages[1:]])
    line = pipeline_model(plan, simulate=False)["layout"]
    assert line["layout"] is None and line["why"].startswith("stage 0: ") and "wte" in line["why"]


def test_a_layout_match_that_fails_says_unknown_not_none(monkeypatch):
    """qwen3-30b-a3b's plan on 8 devices votes for tp=2, cp=2, dp=2, ep=4, whose per-op
    splits pase.perf.plan.layout_configs cannot write (its ep group folds over cp ranks,
    which would split the dispatch's pinned capacity; it used to divide dp by ep and
    fail): the page says the layout is unknown instead of failing or calling it none."""
    from types import SimpleNamespace

    from pase import api
    from pase.perf.layout import make_layout
    from pase.perf.plan import layout_configs
    from pase.viewer.layout import layout_line

    folded = make_layout("tp=2,cp=2,dp=2,ep=4", devices=8, micro_batch=1, global_batch=2)
    with pytest.raises(NoPlanFormError, match="ep=4 over dp=2"):
        layout_configs(api.load_graph("qwen3-30b-a3b", layers=1), folded)

    def folds(*_args, **_kw):
        layout_configs(api.load_graph("mlp"), folded)

    monkeypatch.setattr("pase.export.plan_layout.infer_layout", folds)
    s = SimpleNamespace(meta={}, variants={}, configs={}, devices=2)
    line = layout_line(SimpleNamespace(strategy=s, graph=api.load_graph("mlp"), layout=None))
    assert line["layout"] is None and line["unknown"] and "ep=4 over dp=2" in line["why"]

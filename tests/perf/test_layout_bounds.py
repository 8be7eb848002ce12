"""Every layout search is bounded, and the Python API checks a layout's arguments as the CLI
does: bad input is one pase error (one line and exit 2 on the command line)."""
from __future__ import annotations

import json
import math
import time

import pytest

import pase
from pase.api import evaluate_layout, search_layouts
from pase.cli import main
from pase.deadline import current
from pase.errors import OptionError, PaseError, TooLargeError
from pase.perf import search
from pase.perf.layout import parse_degrees

OPTS = dict(layers=2, width=64, heads=8, ff=256, vocab=512, seq=64, positions=64)
TINY = [a for k, v in OPTS.items() for a in ("--model-option", f"{k}={v}")]


def price(layout, devices=8, **kw):
    args = dict(cluster="dgx-a100", micro_batch=1, global_batch=8, model_options=OPTS)
    args.update(kw)
    return evaluate_layout("gpt3", devices, layout, **args)


def find(devices=2, global_batch=2, **kw):
    return search_layouts("gpt3", devices, cluster="dgx-a100", global_batch=global_batch,
                          model_options=OPTS, **kw)


def one_line_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


# -- the search: an empty family, its size, the deadline, progress ----------------------

def test_an_empty_family_says_so_not_that_nothing_fits(capsys):
    err = one_line_error(capsys, ["solve", "gpt2", "-p", "13", "--cluster", "dgx-a100",
                                  "--layouts", "--global-batch", "1"])
    assert "no layout of the family exists on 13 devices for global batch 1" in err
    assert "the least here is 13" in err and "fits in memory" not in err


def test_the_family_is_counted_before_pricing_and_refused_over_the_limit():
    # By hand, 2 devices, global batch 2, 2 layers, heads 8: micro-batch 1 has (tp, pp, dp)
    # (1,1,2), (1,2,1), (2,1,1); micro-batch 2 has (1,2,1), (2,1,1) (dp=2 needs a batch of
    # 4); no interleaving (pp x 2 > 2 layers); the pp=2 shape of micro-batch 1 (2 micro-batches)
    # also runs ZB-H1 (DualPipe needs 4): 6 shape-schedules x 4 ZeRO x 3 recomputations.
    with pytest.raises(TooLargeError, match=r"has 72 layouts, over the limit of 71"):
        find(max_layouts=71)
    assert find(max_layouts=72).family == 72


def test_the_cli_refuses_a_family_over_the_documented_limit(capsys, monkeypatch):
    monkeypatch.setattr(search, "MAX_LAYOUTS", 71)
    err = one_line_error(capsys, ["solve", "gpt3", "-p", "2", "--cluster", "dgx-a100", *TINY,
                                  "--layouts", "--global-batch", "2"])
    assert "has 72 layouts, over the limit of 71" in err


def test_a_huge_global_batch_is_searched_without_a_loop_up_to_it():
    start = time.process_time()
    found = find(devices=2, global_batch=2**40)
    assert time.process_time() - start < 60  # the old loop ran 2**40 steps
    # micro-batches 1..64 that divide 2**40: 1, 2, 4, ..., 64
    assert {e.layout.micro_batch for e in found.ranked} <= {1, 2, 4, 8, 16, 32, 64}
    assert found.best.layout.global_batch == 2**40 and found.exhaustive
    with pytest.raises(TooLargeError, match="over the limit of 1;"):
        find(devices=8, global_batch=10**18, max_layouts=1)


def test_divisors_agree_with_brute_force_and_reach_large_counts():
    for n in list(range(1, 400)) + [2**24, 3**15, 1_000_003, 2 * 1_000_003]:
        brute = [d for d in range(1, n + 1) if n % d == 0] if n < 10**5 else None
        got = search.divisors(n)
        if brute is not None:
            assert got == brute
        assert all(n % d == 0 for d in got) and got[0] == 1 and got[-1] == n
    assert search.divisors(2**24) == [2**k for k in range(25)]
    assert search.divisors(2 * 1_000_003) == [1, 2, 1_000_003, 2_000_006]
    assert search.divisors(360, 10) == [1, 2, 3, 4, 5, 6, 8, 9, 10]


def test_16_million_devices_stop_at_the_time_limit():
    found = find(devices=2**24, global_batch=2**24, time_limit=1e-9)
    assert not found.exhaustive and found.priced == 0 and found.best is None
    assert found.family > 0


def test_the_deadline_returns_the_best_so_far_marked_not_exhaustive(monkeypatch):
    monkeypatch.setattr(search, "PROGRESS_SECONDS", 0.0)
    lines = []

    def expire_after_one(line):
        lines.append(line)
        if "examined" in line:
            current().at = 0.0  # the time limit passes now, after the first layout

    found = find(time_limit=3600, progress=expire_after_one)
    assert not found.exhaustive and found.priced == 1 and found.family == 72
    assert found.best is not None and found.ranked == (found.best,)
    full = find()
    assert full.exhaustive and full.priced > 1
    assert full.best.step_seconds <= found.best.step_seconds


def test_progress_names_the_family_and_counts_up_to_it(monkeypatch):
    monkeypatch.setattr(search, "PROGRESS_SECONDS", 0.0)
    lines: list[str] = []
    found = find(progress=lines.append)
    assert lines[0] == "layouts: a family of 72 to search"
    counted = [line for line in lines[1:] if " of 72 examined" in line]
    # the branch and bound first bounds each group's shapes, then prices what may rank
    bounding = [line for line in lines[1:] if line.startswith("layouts: bounds of ")]
    assert len(counted) + len(bounding) == len(lines) - 1 and bounding and counted
    assert len(counted) <= found.priced  # a line per layout priced (each 1 to 3 tries)
    assert counted[-1].endswith(" s") and " priced, " in counted[-1] and " pruned, " in counted[-1]


def test_cli_time_limit_with_layouts_is_accepted_and_reported(capsys):
    base = ["solve", "gpt3", "-p", "2", "--cluster", "dgx-a100", *TINY, "--layouts",
            "--global-batch", "2"]
    assert main(base + ["--time-limit", "1e-9", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["exhaustive"] is False and data["priced"] == 0 and data["family"] == 72
    assert main(base + ["--time-limit", "1e-9"]) == 0
    out = capsys.readouterr().out
    assert "no layout of gpt3 on 2 devices that fits in memory was found" in out
    assert "time limit of 1e-09 s stopped the search" in out
    assert main(base + ["--time-limit", "600", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["exhaustive"] is True and data["best"] is not None


# -- the Python API: one boundary ---------------------------------------------------

@pytest.mark.parametrize("layout,kw,message", [
    ("dp=8", dict(micro_batch=0), "micro_batch must be an integer >= 1, got 0"),
    ("dp=8", dict(micro_batch=0.5), "micro_batch must be an integer >= 1, got 0.5"),
    ("dp=8", dict(micro_batch="1"), "micro_batch must be an integer >= 1, got '1'"),
    (None, {}, "layout must be text such as 'tp=8,pp=2,dp=4' or a mapping"),
    (8, {}, "layout must be text .* got 8"),
    ("dp=8", dict(global_batch=None), "global_batch must be an integer >= 1, got None"),
    ("dp=8", dict(global_batch=math.nan), "global_batch must be an integer >= 1, got nan"),
    ("dp=8", dict(global_batch=math.inf), "global_batch must be an integer >= 1, got inf"),
    ("dp=8", dict(global_batch=-8), "global_batch must be an integer >= 1, got -8"),
    ("dp=8", dict(global_batch=0), "global_batch must be an integer >= 1, got 0"),
    ({"pp": -1, "dp": -8}, {}, "pp must be a positive integer, got -1"),
    ({"tp": -2, "dp": -4}, {}, "tp must be a positive integer, got -2"),
    ({"dp": 8, "xx": 1}, {}, "unknown key 'xx' .*allowed: tp, pp, dp, cp, ep"),
    ({"dp": 8, "ep": -1}, {}, "ep must be a positive integer, got -1"),
    ({"tp": 2.5, "dp": 4}, {}, "tp must be a positive integer, got 2.5"),
    ({"dp": "8"}, {}, "dp must be a positive integer, got '8'"),
    ({"dp": True}, {}, "dp must be a positive integer, got True"),
    ({}, {}, "no degree given; allowed keys: tp, pp, dp, cp, ep"),
    ({"tp": 2, "dp": 4}, dict(sequence_parallel="no"), "sequence_parallel must be True or False"),
    ({"tp": 2, "dp": 4}, dict(dropout=1), "dropout must be True or False, got 1"),
    ("dp=8", dict(precision="bf17"), "unknown precision 'bf17'"),
    ("dp=8", dict(zeros=1), "evaluate_layout: unknown option 'zeros'; allowed: schedule"),
    ("dp=8", dict(model_options={"batch": 4}), "give micro_batch"),
])
def test_evaluate_layout_refuses_bad_arguments_with_one_pase_error(layout, kw, message):
    with pytest.raises(OptionError, match=message) as info:
        price(layout, **kw)
    assert isinstance(info.value, (PaseError, ValueError))
    assert len(str(info.value).splitlines()) == 1


@pytest.mark.parametrize("kw,message", [
    (dict(global_batch="8"), "global_batch must be an integer >= 1, got '8'"),
    (dict(global_batch=8.5), "global_batch must be an integer >= 1, got 8.5"),
    (dict(global_batch=None), "global_batch must be an integer >= 1, got None"),
    (dict(global_batch=0), "global_batch must be an integer >= 1, got 0"),
    (dict(max_micro_batch=0), "max_micro_batch must be an integer >= 1"),
    (dict(virtual=(1,)), "virtual must be an integer >= 2"),
    (dict(context="yes"), "context must be True or False"),
    (dict(experts=1), "experts must be True or False"),
    (dict(schedules="1f1b"), "schedules must be a non-empty tuple of 1f1b, interleaved"),
    (dict(schedules=()), "schedules must be a non-empty tuple"),
    (dict(schedules=("1f1b", "gpipe")), "schedules must be a non-empty tuple of .*'gpipe'"),
    (dict(progress="stderr"), "progress must be a function"),
    (dict(time_limit=-1), "time_limit must be a finite number of seconds > 0"),
    (dict(budget=3), "search_layouts: unknown option 'budget'"),
])
def test_search_layouts_refuses_bad_arguments_with_one_pase_error(kw, message):
    args = dict(global_batch=8)
    args.update(kw)
    with pytest.raises(OptionError, match=message):
        find(devices=8, **args)


def test_search_layouts_options_narrow_the_family():
    """``schedules`` and ``experts`` reach the search: a narrower family, every member in it."""
    whole = find(devices=8, global_batch=16, keep=10_000)
    ones = find(devices=8, global_batch=16, keep=10_000, schedules=("1f1b",))
    assert {e.layout.schedule for e in whole.ranked} > {"1f1b"}
    assert {e.layout.schedule for e in ones.ranked} == {"1f1b"}
    assert ones.family < whole.family
    moe = dict(layers=2, width=64, heads=4, kv_heads=4, ff=128, vocab=256, seq=64, experts=4)
    wide = search_layouts("mixtral-8x7b", 8, cluster="dgx-a100", global_batch=8,
                          model_options=moe, keep=10_000)
    plain = search_layouts("mixtral-8x7b", 8, cluster="dgx-a100", global_batch=8,
                           model_options=moe, keep=10_000, experts=False)
    assert max(e.layout.ep for e in wide.ranked) > 1
    assert {e.layout.ep for e in plain.ranked} == {1}


def test_search_layouts_refuses_a_graph_it_cannot_rebuild():
    graph = pase.load_graph("gpt3", batch=1, **OPTS)
    with pytest.raises(OptionError, match="registered model name"):
        search_layouts(graph, 2, cluster="dgx-a100", global_batch=2)


def test_a_mapping_layout_is_the_text_layout():
    assert parse_degrees({"tp": 2, "dp": 4}) == parse_degrees("tp=2,dp=4") == {"tp": 2, "dp": 4}
    assert parse_degrees({"dp": 8.0}) == {"dp": 8}  # check_int: an integral float is its int
    text = price("tp=2,dp=4", sequence_parallel=True).to_dict()
    assert price({"tp": 2, "dp": 4}, sequence_parallel=True).to_dict() == text
    for bad in ("tp=0", {"tp": 0}):
        with pytest.raises(OptionError, match="tp must be a positive integer, got"):
            parse_degrees(bad)


def test_pase_exports_the_layout_entry_points():
    assert pase.evaluate_layout is evaluate_layout and pase.search_layouts is search_layouts
    assert {"evaluate_layout", "search_layouts"} <= set(pase.__all__)


# -- flags no command drops -----------------------------------------------------------

def test_view_refuses_an_ep_the_model_cannot_use(capsys, tmp_path):
    err = one_line_error(capsys, ["view", "gpt3", "-p", "2", *TINY, "--cluster", "dgx-a100",
                                  "--layout", "dp=2,ep=2", "--micro-batch", "1", "--no-timeline",
                                  "-o", str(tmp_path / "x.html")])
    assert "ep=2 but model 'gpt3' has no experts" in err
    assert not (tmp_path / "x.html").exists()


@pytest.mark.parametrize("model", ["resnet101", "mlp"])
def test_evaluate_refuses_cp_on_a_model_without_a_sequence(capsys, model):
    err = one_line_error(capsys, ["evaluate", model, "-p", "2", "--cluster", "dgx-a100",
                                  "--layout", "cp=2", "--micro-batch", "1", "--global-batch", "1"])
    assert f"cp=2 but model {model!r} has no sequence dim" in err

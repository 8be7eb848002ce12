"""The layout search's larger family: brute force over it on a small MoE model, ZB-H1 and
DualPipe priced as their closed forms say, and the published MoE recipes inside it."""
from __future__ import annotations

import itertools
import json
import math
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from pase.api import load_graph
from pase.cluster import get_cluster
from pase.errors import OptionError
from pase.perf import evaluate_layout, make_layout
from pase.perf.family import family
from pase.perf.hardware import achieved
from pase.perf.kernels import make_pricer
from pase.perf.layout import check_graph
from pase.perf.ops import price_ops
from pase.perf.search import search_layouts

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import published_runs  # noqa: E402

MOE = dict(layers=2, width=128, heads=4, kv_heads=4, ff=256, experts=2, top_k=1, vocab=512,
           seq=256)


@lru_cache(maxsize=None)
def moe(m: int):
    return load_graph("mixtral-8x7b", batch=m, **MOE)


def test_the_search_is_brute_force_over_its_family_on_a_small_moe_model():
    """Every layout of the family as the module docstring states it, written out here and
    priced one by one with evaluate_layout (its ops priced once per micro-batch, tp, ep and
    etp, as evaluate_layout prices them; no Shared): the search's best is their best, and
    the family's size is their count."""
    cl = get_cluster("dgx-a100", 2)
    pricer = make_pricer(cl.device, achieved(cl.device), "bf16")
    ops = {}
    devices, batch, experts = 2, 4, 2
    found = search_layouts(moe, devices, "dgx-a100", batch, max_micro_batch=2)
    best, count = math.inf, 0
    for tp, pp, ep, micro in itertools.product((1, 2), (1, 2), (1, 2), (1, 2)):
        if devices % (tp * pp):
            continue
        dp = devices // (tp * pp)
        if batch % (micro * dp):
            continue
        m = batch // (micro * dp)
        schedules = ["1f1b"] if pp == 1 else ["1f1b"] + (["zb-h1"] if m >= pp else []) + (
            ["dualpipe"] if m >= 2 * pp and m % 2 == 0 else [])  # no V: pp x 2 > 2 layers
        for etp in sorted({1, tp}):
            if (tp * dp) % (ep * etp) or experts % ep:
                continue
            for schedule, zero in itertools.product(schedules, (0, 1, 2, 3)):
                count += 3
                for rc, n in (("none", 0), ("selective", 0), ("full", 0), ("full", 1)):
                    lay = make_layout(dict(tp=tp, pp=pp, dp=dp, ep=ep, etp=etp), devices=devices,
                                      micro_batch=micro, global_batch=batch, schedule=schedule,
                                      zero=zero, recompute=rc, sequence_parallel=tp > 1)
                    if n:
                        lay = lay.__class__(**{**lay.__dict__, "recompute_layers": n})
                    key = (micro, tp, ep, etp)
                    if key not in ops:
                        check_graph(moe(micro), lay)
                        ops[key] = price_ops(moe(micro), lay, pricer)
                    e = evaluate_layout(moe(micro), cl, lay, ops[key])
                    if e.fits_memory:
                        best = min(best, e.step_seconds)
    assert found.exhaustive and found.family == count
    assert math.isclose(found.best.step_seconds, best, rel_tol=1e-9)


def _stage_work(e):
    sends = e.details["send_seconds"]
    return [(f + s, b + s, w) for f, b, w, s in zip(e.details["stage_forward_seconds"],
                                                    e.details["stage_backward_seconds"],
                                                    e.details["stage_weight_seconds"], sends)]


def test_zb_h1_and_dualpipe_are_their_closed_forms_by_hand():
    """Two stages, 4 micro-batches (one send per boundary each way, as the stages' sends
    are a single chunk's): ZB-H1 is 1F1B with each stage boundary's bubble ``F + B`` cut to
    ``max(F + B - 2W, F, B - W)`` of the slowest stage (Qi et al.); DualPipe on two stages
    has no bubble term ((p/2 - 1) = 0) and each device runs m/2 micro-batches of both stages
    (DeepSeek-V3, table 2)."""
    g = moe(1)
    base = dict(devices=4, micro_batch=1, global_batch=8, zero=1)
    one = evaluate_layout(g, "dgx-a100", make_layout("pp=2,dp=2", schedule="1f1b", **base))
    zb = evaluate_layout(g, "dgx-a100", make_layout("pp=2,dp=2", schedule="zb-h1", **base))
    dual = evaluate_layout(g, "dgx-a100", make_layout("pp=2,dp=2", schedule="dualpipe", **base))
    m = 4
    work = _stage_work(zb)
    assert all(0 < w < b for _, b, w in work)  # the weight gradient is part of the backward
    totals = [f + b for f, b, _ in work]
    f, b, w = work[max(range(2), key=lambda i: totals[i])]
    slot = max(f + b - 2 * w, f, b - w)
    by_hand = (m - 1) * max(totals) + sum(totals) - (f + b - slot)
    assert math.isclose(zb.step_seconds - zb.details["once_seconds"], by_hand, rel_tol=1e-12)
    assert zb.step_seconds < one.step_seconds  # the weight gradients fill the bubble
    assert math.isclose(dual.step_seconds - dual.details["once_seconds"], m / 2 * sum(totals),
                        rel_tol=1e-12)
    # DualPipe holds each device's two stages: twice the parameter states of 1F1B
    assert math.isclose(dual.memory["states"], 2 * one.memory["states"], rel_tol=1e-12) or \
        dual.details["peak_memory_stage"] != one.details["peak_memory_stage"]


def test_the_new_schedules_are_checked_on_entry():
    base = dict(devices=4, micro_batch=1, zero=1)
    with pytest.raises(OptionError, match="dualpipe needs an even pp"):
        make_layout("pp=2,dp=2", schedule="dualpipe", global_batch=4, **base)  # m = 2 < 2 pp
    with pytest.raises(OptionError, match="unknown schedule 'zb-h2'.*zb-h1, dualpipe"):
        make_layout("pp=2,dp=2", schedule="zb-h2", global_batch=8, **base)
    assert make_layout("pp=2,dp=2", schedule="zb-h1", global_batch=8, **base).schedule == "zb-h1"


@pytest.mark.parametrize("row_id", [7, 45, 191, 343])
def test_the_family_holds_published_moe_recipes(row_id):
    """Qwen3-30B-A3B (ep 8), gpt-oss-120b (ep 8), Qwen3-235B-A22B (pp 4, ep 32) and
    Mixtral 8x7B (ep 8): each recipe's (micro-batch, tp, cp, ep, etp), (pp, dp) and
    schedule are a shape of the family (at 8 layers, enough for their pp, to build fast)."""
    row = next(r for r in json.loads(published_runs.DATA.read_text())["rows"] if r["id"] == row_id)
    spec = published_runs.row_spec(row)
    graph, cluster, lay = published_runs.row_case({**spec, "micro_batch": 1,
                                                   "options": {**spec["options"], "layers": 8}})
    assert lay.ep > 1
    groups = family(graph, lay.devices, cluster.devices_per_node, lay.global_batch, 64, None,
                     ("1f1b", "interleaved", "zb-h1", "dualpipe"), True, True,
                     dict(precision=lay.precision, attention="fused", dropout=False))
    schedule = lay.schedule if lay.schedule != "interleaved" else f"interleaved:{lay.virtual}"
    shapes = {(micro, tp, cp, ep, etp, pp, dp, s) for micro, tp, cp, ep, etp, shapes in groups
              for pp, dp, scheds in shapes for s in scheds}
    assert (spec["micro_batch"], lay.tp, lay.cp, lay.ep, lay.expert_tp, lay.pp, lay.dp,
            schedule) in shapes
    assert cluster == get_cluster(spec["cluster"], spec["devices"])


def test_a_warm_start_changes_the_order_only():
    """The same family, best and ranking; with pruning the counts priced and pruned depend
    on the order, so without it they are equal too."""
    lay = make_layout("dp=2,ep=2", devices=2, micro_batch=2, global_batch=4, zero=1)
    for prune in (True, False):
        cold = search_layouts(moe, 2, "dgx-a100", 4, max_micro_batch=2, prune=prune)
        warm = search_layouts(moe, 2, "dgx-a100", 4, max_micro_batch=2, warm_start=lay,
                              prune=prune)
        assert (warm.family, warm.best.layout) == (cold.family, cold.best.layout)
        assert [(e.layout, e.step_seconds) for e in warm.ranked] == \
            [(e.layout, e.step_seconds) for e in cold.ranked]
        assert prune or (warm.priced, warm.fitting) == (cold.priced, cold.fitting)

"""The layout search's branch and bound (pase.perf.bound) is exact: its bounds are at most
every priced step of their layouts, and the pruned search finds the same best layout and
the same ranking as pricing the whole family (``prune=False``)."""
from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

import pytest

from pase.api import load_graph
from pase.cluster import get_cluster
from pase.perf import make_layout
from pase.perf.bound import Bounds, layout_bound
from pase.perf.comms import group_collectives
from pase.perf.family import family
from pase.perf.family import probe as group_probe
from pase.perf.hardware import achieved
from pase.perf.kernels import make_pricer
from pase.perf.ops import price_ops
from pase.perf.search import ZERO_STAGES, search_layouts
from pase.perf.shared import Shared
from pase.perf.step import evaluate_layout, fewest_full
from pase.perf.tries import recompute_tries

# (model, options, devices, cluster, global batch): a dense GPT, a small MoE (ep, etp,
# all-to-alls), a long sequence (cp) and a deeper GPT whose stages pipeline
CASES = {
    "gpt": ("gpt3", dict(layers=4, width=256, heads=8, vocab=1024, seq=512), 8, "dgx-a100", 16),
    "moe": ("mixtral-8x7b", dict(layers=2, width=128, heads=4, kv_heads=4, ff=256, experts=4,
                                 top_k=2, vocab=512, seq=256), 4, "dgx-a100", 8),
    "cp": ("gpt3", dict(layers=4, width=256, heads=8, vocab=1024, seq=8192), 8, "h100-sxm", 8),
    "deep": ("gpt3", dict(layers=8, width=1024, heads=16, vocab=1024, seq=2048), 32, "h100-sxm",
             32),
    # a MoE in fp8 (its linear layers' quantised copies in memory and time), long sequences
    # (cp) and memory tight enough that some layouts fit with no recomputation, some with
    # selective, some with 1 to 4 fully recomputed layers, and some not at all
    "moe-fp8": ("mixtral-8x7b", dict(layers=4, width=8192, heads=32, kv_heads=8, ff=28672,
                                     experts=4, top_k=2, vocab=512, seq=16384), 4, "h100-sxm", 8),
}
PRECISION = {"moe-fp8": "fp8"}
STRIDE = {"moe-fp8": 3}  # its bounds checked on every third layout (time)


@lru_cache(maxsize=None)
def graph(case: str, micro: int):
    model, options, *_ = CASES[case]
    return load_graph(model, batch=micro, **options)


def _ranking(result):
    return [(e.layout, e.step_seconds) for e in result.ranked]


@pytest.mark.parametrize("case,keep", [("gpt", 5), ("moe", 5), ("cp", 5), ("deep", 3),
                                       ("moe", 12), ("moe-fp8", 5)])
def test_the_pruned_search_ranks_as_the_whole_family_does(case, keep):
    _, _, devices, cluster, batch = CASES[case]
    def build(m):
        return graph(case, m)
    precision = PRECISION.get(case, "bf16")
    whole = search_layouts(build, devices, cluster, batch, keep=keep, prune=False,
                           precision=precision)
    pruned = search_layouts(build, devices, cluster, batch, keep=keep, precision=precision)
    assert whole.pruned == 0 and pruned.pruned > 0
    assert pruned.family == whole.family and pruned.priced < whole.priced
    assert pruned.best.layout == whole.best.layout
    assert _ranking(pruned) == _ranking(whole)
    assert len(pruned.ranked) == min(keep, whole.fitting)


@pytest.mark.parametrize("case", ["gpt", "moe", "cp", "moe-fp8"])
def test_every_bound_is_at_most_every_step_of_its_layouts(case):
    """For each layout of the family: the shape's compute-only bound and the layout's bound
    are at most the step of each recomputation the search prices, and of full
    recomputation of every layer and of one layer per stage."""
    model, _, devices, cluster, batch = CASES[case]
    cl = get_cluster(cluster, devices)
    precision = PRECISION.get(case, "bf16")
    pricer = make_pricer(cl.device, achieved(cl.device), precision)
    options = dict(precision=precision, attention="fused", dropout=False)
    groups = family(graph(case, 1), devices, cl.devices_per_node, batch, 2, None,
                     ("1f1b", "interleaved", "zb-h1", "dualpipe"), True, True, options)
    checked = seen = nowhere = 0
    fitting = set()  # the recomputations found to fit
    for micro, tp, cp, ep, etp, shapes in groups:
        g = graph(case, micro)
        base = dict(tp=tp, cp=cp, ep=ep, etp=etp)
        probe = group_probe(base, micro, **options)
        ops = price_ops(g, probe, pricer)
        shared = Shared(g, ops)
        bounds = Bounds(g, price_ops(g, probe, pricer, copies=False), probe,
                        group_collectives(cl, probe, pricer.hw), pricer.hw)
        for pp, dp, schedules in shapes:
            for schedule in schedules:
                shape = bounds.step(pp, batch // (micro * dp), schedule)
                for zero in ZERO_STAGES:
                    seen += 1
                    if seen % STRIDE.get(case, 1):
                        continue
                    lay = make_layout(dict(base, pp=pp, dp=dp), devices=devices,
                                      micro_batch=micro, global_batch=batch, schedule=schedule,
                                      zero=zero, sequence_parallel=tp > 1, **options)
                    coll = shared.coll(lay, group_collectives(cl, lay, pricer.hw))
                    layout = layout_bound(shared, lay, coll, pricer, True)
                    fits = layout_bound(shared, lay, coll, pricer, True, cl.device.memory_bytes)
                    tries = recompute_tries(g, cl, lay, ops, shared)
                    full = [evaluate_layout(g, cl, replace(lay, recompute="full",
                                                           recompute_layers=n), ops)
                            for n in (0, 1)]
                    full.append(fewest_full(g, cl, lay, ops, shared))
                    selective = evaluate_layout(g, cl, replace(lay, recompute="selective"), ops)
                    tries += full + [selective]
                    steps = [e.step_seconds for e in tries]
                    assert shape <= layout <= min(steps), (lay, shape, layout, steps)
                    for rc, priced in (("selective", [selective]), ("full", full)):
                        again = layout_bound(shared, lay, coll, pricer, True, rebuilt=rc)
                        assert layout <= again <= min(e.step_seconds for e in priced), (lay, rc)
                    # the search's memory check without the times is the priced memory
                    for e in tries:
                        assert shared.memory(e.layout, coll, pricer, True) == e.memory_bytes
                        if e.fits_memory:
                            fitting.add((e.layout.recompute, e.layout.recompute_layers > 0))
                    alone = fewest_full(g, cl, lay, ops)  # by pricing each, no Shared
                    assert alone.layout == full[-1].layout
                    # infinite only where no recomputation fits
                    assert fits in (layout, math.inf)
                    assert fits == layout or not any(e.fits_memory for e in tries)
                    nowhere += not any(e.fits_memory for e in tries)
                    checked += 1
    assert checked > 100
    if case == "moe-fp8":  # every way of fitting, and layouts that fit in none
        assert fitting == {("none", False), ("selective", False), ("full", False),
                           ("full", True)}, fitting
        assert nowhere > 0

"""A tied matrix's gradient sync in the calibrated model.

GPT-2's ``lm_head`` reads the embedding ``wte``'s table. Where ``wte`` keeps it split 8
ways over its width and the head splits the batch 8 ways, the head's 8 partial weight
gradients must be summed onto the embedding's width split once a step (a reduce-scatter
of the whole matrix), which neither op's own sync did: the head's is dropped (the matrix
is its owner's) and the embedding's runs over no devices. Expected values are derived
here from the preset's link figures (pase/cluster/presets.py: dgx-a100 NVLink 300 GB/s a
direction, 3 us a hop) and the A100's achieved constants (pase/perf/hardware.py: NVLink
bus bandwidth 0.78 of the link, overlap tax 0.15).
"""
from __future__ import annotations

import numpy as np
import pytest

import pase
from pase.builder import GraphBuilder
from pase.graphs import blocks

NVLINK = 300e9 * 0.78  # bytes/s NCCL's bus reaches on a DGX A100's NVLink
TAX = 0.15
VOCAB, WIDTH = 50257, 768
MATRIX = VOCAB * WIDTH * 2  # bf16 bytes of the whole tied matrix (77.2 MB)


@pytest.fixture(scope="module")
def gpt2():
    return pase.api.load_graph("gpt2", layers=1)


def _edge(plan, src="wte", dst="lm_head"):
    return next(e[3] for e in plan.op_prices[dst]["edges"] if e[0] == src)


def test_a_batch_split_head_pays_a_reduce_scatter_onto_a_width_split_embedding(gpt2):
    plan = pase.evaluate(gpt2, {"wte": {"d": 8}, "lm_head": {"b": 8}}, 8, "calibrated",
                         cluster="dgx-a100")
    # forward: each device receives the 7 width shards it lacks, 7/8 of the matrix
    # (67.5 MB), plus one NVLink hop; backward, once a step: the reduce-scatter of the
    # whole matrix's gradient over the 8 devices moves the same 7/8 per device, in a
    # bucket (no hop latency), at the overlap tax like every gradient sync
    per_device = 7 / 8 * MATRIX
    assert per_device == pytest.approx(67.54e6, rel=1e-3)
    relayout = per_device / NVLINK + 3e-6
    sync = per_device / NVLINK
    assert sync == pytest.approx(0.2886e-3, rel=1e-3)
    assert _edge(plan) == pytest.approx(relayout + TAX * sync, rel=1e-9)


def test_the_plan_counts_the_tied_sync_with_the_other_syncs(gpt2, built, bound):
    from pase.cost_models.calibrated_plan import tied_syncs
    wte, head = gpt2.index("wte"), gpt2.index("lm_head")
    choice = np.zeros(len(gpt2.ops), dtype=np.int64)
    for i, cfg in ((wte, {"d": 8}), (head, {"b": 8})):
        want = [cfg.get(d.name, 1) for d in gpt2.ops[i].dims]
        configs = np.asarray(built.problem.candidates[i].configs)
        choice[i] = int(np.flatnonzero((configs == want).all(axis=1))[0])
    sync = 7 / 8 * MATRIX / NVLINK
    assert tied_syncs(gpt2, bound, built.problem, choice) == pytest.approx(sync, rel=1e-9)
    # the plan's step: the Problem's sum (the tax on the edge) plus what the backward
    # window does not hide; its breakdown counts the sync once, with the other syncs
    price = built.cost_model.price_plan(gpt2, built.problem, tuple(int(k) for k in choice))
    assert price["exposed_sync_seconds"] >= TAX * sync
    assert sum(price["breakdown"].values()) == pytest.approx(price["step_seconds"], rel=1e-9)


@pytest.fixture(scope="module")
def built(gpt2):
    return pase.api.build_problem(gpt2, 8, "calibrated", cluster="dgx-a100")


@pytest.fixture(scope="module")
def bound(gpt2, built):
    return built.cost_model.bind(gpt2, 8)


def _pair(graph, bound, owner, user):
    """(the tied sync alone, the tied edge's price) of one owner and user config."""
    wte, head = graph.op("wte"), graph.op("lm_head")
    src = np.asarray([[owner.get(d.name, 1) for d in wte.dims]])
    dst = np.asarray([[user.get(d.name, 1) for d in head.dims]])
    return (bound.tied_sync(wte, wte.weights[1], src, head, head.weights[0], dst)[0, 0],
            bound.edge_costs(wte, wte.weights[1], src, head, head.weights[0], dst)[0, 0])


@pytest.mark.parametrize("owner, user, edge", [
    # both split the batch alike: the embedding's all-reduce sums the head's part too
    ({"a": 8}, {"b": 8}, 0.0),
    # both split the width: the head's gradient is whole on each device
    ({"d": 8}, {"e": 8}, 0.0),
    ({"a": 2, "d": 4}, {"b": 2, "e": 4}, 0.0),
    # a replicated head reads 7/8 of the matrix; its gradient is whole, sliced back
    ({"d": 8}, {}, 7 / 8 * MATRIX / NVLINK + 3e-6),
])
def test_a_tied_pair_split_alike_pays_no_extra(gpt2, bound, owner, user, edge):
    sync, price = _pair(gpt2, bound, owner, user)
    assert sync == 0.0
    assert price == pytest.approx(edge, rel=1e-9, abs=1e-15)


def test_a_replicated_embedding_sums_the_head_gradient_whole(gpt2, bound):
    # the embedding keeps the whole matrix on every device: the 8 partial gradients are
    # all-reduced, a reduce-scatter and an all-gather, 2 x 7/8 of the matrix per device
    sync, _ = _pair(gpt2, bound, {}, {"b": 8})
    assert sync == pytest.approx(2 * 7 / 8 * MATRIX / NVLINK, rel=1e-9)
    # half the head's batch split as the embedding splits its own (the embedding's
    # all-reduce over those 2 sums it): the other 4 ways reduce-scatter onto its width split
    sync, _ = _pair(gpt2, bound, {"a": 2, "d": 4}, {"b": 8})
    assert sync == pytest.approx(3 / 4 * MATRIX / NVLINK, rel=1e-9)


def _tiny_tied(vocab=VOCAB, width=WIDTH, batch=8, seq=512):
    b = GraphBuilder("tied-lm", cutoff=1, batch=batch)
    ids = b.input((batch, seq), names=("b", "l"))
    x = b.embedding(ids, vocab, width, name="wte")
    logits = blocks.lm_head(b, x, vocab, "lm_head", tied="wte")
    b.softmax_cross_entropy(logits, name="loss")
    return b.build()


def test_certified_search_matches_exhaustive_on_a_tied_model():
    # an embedding, its tied head and the loss; at these sizes the best plan splits the
    # embedding's width and the head's sequence, so it pays a tied sync
    graph = _tiny_tied()
    kwargs = dict(cluster="dgx-a100")
    found = pase.solve(graph, 4, "auto", **kwargs)
    brute = pase.solve(graph, 4, "exhaustive", **kwargs)
    assert found.cost_model == "calibrated"
    assert found.total_cost == pytest.approx(brute.total_cost, rel=1e-9)

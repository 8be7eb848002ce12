"""The build memo (pase.costing.keys.build_memo): what it shares between a layer's op and
its copies in the other layers must equal what each edge computes on its own."""
from contextlib import nullcontext

import numpy as np
import pytest

from pase import api
from pase.costing import shape
from pase.costing.keys import array_key, build_memo, memoised
from pase.space import ConfigSpace


def _build(memo: bool, monkeypatch):
    graph = api.load_graph("gpt2", layers=3)  # identical layers repeat
    model = api.make_cost_model("calibrated", cluster="dgx-a100", zero="auto", recompute="auto")
    space = ConfigSpace(graph, 8, padded_roles=model.padded_roles)
    with monkeypatch.context() as patch:
        if not memo:
            patch.setattr(shape, "build_memo", nullcontext)
        return model.problem(graph, space), model.bind(graph, 8), graph, space


def test_memoised_build_equals_uncached_build(monkeypatch):
    cached, *_ = _build(True, monkeypatch)
    plain, *_ = _build(False, monkeypatch)
    assert cached.edges == plain.edges
    for a, b in zip(cached.edge_costs, plain.edge_costs):
        assert np.array_equal(a, b)
    for a, b in zip(cached.vertex_costs + cached.memory, plain.vertex_costs + plain.memory):
        assert np.array_equal(a, b)
    # the same matrices shared, the same way: sharing is what the edge keys decide
    assert _sharing(cached.edge_costs) == _sharing(plain.edge_costs)
    assert _sharing(cached.vertex_costs) == _sharing(plain.vertex_costs)
    assert len({id(m) for m in cached.edge_costs}) < len(cached.edges)  # layers do share


def test_edge_keys_equal_with_and_without_memo(monkeypatch):
    _, bound, graph, space = _build(True, monkeypatch)
    conns = bound.edges(graph)

    def keys():
        return [bound.edge_key(*_ports(graph, space, c)) for c in conns]

    plain = keys()
    with build_memo():
        cached = keys()
        again = keys()  # every mask now comes from the memo
    assert cached == plain == again
    assert any(bound.moved.values())  # the masks the memo holds are exercised


def test_moved_masks_shared_across_layers_equal_fresh_ones(monkeypatch):
    _, bound, graph, space = _build(True, monkeypatch)
    seen = 0
    with build_memo():
        for c in bound.edges(graph):
            producer, output, src, consumer, port, dst = _ports(graph, space, c)
            got = bound._moved_groups(producer, output, src, consumer, port, dst)
            for op, configs, mask in ((producer, src, got[0]), (consumer, dst, got[1])):
                tags = bound.moved.get(op.name, ())
                fresh = [bound._moved_mask(op, configs, t) for t in tags]
                if mask is not None and mask.any():
                    assert any(np.array_equal(mask, f) for f in fresh)
                    seen += 1
    assert seen


def test_memo_lives_only_inside_its_scope():
    calls = []
    for _ in range(2):
        memoised("k", lambda: calls.append(1))
    assert len(calls) == 2  # no scope: nothing remembered
    with build_memo():
        with build_memo():  # nested: one memo
            memoised("k", lambda: calls.append(1))
        memoised("k", lambda: calls.append(1))
    assert len(calls) == 3
    with build_memo():
        memoised("k", lambda: calls.append(1))
    assert len(calls) == 4


@pytest.mark.parametrize("writeable", [True, False])
def test_array_key_same_inside_and_outside_memo(writeable):
    a = np.arange(12).reshape(3, 4)
    a.flags.writeable = writeable
    outside = array_key((4,), a)
    with build_memo():
        first = array_key((4,), a)
        if writeable:
            a[0, 0] = 7  # a writeable array is read afresh each time
            assert array_key((4,), a) != first
        else:
            assert array_key((4,), a) == first
    assert first == outside


def _ports(graph, space, conn):
    producer, output, consumer, port = shape.connection_ports(graph, conn)
    u, _, v, _ = conn
    return producer, output, space.configs[u], consumer, port, space.configs[v]


def _sharing(arrays):
    """Per array, the index of the first one that is the same object."""
    first = {}
    return [first.setdefault(id(a), i) for i, a in enumerate(arrays)]


def test_vectorised_undominated_equals_the_per_config_pass():
    from pase.costing.variants import _undominated, _undominated_all

    rng = np.random.default_rng(7)
    # few distinct values: ties and mutual covering, where the greedy order matters
    terms = rng.integers(0, 3, size=(8, 5, 400)).astype(np.float64)
    terms[:, 0] *= 1.0 + rng.choice([0.0, 1e-12, 0.5], size=terms[:, 0].shape)
    kept = _undominated_all(terms)
    for k in range(terms.shape[2]):
        assert np.flatnonzero(kept[:, k]).tolist() == _undominated(terms[:, :, k])

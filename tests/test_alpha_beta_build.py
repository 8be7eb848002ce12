"""Whole alpha-beta Problems equal, bit for bit, those built on the device-by-device path."""
from __future__ import annotations

import numpy as np
import pytest

from pase.cost_models.alpha_beta import AlphaBetaCostModel
from pase.registry import MODELS
from pase.space import ConfigSpace
from pase.testing.relayout_reference import off_mesh_parts_by_device
from pase.work import relayout

# Widths with factors 2, 3 and 5, so that splits off the mesh straddle its prime axes.
GPT = {"batch": 6, "seq": 10, "layers": 1, "width": 30, "heads": 5, "ff": 60, "vocab": 30, "positions": 10}
LLAMA = {"batch": 6, "seq": 10, "layers": 1, "width": 30, "heads": 5, "kv_heads": 5, "ff": 60, "vocab": 30}


def _problems(model, options, p, cluster, monkeypatch, **cost):
    graph = MODELS.get(model)(**options)
    space = ConfigSpace(graph, p, cutoff=1)
    fast = AlphaBetaCostModel(cluster, **cost).problem(graph, space)
    with monkeypatch.context() as m:
        m.setattr(relayout, "_off_mesh_parts", off_mesh_parts_by_device)
        slow = AlphaBetaCostModel(cluster, **cost).problem(graph, space)
    off = sum(int((np.prod(c, axis=1) % p != 0).sum()) for c in space.configs)
    return fast, slow, off


def _assert_equal(fast, slow):
    assert fast.edges == slow.edges
    for a, b in zip(fast.vertex_costs, slow.vertex_costs):
        assert np.array_equal(a, b)
    for a, b in zip(fast.memory, slow.memory):
        assert np.array_equal(a, b)
    for a, b in zip(fast.edge_costs, slow.edge_costs):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("model, options", [("gpt2", GPT), ("llama2-7b", LLAMA)])
@pytest.mark.parametrize("p, cluster", [(12, "dgx-a100"), (16, "h100-sxm"), (30, "h100-sxm")])
def test_problem_equals_the_device_by_device_build(model, options, p, cluster, monkeypatch):
    fast, slow, off = _problems(model, options, p, cluster, monkeypatch)
    assert off > 0  # the space has configs off the mesh
    _assert_equal(fast, slow)


def test_reduce_scatter_problem_equals_the_device_by_device_build(monkeypatch):
    fast, slow, _ = _problems("gpt2", GPT, 24, "h100-sxm", monkeypatch, reduce_scatter=True)
    _assert_equal(fast, slow)

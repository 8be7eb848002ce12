"""Problem builds are predicted (problem_shape) and refused before allocating when too large."""
import math
import time
import tracemalloc

import numpy as np
import pytest

from pase.api import build_problem
from pase.cost_models.alpha_beta import AlphaBetaCostModel
from pase.cost_models.paper import PaperCostModel
from pase.costing import DEFAULT_BUILD_BUDGET, pairwise, problem_shape
from pase.errors import OptionError, TooLargeError
from pase.registry import MODELS
from pase.space import ConfigSpace

CASES = [("mlp", 8, PaperCostModel), ("mlp", 16, AlphaBetaCostModel),
         ("diamond", 4, AlphaBetaCostModel), ("fork-join", 8, PaperCostModel),
         ("fork-join", 8, AlphaBetaCostModel), ("alexnet", 8, AlphaBetaCostModel),
         ("rnnlm", 4, PaperCostModel), ("rnnlm", 4, AlphaBetaCostModel)]


def real_bytes(problem):
    """What the built Problem holds, summed array by array (a shared array once)."""
    arrays = list(problem.vertex_costs) + list(problem.edge_costs) + list(problem.memory or [])
    return sum({id(a): a.nbytes for a in arrays}.values())


@pytest.mark.parametrize("model, devices, cost_model", CASES)
def test_shape_matches_the_built_problem(model, devices, cost_model):
    graph = MODELS.get(model)()
    space = ConfigSpace(graph, devices)
    cm = cost_model()
    shape = problem_shape(graph, space, cost_model=cm)
    problem = cm.problem(graph, space)
    assert shape.names == problem.names and shape.num_vertices == problem.num_vertices
    assert shape.sizes.dtype == np.int64 and shape.sizes.tolist() == problem.sizes.tolist()
    assert shape.edges == problem.edges
    assert shape.array_bytes == real_bytes(problem)
    # The largest edge matrix, found by looking at every built one.
    biggest = max(range(len(problem.edges)), key=lambda e: problem.edge_costs[e].size)
    assert set(shape.largest_edge) == set(problem.edges[biggest])
    assert shape.edge_bytes(*shape.largest_edge) == problem.edge_costs[biggest].nbytes


class Unshared(PaperCostModel):
    """The paper model with every vertex vector and edge matrix its own (whatever paper.py does)."""

    def edge_key(self, *args):
        return None

    def vertex_key(self, *args):
        return None


def test_shape_without_a_cost_model_is_an_upper_bound_with_the_same_edges():
    graph = MODELS.get("rnnlm")()  # several connections between one pair of ops
    space = ConfigSpace(graph, 8)
    problem = PaperCostModel().problem(graph, space)
    shape = problem_shape(graph, space)
    assert shape.edges == problem.edges
    # By hand: vertex costs and memory vectors, and every edge matrix, 8 bytes an entry.
    k = space.sizes
    assert shape.array_bytes == 16 * sum(k) + sum(8 * k[u] * k[v] for u, v in problem.edges)
    assert shape.array_bytes >= real_bytes(problem)
    assert problem_shape(graph, space, cost_model=Unshared()).array_bytes == real_bytes(
        Unshared().problem(graph, space)) == shape.array_bytes - 8 * sum(k)


def test_edges_are_merged_pairs_sorted_with_the_producer_named_first():
    graph = MODELS.get("diamond")()
    shape = problem_shape(graph, ConfigSpace(graph, 4))
    pairs = {tuple(sorted((graph.index(c.src), graph.index(c.dst)))) for c in graph.connections}
    assert shape.edges == sorted(pairs)
    producer, consumer = shape.largest_edge
    assert any(graph.index(c.src) == producer and graph.index(c.dst) == consumer
               for c in graph.connections)


def test_a_tiny_budget_is_refused_naming_the_largest_edge():
    graph = MODELS.get("mlp")()
    space = ConfigSpace(graph, 8)
    # The largest edge by hand: the connection whose two ops have the most configs.
    sizes = space.sizes
    c = max(graph.connections, key=lambda c: sizes[graph.index(c.src)] * sizes[graph.index(c.dst)])
    ku, kv = sizes[graph.index(c.src)], sizes[graph.index(c.dst)]
    with pytest.raises(TooLargeError) as info:
        Unshared().problem(graph, space, memory_budget=1000)
    message = str(info.value)
    assert "\n" not in message
    assert f"{c.src} -> {c.dst} ({ku} x {kv}" in message
    assert "over the 1000 B build budget" in message
    assert "fewer devices" in message and "--cutoff" in message and "--powers-of-two" in message


def test_the_default_budget_refuses_transformer_on_4096_devices_fast_and_lean():
    start = time.process_time()  # CPU seconds: a busy machine does not fail it
    graph = MODELS.get("transformer")()
    space = ConfigSpace(graph, 4096)
    tracemalloc.start()
    try:
        with pytest.raises(TooLargeError, match=r"over the 4 GiB build budget; the largest edge "
                                                r"matrix is \S+ -> \S+ \(\d+ x \d+, [\d.]+ MiB\)"):
            Unshared().problem(graph, space)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.process_time() - start < 5.0
    assert peak < 64 * 2**20  # refused before any cost matrix was allocated
    assert DEFAULT_BUILD_BUDGET == 4 * 2**30
    # The prediction, by hand: 8 bytes per vertex-cost entry and per edge-matrix entry.
    sizes = space.sizes
    pairs = {tuple(sorted((graph.index(c.src), graph.index(c.dst)))) for c in graph.connections}
    expected = 8 * sum(sizes) + sum(8 * sizes[u] * sizes[v] for u, v in pairs)
    assert problem_shape(graph, space, cost_model=Unshared()).array_bytes == expected
    assert expected > DEFAULT_BUILD_BUDGET


def test_the_default_budget_refuses_gpt3_175b_on_32768_devices_fast_and_lean():
    """The README's refused command: with shared arrays the paper model still needs
    5.27 GiB for gpt3-175b on 32768 devices, one edge matrix alone 2.42 GiB."""
    start = time.process_time()  # CPU seconds: a busy machine does not fail it
    graph = MODELS.get("gpt3-175b")()
    space = ConfigSpace(graph, 32768)
    tracemalloc.start()
    try:
        with pytest.raises(TooLargeError, match=r"would take 5.27 GiB, over the 4 GiB build budget"):
            PaperCostModel().problem(graph, space)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.process_time() - start < 10.0
    assert peak < 64 * 2**20
    # By hand: every distinct edge matrix once; the largest one alone is over half the budget.
    shape = problem_shape(graph, space, cost_model=PaperCostModel())
    u, v = shape.largest_edge
    assert 8 * int(space.sizes[u]) * int(space.sizes[v]) > DEFAULT_BUILD_BUDGET / 2


def test_sharing_brings_transformer_on_4096_devices_under_the_budget():
    graph = MODELS.get("transformer")()
    space = ConfigSpace(graph, 4096)
    shared = problem_shape(graph, space, cost_model=PaperCostModel())
    alone = problem_shape(graph, space, cost_model=Unshared())
    assert shared.array_bytes < DEFAULT_BUILD_BUDGET < alone.array_bytes
    assert len(set(shared.shared_with)) < len(shared.edges) / 8


def test_budget_values():
    graph = MODELS.get("chain")()
    space = ConfigSpace(graph, 4)
    assert PaperCostModel().problem(graph, space, memory_budget=math.inf).num_vertices == len(graph.ops)
    for bad in (0, -1.0, "lots", float("nan")):
        with pytest.raises(OptionError, match="memory_budget"):
            PaperCostModel().problem(graph, space, memory_budget=bad)


def test_build_problem_still_calls_problem_with_two_arguments():
    built = build_problem("mlp", 4, "alpha-beta")
    assert built.problem.num_vertices == len(built.graph.ops)


def test_a_space_for_another_graph_is_refused():
    a, b = MODELS.get("chain")(), MODELS.get("mlp")()
    with pytest.raises(OptionError, match="another graph"):
        PaperCostModel().problem(a, ConfigSpace(b, 4))


def test_pairwise_equals_the_kernel_on_every_pair():
    rng = np.random.default_rng(7)
    src = rng.integers(1, 4, size=(40, 2))
    dst = rng.integers(1, 4, size=(30, 3))

    def kernel(a, b):
        return a[..., 0] * 10.0 + b[..., 1] - a[..., 1] * b[..., 2]

    full = kernel(src[:, None, :], dst[None, :, :])
    got = pairwise(src, dst, kernel)
    assert got.shape == (40, 30) and np.array_equal(got, full)


@pytest.mark.parametrize("model, devices, cost_model", CASES + [("transformer", 16, AlphaBetaCostModel)])
def test_every_edge_matrix_is_the_sum_of_its_connections_costs(model, devices, cost_model):
    graph = MODELS.get(model)()
    space = ConfigSpace(graph, devices)
    cm = cost_model()
    problem = cm.problem(graph, space)
    priced = cm.for_devices(devices) if isinstance(cm, AlphaBetaCostModel) else cm
    expected = {}
    for u, out, v, inp in cm.edges(graph):  # each connection priced on its own
        pu, pv = graph.ops[u], graph.ops[v]
        m = priced.edge_costs(pu, pu.outputs[out], space.configs[u], pv, pv.inputs[inp], space.configs[v])
        expected[(u, v)] = expected.get((u, v), 0.0) + m
    for (u, v), m in expected.items():
        assert np.array_equal(problem.edge_matrix(u, v), m)
    shared = [m for m in problem.edge_costs if sum(x is m for x in problem.edge_costs) > 1]
    assert all(not m.flags.writeable for m in shared)


def test_repeated_layers_share_their_edge_matrices():
    graph = MODELS.get("transformer")()
    space = ConfigSpace(graph, 16)
    problem = AlphaBetaCostModel().problem(graph, space)
    distinct = {id(m) for m in problem.edge_costs}
    assert len(problem.edges) == 256 and len(distinct) < 64  # 6 + 6 identical layers
    shape = problem_shape(graph, space, cost_model=AlphaBetaCostModel())
    assert shape.array_bytes == real_bytes(problem) < problem_shape(graph, space).array_bytes


def test_sharing_is_counted_before_the_guard_decides():
    graph = MODELS.get("transformer")()
    space = ConfigSpace(graph, 16384)
    start = time.process_time()  # CPU seconds: a busy machine does not fail it
    shape = problem_shape(graph, space, cost_model=AlphaBetaCostModel().for_devices(16384))
    # 256 edges but far fewer distinct matrices: well under the 17 GiB of one matrix per edge.
    assert len(set(shape.shared_with)) < 64
    assert shape.array_bytes < problem_shape(graph, space).array_bytes / 4
    with pytest.raises(TooLargeError, match="over the 1 GiB build budget"):
        AlphaBetaCostModel().problem(graph, space, memory_budget=2**30)
    assert time.process_time() - start < 5.0

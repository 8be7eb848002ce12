"""Repeated blocks reduced through (min,+) powers: the same optimum as the plain dp and brute force."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pase
from pase.problem import Problem, Status
from pase.solvers import dp, exhaustive
from pase.solvers.dp.blocks import fold as fold_module
from pase.solvers.dp.blocks.fold import find_blocks, min_plus_product
from pase.solvers.dp.core import solve_blocks
from pase.testing import add_memory, cap_memory, random_chain, random_dag


def costs(rng: np.random.Generator, shape) -> np.ndarray:
    """Small integers, often tied, as the random Problems of pase.testing draw them."""
    top = 4 if rng.random() < 0.3 else 100
    return rng.integers(0, top, size=shape).astype(float)


def chained(seed: int, count: int, period: int = 3, separators: int = 1, shared: bool = False,
            prefix: int = 2, suffix: int = 2, perturb: bool = False,
            jump: bool = False) -> Problem:
    """``prefix`` random vertices, maybe a shared vertex, a first block with its own costs,
    ``count`` identical blocks, then ``suffix`` random vertices.

    The separator is a random set of ``separators`` offsets; only they carry edges
    into the next block. The shared vertex (if any)
    joins every block at the same offsets with the same matrices. With ``perturb``
    one entry of one identical block's vertex costs changes; with ``jump`` the last
    separator gets an edge back into an earlier identical block.
    """
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 5, size=period)
    sep = sorted(rng.choice(period, size=separators, replace=False).tolist())
    inner_edges = [(int(rng.integers(0, o)), o) for o in range(1, period)]  # a tree
    if period > 2:
        u, w = sorted(rng.choice(period, size=2, replace=False).tolist())
        inner_edges = sorted(set(inner_edges) | {(u, w)})
    back = sorted({(s, int(rng.integers(0, period))) for s in sep for _ in range(2)})
    shared_at = sorted(set(rng.integers(0, period, size=2).tolist())) if shared else []
    template = {
        "vertex": [costs(rng, k) for k in sizes],
        "inner": {e: costs(rng, (sizes[e[0]], sizes[e[1]])) for e in inner_edges},
        "back": {e: costs(rng, (sizes[e[0]], sizes[e[1]])) for e in back},
    }
    vertex: list[np.ndarray] = []
    edges: list[tuple[int, int]] = []
    mats: list[np.ndarray] = []
    for _ in range(prefix):
        vertex.append(costs(rng, int(rng.integers(1, 4))))
        if len(vertex) > 1:
            u = int(rng.integers(0, len(vertex) - 1))
            edges.append((u, len(vertex) - 1))
            mats.append(costs(rng, (vertex[u].size, vertex[-1].size)))
    g = None
    if shared:
        g = len(vertex)
        vertex.append(costs(rng, 3))
        if prefix:
            edges.append((0, g))
            mats.append(costs(rng, (vertex[0].size, 3)))
        shared_mats = {o: costs(rng, (3, sizes[o])) for o in shared_at}
    first = len(vertex)
    # U_0: the template's sizes, its own costs, its own inner edges; prefix attached anywhere.
    for k in sizes:
        vertex.append(costs(rng, k))
    for o in range(1, period):
        u = first + int(rng.integers(0, o))
        edges.append((u, first + o))
        mats.append(costs(rng, (vertex[u].size, vertex[first + o].size)))
    for u in range(prefix):
        w = first + int(rng.integers(0, period))
        edges.append((u, w))
        mats.append(costs(rng, (vertex[u].size, vertex[w].size)))
    bad = int(rng.integers(1, count + 1)) if perturb else -1
    for i in range(1, count + 1):
        base = first + i * period
        for o in range(period):
            c = template["vertex"][o].copy()
            if i == bad and o == period // 2:
                c[0] += 1.0
            vertex.append(c)
        for (a, b), m in template["inner"].items():
            edges.append((base + a, base + b))
            mats.append(m)
        for (s, b), m in template["back"].items():
            edges.append((base - period + s, base + b))
            mats.append(m)
        for o in shared_at:
            edges.append((g, base + o))
            mats.append(shared_mats[o])
    last_sep = [first + count * period + s for s in sep]
    after = len(vertex)
    for _ in range(suffix):  # joined to the last separator, earlier suffix vertices, G
        v = len(vertex)
        vertex.append(costs(rng, int(rng.integers(1, 4))))
        ends = last_sep + list(range(after, v)) + ([g] if shared else [])
        u = ends[int(rng.integers(0, len(ends)))]
        edges.append((u, v))
        mats.append(costs(rng, (vertex[u].size, vertex[v].size)))
    if jump:
        w = first + period + int(rng.integers(0, (count - 1) * period))
        edges.append((w, last_sep[0]))
        mats.append(costs(rng, (vertex[w].size, vertex[last_sep[0]].size)))
    if prefix and suffix:  # the rest of the graph may join its two ends directly
        edges.append((0, len(vertex) - 1))
        mats.append(costs(rng, (vertex[0].size, vertex[-1].size)))
    return Problem(vertex, edges, mats)


def assert_same_optimum(problem: Problem, sol) -> None:
    plain = dp.solve(problem)
    assert sol.status is Status.OPTIMAL
    assert math.isclose(sol.cost, plain.cost, rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(problem.evaluate(sol.choice), sol.cost, rel_tol=1e-9, abs_tol=1e-12)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.sampled_from([2, 3, 5, 7]),
       period=st.integers(1, 4), separators=st.integers(1, 2), shared=st.booleans(),
       prefix=st.integers(0, 3), suffix=st.integers(0, 3), perturb=st.booleans(),
       jump=st.booleans())
def test_matches_plain_dp(seed, count, period, separators, shared, prefix, suffix, perturb, jump):
    separators = min(separators, period)
    problem = chained(seed, count, period, separators, shared, prefix, suffix, perturb, jump)
    sol = solve_blocks(problem)
    if not (perturb or jump):
        assert sol is not None, "an unperturbed chain of identical blocks was not reduced"
    if sol is None:
        return
    assert_same_optimum(problem, sol)
    assert sol.stats["blocks_found"] >= 1
    again = solve_blocks(problem)
    assert again.choice == sol.choice  # deterministic, ties included


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.sampled_from([2, 3, 5]),
       shared=st.booleans(), separators=st.integers(1, 2))
def test_matches_exhaustive(seed, count, shared, separators):
    problem = chained(seed, count, period=2, separators=separators, shared=shared,
                      prefix=1, suffix=1)
    if problem.num_strategies() > 2 * 10**5:
        return
    sol = solve_blocks(problem)
    assert sol is not None
    best = exhaustive.solve(problem).cost
    assert math.isclose(sol.cost, best, rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(problem.evaluate(sol.choice), best, rel_tol=1e-9, abs_tol=1e-12)


def test_finds_the_chain_it_was_given():
    problem = chained(7, count=5, period=3, separators=1, prefix=2, suffix=2)
    chains = find_blocks(problem)
    assert [(c.period, c.count) for c in chains] == [(3, 5)]
    problem = chained(8, count=7, period=4, separators=2, shared=True)
    (chain,) = find_blocks(problem)
    assert (chain.period, chain.count, len(chain.separator), len(chain.shared)) == (4, 7, 2, 1)


@pytest.mark.parametrize("seed", range(5))
def test_nothing_on_random_graphs(seed):
    assert find_blocks(random_dag(40, seed=seed, extra_edges=5)) == []
    assert find_blocks(random_chain(30, seed=seed)) == []
    assert solve_blocks(random_dag(40, seed=seed)) is None


def test_memory_cap_is_left_to_the_plain_dp():
    problem = cap_memory(add_memory(chained(3, count=3), seed=1), 0.5)
    assert solve_blocks(problem) is None


def test_min_plus_product_against_loops():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 5, (2, 3, 4)).astype(float), rng.integers(0, 5, (2, 4, 5)).astype(float)
    value, arg = min_plus_product(a, b)
    for g in range(2):
        for i in range(3):
            for j in range(5):
                sums = [a[g, i, c] + b[g, c, j] for c in range(4)]
                assert value[g, i, j] == min(sums)
                assert arg[g, i, j] == sums.index(min(sums))  # the first minimum


@pytest.mark.parametrize("chunk", [1, 7, 40, 2**19])
def test_min_plus_product_in_chunks_with_ties_and_infinities(monkeypatch, chunk):
    from pase.solvers.dp.blocks import fold

    monkeypatch.setattr(fold, "PRODUCT_CHUNK", chunk)
    rng = np.random.default_rng(chunk)
    a, b = rng.integers(0, 3, (2, 9, 6)).astype(float), rng.integers(0, 3, (2, 6, 5)).astype(float)
    a[0, 2, :3], b[1, 4, :] = np.inf, np.inf
    value, arg = min_plus_product(a, b)
    sums = a[:, :, :, None] + b[:, None, :, :]  # (g, a, c, b)
    assert np.array_equal(value, sums.min(axis=2)) and np.array_equal(arg, sums.argmin(axis=2))


@pytest.mark.parametrize("model,layers,devices", [
    ("gpt2", 4, 8), ("gpt2", 4, 64), ("transformer", 4, 8), ("transformer", 3, 64)])
def test_real_models(model, layers, devices):
    problem = pase.build_problem(model, devices, model_options={"layers": layers}).problem
    chains = find_blocks(problem)
    names = {name: v for v, name in enumerate(problem.names)}
    if model == "gpt2":
        # The position embedding meets layer 0 as layer 0's residual meets layer 1
        # (equal matrices, checked here), so every layer is a block.
        pairs = [("wpe", "h0.attn_norm", "h0.mlp_residual", "h1.attn_norm"),
                 ("wpe", "h0.attn_residual", "h0.mlp_residual", "h1.attn_residual")]
        assert all(np.array_equal(problem.edge_matrix(names[a], names[b]),
                                  problem.edge_matrix(names[c], names[d])) for a, b, c, d in pairs)
        assert [(c.period, c.count, len(c.separator)) for c in chains] == [(12, layers, 1)]
    else:
        # An encoder chain and a decoder chain sharing the encoder's output.
        assert sorted(c.count for c in chains)[0] >= layers - 1
        assert sorted(len(c.shared) for c in chains) == [0, 1]
    sol = solve_blocks(problem)
    assert_same_optimum(problem, sol)
    assert sol.stats["blocks_found"] == len(chains)


def _frozen(problem: Problem, change=lambda a: a.copy()) -> Problem:
    """``problem`` with every array replaced by ``change(array)``, read-only as a cost model
    shares its arrays (an array shared before is shared after)."""
    made: dict[int, np.ndarray] = {}

    def new(a: np.ndarray) -> np.ndarray:
        if id(a) not in made:
            made[id(a)] = b = change(a)
            b.flags.writeable = False
        return made[id(a)]
    return Problem([new(c) for c in problem.vertex_costs], problem.edges,
                   [new(m) for m in problem.edge_costs])


@pytest.mark.parametrize("seed", range(4))
def test_a_transfer_is_reused_only_for_the_same_arrays(seed):
    # A pipeline search folds the same read-only layer arrays in every stage, so the
    # transfer tensor is kept; arrays of the same shapes and other values must not find it.
    first = _frozen(chained(seed, count=5))
    again = Problem(first.vertex_costs, first.edges, first.edge_costs)
    other = _frozen(first, lambda a: np.roll(a, 1, axis=-1) + 1.0)
    held = []
    for problem in (first, again, other):
        sol = solve_blocks(problem)
        plain = dp.solve(problem)
        assert sol is not None and sol.cost == pytest.approx(plain.cost, rel=1e-12, abs=1e-9)
        assert problem.evaluate(sol.choice) == pytest.approx(plain.cost, rel=1e-12, abs=1e-9)
        held.append(len(fold_module._TRANSFERS))
    assert held[1] == held[0] and held[2] == min(held[0] + 1, fold_module.TRANSFERS_KEPT)

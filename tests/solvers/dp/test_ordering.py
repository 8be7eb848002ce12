"""Vertex orderings and the DP structure they induce, on hand-checked graphs."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pase.errors import OptionError
from pase.problem import Problem
from pase.solvers.dp.ordering import ORDERINGS, eliminate, fill_in, generateseq, min_fill, rule_for
from pase.testing import random_problem


def graph(n: int, edges: list[tuple[int, int]], k: int = 2) -> Problem:
    return Problem([np.zeros(k)] * n, edges, [np.zeros((k, k))] * len(edges))


PATH = graph(5, [(0, 1), (1, 2), (2, 3), (3, 4)])
STAR = graph(5, [(0, 1), (0, 2), (0, 3), (0, 4)])
CYCLE = graph(5, [(0, 1), (1, 2), (2, 3), (3, 4), (0, 4)])
# A 4-clique {0,1,2,3} with a detour 0-5-4-6-1: vertex 4 has the smallest degree
# (2) but eliminating it fills 5-6, while 2 has degree 3 and fills nothing.
CLIQUE_DETOUR = graph(7, [(a, b) for a in range(4) for b in range(a + 1, 4)]
                      + [(0, 5), (4, 5), (4, 6), (1, 6)])


def test_path():
    # Ends have degree 1 and eliminating one leaves a shorter path: 0 first
    # (lowest index of the tie with 4), then the new end 1, and so on.
    for name in ORDERINGS:
        assert ORDERINGS[name](PATH) == [0, 1, 2, 3, 4]
    assert fill_in(PATH, [0, 1, 2, 3, 4]) == 0
    e = eliminate(PATH, [0, 1, 2, 3, 4])
    assert e.dependent == ((1,), (2,), (3,), (4,), ())
    assert e.children == ((), (0,), (1,), (2,), (3,))
    assert e.connected_set(2) == (0, 1, 2)
    assert e.roots == (4,)


def test_star():
    # Leaves 1, 2, 3 go first (degree 1, no fill); then centre 0 and leaf 4
    # both have degree 1 and the lower index wins.
    assert generateseq(STAR) == [1, 2, 3, 0, 4]
    assert min_fill(STAR) == [1, 2, 3, 0, 4]
    assert fill_in(STAR, [1, 2, 3, 0, 4]) == 0
    # Eliminating the centre first joins all four leaves: C(4, 2) fill edges.
    assert fill_in(STAR, [0, 1, 2, 3, 4]) == 6
    e = eliminate(STAR, [1, 2, 3, 0, 4])
    assert e.dependent == ((0,), (0,), (0,), (4,), ())
    assert e.children == ((), (), (), (0, 1, 2), (3,))
    assert e.max_dependent_set == 1


def test_star_breadth_first_blows_up():
    # BFS visits the centre first, so every leaf is in the prefix's frontier.
    assert ORDERINGS["bfs"](STAR) == [0, 1, 2, 3, 4]
    e = eliminate(STAR, [0, 1, 2, 3, 4], rule_for("bfs"))
    assert e.dependent == ((4, 3, 2, 1), (4, 3, 2), (4, 3), (4,), ())
    assert e.children == ((), (0,), (1,), (2,), (3,))
    assert e.max_dependent_set == 4
    assert e.connected_set(2) == (0, 1, 2)


def test_cycle():
    # All degrees 2: eliminate 0 (fill 1-4), then 1 (fill 2-4), then the triangle.
    assert generateseq(CYCLE) == [0, 1, 2, 3, 4]
    assert min_fill(CYCLE) == [0, 1, 2, 3, 4]
    assert fill_in(CYCLE, [0, 1, 2, 3, 4]) == 2
    e = eliminate(CYCLE, [0, 1, 2, 3, 4])
    assert e.dependent == ((4, 1), (4, 2), (4, 3), (4,), ())
    assert e.max_dependent_set == 2


def test_min_degree_and_min_fill_differ():
    # Min-degree: 4 (degree 2, fills 5-6), 5 (fills 0-6), 6 (0-1 exists), then
    # the clique. Min-fill: 2 then 3 (no fill), leaving the 5-cycle 0-1-6-4-5;
    # 0 (fills 1-5), 1 (fills 5-6), then the triangle 4, 5, 6.
    assert generateseq(CLIQUE_DETOUR) == [4, 5, 6, 0, 1, 2, 3]
    assert min_fill(CLIQUE_DETOUR) == [2, 3, 0, 1, 4, 5, 6]
    assert fill_in(CLIQUE_DETOUR, [4, 5, 6, 0, 1, 2, 3]) == 2
    assert fill_in(CLIQUE_DETOUR, [2, 3, 0, 1, 4, 5, 6]) == 2


def test_components_restart_and_roots():
    two_paths = graph(5, [(0, 3), (1, 2), (2, 4)])
    assert ORDERINGS["bfs"](two_paths) == [0, 3, 1, 2, 4]
    e = eliminate(two_paths, generateseq(two_paths))
    assert len(e.roots) == 2
    assert all(e.dependent[r] == () for r in e.roots)


def test_bad_order_and_rule():
    with pytest.raises(OptionError, match="permutation"):
        eliminate(PATH, [0, 1, 2, 3])
    with pytest.raises(OptionError, match="rule"):
        eliminate(PATH, [0, 1, 2, 3, 4], "sideways")


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 30), extra=st.integers(0, 20), seed=st.integers(0, 2**32 - 1))
def test_orderings_are_permutations_and_sets_are_consistent(n, extra, seed):
    problem = random_problem(n, max_candidates=2, extra_edges=extra, seed=seed)
    adj = problem.neighbors()
    for name, order_fn in ORDERINGS.items():
        order = order_fn(problem)
        assert sorted(order) == list(range(n)), name
        e = eliminate(problem, order, rule_for(name))
        pos = {v: i for i, v in enumerate(order)}
        for i, v in enumerate(order):
            x = set(e.connected_set(i))
            if e.rule == "connected":
                assert x == _reachable(adj, v, {u for u in pos if pos[u] <= i})
            else:
                assert x == set(order[:i + 1])
            # D(i) is the later neighbourhood of X(i), latest position first.
            later = {u for w in x for u in adj[w] if pos[u] > i}
            assert set(e.dependent[i]) == later
            assert list(e.dependent[i]) == sorted(later, key=lambda u: -pos[u])
            for j in e.children[i]:
                assert set(e.dependent[j]) <= set(e.dependent[i]) | {v}
        assert e.roots == tuple(sorted(e.roots))
        assert sum(len(e.connected_set(r)) for r in e.roots) == n


def _reachable(adj: list[list[int]], start: int, allowed: set[int]) -> set[int]:
    seen, stack = {start}, [start]
    while stack:
        for u in adj[stack.pop()]:
            if u in allowed and u not in seen:
                seen.add(u)
                stack.append(u)
    return seen


def _naive_min_fill(problem: Problem) -> list[int]:
    """Minimum fill-in by brute force: recount every remaining vertex's fill each step."""
    d = [set(nbrs) for nbrs in problem.neighbors()]
    remaining, order = set(range(problem.num_vertices)), []
    while remaining:
        def key(v: int) -> tuple[int, int, int]:
            nbrs = sorted(d[v])
            fill = sum(1 for i, a in enumerate(nbrs) for b in nbrs[i + 1:] if b not in d[a])
            return fill, len(d[v]), v
        v = min(remaining, key=key)
        remaining.remove(v)
        order.append(v)
        for a in d[v]:
            d[a] |= d[v] - {a}
            d[a].discard(v)
    return order


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 40), extra=st.integers(0, 60), seed=st.integers(0, 2**32 - 1))
def test_incremental_min_fill_matches_a_recount(n, extra, seed):
    problem = random_problem(n, max_candidates=1, extra_edges=extra, seed=seed)
    assert min_fill(problem) == _naive_min_fill(problem)


def test_stop_ends_the_order_at_the_first_vertex_it_accepts():
    # On the clique with a detour, min-degree's fourth vertex (0) is the first
    # eliminated with 3 neighbours (1, 2, 3): stop there.
    def wide(v, dependent):
        return len(dependent) >= 3

    assert generateseq(CLIQUE_DETOUR, wide) == [4, 5, 6, 0]
    e = eliminate(CLIQUE_DETOUR, [4, 5, 6, 0], stop=wide)
    assert not e.complete and e.order == (4, 5, 6, 0)
    assert set(e.dependent[-1]) == {1, 2, 3}
    # A stop that never fires changes nothing; a prefix needs a stop.
    assert min_fill(CLIQUE_DETOUR, lambda v, d: False) == min_fill(CLIQUE_DETOUR)
    with pytest.raises(OptionError, match="permutation"):
        eliminate(CLIQUE_DETOUR, [4, 5, 6, 0])


def test_orderings_take_any_shape():
    # Only num_vertices and edges are read: no cost arrays needed.
    class Shape:
        num_vertices = 5
        edges = [(0, 1), (0, 2), (0, 3), (0, 4)]

    for name in ORDERINGS:
        assert ORDERINGS[name](Shape()) == ORDERINGS[name](STAR)

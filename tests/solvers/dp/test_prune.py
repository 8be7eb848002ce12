"""Exact config pruning: dominated configs go, the optimum stays (against plain dp and
exhaustive search), choices map back to original indices."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pase.cost_models.alpha_beta import AlphaBetaCostModel
from pase.cost_models.paper import PaperCostModel
from pase.errors import OptionError
from pase.problem import Problem, Status
from pase.registry import MODELS
from pase.solvers import dp, exhaustive
from pase.solvers.dp import core
from pase.solvers.dp.prune import _pareto_rows, _row_le, prune_dominated
from pase.space import ConfigSpace


@pytest.fixture(autouse=True)
def prune_every_size(monkeypatch):
    """The dp prunes only large Problems; these tests prune every one."""
    monkeypatch.setattr(core, "PRUNE_MIN_ENTRIES", 0)


def structured_problem(seed: int, n: int, k: int, extra: int, with_memory: bool,
                       infinite: bool) -> Problem:
    """A random Problem whose configs fall in few row classes per edge, with small
    integer costs: dominance and exact ties are common (as in real cost models)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, k + 1, size=n)
    edges = sorted({(int(rng.integers(0, v)), v) for v in range(1, n)}
                   | {tuple(sorted(rng.choice(n, 2, replace=False).tolist())) for _ in range(extra)
                      if n >= 3})
    vertex = [rng.integers(0, 4, size=s).astype(float) for s in sizes]
    matrices = []
    for u, v in edges:
        cu, cv = rng.integers(1, 4), rng.integers(1, 4)
        table = rng.integers(0, 4, size=(cu, cv)).astype(float)
        if infinite and rng.random() < 0.3:
            table[rng.integers(0, cu), rng.integers(0, cv)] = math.inf
        matrices.append(table[rng.integers(0, cu, size=sizes[u])][:, rng.integers(0, cv, size=sizes[v])])
    memory = [rng.integers(1, 5, size=s).astype(float) for s in sizes] if with_memory else None
    cap = None
    if with_memory:
        least = sum(m.min() for m in memory)
        cap = least + float(rng.integers(0, 4))
    return Problem(vertex, edges, matrices, memory=memory, memory_cap=cap)


def dominated_by_definition(problem: Problem, v: int) -> set[int]:
    """The configs of v the module docstring says go, checked pair by pair."""
    rows = [m for _, m in problem.incident(v)]
    use_memory = problem.memory_cap is not None
    k = problem.vertex_costs[v].size

    def features(c):
        parts = [problem.vertex_costs[v][c:c + 1]] + [m[c] for m in rows]
        if use_memory:
            parts.append(problem.memory[v][c:c + 1])
        return np.concatenate(parts)

    f = [features(c) for c in range(k)]
    out = set()
    for c in range(k):
        for x in range(k):
            if x != c and (f[x] <= f[c]).all() and (not (f[c] <= f[x]).all() or x < c):
                out.add(c)
    return out


cases = st.builds(structured_problem, seed=st.integers(0, 2**32 - 1), n=st.integers(1, 7),
                  k=st.integers(1, 6), extra=st.integers(0, 3), with_memory=st.booleans(),
                  infinite=st.booleans())


@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases)
def test_pruned_optimum_equals_plain_dp_and_exhaustive(problem):
    truth = exhaustive.solve(problem)
    plain = dp.solve(problem, prune=False, blocks=False)
    pruned = dp.solve(problem, prune=True, blocks=False)
    assert plain.status == pruned.status == truth.status
    if truth.status is Status.INFEASIBLE:
        return
    assert pruned.cost == pytest.approx(truth.cost, rel=1e-12, abs=1e-12)
    assert pruned.cost == plain.cost
    # The choice is in original indices: it evaluates to the cost and fits the cap.
    assert problem.evaluate(pruned.choice) == pruned.cost
    assert problem.fits(pruned.choice)
    # Memory first ignored (the uncapped optimum answers when it fits), then counted.
    counts = {int(problem.sizes.sum()) - int(prune_dominated(problem, memory=m).problem.sizes.sum())
              for m in (False, True)}
    if problem.memory_cap is None:
        assert pruned.stats["pruned"] == prune_dominated(problem).dropped
    else:
        assert pruned.stats["pruned"] in counts


@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases)
def test_a_single_pass_drops_exactly_the_dominated_configs(problem):
    result = prune_dominated(problem)
    for v in range(problem.num_vertices):
        dropped = set(range(problem.vertex_costs[v].size)) - set(result.kept[v].tolist())
        assert dropped == dominated_by_definition(problem, v)
    assert result.dropped == sum(len(dominated_by_definition(problem, v))
                                 for v in range(problem.num_vertices))
    # The reduced Problem holds the kept rows, columns and memory of the original.
    for v, keep in enumerate(result.kept):
        assert np.array_equal(result.problem.vertex_costs[v], problem.vertex_costs[v][keep])
    for (u, v), m in zip(result.problem.edges, result.problem.edge_costs):
        assert np.array_equal(m, problem.edge_matrix(u, v)[np.ix_(result.kept[u], result.kept[v])])


def test_dominance_and_ties_by_hand():
    # Vertex 0: config 1 costs more than 0 with equal rows -> dropped; config 2 equals
    # config 0 exactly -> dropped (lowest index kept); config 3 is cheaper on the edge
    # to config 1 of vertex 1 and dearer elsewhere -> kept.
    p = Problem([np.array([1.0, 2.0, 1.0, 3.0]), np.array([0.0, 0.0])], [(0, 1)],
                [np.array([[0.0, 5.0], [0.0, 5.0], [0.0, 5.0], [1.0, 0.0]])])
    result = prune_dominated(p)
    assert result.kept[0].tolist() == [0, 3]
    # Vertex 1: config 1 has the same vertex cost; its column 5,5,5,0 vs 0,0,0,1: neither.
    assert result.kept[1].tolist() == [0, 1]
    assert result.dropped == 2
    solution = dp.solve(p, blocks=False)
    assert solution.choice == (0, 0) and solution.cost == 1.0 and solution.stats["pruned"] == 2


def test_memory_counts_only_under_a_cap():
    # Config 1 is dearer but lighter: dominated without a cap, kept under one.
    costs = [np.array([1.0, 2.0])]
    memory = [np.array([5.0, 1.0])]
    assert prune_dominated(Problem(costs, [], [], memory=memory)).kept[0].tolist() == [0]
    capped = Problem(costs, [], [], memory=memory, memory_cap=3.0)
    assert prune_dominated(capped).kept[0].tolist() == [0, 1]
    solution = dp.solve(capped, blocks=False)
    assert solution.choice == (1,) and solution.cost == 2.0


def test_a_vertex_over_the_work_limit_keeps_everything_and_is_counted():
    p = structured_problem(5, 6, 6, 2, False, False)
    full = prune_dominated(p)
    limited = prune_dominated(p, work_limit=1)
    assert full.dropped > 0 and limited.dropped == 0
    assert limited.skipped == sum(1 for k in p.sizes if k > 1)


def test_row_table_equals_the_full_comparison():
    rng = np.random.default_rng(3)
    for cols in (1, 5, 40, 100):
        rows = np.unique(rng.integers(0, 3, size=(60, cols)).astype(float), axis=0)
        rows[rng.random(rows.shape) < 0.05] = math.inf
        rows = np.unique(rows, axis=0)
        assert np.array_equal(_row_le(rows), (rows[:, None, :] <= rows[None, :, :]).all(axis=2))


def test_row_table_stops_at_its_work_limit_and_is_exact_below_it():
    # rows alike but for noise in a few columns: the screen passes most pairs, so the
    # pairwise comparisons are most of the work; past the limit the table is abandoned
    # (its vertex keeps every config), below it every pair is right
    rng = np.random.default_rng(5)
    rows = np.tile(rng.integers(0, 3, size=200).astype(float), (80, 1))
    rows[:, :8] += rng.integers(0, 2, size=(80, 8))
    rows = np.unique(rows, axis=0)
    s, cols = rows.shape
    want = (rows[:, None, :] <= rows[None, :, :]).all(axis=2)
    screen = s * s * min(cols, 32)
    assert _row_le(rows, work_limit=screen) is None  # no room left for a single pair
    assert np.array_equal(_row_le(rows, work_limit=screen + s * s * cols), want)


def test_row_table_when_the_screens_pass_but_a_column_disagrees():
    # a equals b but for two columns of one screening group (j and j + 32), one higher and
    # one lower: the group sums tie and b's smallest columns (its zeros) agree, yet a is
    # not <= b; a copy lowered in one column is.
    rng = np.random.default_rng(0)
    b = rng.integers(5, 9, size=200).astype(float)
    b[:40] = 0.0
    a = b.copy()
    a[50] += 1.0
    a[82] -= 1.0
    c = b.copy()
    c[60] -= 1.0
    rows = np.array([a, b, c])
    le = _row_le(rows)
    assert not le[0, 1] and not le[1, 0] and le[2, 1] and not le[1, 2]
    assert np.array_equal(le, (rows[:, None, :] <= rows[None, :, :]).all(axis=2))


def test_pareto_rows_with_negative_zero_and_infinities():
    vertex = np.array([0.0, -0.0, math.inf, math.inf, 1.0])
    edge = np.array([[1.0, 2.0], [1.0, 2.0], [0.0, 0.0], [0.0, 0.0], [0.5, 2.0]])
    # 1 ties 0 (-0.0 == 0.0): dropped. 3 ties 2 (inf == inf): dropped. 4: no rival
    # has both a cost <= 1 and an edge row <= (0.5, 2).
    assert _pareto_rows(vertex, [(edge, False)], None, 10**9).tolist() == [0, 2, 4]


@pytest.mark.parametrize("model, devices, options, cost_model, cap", [
    ("transformer", 16, {}, PaperCostModel, None),
    ("rnnlm", 8, {}, PaperCostModel, None),
    ("gpt2", 16, {"layers": 2}, AlphaBetaCostModel, None),
    ("gpt2", 16, {"layers": 2}, AlphaBetaCostModel, 1.3),
])
def test_real_models_same_optimum_with_and_without_pruning(model, devices, options, cost_model, cap):
    graph = MODELS.get(model)(**options)
    problem = cost_model().problem(graph, ConfigSpace(graph, devices))
    if cap is not None:
        problem = problem.with_memory_cap(problem.min_memory() * cap)
    plain = dp.solve(problem, prune=False, blocks=False)
    pruned = dp.solve(problem, prune=True, blocks=False)
    assert pruned.stats["pruned"] > 0
    assert pruned.cost == pytest.approx(plain.cost, rel=1e-9)
    assert problem.evaluate(pruned.choice) == pruned.cost and problem.fits(pruned.choice)
    assert pruned.stats["table_entries"] <= plain.stats["table_entries"]


@pytest.mark.parametrize("bad", ["yes", 1, None, 0.0])
def test_prune_and_blocks_take_booleans_only(bad):
    p = structured_problem(1, 3, 3, 0, False, False)
    for name in ("prune", "blocks"):
        with pytest.raises(OptionError, match=f"{name} must be true or false"):
            dp.solve(p, **{name: bad})

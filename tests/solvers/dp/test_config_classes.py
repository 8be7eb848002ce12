"""A DP step on classes of configurations equals the plain step (values to rounding, and
its argmin is a true minimiser), on random steps whose edges read few splits."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import pase
from pase.problem import Problem
from pase.solvers import dp
from pase.solvers.dp.config_classes import class_min_plus, edge_classes
from pase.solvers.dp.kernel import Ledger, min_plus
from pase.solvers.dp.ordering import ORDERINGS
from pase.solvers.dp.plan import plan_ordering


def few_classes(rng, rows: int, cols: int) -> np.ndarray:
    """A matrix with a few distinct rows and columns (as edges that read a port's split)."""
    r, c = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    small = rng.integers(0, 6, size=(r, c)).astype(float)
    if rng.random() < 0.2:
        small[0, 0] = np.inf
    return small[rng.integers(0, r, rows)][:, rng.integers(0, c, cols)]


def problem_of(seed: int, n: int) -> Problem:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 30, size=n)
    vertex = [rng.integers(0, 50, size=k).astype(float) for k in sizes]
    edges = [(int(rng.integers(0, v)), v) for v in range(1, n)]
    for _ in range(n // 2):
        u, v = sorted(rng.choice(n, 2, replace=False).tolist())
        if (u, v) not in edges:
            edges.append((u, v))
    mats = [few_classes(rng, sizes[u], sizes[v]) if rng.random() < 0.8 else
            rng.integers(0, 50, size=(sizes[u], sizes[v])).astype(float) for u, v in edges]
    return Problem(vertex, edges, mats)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(3, 7), ordering=st.sampled_from(
    sorted(ORDERINGS)))
def test_every_step_matches_the_plain_kernel(seed, n, ordering):
    problem = problem_of(seed, n)
    plan = plan_ordering(problem, ordering)
    sizes = [int(k) for k in problem.sizes]
    values: dict[int, np.ndarray] = {}
    used = 0
    for step in plan.steps:
        children = [values[j] for j in step.children]
        terms = children + [problem.edge_matrix(u, step.vertex) for u in step.later] + \
            [problem.vertex_costs[step.vertex]]
        plain_value, _ = min_plus(step, [t.copy() for t in terms], 0, Ledger())
        got = class_min_plus(step, terms, sizes, {})
        values[step.position] = plain_value
        if got is None:
            continue
        used += 1
        value, arg = got
        assert value.shape == plain_value.shape and arg.shape == plain_value.shape
        np.testing.assert_allclose(value, plain_value, rtol=1e-12, atol=0)
        # the argmin's own sum is the minimum (at up to 200 entries)
        full = step.dependent + (step.vertex,)
        for index in list(np.ndindex(*value.shape))[::max(1, value.size // 200)]:
            at = dict(zip(step.dependent, index))
            at[step.vertex] = int(arg[index])
            total = 0.0
            for t, axes in zip(terms, step.term_axes):
                total += t[tuple(at[a] for a in axes)]
            assert total == value[index] or np.isclose(total, value[index], rtol=1e-12)
        assert all(a in full for a in step.dependent)


def test_the_class_step_is_used_and_the_dp_answer_is_unchanged():
    problem = problem_of(3, 8)
    hits = 0
    for ordering in sorted(ORDERINGS):
        plan = plan_ordering(problem, ordering)
        for step in plan.steps:
            terms = [np.zeros(1)] * len(step.children) + \
                [problem.edge_matrix(u, step.vertex) for u in step.later] + \
                [problem.vertex_costs[step.vertex]]
            if not step.children and class_min_plus(step, terms, problem.sizes, {}) is not None:
                hits += 1
    assert hits >= 1


def test_edge_classes_rebuild_the_matrix():
    rng = np.random.default_rng(0)
    for _ in range(20):
        m = few_classes(rng, int(rng.integers(1, 40)), int(rng.integers(1, 40)))
        r, c, small = edge_classes(m)
        np.testing.assert_array_equal(small[r][:, c], m)
        assert np.unique(small, axis=0).shape[0] == small.shape[0]
        assert np.unique(small, axis=1).shape[1] == small.shape[1]


def test_real_model_blocks_still_exact():
    problem = pase.build_problem("gpt2", 64, model_options={"layers": 3}).problem
    a = dp.solve(problem, blocks=False)
    from pase.solvers.dp.core import solve_blocks

    b = solve_blocks(problem)
    assert abs(a.cost - b.cost) <= 1e-9 * abs(a.cost)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 3))
def test_the_sampled_count_never_exceeds_the_true_classes(seed, edges):
    """The cheap test before hashing may only refuse steps the full count refuses."""
    from pase.solvers.dp.config_classes import _sampled_classes

    rng = np.random.default_rng(seed)
    kv = int(rng.integers(1, 80))
    mats = [few_classes(rng, int(rng.integers(1, 80)), kv) if rng.random() < 0.7 else
            rng.integers(0, 3, size=(int(rng.integers(1, 80)), kv)).astype(float)
            for _ in range(edges)]
    classes = [edge_classes(m) for m in mats]
    n_k = np.unique(np.stack([c[1] for c in classes], axis=1), axis=0).shape[0]
    rows = int(np.prod([c[2].shape[0] for c in classes]))
    for sample in (1, 4, 16, 128):
        assert 1 <= _sampled_classes(mats, sample) <= rows * n_k

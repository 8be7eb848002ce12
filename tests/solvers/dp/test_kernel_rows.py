"""A tiled dp step sums each class of equal rows once (kernel.row_classes): the same tables."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from pase import forked
from pase.problem import Problem
from pase.solvers.dp import core, kernel
from pase.solvers.dp.kernel import row_classes
from pase.solvers.dp.plan import plan_for_order


def star(seed: int, repeat: int, ties: bool) -> Problem:
    """``a`` (8 configs) and ``b`` (5) both joined to ``c`` (6): eliminating ``c`` first is a
    step over (a, b, c). ``a``'s edge repeats its rows (groups of ``repeat``), one pair as
    0.0 against -0.0 (equal values, other bytes); ``ties`` rounds costs so minima tie."""
    rng = np.random.default_rng(seed)
    pattern = rng.integers(0, 4, (8 // repeat + 1, 6)) if ties else rng.random((8 // repeat + 1, 6))
    ac = np.repeat(pattern, repeat, axis=0)[:8].astype(float)
    ac[-1] = ac[-2]
    ac[-1][ac[-1] == 0] = -0.0
    bc = rng.integers(0, 3, (5, 6)).astype(float) if ties else rng.random((5, 6))
    costs = [rng.random(8), rng.random(5), np.zeros(6) if ties else rng.random(6)]
    return Problem(costs, [(0, 2), (1, 2)], [ac, bc])


def brute_step(problem: Problem) -> tuple[np.ndarray, np.ndarray]:
    """min over c of ac[a, c] + bc[b, c] + cost[c], and the first minimiser, per (a, b)."""
    ac, bc = problem.edge_costs
    total = ac[:, None, :] + bc[None, :, :] + problem.vertex_costs[2][None, None, :]
    return total.min(axis=2), total.argmin(axis=2)


@pytest.mark.parametrize("seed, repeat, ties", itertools.product(range(3), (1, 2, 4), (False, True)))
def test_tiled_step_with_row_classes_matches_brute_force(monkeypatch, seed, repeat, ties):
    problem = star(seed, repeat, ties)
    monkeypatch.setattr(kernel, "CHUNK_BYTES", 8 * 8)  # tiles of one step row
    monkeypatch.setattr(kernel, "ROW_CLASSES_MAX_SHARE", 1.0)  # compare rows at any size
    monkeypatch.setattr(kernel, "row_classes", lambda bases, entries: None)
    seen = []
    classes = row_classes

    def spy(bases, entries):
        seen.append(classes(bases, entries))
        return seen[-1]

    chosen = plan_for_order(problem, [2, 1, 0])  # D = (a, b): a latest, the first axis
    step = chosen.steps[0]
    assert step.vertex == 2 and step.dependent == (0, 1) and step.chunk_cols  # tiled
    terms = [problem.edge_matrix(u, 2) for u in step.later] + [problem.vertex_costs[2]]
    plain = kernel.min_plus(step, terms, 0, kernel.Ledger())  # every row summed
    monkeypatch.setattr(kernel, "row_classes", spy)
    value, arg = kernel.min_plus(step, terms, 0, kernel.Ledger())
    assert np.array_equal(value, plain[0]) and np.array_equal(arg, plain[1])  # bit for bit
    want_value, want_arg = brute_step(problem)
    order = [step.dependent.index(0), step.dependent.index(1)]
    assert np.allclose(np.transpose(value, order), want_value, rtol=1e-12, atol=0)
    if ties:  # integers: sums exact in any order, so the first minimiser is brute force's
        assert np.array_equal(np.transpose(arg, order), want_arg)
    if repeat > 1:  # rows repeat: only one of each class was summed
        assert seen[0] is not None and len(seen[0][0]) < 8
    total, choice, _ = core.min_sum(problem, chosen)
    assert total == pytest.approx(problem.evaluate(choice), rel=1e-12)
    best = min(problem.evaluate(c) for c in itertools.product(range(8), range(5), range(6)))
    assert total == pytest.approx(best, rel=1e-12)


def test_row_classes_keep_other_bytes_apart_and_skip_few_repeats():
    rows = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, -0.0], [2.0, 3.0]])
    base = rows[:, None, :]  # over (a, b, v), b broadcast
    first, source = kernel.row_classes([np.zeros((1, 3, 2)), base], entries=10**9)
    assert first.tolist() == [0, 2, 3] and source.tolist() == [0, 0, 2, 3]
    distinct = np.arange(20.0).reshape(10, 1, 2)  # no row repeats: not worth it
    assert kernel.row_classes([distinct], entries=10**9) is None
    assert kernel.row_classes([base], entries=100) is None  # comparing would cost too much


@pytest.mark.parametrize("seed, repeat", itertools.product(range(2), (1, 2)))
def test_a_step_split_with_a_spare_cpu_gives_the_same_tables(monkeypatch, seed, repeat):
    """With a CPU spare (pase.forked.spare) a wide tiled step sums the later half of its
    rows in a forked child writing into shared tables: bit for bit the tables of one process."""
    problem = star(seed, repeat, ties=False)
    monkeypatch.setattr(kernel, "CHUNK_BYTES", 8 * 8)
    monkeypatch.setattr(kernel, "ROW_CLASSES_MAX_SHARE", 1.0)
    chosen = plan_for_order(problem, [2, 1, 0])
    step = chosen.steps[0]
    terms = [problem.edge_matrix(u, 2) for u in step.later] + [problem.vertex_costs[2]]
    alone = kernel.min_plus(step, terms, 0, kernel.Ledger())
    monkeypatch.setattr(kernel, "SPLIT_MIN_ENTRIES", 0)
    forks = []
    real = forked.Forked

    def counted(fn):
        forks.append(fn)
        return real(fn)

    monkeypatch.setattr(forked, "Forked", counted)
    monkeypatch.setattr(forked, "available", lambda: True)  # a fork runs on one CPU too
    with forked.spare():
        value, arg = kernel.min_plus(step, terms, 0, kernel.Ledger())
        total, choice, _ = core.min_sum(problem, chosen)
    assert forks  # the step was split
    assert np.array_equal(value, alone[0]) and np.array_equal(arg, alone[1])
    assert total == pytest.approx(problem.evaluate(choice), rel=1e-12)
    assert not forked.has_spare()  # only inside the block

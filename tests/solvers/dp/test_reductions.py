"""The DP's reductions keep their contract: for ``reduced, inverse = apply(problem)``, the
optimum of ``reduced``, mapped back by ``invert(choice, inverse)``, is an optimum of
``problem`` (against exhaustive search, on small random Problems)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from pase.problem import Problem, Status
from pase.solvers import dp, exhaustive
from pase.solvers.dp import prune
from pase.solvers.dp.blocks import fold
from pase.testing import add_memory, cap_memory, random_chain, random_problem


def assert_inverts_to_an_optimum(problem: Problem, reduced: Problem, choice) -> None:
    """``choice`` (of ``problem``, inverted from a minimiser of ``reduced``) is optimal."""
    truth = exhaustive.solve(problem)
    assert truth.status is Status.OPTIMAL
    assert len(choice) == problem.num_vertices
    assert math.isclose(problem.evaluate(choice), truth.cost, rel_tol=1e-9, abs_tol=1e-9)
    assert problem.fits(choice)


@pytest.mark.parametrize("seed", range(40))
def test_prune_inverts_exhaustive_and_dp_optima(seed):
    problem = random_problem(3 + seed % 5, max_candidates=5, extra_edges=seed % 3, seed=seed,
                             tie_prob=0.5, zero_prob=0.3)
    reduced, inverse = prune.apply(problem)
    assert reduced.num_vertices == problem.num_vertices
    assert int(reduced.sizes.sum()) == int(problem.sizes.sum()) - inverse.dropped
    for solver in (exhaustive.solve, dp.solve):
        found = solver(reduced)
        choice = prune.invert(found.choice, inverse)
        assert problem.evaluate(choice) == reduced.evaluate(found.choice)  # the same terms
        assert_inverts_to_an_optimum(problem, reduced, choice)


def test_prune_drops_configs_on_these_problems():
    """The test above is not about the identity: most of its Problems lose configs."""
    dropped = [prune.apply(random_problem(3 + s % 5, max_candidates=5, extra_edges=s % 3,
                                          seed=s, tie_prob=0.5, zero_prob=0.3))[1].dropped
               for s in range(40)]
    assert sum(d > 0 for d in dropped) >= 25


@pytest.mark.parametrize("seed", range(25))
def test_prune_with_memory_inverts_the_capped_optimum(seed):
    base = random_problem(3 + seed % 4, max_candidates=4, extra_edges=1, seed=seed,
                          tie_prob=0.5, zero_prob=0.3)
    problem = cap_memory(add_memory(base, seed=seed), 0.3 + 0.1 * (seed % 5))
    reduced, inverse = prune.apply(problem, memory=True)
    assert reduced.memory_cap == problem.memory_cap
    found = exhaustive.solve(reduced)
    truth = exhaustive.solve(problem)
    assert found.status is truth.status
    if truth.status is Status.OPTIMAL:
        assert_inverts_to_an_optimum(problem, reduced, prune.invert(found.choice, inverse))


def repeated(seed: int, count: int, period: int = 2) -> Problem:
    """A random_problem of ``period`` vertices as a block, ``count`` copies of it in a row
    (each block's last vertex feeding the next block's first through one shared matrix),
    between two random_chain ends joined to the first and last block the same way."""
    rng = np.random.default_rng(seed)
    block = random_problem(period, max_candidates=3, extra_edges=0, seed=seed)
    head = random_chain(2, max_candidates=3, seed=seed + 1)
    tail = random_chain(2, max_candidates=3, seed=seed + 2)
    link = rng.integers(0, 9, size=(block.sizes[-1], block.sizes[0])).astype(float)
    vertex = list(head.vertex_costs)
    edges, mats = list(head.edges), list(head.edge_costs)
    last, size = 1, head.sizes[-1]  # the vertex the next block hangs from, and its size
    for _ in range(count):
        base = len(vertex)
        vertex += block.vertex_costs
        edges += [(base + u, base + w) for u, w in block.edges]
        mats += block.edge_costs
        edges.append((last, base))
        mats.append(link if size == block.sizes[-1] else
                    rng.integers(0, 9, size=(size, block.sizes[0])).astype(float))
        last, size = base + period - 1, block.sizes[-1]
    base = len(vertex)
    vertex += tail.vertex_costs
    edges += [(base + u, base + w) for u, w in tail.edges]
    mats += tail.edge_costs
    edges.append((last, base))
    mats.append(rng.integers(0, 9, size=(size, tail.sizes[0])).astype(float))
    return Problem(vertex, edges, mats)


@pytest.mark.parametrize("seed", range(30))
def test_fold_inverts_exhaustive_and_dp_optima(seed):
    problem = repeated(seed, count=3 + seed % 3)
    reduced, folding = fold.apply(problem)
    if not folding.reductions:
        assert reduced is problem
    for solver in (exhaustive.solve, dp.solve):
        found = solver(reduced)
        choice = fold.invert(found.choice, folding)
        assert math.isclose(problem.evaluate(choice), found.cost, rel_tol=1e-9, abs_tol=1e-9)
        assert_inverts_to_an_optimum(problem, reduced, choice)


def test_fold_folds_these_problems():
    """The test above is not about the identity: most of its Problems fold."""
    folded = [fold.apply(repeated(s, count=3 + s % 3))[1] for s in range(30)]
    assert sum(bool(f.reductions) for f in folded) >= 25
    assert all(f.stats(repeated(s, 3 + s % 3))["vertices_removed"] > 0
               for s, f in enumerate(folded) if f.reductions)


@pytest.mark.parametrize("seed", range(10))
def test_fold_of_nothing_repeated_is_the_identity(seed):
    problem = random_problem(8, seed=seed)
    reduced, folding = fold.apply(problem)
    assert reduced is problem and not folding.reductions
    choice = exhaustive.solve(problem).choice
    assert fold.invert(choice, folding) == tuple(choice)

"""The PaSE DP against brute force, plus its memory guard, limits and plan."""
from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pase.errors import OptionError, TimeLimitError, TooLargeError
from pase.problem import Problem, Status
from pase.registry import SOLVERS
from pase.solvers import dp, exhaustive
from pase.solvers.dp import core
from pase.solvers.dp.plan import plan_ordering
from pase.testing import random_problem

ORDERINGS = ("generateseq", "bfs", "min-fill", "auto")

problems = st.builds(
    random_problem,
    num_vertices=st.integers(1, 9),
    max_candidates=st.integers(1, 6),
    extra_edges=st.integers(0, 4),
    seed=st.integers(0, 2**32 - 1),
    tie_prob=st.floats(0, 1),
    zero_prob=st.floats(0, 1),
)


def disjoint_union(a: Problem, b: Problem) -> Problem:
    """``a`` and ``b`` side by side, with no edge between them."""
    n = a.num_vertices
    return Problem(a.vertex_costs + b.vertex_costs,
                   list(a.edges) + [(u + n, v + n) for u, v in b.edges],
                   a.edge_costs + b.edge_costs)


def assert_matches_exhaustive(problem: Problem) -> None:
    best = exhaustive.solve(problem).cost
    for ordering in ORDERINGS:
        sol = dp.solve(problem, ordering=ordering)
        assert sol.status is Status.OPTIMAL
        assert math.isclose(sol.cost, best, rel_tol=1e-9), ordering
        assert sol.lower_bound == sol.cost
        assert math.isclose(problem.evaluate(sol.choice), best, rel_tol=1e-9), ordering
        # The DP's own byte count is exactly what its plan predicted.
        assert sol.stats["peak_table_bytes_used"] == sol.stats["peak_table_bytes"]


@settings(max_examples=150, deadline=None)
@given(problems)
def test_matches_exhaustive(problem):
    assert_matches_exhaustive(problem)


@settings(max_examples=40, deadline=None)
@given(problems, problems)
def test_matches_exhaustive_on_disconnected(a, b):
    if a.num_strategies() * b.num_strategies() <= 10**5:
        assert_matches_exhaustive(disjoint_union(a, b))


def test_single_vertex_and_isolated_vertices():
    one = Problem([np.array([3.0, 1.0, 2.0])], [], [])
    sol = dp.solve(one)
    assert sol.choice == (1,) and sol.cost == 1.0
    three = Problem([np.array([3.0, 1.0]), np.array([0.0, 5.0]), np.array([4.0])], [], [])
    sol = dp.solve(three, ordering="bfs")
    assert sol.choice == (1, 0, 0) and sol.cost == 5.0


def test_registered():
    assert "dp" in SOLVERS
    entry = SOLVERS.entry("dp")
    assert entry.obj is dp.solve and entry.info["exact"]


def test_ties_are_deterministic():
    problem = random_problem(40, max_candidates=5, extra_edges=15, seed=7, zero_prob=1.0)
    first = dp.solve(problem)
    assert first.cost == 0.0
    assert first.choice == dp.solve(problem).choice
    # argmin takes the first of equal entries, so every vertex picks candidate 0.
    assert first.choice == (0,) * 40


def clique(n: int, k: int, seed: int = 0) -> Problem:
    rng = np.random.default_rng(seed)
    edges = [(a, b) for a in range(n) for b in range(a + 1, n)]
    return Problem([rng.random(k) for _ in range(n)], edges,
                   [rng.random((k, k)) for _ in edges], names=[f"layer{i}" for i in range(n)])


def test_memory_guard_names_vertex_and_bytes():
    problem = clique(4, 20)
    # Min-degree eliminates layer0 first; its dependent set is the other three:
    # a float64 value table and a uint8 argmin table of 20**3 entries each.
    assert dp.plan(problem, "generateseq").steps[0].vertex == 0
    with pytest.raises(TooLargeError) as info:
        dp.solve(problem, ordering="generateseq", memory_budget=1000)
    msg = str(info.value)
    assert "'layer0'" in msg and "layer1 (20), layer2 (20), layer3 (20)" in msg
    # Planning stopped there, so the need is a lower bound: the tables and more.
    needed = plan_ordering(problem, "generateseq", limit_bytes=1000).peak_bytes
    assert needed >= 9 * 20**3 and "needs at least" in msg
    assert f"({needed} bytes)" in msg and "1000 bytes" in msg
    assert "ordering" in msg and "fewer devices" in msg and "memory_budget" in msg


def test_predicted_peak_bounds_allocations():
    # A 4-clique with a tail: dependent sets of 3 over 40 candidates, so the
    # tables and the chunked broadcast buffer are several MB.
    rng = np.random.default_rng(1)
    k, edges = 40, [(a, b) for a in range(4) for b in range(a + 1, 4)] + [(3, 4), (4, 5), (0, 5)]
    problem = Problem([rng.random(k) for _ in range(6)], edges,
                      [rng.random((k, k)) for _ in edges])
    for ordering in ("generateseq", "bfs", "min-fill"):
        predicted = dp.plan(problem, ordering).peak_bytes
        assert predicted > 4 * 2**20
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            sol = dp.solve(problem, ordering=ordering)
            peak = tracemalloc.get_traced_memory()[1] - before
        finally:
            tracemalloc.stop()
        assert sol.stats["peak_table_bytes_used"] == predicted
        # Everything numpy allocated, plus a little room for the plan's Python objects.
        assert peak <= predicted + 512 * 2**10, ordering


def test_chunked_steps_match_unchunked(monkeypatch):
    problem = clique(4, 12, seed=3)
    whole = dp.solve(problem, ordering="generateseq")
    monkeypatch.setattr("pase.solvers.dp.kernel.CHUNK_BYTES", 1)  # one row per chunk
    assert all(s.chunk_rows == 1 for s in dp.plan(problem, "generateseq").steps)
    chunked = dp.solve(problem, ordering="generateseq")
    assert chunked.choice == whole.choice and chunked.cost == whole.cost


def test_auto_picks_fewest_entries_and_reports():
    problem = random_problem(30, max_candidates=4, extra_edges=12, seed=2)
    sol = dp.solve(problem)
    predicted = sol.stats["predicted"]
    assert set(predicted) == {"generateseq", "min-fill"}
    fewest = min(p["table_entries"] for p in predicted.values())
    assert sol.stats["table_entries"] == fewest
    assert predicted[sol.stats["ordering"]]["table_entries"] == fewest
    for key in ("max_dependent_set", "peak_table_bytes"):
        assert sol.stats[key] == predicted[sol.stats["ordering"]][key]


def test_bfs_blows_up_on_a_star():
    star = Problem([np.zeros(10)] * 9, [(0, v) for v in range(1, 9)],
                   [np.zeros((10, 10))] * 8)
    assert dp.plan(star, "generateseq").max_dependent_set == 1
    assert dp.plan(star, "bfs").max_dependent_set == 8
    budget = 2**20  # generateseq needs ~20 KB, bfs ~1 GB
    assert dp.solve(star, ordering="generateseq", memory_budget=budget).cost == 0.0
    with pytest.raises(TooLargeError, match="bfs"):
        dp.solve(star, ordering="bfs", memory_budget=budget)


@pytest.mark.parametrize("options, named", [
    ({"ordering": "dfs"}, "unknown ordering 'dfs'; choose from auto, generateseq, bfs, min-fill"),
    ({"ordering": None}, "ordering"),
    ({"memory_budget": 0}, "memory_budget"),
    ({"memory_budget": float("nan")}, "memory_budget"),
    ({"memory_budget": "4GiB"}, "memory_budget"),
    ({"max_states": 0}, "max_states"),
    ({"max_states": 2.5}, "max_states"),
    ({"seed": -1}, "seed"),
    ({"time_limit": 0.0}, "time_limit"),
    ({"time_limit": -1}, "time_limit"),
])
def test_options_are_validated(options, named):
    problem = random_problem(4, seed=0, with_memory=True)
    with pytest.raises(OptionError, match=named):
        dp.solve(problem, **options)


def test_options_accept_integral_floats_and_infinite_budget():
    problem = random_problem(6, seed=2)
    best = dp.solve(problem).cost
    assert dp.solve(problem, max_states=1e6, memory_budget=math.inf, seed=3).cost == best


def test_time_limit():
    problem = random_problem(50, seed=4)
    with pytest.raises(TimeLimitError, match="time limit"):
        dp.solve(problem, time_limit=1e-9)


def test_infinite_costs():
    inf = math.inf
    problem = Problem([np.array([1.0, 2.0]), np.array([0.0, 0.0])], [(0, 1)],
                      [np.array([[inf, 0.0], [inf, inf]])])
    sol = dp.solve(problem)
    assert sol.choice == (0, 1) and sol.cost == 1.0
    hopeless = Problem([np.array([inf])], [], [])
    assert dp.solve(hopeless).status is Status.INFEASIBLE


def test_blocks_option_reduces_repeated_layers_to_the_same_optimum(monkeypatch):
    from pase.cost_models.paper import PaperCostModel
    from pase.registry import MODELS
    from pase.space import ConfigSpace

    monkeypatch.setattr(core, "BLOCKS_MIN_ENTRIES", 0)  # a small model, so that blocks are tried
    graph = MODELS.get("gpt2")(layers=4)
    problem = PaperCostModel().problem(graph, ConfigSpace(graph, 8))
    plain = dp.solve(problem, blocks=False)
    reduced = dp.solve(problem)
    assert "blocks_found" not in plain.stats
    assert reduced.stats["blocks_found"] >= 1 and reduced.stats["vertices_removed"] > 0
    assert reduced.cost == pytest.approx(plain.cost, rel=1e-9)
    assert problem.evaluate(reduced.choice) == reduced.cost and reduced.status is Status.OPTIMAL
    # Under a cap that does not bind, the folded optimum is the answer.
    memory = [np.ones(k) for k in problem.sizes]
    loose = Problem(problem.vertex_costs, problem.edges, problem.edge_costs, memory=memory,
                    memory_cap=float(problem.num_vertices))
    got = dp.solve(loose)
    assert got.stats["blocks_found"] >= 1 and got.stats["capped"] is False
    assert got.cost == pytest.approx(plain.cost, rel=1e-9) and loose.fits(got.choice)
    # A cap the folded optimum breaks (its own configs cost memory 1, all others 0):
    # the capped dp runs, and finds what it finds without blocks.
    memory = [(np.arange(k) == c).astype(float) for k, c in zip(problem.sizes, reduced.choice)]
    tight = Problem(problem.vertex_costs, problem.edges, problem.edge_costs, memory=memory,
                    memory_cap=float(problem.num_vertices - 1))
    got, alone = dp.solve(tight), dp.solve(tight, blocks=False)
    assert "blocks_found" not in got.stats and got.stats["capped"] is True
    assert got.cost == alone.cost and tight.fits(got.choice) and got.cost >= plain.cost


def test_small_plans_skip_blocks_and_pruning():
    problem = random_problem(6, seed=1)
    solution = dp.solve(problem)
    assert "blocks_found" not in solution.stats and solution.stats["pruned"] == 0


@pytest.mark.parametrize("seed", range(4))
def test_tiled_steps_match_row_chunks(monkeypatch, seed):
    # A step whose one row passes CHUNK_BYTES is summed in tiles of its second axis
    # (kernel.chunk_cols): the same additions, so the same tables, argmins and bytes.
    problem = random_problem(9, max_candidates=7, extra_edges=6, seed=seed, tie_prob=0.5)
    chosen = dp.plan(problem, "min-fill")
    whole = core.min_sum(problem, chosen, keep=True)
    monkeypatch.setattr("pase.solvers.dp.kernel.CHUNK_BYTES", 8 * 8)  # 8 float64 a block
    tiled_plan = dp.plan(problem, "min-fill")
    assert any(s.chunk_cols for s in tiled_plan.steps)
    tiled = core.min_sum(problem, tiled_plan, keep=True)
    assert tiled[:2] == whole[:2]
    for position, table in whole[2].items():
        assert np.array_equal(tiled[2][position], table)
    sol = dp.solve(problem, ordering="min-fill")
    assert sol.stats["peak_table_bytes_used"] == sol.stats["peak_table_bytes"]

"""The dp's plans and dry runs: hand-counted sizes, any shape, huge graphs refused fast."""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass

import numpy as np
import pytest

from pase.errors import OptionError, TooLargeError
from pase.problem import Problem
from pase.solvers import dp
from pase.solvers.dp.plan import MAX_DEPENDENT_SET
from pase.testing import random_problem
from pase.testing.random_problems import random_dag

KEYS = {"ordering", "max_dependent_set", "table_entries", "peak_table_bytes",
        "estimated_seconds", "within_memory_budget", "peak_vertex", "complete"}


@dataclass
class Shape:
    """A graph's shape with no cost arrays (what pase.costing.problem_shape gives)."""

    names: list[str]
    sizes: np.ndarray
    edges: list[tuple[int, int]]

    @property
    def num_vertices(self) -> int:
        return len(self.names)


def shape_of(problem: Problem) -> Shape:
    return Shape(list(problem.names), problem.sizes, list(problem.edges))


def all_finite(report: dict) -> bool:
    numbers = [report["vertices"], report["edges"], report["memory_budget"]] + [
        row[k] for row in report["orderings"]
        for k in ("max_dependent_set", "table_entries", "peak_table_bytes", "estimated_seconds")]
    return all(isinstance(x, (int, float)) and math.isfinite(x) for x in numbers)


def test_dry_run_of_a_path_by_hand():
    # A path of three vertices with 3 candidates: every ordering eliminates 0, 1, 2,
    # tables over D = {1}, {2}, {}: entries 3*3 + 3*3 + 3. Folds: a's edge copied and its
    # costs added (2 * 9), b's edge copied with its child and costs added (3 * 9), c's
    # costs added into its child's table (3): 48 entries.
    path = Shape(["a", "b", "c"], np.array([3, 3, 3]), [(0, 1), (1, 2)])
    report = dp.dry_run(path, memory_budget=2**20)
    assert (report["vertices"], report["edges"], report["memory_budget"]) == (3, 2, 2**20)
    assert report["auto_ordering"] == "generateseq"
    assert [r["ordering"] for r in report["orderings"]] == ["generateseq", "bfs", "min-fill"]
    for row in report["orderings"]:
        assert set(row) == KEYS
        assert row["max_dependent_set"] == 1 and row["table_entries"] == 21
        assert row["within_memory_budget"] and row["complete"]
        assert row["estimated_seconds"] == pytest.approx(
            21 / dp.DP_ENTRIES_PER_SECOND + 48 / dp.FOLD_ENTRIES_PER_SECOND, rel=1e-12)
    json.dumps(report, allow_nan=False)


def test_dry_run_needs_no_costs_and_matches_the_problem():
    problem = random_problem(40, max_candidates=6, extra_edges=10, seed=3)
    assert dp.dry_run(shape_of(problem)) == dp.dry_run(problem)
    plan = dp.plan(shape_of(problem))
    assert plan.summary() == dp.plan(problem).summary()
    assert plan.peak_bytes == dp.solve(problem).stats["peak_table_bytes_used"]


def test_dry_run_budget_and_options():
    problem = random_problem(12, max_candidates=6, extra_edges=6, seed=5)
    tight = dp.dry_run(problem, memory_budget=1000)
    assert not any(r["within_memory_budget"] for r in tight["orderings"])
    for bad in (0, -1.0, float("nan"), "big"):
        with pytest.raises(OptionError, match="memory_budget"):
            dp.dry_run(problem, memory_budget=bad)
    with pytest.raises(OptionError, match="ordering"):
        dp.plan(problem, "dfs")


def test_numbers_past_float_range_are_capped():
    # A 40-clique of 10**9 candidates: the first table has 10**(9*39) entries.
    n = 40
    clique = Shape([f"v{i}" for i in range(n)], np.full(n, 10**9),
                   [(a, b) for a in range(n) for b in range(a + 1, n)])
    report = dp.dry_run(clique)
    assert all_finite(report)
    assert not any(r["within_memory_budget"] for r in report["orderings"])
    json.dumps(report, allow_nan=False)


def test_a_plan_stops_at_a_step_too_wide_to_run():
    # A star: breadth-first puts the centre first, so every leaf is in D.
    leaves = MAX_DEPENDENT_SET + 6
    star = Shape([f"v{i}" for i in range(leaves + 1)], np.full(leaves + 1, 2),
                 [(0, v) for v in range(1, leaves + 1)])
    bfs = dp.plan(star, "bfs")
    assert not bfs.complete and len(bfs.steps) == 1
    assert bfs.max_dependent_set == leaves and bfs.steps[0].vertex == 0
    assert dp.plan(star, "generateseq").complete  # leaves first: D = {centre}
    row = {r["ordering"]: r for r in dp.dry_run(star)["orderings"]}["bfs"]
    assert not row["complete"] and not row["within_memory_budget"]
    assert row["peak_vertex"] == "v0"
    problem = Problem([np.zeros(2)] * (leaves + 1), star.edges, [np.zeros((2, 2))] * leaves)
    with pytest.raises(TooLargeError, match="'v0'"):
        dp.solve(problem, ordering="bfs", memory_budget=math.inf)


def test_dry_run_of_a_1000_op_graph_is_finite():
    # Breadth-first on a 1000-vertex random DAG once needed ~1e400 entries,
    # more than a float holds: the dry run died with an OverflowError.
    report = dp.dry_run(shape_of(random_dag(1000, 20, 400, seed=1)))
    assert all_finite(report)
    json.dumps(report, allow_nan=False)


def _huge_shape(n: int, seed: int) -> Shape:
    """A random tree plus 0.4 n extra edges over ``n`` vertices (like the ``random``
    model's ops reading one or two earlier ops), up to 20 candidates each."""
    rng = np.random.default_rng(seed)
    edges = {(int(rng.integers(0, v)), v) for v in range(1, n)}
    while len(edges) < 1.4 * (n - 1):
        u, v = sorted(rng.choice(n, size=2, replace=False).tolist())
        edges.add((u, v))
    return Shape([f"op{i}" for i in range(n)], rng.integers(1, 21, size=n), sorted(edges))


@pytest.mark.slow
def test_dry_run_of_10000_vertices_answers_in_seconds():
    shape = _huge_shape(10_000, seed=0)
    start = time.process_time()  # CPU seconds: a busy machine does not fail it
    report = dp.dry_run(shape)
    assert time.process_time() - start < 10.0
    assert all_finite(report) and report["vertices"] == 10_000
    assert not any(r["within_memory_budget"] for r in report["orderings"])
    assert all(r["peak_vertex"] in shape.names for r in report["orderings"])


def test_dp_refuses_3000_ops_within_seconds():
    problem = random_dag(3000, 8, 1200, seed=2)
    start = time.process_time()
    with pytest.raises(TooLargeError, match=r"at vertex 'v\d+'"):
        # The plan's refusal; looking for repeated blocks first (blocks=True) is
        # the fold's own time (blocks.fold).
        dp.solve(problem, blocks=False)
    assert time.process_time() - start < 5.0

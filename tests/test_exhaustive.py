import numpy as np
import pytest

from pase.errors import TooLargeError
from pase.problem import Problem, Status
from pase.solvers import exhaustive


def test_hand_solved_chain(tiny_problem):
    # Enumerated by hand (a, b, c): vertex costs + edge (a,b) + edge (b,c)
    # (0,0,0)=1+0+4+0+0=5  (0,0,1)=1+0+0+0+3=4  (0,1,0)=1+5+4=10  (0,1,1)=1+5+0=6
    # (1,0,0)=0+0+4+10=14  (1,0,1)=0+0+0+10+3=13 (1,1,0)=0+5+4=9  (1,1,1)=0+5+0=5
    sol = exhaustive.solve(tiny_problem)
    assert sol.choice == (0, 0, 1)
    assert sol.cost == 4.0
    assert sol.status is Status.OPTIMAL and sol.lower_bound == 4.0


def test_hand_solved_triangle():
    # A triangle where every vertex prefers candidate 1 alone but the edges punish
    # mixing: the optimum is all-0 (cost 3) versus all-1 (cost 0 + 3*2 = 6).
    same = np.array([[0.0, 9.0], [9.0, 2.0]])
    p = Problem([np.array([1.0, 0.0])] * 3, [(0, 1), (1, 2), (0, 2)], [same] * 3)
    sol = exhaustive.solve(p)
    assert sol.choice == (0, 0, 0) and sol.cost == 3.0


def test_ties_go_to_the_lexicographically_first_choice():
    p = Problem([np.zeros(3), np.zeros(2)], [(0, 1)], [np.zeros((3, 2))])
    assert exhaustive.solve(p).choice == (0, 0)


def test_memory_cap_filters_and_reports_infeasible():
    p = Problem([np.array([0.0, 5.0]), np.array([0.0, 5.0])], [], [],
                memory=[np.array([10.0, 1.0]), np.array([10.0, 1.0])], memory_cap=11.0)
    sol = exhaustive.solve(p)
    assert sol.choice in {(0, 1), (1, 0)} and sol.cost == 5.0
    tight = Problem(p.vertex_costs, [], [], memory=p.memory, memory_cap=1.0)
    assert exhaustive.solve(tight).status is Status.INFEASIBLE


def test_refuses_too_many_strategies():
    p = Problem([np.zeros(10)] * 8, [], [])
    with pytest.raises(TooLargeError, match="1e\\+08 strategies exceeds max_strategies=1e\\+07"):
        exhaustive.solve(p)


def test_million_strategies_in_seconds():
    import time

    rng = np.random.default_rng(0)
    p = Problem([rng.random(10) for _ in range(6)], [(i, i + 1) for i in range(5)],
                [rng.random((10, 10)) for _ in range(5)])
    start = time.process_time()  # CPU seconds: a busy machine does not fail it
    sol = exhaustive.solve(p)
    assert time.process_time() - start < 10
    assert sol.stats["strategies"] == 10**6
    assert sol.cost == pytest.approx(p.evaluate(sol.choice))


def test_time_limit_returns_the_best_strategy_seen_so_far():
    import time

    rng = np.random.default_rng(1)
    p = Problem([rng.random(10) for _ in range(12)], [(i, i + 1) for i in range(11)],
                [rng.random((10, 10)) for _ in range(11)])  # 1e12 strategies
    # The limit is wall-clock; the work done under it is CPU time, which a busy
    # machine only lowers (less work fits in 0.5 s), so this bound holds under load
    # and still fails a search that does not stop (1e12 strategies take hours).
    start = time.process_time()
    sol = exhaustive.solve(p, max_strategies=1e17, time_limit=0.5)
    assert time.process_time() - start < 0.5 * 1.1 + 2
    assert sol.status is Status.TIME_LIMIT and sol.lower_bound is None
    assert 0 < sol.stats["evaluated"] < sol.stats["strategies"] == 10**12
    assert sol.cost == pytest.approx(p.evaluate(sol.choice), rel=1e-12)
    # The strategies seen are the first ones in lexicographic order: the leading
    # vertices still hold their first candidates.
    seen = sol.stats["evaluated"]
    assert sol.choice[0] == 0 and seen <= 10**11


def test_time_limit_with_nothing_fitting_yet_has_no_choice():
    # Only the lexicographically last strategy fits the cap, so nothing fitting
    # can be seen before the limit.
    k, n = 10, 12
    memory = [np.r_[np.full(k - 1, 2.0), 1.0] for _ in range(n)]
    p = Problem([np.zeros(k)] * n, [], [], memory=memory, memory_cap=float(n))
    sol = exhaustive.solve(p, max_strategies=10**13, time_limit=0.2)
    assert sol.status is Status.TIME_LIMIT and sol.choice is None and sol.cost == np.inf


def test_batches_enumerate_in_lexicographic_order():
    import itertools

    sizes = np.array([3, 1, 4, 2, 5])
    want = list(itertools.product(*(range(k) for k in sizes)))
    for rows in (1, 2, 7, 40, 10**6):
        got = [tuple(int(c) for c in row) for batch in exhaustive._batches(sizes, rows)
               for row in batch]
        assert got == want, rows


def test_large_counts_beyond_int64_are_enumerated_lazily():
    sizes = np.array([1000] * 8)  # 1e24 strategies: more than int64 can index
    first = next(exhaustive._batches(sizes, 5000))
    assert first.shape == (5000, 8) and tuple(first[-1]) == (0,) * 6 + (4, 999)


@pytest.mark.parametrize("value, message", [
    (0, "max_strategies must be an integer >= 1, got 0"),
    (2.5, "max_strategies must be an integer >= 1, got 2.5"),
    ("many", "max_strategies must be an integer >= 1, got 'many'"),
])
def test_max_strategies_is_checked(tiny_problem, value, message):
    from pase.errors import OptionError

    with pytest.raises(OptionError, match=message):
        exhaustive.solve(tiny_problem, max_strategies=value)


def test_float_max_strategies_is_a_count(tiny_problem):
    assert exhaustive.solve(tiny_problem, max_strategies=1e17).cost == 4.0

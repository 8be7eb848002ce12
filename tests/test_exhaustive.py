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
    start = time.perf_counter()
    sol = exhaustive.solve(p)
    assert time.perf_counter() - start < 10
    assert sol.stats["strategies"] == 10**6
    assert sol.cost == pytest.approx(p.evaluate(sol.choice))

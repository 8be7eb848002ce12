"""The Python API under the same rules as the command: typed options, checked claims, strict JSON."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

import pase
from pase.api import build_problem, evaluate, run_solver
from pase.claims import ClaimError
from pase.errors import OptionError, StrategyError
from pase.options import coerce, coerce_options, parse_bytes
from pase.problem import Problem, Solution, Status
from pase.registry import SOLVERS
from pase.strategy import json_text

# -- option coercion by annotation ----------------------------------------------------

@pytest.mark.parametrize("types, value, expected", [
    (("int",), "12", 12),
    (("int",), "1e17", 10**17),
    (("int",), 3.0, 3),
    (("int",), np.int64(7), 7),
    (("float",), "2.5", 2.5),
    (("float",), 4, 4.0),
    (("bool",), "true", True),
    (("bool",), "No", False),
    (("bool",), 0, False),
    (("str",), "min-fill", "min-fill"),
    (("int", "None"), "none", None),
    (("int", "None"), None, None),
    (("tuple[int, ...]", "None"), "[1, 2]", [1, 2]),  # other types: JSON text, unchecked
    (("str", "Cluster"), "123", "123"),  # text stays text where str is allowed
])
def test_coerce_accepts(types, value, expected):
    got = coerce(value, types, "option x")
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("types, value, message", [
    (("int",), "abc", "option x expects an integer, got 'abc'"),
    (("int",), 1.5, "option x expects an integer, got 1.5"),
    (("int",), True, "option x expects an integer, got True"),
    (("int",), None, "option x expects an integer, got None"),
    (("float",), "abc", "option x expects a number, got 'abc'"),
    (("float",), "nan", "option x must be a finite number"),
    (("float",), math.inf, "option x must be a finite number"),
    (("bool",), "maybe", "option x expects true or false"),
    (("str",), 5, "option x expects text, got 5"),
])
def test_coerce_refuses_with_one_line(types, value, message):
    with pytest.raises(OptionError) as exc:
        coerce(value, types, "option x")
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_byte_sizes_for_budget_and_bytes_options():
    def solve(problem, *, memory_budget: float = 1.0, peak_bytes: float = 1.0, ratio: float = 1.0):
        pass

    got = coerce_options(solve, {"memory_budget": "1GiB", "peak_bytes": "2 MiB"}, "solver 's'")
    assert got == {"memory_budget": 2.0**30, "peak_bytes": 2.0 * 2**20}
    with pytest.raises(OptionError, match="option ratio expects a number, got '1GiB'"):
        coerce_options(solve, {"ratio": "1GiB"}, "solver 's'")


def test_parse_bytes_refuses_non_finite_and_non_positive():
    for text in ("1e400", "inf", float("inf"), 0, "-1GiB", "lots"):
        with pytest.raises(OptionError):
            parse_bytes(text)


def test_python_callers_get_the_same_checks():
    problem = build_problem("chain", 4).problem
    with pytest.raises(OptionError, match="option improve expects an integer, got 'abc'"):
        run_solver("greedy", problem, improve="abc")
    with pytest.raises(OptionError, match="seed must be an integer >= 0"):
        run_solver("greedy", problem, seed=-1)
    for bad in (0, -3, math.nan, math.inf, "5"):
        with pytest.raises(OptionError, match="time_limit must be a finite number of seconds > 0"):
            run_solver("greedy", problem, time_limit=bad)
    assert run_solver("greedy", problem, seed=np.int64(3), improve=2.0).choice is not None
    with pytest.raises(OptionError, match="model 'random' option size expects an integer"):
        pase.solve("random", 4, model_options={"size": "many"})


# -- run_solver checks the solver's claim -----------------------------------------------

def _problem(scale: float = 1.0, cap: float | None = None) -> Problem:
    """Two vertices, two candidates; the optimum (0, 0) costs 3 * scale (by hand)."""
    vertex = [np.array([1.0, 2.0]) * scale, np.array([2.0, 0.0]) * scale]
    edge = [np.array([[0.0, 9.0], [9.0, 0.0]]) * scale]
    memory = [np.array([1.0, 5.0]), np.array([1.0, 5.0])]
    return Problem(vertex, [(0, 1)], edge, memory=memory, memory_cap=cap)


@pytest.fixture
def fake_solver():
    """Register a solver that returns whatever the test puts in ``answer``."""
    answer: dict = {}

    @SOLVERS.register("test-fake", "returns a canned answer")
    def solve(problem, *, time_limit=None, seed=None):
        return answer["solution"]

    yield answer
    SOLVERS.remove("test-fake")


@pytest.mark.parametrize("solution, message", [
    ("not a solution", "returned a str, not a pase.problem.Solution"),
    (Solution((0, 0), 3.0, "optimal", "f"), "returned status 'optimal', not a pase.problem.Status"),
    (Solution(None, math.inf, Status.FEASIBLE, "f"), "returned no choice with status feasible"),
    (Solution((0, 2), 3.0, Status.FEASIBLE, "f"), "returned an invalid choice"),
    (Solution((0, 0), 2.0, Status.FEASIBLE, "f"), "reported cost 2.0 but its choice evaluates to 3.0"),
    (Solution((0, 0), 3.0, Status.OPTIMAL, "f", lower_bound=2.0),
     "claims optimal at cost 3.0 but its lower bound is 2.0"),
    (Solution((1, 1), 2.0, Status.FEASIBLE, "f", lower_bound=2.5), "reported lower bound 2.5 above its cost 2.0"),
    (Solution((0, 0), 3.0, Status.FEASIBLE, "f", lower_bound=math.nan),
     "reported lower bound nan, not a number"),
])
def test_broken_claims_are_refused(fake_solver, solution, message):
    fake_solver["solution"] = solution
    with pytest.raises(ClaimError, match="solver 'test-fake' " + message.replace("(", r"\(")):
        run_solver("test-fake", _problem())


def test_a_choice_over_the_cap_is_refused(fake_solver):
    fake_solver["solution"] = Solution((1, 1), 2.0, Status.FEASIBLE, "f")  # memory 10 > cap 4
    with pytest.raises(ClaimError, match="over the memory cap"):
        run_solver("test-fake", _problem(cap=4.0))


def test_costs_are_compared_at_the_problems_own_scale(fake_solver):
    # Costs of ~1e-9 s: an error of 1e-15 is a relative 3e-7, far above COST_RTOL = 1e-9.
    fake_solver["solution"] = Solution((0, 0), 3e-9 + 1e-15, Status.FEASIBLE, "f")
    with pytest.raises(ClaimError, match="reported cost"):
        run_solver("test-fake", _problem(scale=1e-9))
    # Rounding noise (a relative 1e-13) passes, at 1e-9 and at 1e15.
    for scale in (1e-9, 1e15):
        fake_solver["solution"] = Solution((0, 0), 3 * scale * (1 + 1e-13), Status.OPTIMAL, "f",
                                           lower_bound=3 * scale)
        assert run_solver("test-fake", _problem(scale=scale)).solver == "test-fake"


def test_a_big_m_entry_the_choice_does_not_pay_excuses_nothing(fake_solver):
    # One entry of 1e15 elsewhere in the Problem: the answer (1, 1) pays 2 + 0 + 0 = 2
    # (by hand), so a bound of 1.9 is 5% off, not 1e-16 of the largest entry.
    p = _problem()
    p = Problem(p.vertex_costs, p.edges, [np.array([[0.0, 1e15], [9.0, 0.0]])])
    fake_solver["solution"] = Solution((1, 1), 2.0, Status.OPTIMAL, "f", lower_bound=1.9)
    with pytest.raises(ClaimError, match="claims optimal at cost 2.0 but its lower bound is 1.9"):
        run_solver("test-fake", p)
    fake_solver["solution"] = Solution((1, 1), 2.0 + 1e-6, Status.FEASIBLE, "f")
    with pytest.raises(ClaimError, match="reported cost"):
        run_solver("test-fake", p)
    # Rounding noise at the answer's own scale still passes.
    fake_solver["solution"] = Solution((1, 1), 2.0 * (1 + 1e-13), Status.OPTIMAL, "f",
                                       lower_bound=2.0)
    assert run_solver("test-fake", p).status is Status.OPTIMAL


def test_an_optimal_answer_without_a_bound_gets_its_cost(fake_solver):
    fake_solver["solution"] = Solution((0, 0), 3.0, Status.OPTIMAL, "f")
    assert run_solver("test-fake", _problem()).lower_bound == 3.0


# -- evaluate accepts what solve gives ---------------------------------------------------

def test_evaluate_takes_a_solve_output_a_strategy_or_numpy_factors():
    solved = pase.solve("alexnet", devices=8)
    built = build_problem("alexnet", 8)
    index = {op.name: i for i, op in enumerate(built.graph.ops)}
    choice = [built.space.index_of(op, solved.configs[op]) for op in index]
    expected = built.problem.evaluate(choice)  # the Problem's own sum, not Strategy's
    as_numpy = {op: {d: np.int64(f) for d, f in dims.items()} for op, dims in solved.configs.items()}
    for given in (json.loads(solved.to_json()), solved, as_numpy):
        assert evaluate("alexnet", given, 8).total_cost == pytest.approx(expected, rel=1e-12)


def test_evaluate_reports_memory_against_the_cap():
    s = evaluate("alexnet", {"conv1": {"b": 8}}, 8, "alpha-beta", cluster="gtx1080ti", memory_cap="1GiB")
    assert s.meta["memory_cap_bytes"] == 2**30
    assert s.meta["fits_memory_cap"] is (s.meta["memory_bytes"] <= 2**30)
    uncapped = evaluate("alexnet", {"conv1": {"b": 8}}, 8, "alpha-beta", cluster="gtx1080ti",
                        memory_cap="none")
    assert uncapped.meta["memory_cap_bytes"] is None and uncapped.meta["fits_memory_cap"] is None


def test_unknown_ops_raise_strategy_errors_listing_known_ones():
    s = pase.solve("alexnet", devices=8)
    for mapping in (s.configs, s.op_costs):
        with pytest.raises(StrategyError, match=r"has no op 'nope'; ops: conv1, pool1, .*\(14 in all\)"):
            mapping["nope"]
        with pytest.raises(KeyError):  # still a KeyError for code that catches one
            mapping["nope"]
    with pytest.raises(StrategyError):
        s.split("nope")


# -- JSON is strict ----------------------------------------------------------------------

def test_infeasible_strategy_json_has_nulls_and_json_text_refuses_infinity():
    s = pase.solve("chain", 4, cost_model="alpha-beta", cluster="dgx-a100", memory_cap="1KiB")
    data = json.loads(s.to_json(), parse_constant=lambda name: pytest.fail(f"JSON holds {name}"))
    assert data["status"] == "infeasible" and data["total_cost"] is None
    with pytest.raises(ValueError):
        json_text({"x": math.inf})


def test_build_budget_reaches_the_cost_model():
    from pase.errors import TooLargeError

    with pytest.raises(TooLargeError, match="build budget"):
        pase.solve("chain", 4, build_budget="1KiB")  # chain's arrays take 2.66 KiB
    assert pase.solve("chain", 4, build_budget="1MiB").total_cost > 0

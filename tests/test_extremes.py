"""Issue 27, "no internal error on bad input": numbers that overflow, odd arguments, odd exits.

Each test names the defect of the issue it reproduces. Bad input is exit 2 and one line
``pase: error: ...`` on the command line, a :class:`pase.errors.PaseError` in Python.
"""
from __future__ import annotations

import pytest

from pase.api import build_problem, run_solver
from pase.cli import main
from pase.errors import PaseError, UnknownNameError


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pase: error: "), err
    return lines[0][len("pase: error: "):]


# -- defect 6: exhaustive's refusal formatted an int above 1e308 with :.3g --------------------
def test_exhaustive_refusal_of_an_astronomical_count_is_one_line(capsys):
    assert main(["solve", "transformer", "-p", "8", "--solver", "exhaustive"]) == 2
    line = one_error_line(capsys)
    assert "internal error" not in line
    assert "exhaustive search over 5.89e+313 strategies exceeds max_strategies=1e+07" in line


def test_exhaustive_counts_are_formatted_without_floats():
    from pase.solvers.exhaustive import _count

    assert [_count(n) for n in (7, 999_999, 1_234_567, 9_995_000, 10**400)] == \
        ["7", "999999", "1.23e+06", "1e+07", "1e+400"]
    assert _count(7**20000) == "9.14e+16901"  # over the 4300 digits str() converts


def test_compare_row_of_exhaustive_is_refused_not_an_error(capsys):
    assert main(["compare", "transformer", "-p", "8", "--solvers", "exhaustive,greedy"]) == 0
    out = capsys.readouterr().out
    assert "OverflowError" not in out and "5.89e+313 strategies" in out


# -- defect 12: --solver '' silently ran dp ---------------------------------------------------
@pytest.mark.parametrize("command", ["solve", "simulate"])
def test_empty_solver_name_is_unknown(capsys, command):
    extra = ["--cluster", "dgx-a100"] if command == "simulate" else []
    assert main([command, "mlp", "-p", "4", "--solver", "", *extra]) == 2
    assert one_error_line(capsys).startswith("unknown solver ''; known: auto, data-parallel, dp, ")


# -- defect 11: a model function calling sys.exit(0) ended pase with 0, no output, no file ----
@pytest.mark.parametrize("body, expected", [
    ("def f():\n    sys.exit(0)\n", r"f\(\) in .*bad\.py called sys\.exit\(0\); it must return"),
    ("def f():\n    raise SystemExit\n", r"f\(\) in .*bad\.py called sys\.exit\(\)"),
    ("sys.exit(3)\ndef f():\n    pass\n", r"bad\.py called sys\.exit\(3\) while being imported"),
])
def test_a_model_function_that_exits_is_an_import_error(capsys, tmp_path, body, expected):
    pytest.importorskip("torch")
    import re

    (tmp_path / "bad.py").write_text("import sys\n" + body)
    out = tmp_path / "out.json"
    assert main(["import", f"{tmp_path}/bad.py:f", "-o", str(out)]) == 2
    assert re.search(expected, one_error_line(capsys))
    assert not out.exists()


# -- defect 9: run_solver('dp', 'problem') raised AttributeError ------------------------------
def test_run_solver_checks_its_problem():
    with pytest.raises(PaseError, match=r"run_solver\('dp', \.\.\.\) needs a pase\.problem\.Problem, "
                                        r"got str 'problem'"):
        run_solver("dp", "problem")
    with pytest.raises(PaseError, match=r"got Built .*; pass its \.problem$"):
        run_solver("dp", build_problem("mlp", 4))


@pytest.mark.parametrize("name", [["dp"], None, 3])
def test_run_solver_checks_its_solver_name(name):
    with pytest.raises(UnknownNameError, match="a solver name must be a string"):
        run_solver(name, build_problem("mlp", 4).problem)


# -- defect 7: an attribute pw of 1e308 (finite) broke inspect's JSON and made solve "infeasible"
def _chain_with_pw(tmp_path, pw: float):
    import json

    from pase.registry import MODELS

    data = MODELS.get("chain")().to_dict()
    next(o for o in data["ops"] if o["name"] == "fc2")["attrs"]["pw"] = pw
    path = tmp_path / f"pw-{pw:g}.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize("argv", [
    ["inspect", "-p", "4", "--format", "json"],
    ["inspect", "-p", "4"],
])
def test_an_overflowing_attribute_is_refused_by_inspect(capsys, tmp_path, argv):
    graph = _chain_with_pw(tmp_path, 1e308)
    assert main([argv[0], graph, *argv[1:]]) == 2
    assert one_error_line(capsys) == ("op 'fc2' (FC): its FLOP count overflows float64; its sizes "
                                      "or attributes are too large (pw=1e+308)")


@pytest.mark.parametrize("pw, expected", [
    (1e308, r"cost model '(paper|alpha-beta)': op 'fc2' has an infinite cost"),
    # only the unsplit config overflows: the solver must not quietly pick a split one
    (1e305, r"cost model '(paper|alpha-beta)': op 'fc2' has an infinite cost"),
])
@pytest.mark.parametrize("costs", [[], ["--cost-model", "alpha-beta", "--cluster", "dgx-a100",
                                        "--memory-cap", "none"]])
def test_an_overflowing_attribute_is_refused_by_solve_not_infeasible(capsys, tmp_path, pw,
                                                                     expected, costs):
    import re

    assert main(["solve", _chain_with_pw(tmp_path, pw), "-p", "4", *costs]) == 2
    assert re.search(expected, one_error_line(capsys))


def test_an_uncapped_problem_whose_costs_overflow_is_refused_naming_the_vertex():
    """(+inf entries still forbid candidates: a vertex of them all makes it infeasible.)"""
    import numpy as np

    from pase.problem import Problem

    with pytest.raises(PaseError, match=r"the costs overflow float64 when a strategy adds them up: "
                                        r"with the largest of vertex 'b' \(1e\+308\)"):
        Problem([np.full(2, 1e308), np.full(3, 1e308)], [], [], names=["a", "b"])
    with pytest.raises(PaseError, match=r"memory footprints overflow .* of vertex 'b'"):
        Problem([np.ones(2), np.ones(2)], [], [], names=["a", "b"],
                memory=[np.full(2, 1e308), np.full(2, 1e308)])
    with pytest.raises(PaseError, match=r"largest of edge 'a -> b'"):
        Problem([np.full(2, 1e308), np.ones(2)], [(0, 1)], [np.full((2, 2), 1e308)],
                names=["a", "b"])
    # a forbidden (+inf) candidate next to finite ones is still fine, and so is 1e308 alone
    assert Problem([np.array([1.0, np.inf]), np.array([1e308])], [], []).evaluate([0, 0]) > 1e307


# -- defect 9 and item 4: every solver safe at extreme scales -----------------------------------
def _available(name: str) -> bool:
    from pase.registry import SOLVERS

    ok = SOLVERS.entry(name).info.get("available")
    return ok is None or bool(ok())


ALL_SOLVERS = ["dp", "exhaustive", "greedy", "mcmc", "ilp-highs", "ilp-cbc", "ilp-cpsat"]


@pytest.mark.parametrize("solver", ALL_SOLVERS)
@pytest.mark.parametrize("cost_scale, memory_scale", [(1e-300, None), (1e300, None),
                                                       (1.0, 1e-300), (1e-300, 1e300),
                                                       (1.0, 1e306)])
def test_every_solver_answers_or_refuses_at_extreme_scales(solver, cost_scale, memory_scale):
    """ilp-cpsat raised OverflowError at 1e-300 and a math domain error with memory near
    1e308; an answer must now come back (claims checked by run_solver) or a PaseError."""
    from pase.testing.random_problems import add_memory, cap_memory, random_dag

    if not _available(solver):
        pytest.skip(f"{solver}: backend missing")
    problem = random_dag(5, 3, 2, seed=1, scale=cost_scale)
    if memory_scale is not None:
        problem = cap_memory(add_memory(problem, 1, memory_scale), 0.4)
    try:
        solution = run_solver(solver, problem, time_limit=20, seed=0)
    except PaseError:
        return
    assert solution.choice is not None and problem.fits(solution.choice)


@pytest.mark.parametrize("solver", ALL_SOLVERS)
def test_costs_that_overflow_when_summed_are_refused_before_any_solver(solver):
    """Costs near 1e308 made greedy, mcmc and the ILPs raise 'intermediate overflow in fsum'."""
    import numpy as np

    from pase.problem import Problem

    costs = [np.array([1e308, 9e307]), np.array([9e307, 1e308])]
    with pytest.raises(PaseError, match="overflow float64 when a strategy adds them up"):
        run_solver(solver, Problem(costs, [(0, 1)], [np.array([[0.0, 1e307], [1e307, 0.0]])]))


@pytest.mark.parametrize("solver", ALL_SOLVERS)
def test_the_extreme_scale_check_of_the_battery_passes(solver):
    from pase.testing.checks import extreme_scales
    from pase.testing.runner import solver_spec

    if not _available(solver):
        pytest.skip(f"{solver}: backend missing")
    assert extreme_scales(solver_spec(solver)) == []

"""The outputs a sweep stores: the compute / communication split of a strategy's cost,
and solver options in ``compare``."""
from __future__ import annotations

import json

import pytest

import pase
from pase.cli import main
from pase.errors import OptionError, UnknownNameError


@pytest.mark.parametrize("model, p, solver", [("alexnet", 8, "dp"), ("rnnlm", 4, "greedy"),
                                               ("inception_v3", 4, "data-parallel")])
def test_compute_and_communication_are_the_vertex_and_edge_sums(model, p, solver):
    strategy = pase.solve(model, p, solver)
    built = pase.build_problem(model, p)
    choice = pase.api.choice_of(built, strategy.configs)
    problem = built.problem
    vertex = sum(float(problem.vertex_costs[v][c]) for v, c in enumerate(choice))
    edge = sum(float(m[choice[u], choice[v]]) for (u, v), m in zip(problem.edges, problem.edge_costs))
    assert strategy.compute_cost == pytest.approx(vertex, rel=1e-12)
    assert strategy.communication_cost == pytest.approx(edge, rel=1e-12)
    assert strategy.compute_cost + strategy.communication_cost == strategy.total_cost


def test_one_device_has_no_communication():
    strategy = pase.solve("alexnet", 1)
    assert strategy.communication_cost == 0
    assert strategy.compute_cost == strategy.total_cost


def test_solve_and_evaluate_json_carry_the_split(tmp_path, capsys):
    assert main(["solve", "alexnet", "-p", "8", "--format", "json"]) == 0
    solved = json.loads(capsys.readouterr().out)
    assert solved["compute_cost"] + solved["communication_cost"] == solved["total_cost"]
    assert solved["compute_cost"] == pytest.approx(sum(solved["op_costs"].values()), rel=1e-12)
    assert solved["communication_cost"] == pytest.approx(
        sum(e["cost"] for e in solved["edge_costs"]), rel=1e-12)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(solved))
    assert main(["evaluate", "alexnet", "-p", "8", "--strategy", str(path), "--format",
                 "json"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["compute_cost"] == solved["compute_cost"]
    assert evaluated["communication_cost"] == solved["communication_cost"]


def test_an_infeasible_answer_has_no_split():
    strategy = pase.solve("gpt2", 8, cost_model="alpha-beta", memory_cap="1MiB", layers=1)
    data = strategy.to_dict()
    assert data["status"] == "infeasible"
    assert data["total_cost"] is None and data["compute_cost"] is None
    assert data["communication_cost"] is None


def test_compare_passes_solver_options():
    few = pase.compare("alexnet", 8, ["dp", "mcmc"], solver_options={"mcmc": {"iterations": 1}},
                       seed=0)
    many = pase.compare("alexnet", 8, ["dp", "mcmc"],
                        solver_options={"mcmc": {"iterations": 2000}}, seed=0)
    mcmc_few, mcmc_many = few[1], many[1]
    assert mcmc_few.total_cost >= mcmc_many.total_cost >= few[0].total_cost
    rows = pase.compare("alexnet", 8, ["dp"], solver_options={"dp": {"ordering": "min-fill"}})
    assert rows[0].status == "optimal" and rows[0].error is None


@pytest.mark.parametrize("options, error, message", [
    ({"nope": {}}, UnknownNameError, "unknown solver 'nope'"),
    ({"greedy": {"improve": 1}}, OptionError, "'greedy', which is not compared"),
    ({"dp": {"nope": 1}}, OptionError, "solver 'dp' has no option 'nope'"),
    ({"mcmc": {"iterations": "many"}}, OptionError, "iterations"),
])
def test_compare_refuses_bad_solver_options_before_any_work(options, error, message):
    with pytest.raises(error, match=message):
        pase.compare("alexnet", 8, ["dp", "mcmc"], solver_options=options)


def test_compare_command_takes_solver_options(capsys):
    assert main(["compare", "alexnet", "-p", "8", "--solvers", "dp,mcmc", "--format", "json",
                 "--option", "mcmc:iterations=1", "--option", "dp:ordering=min-fill"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["status"] for r in rows] == ["optimal", "feasible"]
    for bad, message in [("mcmc:nope=1", "has no option 'nope'"),
                         ("foo:x=1", "unknown solver 'foo'"),
                         ("greedy:improve=1", "not compared"),
                         ("dp=1", "SOLVER:KEY=VALUE"),
                         ("mcmc:iterations=1", "given twice")]:
        extra = ["--option", "mcmc:iterations=2"] if "twice" in message else []
        code = main(["compare", "alexnet", "-p", "8", "--solvers", "dp,mcmc",
                     "--option", bad, *extra])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("pase: error: ") and err.count("\n") == 1, err
        assert message in err


def test_sweeps_import_neither_pandas_nor_dask():
    import subprocess
    import sys

    code = ("import sys, pase, pase.sweeps, pase.cli.sweeping\n"
            "heavy = [m for m in ('pandas', 'dask', 'distributed', 'tqdm', 'matplotlib') "
            "if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

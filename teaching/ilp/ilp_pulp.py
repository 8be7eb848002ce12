"""Assignment 3: the strategy search as an integer linear program, with PuLP and CBC.

Fill in the three functions; the statement is ``teaching/ilp/README.md``.
Grade with ``pytest teaching/ilp`` from the repository root.
"""
from __future__ import annotations

import warnings

import numpy as np  # noqa: F401  (you will want it)
import pulp  # pip install -e ".[ilp]"

from pase.errors import SolverUnavailableError, TimeLimitError  # noqa: F401
from pase.problem import Problem, Solution, Status  # noqa: F401
from pase.registry import SOLVERS


def cbc(time_limit: float | None) -> pulp.LpSolver:
    """CBC through PuLP, quiet, with a time limit (given: not part of the exercise).

    A ``cbc`` on the PATH if PuLP finds one, else the binary bundled with PuLP.
    """
    for name in ("COIN_CMD", "PULP_CBC_CMD"):
        make = getattr(pulp, name, None)
        if make is not None:
            with warnings.catch_warnings():  # PuLP 3.3+ deprecates the bundled binary
                warnings.simplefilter("ignore", DeprecationWarning)
                solver = make(msg=False, timeLimit=time_limit)
            if solver.available():
                return solver
    raise SolverUnavailableError('no CBC found: pip install -e ".[ilp]"')


def objective_scale(problem: Problem) -> float:
    """Part 1: the largest finite |cost| entry of the Problem (1.0 when none is above 0)."""
    raise NotImplementedError(
        "Part 1: the max of abs(a[np.isfinite(a)]).max() over problem.vertex_costs and "
        "problem.edge_costs, or 1.0")


def build_model(problem: Problem, scale: float):
    """Part 2: ``(model, x, y)``: the one-hot ILP, its vertex and its edge variables."""
    raise NotImplementedError(
        "Part 2: pulp.LpProblem(name, pulp.LpMinimize); x[v][i] = pulp.LpVariable(..., "
        "cat='Binary'); y[e][i][j] = pulp.LpVariable(..., 0, 1); add sum(x[v]) == 1, the edge "
        "marginals, the objective divided by scale, and the memory cap if any")


@SOLVERS.register("student-ilp", "assignment 3: one-hot ILP with PuLP and CBC",
                  exact=True, scope="general", memory_cap=True)
def solve(problem: Problem, *, time_limit: float | None = None,
          seed: int | None = None) -> Solution:
    """Part 3: build the model, run CBC, read the choice and say what was proved."""
    raise NotImplementedError(
        "Part 3: model.solve(cbc(time_limit)); map "
        "model.sol_status / model.status to OPTIMAL, TIME_LIMIT or INFEASIBLE")

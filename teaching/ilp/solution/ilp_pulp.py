"""Assignment 3, a reference solution: the one-hot ILP with marginal edge constraints."""
from __future__ import annotations

import warnings

import numpy as np
import pulp

from pase.errors import SolverUnavailableError, TimeLimitError
from pase.problem import Problem, Solution, Status
from pase.registry import SOLVERS

NAME = "student-ilp"


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


# The least share of the largest coefficient an answer's own terms may have for
# CBC's "optimal" (tolerances about 1e-7 of the scaled objective) to be trusted.
RESOLVABLE = 1e-2


def objective_scale(problem: Problem) -> float:
    """Part 1: the largest finite |cost| entry of the Problem (1.0 when none is above 0)."""
    top = 0.0
    for a in problem.vertex_costs + problem.edge_costs:
        finite = np.abs(a[np.isfinite(a)])
        if finite.size:
            top = max(top, float(finite.max()))
    return top if top > 0 else 1.0


def build_model(problem: Problem, scale: float):
    """Part 2: ``(model, x, y)``: the one-hot ILP, its vertex and its edge variables."""
    model = pulp.LpProblem("strategy", pulp.LpMinimize)
    x = [[pulp.LpVariable(f"x_{v}_{i}", cat="Binary") for i in range(int(k))]
         for v, k in enumerate(problem.sizes)]
    terms = []
    for v, costs in enumerate(problem.vertex_costs):
        model += pulp.lpSum(x[v]) == 1, f"one_{v}"
        terms += [(x[v][i], c / scale) for i, c in enumerate(costs) if c != 0]
    y = []
    for e, ((u, v), matrix) in enumerate(zip(problem.edges, problem.edge_costs)):
        ku, kv = matrix.shape
        ye = [[pulp.LpVariable(f"y_{e}_{i}_{j}", 0, 1) for j in range(kv)] for i in range(ku)]
        for i in range(ku):
            model += pulp.lpSum(ye[i]) == x[u][i], f"row_{e}_{i}"
        for j in range(kv):
            model += pulp.lpSum(ye[i][j] for i in range(ku)) == x[v][j], f"col_{e}_{j}"
        terms += [(ye[i][j], matrix[i, j] / scale)
                  for i in range(ku) for j in range(kv) if matrix[i, j] != 0]
        y.append(ye)
    model += pulp.LpAffineExpression(terms)
    if problem.memory_cap is not None:
        norm = max(abs(problem.memory_cap), 1e-300)
        model += pulp.lpSum(float(m) / norm * x[v][i] for v, mem in enumerate(problem.memory)
                            for i, m in enumerate(mem)) <= problem.memory_cap / norm, "memory"
    return model, x, y


@SOLVERS.register(NAME, "assignment 3: one-hot ILP with PuLP and CBC",
                  exact=True, scope="general", memory_cap=True)
def solve(problem: Problem, *, time_limit: float | None = None,
          seed: int | None = None) -> Solution:
    """Part 3: build the model, run CBC, read the choice and say what was proved."""
    model, x, _ = build_model(problem, objective_scale(problem))
    model.solve(cbc(time_limit))
    if model.status == pulp.LpStatusInfeasible:
        return Solution(None, float("inf"), Status.INFEASIBLE, NAME)
    if model.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        raise TimeLimitError(f"{NAME} found no strategy within time_limit={time_limit} s")
    choice = tuple(int(np.argmax([var.value() or 0.0 for var in xv])) for xv in x)
    cost = problem.evaluate(choice)
    # CBC works to absolute tolerances on the scaled objective: when the terms this
    # answer pays are tiny next to the largest coefficient (a big-M entry), its
    # "optimal" proves nothing at the Problem's own scale, so claim less.
    resolved = problem.term_scale(choice) >= RESOLVABLE * objective_scale(problem)
    if model.sol_status == pulp.LpSolutionOptimal and resolved:
        return Solution(choice, cost, Status.OPTIMAL, NAME, lower_bound=cost)
    if model.sol_status == pulp.LpSolutionOptimal:
        return Solution(choice, cost, Status.FEASIBLE, NAME)
    return Solution(choice, cost, Status.TIME_LIMIT, NAME)

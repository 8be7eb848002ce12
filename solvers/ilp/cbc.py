"""``ilp-cbc``: the formulation through PuLP to COIN-OR CBC.

The slow but dependable backend: PuLP builds Python objects per variable and
writes an MPS file (coefficients to 13 significant digits) for the CBC binary.
CBC is chosen through PuLP's own lookup: a ``cbc`` on the PATH (``COIN_CMD``)
if there is one, else the binary bundled with PuLP (``PULP_CBC_CMD``, which
PuLP 3 marks deprecated; its warning is silenced because pase, not the user,
chose it).

Under a memory cap CBC's preprocessing is switched off: the bundled CBC 2.10.3
proved wrong optima with it (see ``_run``).

PuLP reports a time-limited run as status "Optimal" with solution status
"integer feasible"; only ``sol_status == LpSolutionOptimal`` counts as a proof.
PuLP gives no bound, so the "Lower bound" CBC prints when it stops early is read
from its log, less the printing and MPS rounding errors; without it the bound
is None unless the answer is proven optimal.
"""
from __future__ import annotations

import decimal
import functools
import math
import os
import re
import tempfile
import time
import warnings
from types import ModuleType

import numpy as np

from pase.errors import OptionError, PaseError, SolverUnavailableError
from pase.problem import Problem, Solution
from pase.registry import SOLVERS
from pase.solvers.ilp.formulation import (
    DEFAULT_MAX_VARIABLES,
    INSTALL_HINT,
    BackendResult,
    Formulation,
    float_memory_row,
    group_max,
    solve_formulation,
    unavailable,
)

NAME = "ilp-cbc"
# PuLP writes MPS coefficients in this format (pulp/mps_lp.py).
MPS_FORMAT = "{:.12e}"
_LOWER_BOUND = re.compile(r"^Lower bound:\s+(\S+)", re.MULTILINE)


def _import() -> ModuleType:
    import pulp
    return pulp


def _cbc(pulp: ModuleType, **kwargs):
    """A CBC command through PuLP's lookup, or None when PuLP finds no binary."""
    for name in ("COIN_CMD", "PULP_CBC_CMD"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                solver = pulp.getSolver(name, **kwargs)
            except pulp.PulpSolverError:  # a PuLP without this solver class
                continue
        if solver.available():
            return solver
    return None


def available() -> bool:
    try:
        return _cbc(_import(), msg=False) is not None
    except ImportError:
        return False


@SOLVERS.register(NAME, "exact ILP on COIN-OR CBC through PuLP (slowest to build)",
                  exact=True, available=available, extra="ilp")
def solve(problem: Problem, *, time_limit: float | None = None, seed: int | None = None,
          threads: int | None = None, warm_start: bool = True,
          max_variables: int = DEFAULT_MAX_VARIABLES) -> Solution:
    """Solve exactly with CBC (``seed`` is ignored: CBC is deterministic here).

    Args:
        time_limit: seconds for build plus search; the best choice so far is
            returned with status TIME_LIMIT unless optimality was proven.
        threads: CBC's ``-threads`` (None: CBC's default).
        warm_start: give CBC the greedy choice as a MIP start.
    """
    try:
        pulp = _import()
    except ImportError as err:
        raise unavailable(NAME, "pulp", err) from err
    if _cbc(pulp, msg=False) is None:
        raise SolverUnavailableError(
            f"solver {NAME!r}: PuLP found no CBC binary (neither 'cbc' on the PATH nor "
            f"PuLP's bundled one); install one with: pip install \"pulp[cbc]\", or {INSTALL_HINT}")
    if threads is not None and (int(threads) != threads or threads < 1):
        raise OptionError(f"threads must be an integer >= 1 or None, got {threads!r}")
    backend = functools.partial(_run, pulp=pulp, threads=threads)
    return solve_formulation(problem, NAME, backend, time_limit=time_limit,
                             warm_start=warm_start, max_variables=max_variables)


def _run(form: Formulation, *, conservative: bool, start: np.ndarray | None,
         time_limit: float | None, pulp: ModuleType, threads: int | None) -> BackendResult:
    t0 = time.perf_counter()
    if time_limit is not None and time_limit <= 0:  # CBC has no "no time at all"
        return BackendResult(None, False, False, True, None, "not started: no time left")
    prob = pulp.LpProblem("pase", pulp.LpMinimize)
    new_var = getattr(prob, "add_variable", None) or pulp.LpVariable  # PuLP 4 API if present
    z = [new_var(f"z{c}", 0, 1, pulp.LpBinary if c < form.num_x else pulp.LpContinuous)
         for c in range(form.num_cols)]
    prob.setObjective(pulp.LpAffineExpression(zip(z, form.cost.tolist())))
    order = np.argsort(form.row, kind="stable")
    ends = np.cumsum(np.bincount(form.row, minlength=form.num_rows)).tolist()
    cols, vals = form.col[order].tolist(), form.val[order].tolist()
    lo = 0
    for r, hi in enumerate(ends):
        # One-hot rows (= 1) and linearisation rows (= 0); see formulation.py.
        expr = pulp.LpAffineExpression([(z[c], a) for c, a in zip(cols[lo:hi], vals[lo:hi])])
        prob.addConstraint(pulp.LpConstraint(expr, pulp.LpConstraintEQ, f"r{r}",
                                             float(form.rhs[r])))
        lo = hi
    if form.memory is not None:
        # Memory: sum memory * x <= cap, always normalised here: with raw byte
        # counts (1e8..1e10) CBC proved wrong optima (5 in 90 on random Problems),
        # and 13 MPS digits would round larger ones.
        coef, cap = float_memory_row(form, conservative, raw_integers=False)
        expr = pulp.LpAffineExpression(zip(z[:form.num_x], coef.tolist()))
        prob.addConstraint(pulp.LpConstraint(expr, pulp.LpConstraintLE, "memory", cap))
    if start is not None:
        for var, value in zip(z, start.tolist()):
            var.setInitialValue(value)

    if time_limit is not None:  # what is left after building (PuLP's MPS writing not counted)
        time_limit = time_limit - (time.perf_counter() - t0)
        if time_limit <= 0:
            return BackendResult(None, False, False, True, None, "not started: no time left")
    with tempfile.TemporaryDirectory(prefix="pase-cbc-") as tmp:
        log_path = os.path.join(tmp, "cbc.log")
        # With the memory row, CBC 2.10.3's preprocessing (PuLP's bundled binary)
        # proved wrong optima on random byte-sized Problems; without it, none in 800.
        solver = _cbc(pulp, msg=False, timeLimit=time_limit, threads=threads, gapRel=0,
                      gapAbs=0, warmStart=start is not None, logPath=log_path,
                      options=["preprocess off"] if form.memory is not None else None)
        if solver is None:
            raise PaseError("PuLP's CBC binary disappeared during the solve")
        prob.solve(solver)
        with open(log_path) as f:
            log = f.read()
    name = f"{pulp.LpStatus[prob.status]} / {pulp.LpSolution[prob.sol_status]}"
    if prob.status == pulp.LpStatusInfeasible:
        return BackendResult(None, True, True, False, None, name)
    has_solution = prob.sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
    proven = prob.sol_status == pulp.LpSolutionOptimal
    # PuLP knows nothing of why CBC stopped early; with no other limit set, it is time.
    time_limited = not proven and time_limit is not None
    choice, bound = None, None
    mps_error = _mps_error(form)
    if has_solution:
        values = np.array([v.varValue or 0.0 for v in z])
        choice = form.choice_from_x(values[:form.num_x])
        if proven:  # CBC's optimum of the MPS-rounded model, off by <= mps_error each way
            bound = float(form.cost @ values) - 2 * mps_error
    if bound is None:
        bound = _logged_bound(log, mps_error)
    return BackendResult(choice, proven, False, time_limited, bound, name)


def _written(value: float) -> float:
    """``value`` as CBC reads it back from PuLP's MPS file."""
    return float(MPS_FORMAT.format(value))


def _mps_error(form: Formulation) -> float:
    """Most the MPS file's rounded objective can differ from ``cost @ z`` for any choice."""
    written = np.array([_written(c) for c in form.cost.tolist()])
    return math.fsum(group_max(np.abs(written - form.cost), form.group, form.num_groups))


def _logged_bound(log: str, mps_error: float) -> float | None:
    """CBC's printed "Lower bound", less half a unit of its last printed digit."""
    match = _LOWER_BOUND.search(log)
    if not match:
        return None
    try:
        printed = decimal.Decimal(match.group(1))
    except decimal.InvalidOperation:
        return None
    if not printed.is_finite():
        return None
    return float(printed) - 0.5 * 10.0 ** printed.as_tuple().exponent - mps_error

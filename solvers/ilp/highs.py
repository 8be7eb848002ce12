"""``ilp-highs``: the formulation passed to HiGHS as matrices through highspy.

The model goes in as one ``HighsLp`` (column costs and bounds, row bounds, a
row-wise sparse matrix, integrality): on a 50-vertex, up-to-50-candidate random
Problem (34,541 columns) that takes 0.01 s, against 0.27 s for PuLP's objects
and MPS file. The ``x`` columns are integer, the ``y`` columns
continuous (integral ``x`` forces them to 0/1; see formulation.py).

HiGHS works in floats with tolerances (feasibility 1e-7 / 1e-6 for integers):
its dual bound is as rigorous as those tolerances. Integral memory (bytes)
is given so the tolerance cannot admit an extra byte (``float_memory_row``);
if a rounded answer still overflows the cap, the driver re-solves with the
cap lowered by ``MEMORY_MARGIN``.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
import time
from collections.abc import Iterator
from types import ModuleType

import numpy as np

from pase.errors import OptionError, PaseError
from pase.problem import Problem, Solution
from pase.registry import SOLVERS
from pase.solvers.ilp.formulation import (
    DEFAULT_MAX_VARIABLES,
    BackendResult,
    Formulation,
    float_memory_row,
    importable,
    solve_formulation,
    unavailable,
)

NAME = "ilp-highs"


def _import() -> ModuleType:
    import highspy
    return highspy


def available() -> bool:
    return importable(_import)


@SOLVERS.register(NAME, "exact ILP on HiGHS (highspy, matrix form)", exact=True,
                  available=available, extra="ilp")
def solve(problem: Problem, *, time_limit: float | None = None, seed: int | None = None,
          threads: int | None = None, mip_rel_gap: float = 0.0,
          warm_start: bool = True,
          max_variables: int = DEFAULT_MAX_VARIABLES) -> Solution:
    """Solve exactly with HiGHS's MIP solver.

    Args:
        time_limit: seconds for build plus search; the best choice so far is
            returned with status TIME_LIMIT unless optimality was proven.
        seed: HiGHS's ``random_seed``.
        threads: HiGHS's ``threads``. HiGHS sizes one global thread pool at the
            first solve in a process; a different value later rebuilds that
            pool, so do not change it while another thread runs HiGHS.
        mip_rel_gap: stop when the relative gap falls below this (0 = prove).
        warm_start: give HiGHS the greedy choice as a starting solution.
    """
    try:
        highspy = _import()
    except ImportError as err:
        raise unavailable(NAME, "highspy", err) from err
    if threads is not None and (int(threads) != threads or threads < 1):
        raise OptionError(f"threads must be an integer >= 1 or None, got {threads!r}")
    if not mip_rel_gap >= 0:
        raise OptionError(f"mip_rel_gap must be >= 0, got {mip_rel_gap!r}")
    backend = functools.partial(_run, highspy=highspy, threads=threads, seed=seed,
                                mip_rel_gap=float(mip_rel_gap))
    return solve_formulation(problem, NAME, backend, time_limit=time_limit,
                             warm_start=warm_start, max_variables=max_variables)


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """Silence file descriptor 1: HiGHS prints a banner on its first construction
    in a process, before any option can turn output off, and it would corrupt
    machine-readable output such as ``pase solve --format json``."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _run(form: Formulation, *, conservative: bool, start: np.ndarray | None,
         time_limit: float | None, highspy: ModuleType, threads: int | None,
         seed: int | None, mip_rel_gap: float) -> BackendResult:
    t0 = time.perf_counter()
    with _quiet_stdout():
        h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("mip_rel_gap", mip_rel_gap)
    if mip_rel_gap == 0:
        h.setOptionValue("mip_abs_gap", 0.0)  # the 1e-6 default is not scale-free
    if threads is not None:
        h.setOptionValue("threads", int(threads))
    if seed is not None:
        h.setOptionValue("random_seed", int(seed) % 2**31)

    row, col, val = form.row, form.col, form.val
    lower, upper = form.rhs, form.rhs  # equality rows; see formulation.py
    num_rows = form.num_rows
    if form.memory is not None:
        # Memory: sum memory * x <= cap (see float_memory_row for the scaling).
        coef, cap = float_memory_row(form, conservative)
        row = np.concatenate([row, np.full(form.num_x, num_rows)])
        col = np.concatenate([col, np.arange(form.num_x)])
        val = np.concatenate([val, coef])
        lower, upper = np.append(lower, -math.inf), np.append(upper, cap)
        num_rows += 1
    order = np.argsort(row, kind="stable")
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = form.num_cols, num_rows
    lp.col_cost_ = form.cost
    lp.col_lower_ = np.zeros(form.num_cols)
    lp.col_upper_ = np.ones(form.num_cols)
    lp.row_lower_, lp.row_upper_ = lower, upper
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = form.num_cols, num_rows
    lp.a_matrix_.start_ = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=num_rows))])
    lp.a_matrix_.index_ = col[order]
    lp.a_matrix_.value_ = val[order]
    lp.integrality_ = ([highspy.HighsVarType.kInteger] * form.num_x
                       + [highspy.HighsVarType.kContinuous] * (form.num_cols - form.num_x))
    if h.passModel(lp) == highspy.HighsStatus.kError:
        raise PaseError("HiGHS rejected the model")
    built = time.perf_counter()
    if time_limit is not None:  # what is left after building the model
        h.setOptionValue("time_limit", max(0.0, time_limit - (built - t0)))
    status, info, x = _solve(h, highspy, form, start)
    if x is not None and start is not None and not _consistent(form, info, x):
        # HiGHS 1.16 quirk: when presolve solves a warm-started MIP outright it can
        # return the user's start as the solution while reporting the optimum's
        # objective. Solve again without the start.
        h.clearSolver()
        if time_limit is not None:
            h.setOptionValue("time_limit", max(0.0, time_limit - (time.perf_counter() - t0)))
        status, info, x = _solve(h, highspy, form, None)
    name = h.modelStatusToString(status)
    extra = {"highs_model_seconds": built - t0, "highs_run_seconds": time.perf_counter() - built,
             "highs_nodes": int(info.mip_node_count)}
    ms = highspy.HighsModelStatus
    if status in (ms.kModelError, ms.kLoadError, ms.kSolveError, ms.kPresolveError,
                  ms.kPostsolveError, ms.kNotset):
        raise PaseError(f"HiGHS failed: {name}")
    if status == ms.kInfeasible:
        return BackendResult(None, True, True, False, None, name, extra)
    choice = None if x is None else form.choice_from_x(x)
    # A solution whose objective disagrees with HiGHS's own report proves nothing.
    proven = status == ms.kOptimal and x is not None and _consistent(form, info, x)
    bound = float(info.mip_dual_bound)
    return BackendResult(choice, proven, False, status == ms.kTimeLimit,
                         bound if math.isfinite(bound) else None, name, extra)


def _solve(h, highspy: ModuleType, form: Formulation, start: np.ndarray | None):
    """Run HiGHS; the model status, info and the x values (None without a solution)."""
    if start is not None:
        sol = highspy.HighsSolution()
        sol.col_value = start.tolist()
        h.setSolution(sol)
    failed = h.run() == highspy.HighsStatus.kError
    if failed and h.getModelStatus() == highspy.HighsModelStatus.kNotset:
        # HiGHS fixes its global thread pool at the first solve in a process and
        # refuses a different ``threads`` later; rebuild the pool and retry once.
        highspy.Highs.resetGlobalScheduler(True)
        h.run()
    info = h.getInfo()
    if info.primal_solution_status != 2:  # not kSolutionStatusFeasible
        return h.getModelStatus(), info, None
    return h.getModelStatus(), info, np.asarray(h.getSolution().col_value, dtype=float)


def _consistent(form: Formulation, info, x: np.ndarray) -> bool:
    """Does the solution's objective match the one HiGHS reports for it?"""
    claimed = float(info.objective_function_value)
    scale = max(abs(claimed), float(form.cost.max(initial=0.0)))
    return abs(float(form.cost @ x) - claimed) <= 1e-9 * scale

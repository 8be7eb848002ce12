"""``ilp-highs``: the formulation passed to HiGHS as matrices through highspy.

The model goes in as one ``HighsLp`` (column costs and bounds, row bounds, a
row-wise sparse matrix, integrality): on a 50-vertex, up-to-50-candidate random
Problem (34,541 columns) that takes 0.01 s, against 0.27 s for PuLP's objects
and MPS file. The ``x`` columns are integer, the ``y`` columns
continuous (integral ``x`` forces them to 0/1; see formulation.py).

HiGHS works in floats with absolute tolerances, so costs and memory are scaled
first (``scaling.py``) and the gaps set to zero; its dual bound, less its
pruning tolerance and its reduced-cost tolerance per vertex and edge, is mapped
back to the Problem's scale.

HiGHS looks at neither its time limit nor an interrupt request while it
presolves a large model (after ``cancelSolve`` it went on for 5-7 s on the
Transformer at p = 8 with a warm start and no time limit), so the search runs in
a forked child process (``limits.run_forked``), under ``limits.run_stoppable``
there: past the deadline HiGHS is asked to stop (``cancelSolve``, through
highspy's user-interrupt callbacks) and is given up on a second later, the child
sending back what it has; Ctrl-C kills the child at once. HiGHS must not be left
running in a thread of this process: coming back into Python while the
interpreter shut down, it made the C++ runtime abort the process after the
answer was printed ("terminate called without an active exception", exit 134).
Where ``os.fork`` is missing, HiGHS runs in a thread of this process.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
from collections.abc import Iterator
from types import ModuleType, SimpleNamespace

import numpy as np

from pase.errors import OptionError, PaseError, check_float, check_int
from pase.problem import Problem, Solution
from pase.registry import SOLVERS
from pase.solvers.ilp.driver import (
    DEFAULT_MAX_VARIABLES,
    BackendResult,
    abandoned,
    check_options,
    importable,
    not_started,
    solve_formulation,
    unavailable,
)
from pase.solvers.ilp.formulation import Formulation
from pase.solvers.ilp.limits import Deadline, can_fork, run_forked, run_stoppable
from pase.solvers.ilp.scaling import FloatModel, float_model, true_bound

NAME = "ilp-highs"
# Integrality and row tolerance. HiGHS's defaults (1e-6, 1e-7) let x be fractional
# by that much, and the y columns follow: a "solution" 3e-8 cheaper than any
# integral one made the proven bound too weak to certify at 1e-9 (seen on a
# random Problem with a tight memory cap).
FEASIBILITY_TOLERANCE = 1e-9
# Reduced-cost tolerance: HiGHS's smallest allowed value.
DUAL_TOLERANCE = 1e-10


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
        threads: HiGHS's ``threads`` (>= 1; None: HiGHS's default). HiGHS sizes
            one global thread pool at the first solve in a process; a different
            value later rebuilds that pool, so do not change it while another
            thread runs HiGHS.
        mip_rel_gap: stop when the relative gap falls below this, in [0, 1)
            (0 = prove optimality). A positive gap gives status FEASIBLE.
        warm_start: give HiGHS the greedy choice as a starting solution.
        max_variables: refuse larger models (TooLargeError).
    """
    max_variables = check_options(time_limit, seed, warm_start, max_variables)
    if threads is not None:
        threads = check_int("threads", threads, 1)
    gap = check_float("mip_rel_gap", mip_rel_gap, 0.0)
    if gap >= 1:
        raise OptionError(f"mip_rel_gap must be in [0, 1), got {mip_rel_gap!r}")
    try:
        highspy = _import()
    except ImportError as err:
        raise unavailable(NAME, "highspy", err) from err
    backend = functools.partial(_run, highspy=highspy, threads=threads, seed=seed,
                                mip_rel_gap=gap)
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
         deadline: Deadline, highspy: ModuleType, threads: int | None,
         seed: int | None, mip_rel_gap: float) -> BackendResult:
    began = deadline.elapsed()
    model = float_model(form, conservative)
    with _quiet_stdout():
        h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("mip_rel_gap", mip_rel_gap)
    h.setOptionValue("mip_abs_gap", 0.0)  # absolute gaps are not scale-free
    for option in ("mip_feasibility_tolerance", "primal_feasibility_tolerance"):
        h.setOptionValue(option, FEASIBILITY_TOLERANCE)
    # The bound below is lowered by this tolerance per vertex and edge; HiGHS's
    # default (1e-7) made that margin too wide to certify optima whose terms are
    # small next to the largest coefficient (2-layer zoo models under alpha-beta).
    h.setOptionValue("dual_feasibility_tolerance", DUAL_TOLERANCE)
    if threads is not None:
        h.setOptionValue("threads", threads)
    if seed is not None:
        h.setOptionValue("random_seed", int(seed) % 2**31)
    deadline.check("building the HiGHS model")
    if h.passModel(_lp(highspy, form, model)) == highspy.HighsStatus.kError:
        raise PaseError("HiGHS rejected the model")
    built = deadline.elapsed() - began
    deadline.check("building the HiGHS model")
    stop = _stopper(h)
    outcome = _solve(h, highspy, form, start, deadline, stop)
    if outcome is None:
        return abandoned()
    status, info, x = outcome
    if x is not None and start is not None and not _consistent(model, info, x):
        # HiGHS 1.16 quirk: when presolve solves a warm-started MIP outright it can
        # return the user's start as the solution while reporting the optimum's
        # objective. Solve again without the start.
        h.clearSolver()
        outcome = _solve(h, highspy, form, None, deadline, stop)
        if outcome is None:
            return abandoned()
        status, info, x = outcome
    name = h.modelStatusToString(status)
    extra = {"highs_model_seconds": built, "highs_nodes": int(info.mip_node_count)}
    ms = highspy.HighsModelStatus
    if status in (ms.kModelError, ms.kLoadError, ms.kSolveError, ms.kPresolveError,
                  ms.kPostsolveError):
        raise PaseError(f"HiGHS failed: {name}")
    if status == ms.kNotset and x is None:
        return not_started(extra)
    if status == ms.kInfeasible:
        return BackendResult(None, True, True, False, None, name, extra)
    choice = None if x is None else form.choice_from_x(x)
    # A solution whose objective disagrees with HiGHS's own report proves nothing.
    proven = status == ms.kOptimal and x is not None and _consistent(model, info, x)
    # HiGHS prunes nodes within its MIP feasibility tolerance, and an LP counts as
    # optimal once no reduced cost is below -dual_feasibility_tolerance: as every
    # solution sets one column per vertex and per edge to 1 (the rest 0), its dual
    # bound may be that much too high per group. Small next to coefficients near
    # 2**20; it is what keeps the bound valid next to a big-M entry, which squeezes
    # the other coefficients below the tolerance.
    tolerance = (_option(h, "mip_feasibility_tolerance")
                 + _option(h, "dual_feasibility_tolerance") * form.num_groups)
    bound = true_bound(model, float(info.mip_dual_bound), tolerance)
    stopped = status in (ms.kTimeLimit, ms.kInterrupt)
    return BackendResult(choice, proven, False, stopped, bound, name, extra)


def _lp(highspy: ModuleType, form: Formulation, model: FloatModel):
    """The HighsLp: equality rows, then the memory row when there is one."""
    row, col, val = form.row, form.col, form.val
    lower, upper = form.rhs, form.rhs  # equality rows; see formulation.py
    num_rows = form.num_rows
    if model.memory is not None:
        row = np.concatenate([row, np.full(form.num_x, num_rows)])
        col = np.concatenate([col, np.arange(form.num_x)])
        val = np.concatenate([val, model.memory])
        lower, upper = np.append(lower, -math.inf), np.append(upper, model.memory_rhs)
        num_rows += 1
    order = np.argsort(row, kind="stable")
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = form.num_cols, num_rows
    lp.col_cost_ = model.cost
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
    return lp


def _option(h, name: str) -> float:
    """A numeric option's value (highspy returns it bare or as ``(status, value)``)."""
    value = h.getOptionValue(name)
    return float(value[-1] if isinstance(value, tuple) else value)


def _stopper(h):
    """A thread-safe "stop now" for a running solve (highspy >= 1.8), else a no-op."""
    if not hasattr(h, "cancelSolve") or not hasattr(h, "HandleUserInterrupt"):
        return lambda: None
    h.HandleUserInterrupt = True  # subscribes the callbacks that honour cancelSolve()
    return h.cancelSolve


def _solve(h, highspy: ModuleType, form: Formulation, start: np.ndarray | None,
           deadline: Deadline, stop):
    """Run HiGHS under the watchdog: (model status, info, x or None), or None if abandoned.

    In a forked child where the platform can fork and the model is large enough to
    outlast the watchdog (:data:`FORK_COLUMNS`), so that such a HiGHS never runs in a
    thread of this process; ``h`` here is left as it was. A smaller model stops well
    within the second the watchdog waits, and a fork would cost it 30-40 ms.
    """
    if not can_fork() or form.num_cols < FORK_COLUMNS:
        return _solve_here(h, highspy, start, deadline, stop)

    def in_child():
        outcome = _solve_here(h, highspy, start, deadline, stop)
        if outcome is None:
            return None
        status, info, x = outcome  # the HighsInfo does not pickle: what is used of it
        return int(status), SimpleNamespace(**{k: getattr(info, k) for k in _INFO}), x

    outcome, gave_up = run_forked(in_child, deadline)
    if gave_up or outcome is None:
        return None
    status, info, x = outcome
    return highspy.HighsModelStatus(status), info, x


# Columns from which HiGHS searches in a child process: the Transformer at p = 8 (350,053
# columns) presolved for about 0.3 s without looking at its interrupt flag, and was
# abandoned in the tests that made the abort certain; a tiny Problem (a few thousand
# columns) answers in milliseconds.
FORK_COLUMNS = 100_000

# The HighsInfo fields read after a solve.
_INFO = ("primal_solution_status", "mip_node_count", "mip_dual_bound",
         "objective_function_value")


def _solve_here(h, highspy: ModuleType, start: np.ndarray | None, deadline: Deadline, stop):
    """:func:`_solve` in this process (HiGHS in a worker thread)."""
    remaining = deadline.remaining()
    if remaining is not None:
        h.setOptionValue("time_limit", remaining)
    if start is not None:
        sol = highspy.HighsSolution()
        sol.col_value = start.tolist()
        h.setSolution(sol)

    def run():
        failed = h.run() == highspy.HighsStatus.kError
        if failed and h.getModelStatus() == highspy.HighsModelStatus.kNotset:
            # HiGHS fixes its global thread pool at the first solve in a process and
            # refuses a different ``threads`` later; rebuild the pool and retry once.
            highspy.Highs.resetGlobalScheduler(True)
            h.run()

    _, gave_up = run_stoppable(run, stop, deadline)
    if gave_up:
        return None
    info = h.getInfo()
    if info.primal_solution_status != 2:  # not kSolutionStatusFeasible
        return h.getModelStatus(), info, None
    return h.getModelStatus(), info, np.asarray(h.getSolution().col_value, dtype=float)


def _consistent(model: FloatModel, info, x: np.ndarray) -> bool:
    """Does the solution's objective match the one HiGHS reports for it?"""
    claimed = float(info.objective_function_value)
    scale = max(abs(claimed), float(model.cost.max(initial=0.0)))
    return abs(float(model.cost @ x) - claimed) <= 1e-9 * scale

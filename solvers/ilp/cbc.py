"""``ilp-cbc``: the formulation solved by the COIN-OR CBC binary.

PuLP is used only to find the binary: a ``cbc`` on the PATH (``COIN_CMD``) if
there is one, else the one bundled with PuLP (``PULP_CBC_CMD``, which PuLP 3
marks deprecated; its warning is silenced because pase, not the user, chose it).
pase writes the model itself (``lpfile.py``) into a private temporary directory
and runs CBC in its own process group (``limits.run_process``): Ctrl-C, SIGTERM,
SIGHUP, an error or an overrun deadline kill CBC and the directory is removed, where PuLP
left CBC running and hundreds of MB of files behind.

CBC's ``-sec`` limit is honoured only during branch and bound (a 10 s limit ran
for minutes on a large root LP), so past the deadline CBC gets SIGINT, then
SIGKILL; without a solution file the greedy choice is returned (TIME_LIMIT).

Costs and memory are scaled first (``scaling.py``), the gaps are zero and the
cutoff increment is :data:`INCREMENT`; a proven answer's bound is its own
objective less that increment, an unfinished one's is the "Lower bound" CBC
logs. Under a memory cap CBC's preprocessing is switched off: the bundled CBC
2.10.3 proved wrong optima with it (none in 800 random Problems without it).
"""
from __future__ import annotations

import functools
import os
import warnings
from types import ModuleType

import numpy as np

from pase import cleanup
from pase.errors import SolverUnavailableError, check_int
from pase.problem import Problem, Solution
from pase.registry import SOLVERS
from pase.solvers.ilp import lpfile
from pase.solvers.ilp.driver import (
    DEFAULT_MAX_VARIABLES,
    INSTALL_HINT,
    BackendResult,
    abandoned,
    check_options,
    not_started,
    solve_formulation,
    unavailable,
)
from pase.solvers.ilp.formulation import Formulation
from pase.solvers.ilp.limits import Deadline, run_process
from pase.solvers.ilp.scaling import float_model, true_bound

NAME = "ilp-cbc"
# Less time left than this and CBC is not started ("-sec 0.000" would be its limit).
MIN_SECONDS = 0.001
# CBC prunes nodes that cannot beat the incumbent by this much (scaled objective
# units, largest coefficient ~2**20): a proven optimum is within it of the best.
INCREMENT = 1e-6
# Integrality and row tolerance (CBC's defaults: 1e-7): a slightly fractional x lets
# the y columns undercut every integral solution, weakening the proven bound.
FEASIBILITY_TOLERANCE = 1e-9
# How far (relative to the largest coefficient) CBC's reported objective may be from
# the re-evaluated one before its optimality claim is disbelieved.
OBJECTIVE_AGREEMENT = 1e-7


def _import() -> ModuleType:
    import pulp
    return pulp


def _cbc_path(pulp: ModuleType) -> str | None:
    """The CBC binary PuLP would run, or None when PuLP finds none."""
    for name in ("COIN_CMD", "PULP_CBC_CMD"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                solver = pulp.getSolver(name, msg=False)
            except pulp.PulpSolverError:  # a PuLP without this solver class
                continue
        if solver.available():
            return solver.path
    return None


def available() -> bool:
    try:
        return _cbc_path(_import()) is not None
    except ImportError:
        return False


@SOLVERS.register(NAME, "exact ILP on the COIN-OR CBC binary (found through PuLP)",
                  exact=True, available=available, extra="ilp")
def solve(problem: Problem, *, time_limit: float | None = None, seed: int | None = None,
          threads: int | None = None, warm_start: bool = True,
          max_variables: int = DEFAULT_MAX_VARIABLES) -> Solution:
    """Solve exactly with CBC (``seed`` is ignored: CBC is deterministic here).

    Args:
        time_limit: seconds for build plus search; the best choice so far is
            returned with status TIME_LIMIT unless optimality was proven.
        threads: CBC's ``-threads`` (>= 1; None: CBC's default).
        warm_start: give CBC the greedy choice as a MIP start.
        max_variables: refuse larger models (TooLargeError).
    """
    max_variables = check_options(time_limit, seed, warm_start, max_variables)
    if threads is not None:
        threads = check_int("threads", threads, 1)
    try:
        pulp = _import()
    except ImportError as err:
        raise unavailable(NAME, "pulp", err) from err
    path = _cbc_path(pulp)
    if path is None:
        raise SolverUnavailableError(
            f"solver {NAME!r}: PuLP found no CBC binary (neither 'cbc' on the PATH nor "
            f"PuLP's bundled one); install one with: pip install \"pulp[cbc]\", or {INSTALL_HINT}")
    backend = functools.partial(_run, path=path, threads=threads)
    return solve_formulation(problem, NAME, backend, time_limit=time_limit,
                             warm_start=warm_start, max_variables=max_variables)


def _run(form: Formulation, *, conservative: bool, start: np.ndarray | None,
         deadline: Deadline, path: str, threads: int | None) -> BackendResult:
    began = deadline.elapsed()
    model = float_model(form, conservative)
    with cleanup.temp_dir("pase-cbc-") as tmp:  # removed however the command ends
        files = {k: os.path.join(tmp, f"pase.{k}") for k in ("lp", "mst", "sol", "log")}
        lpfile.write_lp(files["lp"], form, model, deadline)
        args = [path, files["lp"]]
        if start is not None:
            lpfile.write_start(files["mst"], form, start)
            args += ["-mips", files["mst"]]
        extra = {"cbc_model_seconds": deadline.elapsed() - began}
        remaining = deadline.remaining()
        if remaining is not None:
            if remaining < MIN_SECONDS:
                return not_started(extra)
            args += ["-sec", f"{remaining:.3f}", "-timeMode", "elapsed"]
        args += ["-allowableGap", "0", "-ratioGap", "0", "-increment", repr(INCREMENT),
                 "-integerTolerance", repr(FEASIBILITY_TOLERANCE),
                 "-primalTolerance", repr(FEASIBILITY_TOLERANCE)]
        if threads is not None:
            args += ["-threads", str(threads)]
        if model.memory is not None:
            # With the memory row, CBC 2.10.3's preprocessing (PuLP's bundled binary)
            # proved wrong optima on random byte-sized Problems; without it, none in 800.
            args += ["-preprocess", "off"]
        args += ["-solve", "-solution", files["sol"]]
        code, stopped = run_process(args, deadline, log_path=files["log"], cwd=tmp)
        head, values = lpfile.read_solution(files["sol"], form.num_cols)
        with open(files["log"], errors="replace") as f:
            log = f.read()
    if code is None and values is None:
        return abandoned(extra)
    if head.startswith(("Infeasible", "Integer infeasible")):
        return BackendResult(None, True, True, False, None, head, extra)
    choice, bound, proven = None, None, False
    if values is not None:
        choice = form.choice_from_x(values[:form.num_x])
        ours = float(model.cost @ form.columns_for(choice))
        theirs = lpfile.reported_objective(head)
        # CBC prints its objective to 8 decimals; x may be fractional by 1e-9.
        agree = theirs is not None and abs(theirs - ours) <= OBJECTIVE_AGREEMENT * max(
            1.0, abs(ours), float(model.cost.max(initial=0.0)))
        extra["cbc_objective"] = theirs
        # A solution whose objective disagrees with CBC's own report proves nothing.
        proven = head.startswith("Optimal") and agree
        if proven:  # CBC proved that nothing beats its objective by INCREMENT
            bound = true_bound(model, min(ours, theirs - 0.5e-8), INCREMENT)
    if not proven:
        logged = lpfile.logged_bound(log)
        bound = None if logged is None else true_bound(model, logged, INCREMENT)
    time_limited = not proven and (stopped or remaining is not None)
    status = head
    if values is None:  # say why: CBC's own error line, if it printed one
        errors = [line for line in log.splitlines() if "ERROR" in line]
        status = f"{head}; cbc exit {code}" + (f": {errors[0].strip()}" if errors else "")
    return BackendResult(choice, proven, False, time_limited, bound, status, extra)

"""``ilp-cpsat``: the formulation on OR-Tools CP-SAT.

CP-SAT needs integer coefficients. Objective coefficients (all >= 0 once the
formulation moved each vertex's and edge's minimum into a constant) are scaled
by a power of two ``s`` so the largest, ``c_max``, maps into (2**39, 2**40]
(~1.1e12), or lower if the sum of all of them would pass 2**60 (int64
headroom), and rounded. Scaling by a power of two is exact, so each rounding
error is known exactly; it is at most ``0.5 / s < 2**-40 * c_max`` (~9.1e-13
relative to the largest coefficient). Exactly one column per vertex and per
edge is 1, so any choice's objective is off by at most ``E / s``, ``E`` the sum
over vertices and edges of their largest rounding error: at most
``(|V| + |E|) * 2**-40 * c_max``, and 0 for integer costs up to 2**40.

* the lower bound is ``offset + (CP-SAT's best bound - E) / s``, valid for the
  true float costs (up to the float rounding of the costs themselves);
* the choice is re-evaluated with the float costs, and the driver reports
  OPTIMAL only when that cost is within ``OPTIMAL_RTOL`` (1e-9) of the bound,
  relative to the summed magnitudes of the terms the choice pays (never to
  ``c_max``). The proven scaled optimum is within ``2 E / s`` of the true
  optimum, so this fails when ``c_max`` dwarfs the answer's terms (a big-M
  entry 1e9 times the rest rounds them to a few units): the answer is then
  FEASIBLE with its bound and gap.

CP-SAT 9.15 runs with ``presolve_inclusion_work_limit = 0``: its at-most-one +
linear inclusion presolve certified wrong optima on these models with a memory
row (google/or-tools#5293).

Memory coefficients are used as they are when they are integers (bytes)
summing below 2**53. Otherwise they are scaled by a power of two, exactly if
the integers stay below 2**40, else to ~2**40 and rounded; the row is first made
looser (coefficients floored, cap ceiled and widened by the float-summation
error of ``Problem.fits``) so infeasibility and bounds stay valid; if the
answer then overflows the true cap, the driver re-solves with the safe rounding.

The model is written straight into CP-SAT's proto (see ``_fill``), and the
search runs under ``limits.run_stoppable``: CP-SAT does not look at its time
limit while it loads a large model (15-25 s for the Transformer at p = 16), so
the deadline and Ctrl-C call ``stop_search`` and, if CP-SAT does not return
within a second, the caller goes on without it.
"""
from __future__ import annotations

import functools
import math
from types import ModuleType

import numpy as np

from pase.errors import OptionError, PaseError, check_int
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
from pase.solvers.ilp.formulation import Formulation, group_max
from pase.solvers.ilp.limits import Deadline, run_stoppable

NAME = "ilp-cpsat"
# Largest scaled objective coefficient, and cap on their sum (int64 headroom).
OBJECTIVE_TARGET = 2.0 ** 40
OBJECTIVE_SUM_LIMIT = 2.0 ** 60
# Memory that is not integral is scaled by the power of two that makes every
# value an integer if the total then stays below MEMORY_EXACT_LIMIT; otherwise
# the total is scaled to MEMORY_TARGET and rounded (2**-40 relative is plenty).
MEMORY_EXACT_LIMIT = 2.0 ** 40
# Scales are powers of two up to 2**1023 (math.ldexp(1.0, 1024) overflows): costs of
# 1e-300 then reach ~2**26, coarser than 2**40 but with the rounding bound kept honest.
MAX_EXPONENT = 1023
FLOAT_MAX = float(np.finfo(np.float64).max)
MEMORY_TARGET = 2.0 ** 40
# Measured on a 2-core machine: 2 workers found optima they could not prove in
# 120 s, 8 workers proved them in about a second (portfolio diversity wins).
DEFAULT_WORKERS = 8
# CP-SAT 9.x refuses more ("parameter 'num_workers' should be in [0,10000]").
MAX_WORKERS = 10_000


def _import() -> ModuleType:
    from ortools.sat.python import cp_model
    return cp_model


def available() -> bool:
    return importable(_import)


@SOLVERS.register(NAME, "exact ILP on OR-Tools CP-SAT (integer-scaled costs)", exact=True,
                  available=available, extra="ilp")
def solve(problem: Problem, *, time_limit: float | None = None, seed: int | None = None,
          num_workers: int = DEFAULT_WORKERS, warm_start: bool = True,
          max_variables: int = DEFAULT_MAX_VARIABLES) -> Solution:
    """Solve exactly with CP-SAT (see the module docstring for the precision).

    Args:
        time_limit: seconds for build plus search; the best choice so far is
            returned with status TIME_LIMIT unless optimality was proven.
        seed: CP-SAT's ``random_seed``; with a seed the workers interleave
            deterministically, so the same call returns the same choice (several
            times slower than the default parallel portfolio, which may return
            any of several equally good choices).
        num_workers: CP-SAT search workers (portfolio), 1..10000 (CP-SAT's limit);
            8 proves far more than 2 even on 2 cores.
        warm_start: hint the greedy choice to CP-SAT.
        max_variables: refuse larger models (TooLargeError).
    """
    max_variables = check_options(time_limit, seed, warm_start, max_variables)
    num_workers = check_int("num_workers", num_workers, 1)
    if num_workers > MAX_WORKERS:
        raise OptionError(f"num_workers must be in 1..{MAX_WORKERS} (CP-SAT's limit), "
                          f"got {num_workers}")
    try:
        cp_model = _import()
    except ImportError as err:
        raise unavailable(NAME, "ortools", err) from err
    backend = functools.partial(_run, cp_model=cp_model, num_workers=num_workers, seed=seed)
    return solve_formulation(problem, NAME, backend, time_limit=time_limit,
                             warm_start=warm_start, max_variables=max_variables)


def scale_objective(form: Formulation) -> tuple[np.ndarray, float, float]:
    """Integer coefficients, the scale ``s`` and the rounding error bound ``E``."""
    cost = form.cost
    top = float(cost.max()) if cost.size else 0.0
    if top <= 0:
        return np.zeros(cost.size, dtype=np.int64), 1.0, 0.0
    # Logarithms, not quotients: OBJECTIVE_TARGET / 1e-300 overflows, and so may the sum.
    k = min(math.floor(math.log2(OBJECTIVE_TARGET) - math.log2(top)),
            math.floor(math.log2(OBJECTIVE_SUM_LIMIT) - _log2_sum(cost)), MAX_EXPONENT)
    scaled = np.ldexp(cost, k)
    coef = np.round(scaled)
    error = math.fsum(group_max(np.abs(coef - scaled), form.group, form.num_groups))
    return coef.astype(np.int64), math.ldexp(1.0, k), error


def scale_memory(form: Formulation, conservative: bool) -> tuple[np.ndarray, int]:
    """Integer memory coefficients and cap (see the module docstring)."""
    mem, cap = form.memory, form.memory_cap
    log_total = max(_log2_sum(mem), math.log2(abs(cap)) if cap else -math.inf)
    total = 2.0 ** log_total if log_total < 1024 else FLOAT_MAX  # memory near 1e308 adds to inf
    integral = bool(np.all(mem == np.round(mem))) and cap == math.floor(cap)
    if integral and total < 2.0 ** 53:
        return mem.astype(np.int64), int(cap)  # exact, and so are Problem.fits' float sums
    # Problem.fits sums floats left to right: within this of the exact sum.
    slack = form.num_vertices * np.finfo(float).eps * total
    cap = cap - slack if conservative else cap + slack
    k = _exact_exponent(np.append(mem, cap))
    if k is None or total * 2.0 ** k >= MEMORY_EXACT_LIMIT:
        k = min(math.floor(math.log2(MEMORY_TARGET) - log_total), MAX_EXPONENT) if total > 0 else 0
    scaled, cap_scaled = np.ldexp(mem, k), math.ldexp(cap, k)
    if conservative:  # every solution truly fits
        return np.ceil(scaled).astype(np.int64), math.floor(cap_scaled)
    return np.floor(scaled).astype(np.int64), math.ceil(cap_scaled)  # a relaxation


def _log2_sum(values: np.ndarray) -> float:
    """``log2(sum(|values|))`` without overflow (a sum of entries near 1e308 is inf) or
    underflow; -inf for an empty or all-zero array."""
    top = float(np.abs(values).max(initial=0.0))
    if top == 0:
        return -math.inf
    return math.log2(top) + math.log2(float(np.abs(values / top).sum()))


def _exact_exponent(values: np.ndarray) -> int | None:
    """Smallest k with every ``values * 2**k`` an integer (None if none is sensible)."""
    values = values[values != 0]
    if values.size == 0:
        return 0
    mantissa, exponent = np.frexp(values)
    odd = (mantissa * 2.0 ** 53).astype(np.int64)  # exact 53-bit integers
    zeros = np.array([(int(m) & -int(m)).bit_length() - 1 for m in np.abs(odd)])
    k = int(np.max(53 - exponent - zeros))
    return k if k <= 1000 else None


def _run(form: Formulation, *, conservative: bool, start: np.ndarray | None,
         deadline: Deadline, cp_model: ModuleType, num_workers: int,
         seed: int | None) -> BackendResult:
    began = deadline.elapsed()
    model = cp_model.CpModel()
    _fill(model.proto, form, conservative, start, deadline)
    coef, scale, error = scale_objective(form)
    used = np.flatnonzero(coef)
    model.proto.objective.vars.extend(used.tolist())
    model.proto.objective.coeffs.extend(coef[used].tolist())
    built = deadline.elapsed() - began
    deadline.check("building the CP-SAT model")

    solver = cp_model.CpSolver()
    solver.parameters.num_workers = num_workers
    # Work around google/or-tools#5293 (open for 9.15): the at-most-one + linear
    # inclusion presolve certifies wrong optima. Seen here: exactly-one rows plus
    # a memory row with byte-sized coefficients gave 10 wrong OPTIMALs in 1000.
    solver.parameters.presolve_inclusion_work_limit = 0
    # CP-SAT would otherwise take over SIGINT for the whole process while it runs;
    # Ctrl-C must reach Python, which then stops the search (limits.py).
    solver.parameters.catch_sigint_signal = False
    remaining = deadline.remaining()
    extra = {"cpsat_model_seconds": built, "objective_scale": scale,
             "rounding_error": error / scale}
    if remaining is not None:
        if remaining <= 0:
            return not_started(extra)
        solver.parameters.max_time_in_seconds = remaining
    if seed is not None:
        # Workers racing in parallel return different optima among ties; with a seed
        # they interleave deterministically instead (reproducible, but Inception-v3
        # at p = 8 took 95 s instead of 15 s).
        solver.parameters.random_seed = int(seed) % 2**31
        solver.parameters.interleave_search = True
    code, gave_up = run_stoppable(lambda: solver.solve(model), solver.stop_search, deadline)
    if gave_up:
        return abandoned(extra)
    name = solver.status_name(code)
    extra["cpsat_wall_time"] = solver.wall_time
    if code == cp_model.MODEL_INVALID:
        # A bad parameter is reported in the response, not by validate().
        reason = model.validate() or solver.response_proto.solution_info or "no reason given"
        if reason.startswith("parameter"):
            raise OptionError(f"CP-SAT rejected its parameters: {reason}")
        raise PaseError(f"CP-SAT rejected the model: {reason}")
    if code == cp_model.INFEASIBLE:
        return BackendResult(None, True, True, False, None, name, extra)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):  # UNKNOWN: nothing found in time
        return BackendResult(None, False, False, True, None, name, extra)
    values = solver.response_proto.solution
    x = np.array([values[i] for i in range(form.num_x)], dtype=float)
    bound = (solver.best_objective_bound - error) / scale
    # Only a limit (time, or the watchdog's stop) ends CP-SAT with FEASIBLE.
    return BackendResult(form.choice_from_x(x), code == cp_model.OPTIMAL, False,
                         code == cp_model.FEASIBLE, bound, name, extra)


def _fill(proto, form: Formulation, conservative: bool, start: np.ndarray | None,
          deadline: Deadline) -> None:
    """Variables, rows and hint straight into the model's proto.

    Through ``CpModel.new_bool_var`` and ``model.add`` the Transformer at p = 16
    (1.5 million columns) took 57 s to build; through the proto it takes a few.
    """
    _bool_vars(proto, form.num_cols, deadline)
    order = np.argsort(form.row, kind="stable")
    ends = np.cumsum(np.bincount(form.row, minlength=form.num_rows)).tolist()
    cols, vals = form.col[order].tolist(), form.val[order].astype(np.int64).tolist()
    rhs = form.rhs.astype(np.int64).tolist()
    lo = 0
    for r, hi in enumerate(ends):
        # One-hot rows (= 1) and linearisation rows (= 0); see formulation.py.
        if r % 4096 == 0:
            deadline.check("building the CP-SAT model")
        linear = proto.constraints.add().linear
        linear.vars.extend(cols[lo:hi])
        linear.coeffs.extend(vals[lo:hi])
        linear.domain.extend([rhs[r], rhs[r]])
        lo = hi
    if form.memory is not None:
        mem, cap = scale_memory(form, conservative)
        linear = proto.constraints.add().linear
        linear.vars.extend(range(form.num_x))
        linear.coeffs.extend(mem.tolist())
        linear.domain.extend([min(0, int(mem[mem < 0].sum())), cap])
    if start is not None:
        proto.solution_hint.vars.extend(range(form.num_cols))
        proto.solution_hint.values.extend(start.astype(np.int64).tolist())


def _bool_vars(proto, count: int, deadline: Deadline) -> None:
    """Append ``count`` Boolean variables by doubling a block of them (22 copies
    in C++ for 1.5 million, against one Python call per variable). Works on the
    pybind proto of OR-Tools >= 9.12 and on the protobuf message of older ones."""
    merge = "merge_from" if hasattr(proto, "merge_from") else "MergeFrom"
    block = type(proto)()
    block.variables.add().domain.extend([0, 1])
    while count:
        deadline.check("building the CP-SAT model")
        if count & 1:
            getattr(proto, merge)(block)
        count >>= 1
        if count:
            twin = type(proto)()
            getattr(twin, merge)(block)
            getattr(block, merge)(twin)

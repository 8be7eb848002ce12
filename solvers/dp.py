"""The PaSE dynamic program (paper section III): exact, vectorised min-plus.

The vertices are ordered (see :mod:`pase.solvers.ordering`); step ``i``
computes, for every configuration of its dependent set ``D(i)``,

    R(i, phi_D(i)) = min over C of [ vertex cost(C) + edge costs to later
                     neighbours + sum over children j of R(j, phi_D(j)) ]

as one broadcast sum with axes ``(D(i)..., v(i))`` followed by an argmin over
the last axis. Only the argmin tables are kept for back-substitution; a child's
value table is freed once its parent has used it. What each step allocates is
fixed beforehand by a :class:`~pase.solvers.dp_plan.Plan`, so the memory guard
refuses a problem before any numeric work rather than part way through.

Under a memory cap (``problem.memory_cap``) the answer is still exact: the
unconstrained optimum is returned when it fits; otherwise, unless even the
least memory any strategy needs is over the cap (INFEASIBLE), the tables hold
Pareto fronts of (cost, memory), see :mod:`pase.solvers.dp_memory`.
"""
from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from pase.errors import OptionError, PaseError, TooLargeError
from pase.problem import COST_RTOL, Problem, Solution, Status
from pase.registry import SOLVERS
from pase.solvers.dp_memory import CAP_RTOL, DEFAULT_MAX_STATES, Minimiser, pareto_solve
from pase.solvers.dp_plan import Plan, Step, Term, argmin_dtype, sum_into
from pase.solvers.dp_plan import plan as plan_named
from pase.solvers.ordering import ORDERINGS

__all__ = ["plan", "solve"]

DEFAULT_MEMORY_BUDGET = 4 * 2**30
# Orderings "auto" compares; bfs is left out: it is the paper's blow-up baseline.
AUTO_ORDERINGS = tuple(name for name in ORDERINGS if name != "bfs")


def plan(problem: Problem, ordering: str = "auto") -> Plan:
    """The plan ``solve`` would execute, with its predicted size (for dry runs).

    Examples:
        >>> from pase.testing import random_problem
        >>> p = plan(random_problem(6, seed=1))
        >>> p.ordering, p.max_dependent_set <= 2
        ('generateseq', True)
    """
    return _choose(problem, ordering)[0]


def _choose(problem: Problem, ordering: str) -> tuple[Plan, dict[str, dict[str, Any]]]:
    if ordering != "auto":
        if ordering not in ORDERINGS:
            raise OptionError(f"unknown ordering {ordering!r}; choose from auto, "
                              f"{', '.join(ORDERINGS)}")
        return plan_named(problem, ordering), {}
    plans = [plan_named(problem, name) for name in AUTO_ORDERINGS]
    best = plans[0]
    for p in plans[1:]:
        if p.table_entries < best.table_entries:  # strict: ties keep generateseq
            best = p
    return best, {p.ordering: p.summary() for p in plans}


@SOLVERS.register("dp", "PaSE dynamic program (exact)", exact=True)
def solve(problem: Problem, *, ordering: str = "auto",
          memory_budget: float = DEFAULT_MEMORY_BUDGET,
          max_states: int = DEFAULT_MAX_STATES,
          time_limit: float | None = None, seed: int | None = None) -> Solution:
    """Exact optimum of ``problem`` by the PaSE dynamic program.

    Args:
        ordering: ``"auto"`` (the ordering with the fewest table entries among
            generateseq and min-fill), or a name in ``ORDERINGS``.
        memory_budget: bytes the DP's tables and buffers may hold at once; a
            larger predicted peak raises TooLargeError before any work.
        max_states: under a memory cap, the most (cost, memory) front points
            the DP may generate at once or keep in all; more raises TooLargeError.
        time_limit: seconds; the DP has no partial answer, so exceeding it
            raises TooLargeError.
        seed: unused (the DP is deterministic); accepted like every solver.
    """
    start = time.perf_counter()
    if not memory_budget > 0:
        raise OptionError(f"memory_budget must be a positive number of bytes, got {memory_budget}")
    if not max_states >= 1 or int(max_states) != max_states:
        raise OptionError(f"max_states must be a positive integer, got {max_states}")
    if time_limit is not None and not time_limit > 0:
        raise OptionError(f"time_limit must be positive seconds or None, got {time_limit}")
    chosen, predicted = _choose(problem, ordering)
    _check_budget(problem, chosen, memory_budget)
    _check_dims(chosen)
    deadline = None if time_limit is None else start + time_limit
    total, choice, used = _execute(problem, chosen, deadline)

    stats: dict[str, Any] = chosen.summary()
    stats["peak_table_bytes_used"] = used
    if predicted:
        stats["predicted"] = predicted
    if total == math.inf:  # every strategy has infinite cost, as exhaustive reports it
        return Solution(None, math.inf, Status.INFEASIBLE, "dp",
                        wall_time=time.perf_counter() - start, stats=stats)
    if problem.memory_cap is not None:
        return _solve_capped(problem, chosen, choice, total, int(max_states), deadline,
                             start, stats)
    cost = _verified_cost(problem, choice, total)
    return Solution(choice, cost, Status.OPTIMAL, "dp", lower_bound=cost,
                    wall_time=time.perf_counter() - start, stats=stats)


def _solve_capped(problem: Problem, chosen: Plan, choice: tuple[int, ...], total: float,
                  max_states: int, deadline: float | None, start: float,
                  stats: dict[str, Any]) -> Solution:
    """The capped optimum, given the unconstrained one (``choice``, ``total``)."""
    cap = problem.memory_cap
    stats["memory_cap"] = cap
    # The unconstrained optimum is a lower bound; when it fits it is the answer.
    stats["capped"] = not problem.fits(choice)
    if stats["capped"]:
        stats["min_memory"] = least = _min_memory(problem, chosen, deadline)
        if least > cap:
            return Solution(None, math.inf, Status.INFEASIBLE, "dp",
                            wall_time=time.perf_counter() - start, stats=stats)
        found, front_stats = pareto_solve(problem, chosen.elimination, cap,
                                          _minimiser(problem, chosen, deadline, choice, total),
                                          max_states=max_states, deadline=deadline)
        stats.update(front_stats)
        if found is None:
            # Only rounding can do this: the least-memory strategy sums to the cap
            # in the DP's order but not in Problem.memory_of's.
            if least < cap - CAP_RTOL * max(abs(cap), 1.0):
                raise PaseError(f"dp internal error: the least memory {least!r} fits the cap "
                                f"{cap!r} but the Pareto DP found no strategy; please report this")
            return Solution(None, math.inf, Status.INFEASIBLE, "dp",
                            wall_time=time.perf_counter() - start, stats=stats)
        choice, total = found
    stats["memory"] = problem.memory_of(choice)
    cost = _verified_cost(problem, choice, total)
    return Solution(choice, cost, Status.OPTIMAL, "dp", lower_bound=cost,
                    wall_time=time.perf_counter() - start, stats=stats)


def _min_memory(problem: Problem, chosen: Plan, deadline: float | None) -> float:
    """Least total memory over strategies of finite cost.

    Memory is per vertex, so that is the sum of per-vertex minima unless some
    cost is infinite; then the same DP runs with memory as the cost.
    """
    assert problem.memory is not None
    finite = all(np.isfinite(c).all() for c in problem.vertex_costs) and \
        all(np.isfinite(m).all() for m in problem.edge_costs)
    if finite:
        return float(sum(float(m.min()) for m in problem.memory))
    as_cost = Problem([m + np.where(np.isinf(c), np.inf, 0.0)
                       for m, c in zip(problem.memory, problem.vertex_costs)],
                      problem.edges, [np.where(np.isinf(m), np.inf, 0.0) for m in problem.edge_costs],
                      names=problem.names)
    return _execute(as_cost, chosen, deadline)[0]


def _minimiser(problem: Problem, chosen: Plan, deadline: float | None,
               choice: tuple[int, ...], total: float) -> Minimiser:
    """The plain DP on ``cost + lam * memory``, for the Lagrangian search.

    ``choice`` and ``total`` are its known answer at ``lam = 0``.
    """
    assert problem.memory is not None

    def minimise(lam: float) -> tuple[tuple[int, ...], float]:
        if lam == 0:
            return choice, total
        costs = [c + lam * m for c, m in zip(problem.vertex_costs, problem.memory)]
        shifted = Problem(costs, problem.edges, problem.edge_costs, names=problem.names)
        value, minimiser, _ = _execute(shifted, chosen, deadline)
        return minimiser, value

    return minimise


def _check_budget(problem: Problem, chosen: Plan, budget: float) -> None:
    step = chosen.peak_step
    if step is None or chosen.peak_bytes <= budget:
        return
    names, sizes = problem.names, problem.sizes
    dep = ", ".join(f"{names[u]} ({sizes[u]})" for u in sorted(step.dependent)) or "none"
    others = ", ".join(n for n in AUTO_ORDERINGS if n != chosen.ordering)
    raise TooLargeError(
        f"dp (ordering {chosen.ordering!r}) needs {_human(chosen.peak_bytes)} "
        f"({chosen.peak_bytes} bytes) at vertex {names[step.vertex]!r} ({sizes[step.vertex]} "
        f"candidates; dependent set with candidate counts: {dep}), over "
        f"memory_budget={_human(budget)} ({int(budget)} bytes); try another ordering "
        f"({others}), fewer devices, or a larger memory_budget")


def _check_dims(chosen: Plan) -> None:
    """Refuse a dependent set with more axes than numpy arrays may have.

    Only reachable when most of the set has a single candidate, since the
    budget already refuses a product of 60-odd counts above one.
    """
    ndim = chosen.max_dependent_set + 1
    try:
        np.empty((1,) * ndim)
    except ValueError:
        raise TooLargeError(f"dp (ordering {chosen.ordering!r}) needs a {ndim}-axis table, "
                            f"more than numpy supports; try another ordering") from None


def _human(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{int(nbytes)} B"


class _Ledger:
    """Bytes of the arrays the DP holds, to check the plan's prediction."""

    def __init__(self) -> None:
        self.held = 0
        self.peak = 0

    def alloc(self, *arrays: np.ndarray) -> None:
        self.held += sum(a.nbytes for a in arrays)
        self.peak = max(self.peak, self.held)

    def free(self, *arrays: np.ndarray) -> None:
        self.held -= sum(a.nbytes for a in arrays)


def _execute(problem: Problem, chosen: Plan,
             deadline: float | None) -> tuple[float, tuple[int, ...], int]:
    """Run every step, then back-substitute. Returns (optimum, choice, peak bytes held)."""
    edge_cost = dict(zip(problem.edges, problem.edge_costs))
    sizes = [int(k) for k in problem.sizes]
    elim = chosen.elimination
    values: dict[int, np.ndarray] = {}
    argmins: list[np.ndarray] = []
    ledger = _Ledger()
    for step in chosen.steps:
        value, arg = _run_step(problem, step, sizes, values, edge_cost, ledger)
        for j in elim.children[step.position]:
            ledger.free(values.pop(j))
        values[step.position] = value
        argmins.append(arg)
        if deadline is not None and time.perf_counter() > deadline:
            raise TooLargeError(
                f"dp exceeded its time limit after {step.position + 1} of {len(chosen.steps)} "
                f"vertices (ordering {chosen.ordering!r}); the DP has no partial answer")
    total = sum(float(values[r]) for r in elim.roots)
    choice = [0] * problem.num_vertices
    for step in reversed(chosen.steps):
        choice[step.vertex] = int(argmins[step.position][tuple(choice[u] for u in step.dependent)])
    return total, tuple(choice), ledger.peak


def _expand(array: np.ndarray, axes: tuple[int, ...], target: tuple[int, ...]) -> np.ndarray:
    """View of ``array`` (axes ``axes``) with singleton axes, to broadcast over ``target``.

    Both axis tuples are in table order (latest position first), so no transpose.
    """
    present = set(axes)
    return array[tuple(slice(None) if a in present else None for a in target)]


def _term_array(problem: Problem, term: Term, values: dict[int, np.ndarray],
                edge_cost: dict[tuple[int, int], np.ndarray]) -> np.ndarray:
    if term.kind == "child":
        return values[term.ref]
    if term.kind == "vertex":
        return problem.vertex_costs[term.ref]
    u, v = term.axes  # (later neighbour, v(i)); problem matrices are (low index, high index)
    return edge_cost[(u, v)] if u < v else edge_cost[(v, u)].T


def _run_step(problem: Problem, step: Step, sizes: list[int], values: dict[int, np.ndarray],
              edge_cost: dict[tuple[int, int], np.ndarray],
              ledger: _Ledger) -> tuple[np.ndarray, np.ndarray]:
    """One min-plus step: fold the groups, then broadcast-add and argmin chunk by chunk."""
    kv = sizes[step.vertex]
    full = step.dependent + (step.vertex,)
    bases, copies = [], []
    for group in step.groups:
        head = group[0]
        if head.kind == "child":
            base = values[head.ref]  # ours to overwrite: its parent is its only reader
        else:
            base = np.array(_term_array(problem, head, values, edge_cost),
                            dtype=np.float64, order="C", copy=True)
            copies.append(base)
            ledger.alloc(base)
        for term in group[1:]:
            np.add(base, _expand(_term_array(problem, term, values, edge_cost), term.axes,
                                 head.axes), out=base)
        bases.append(_expand(base, head.axes, full))
    if not step.dependent:  # a root: give it a one-row leading axis like the others
        bases = [b[None] for b in bases]

    out_shape = tuple(sizes[u] for u in step.dependent)
    value = np.empty(out_shape)
    arg = np.empty(out_shape, dtype=argmin_dtype(kv))
    ledger.alloc(value, arg)
    lead = out_shape or (1,)
    value_rows, arg_rows = value.reshape(lead), arg.reshape(lead)
    rest, row_entries = lead[1:], math.prod(lead[1:])
    chunk = step.chunk_rows * row_entries
    index = np.empty(chunk, dtype=np.intp)
    offsets = np.arange(chunk, dtype=np.intp) * kv  # flat start of each row's v(i) axis
    buffer = None if step.direct else np.empty(chunk * kv)
    ledger.alloc(index, offsets, *([] if buffer is None else [buffer]))

    for r0 in range(0, lead[0], step.chunk_rows):
        r1 = min(r0 + step.chunk_rows, lead[0])
        e = (r1 - r0) * row_entries
        parts = [b[r0:r1] if b.shape[0] != 1 else b for b in bases]
        if buffer is None:
            block = parts[0]  # a C-contiguous table slice spanning every axis
        else:
            block = sum_into(buffer[:e * kv].reshape((r1 - r0,) + rest + (kv,)), parts)
        ix = index[:e]
        np.argmin(block.reshape(e, kv), axis=1, out=ix)
        np.copyto(arg_rows[r0:r1].reshape(e), ix, casting="unsafe")
        np.add(ix, offsets[:e], out=ix)
        # mode="clip" keeps take from buffering its output (the indices are in range).
        np.take(block.reshape(-1), ix, out=value_rows[r0:r1].reshape(e), mode="clip")
    ledger.free(index, offsets, *copies, *([] if buffer is None else [buffer]))
    return value, arg


def _verified_cost(problem: Problem, choice: tuple[int, ...], dp_value: float) -> float:
    """Re-evaluate the choice; a mismatch beyond rounding is a DP bug."""
    cost = float(problem.evaluate(choice))
    if cost == dp_value:
        return cost
    # Rounding scales with the summed magnitudes of the terms, not with their
    # (possibly cancelling) total.
    scale = sum(abs(float(problem.vertex_costs[v][c])) for v, c in enumerate(choice))
    scale += sum(abs(float(m[choice[u], choice[v]]))
                 for (u, v), m in zip(problem.edges, problem.edge_costs))
    if not abs(cost - dp_value) <= COST_RTOL * scale:
        raise PaseError(f"dp internal error: the DP value {dp_value!r} differs from the "
                        f"re-evaluated cost {cost!r} of its choice; please report this")
    return cost

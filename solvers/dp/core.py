"""The PaSE dynamic program (paper section III): exact, vectorised min-plus.

Order the vertices (:mod:`~pase.solvers.dp.ordering`); position ``i`` holds
vertex ``v(i)`` with its dependent set ``D(i)`` (the later vertices its
eliminated component touches) and its children (the components it joins).
For every configuration ``phi`` of ``D(i)``, :func:`min_sum` computes

    R(i, phi) = min over C of [ vertex cost(v(i), C)
                                + edge costs from v(i) to its later neighbours
                                + sum over children j of R(j, phi restricted to D(j)) ]

keeping the minimising ``C`` per ``phi``; the roots' tables sum to the
optimum and back-substitution, last position first, reads off the strategy.

Around that recurrence, each in one place:

- :mod:`~pase.solvers.dp.plan`: the plan, before any numeric work: each
  step's terms, how they fold and chunk, the bytes the DP will hold (the
  memory guard refuses a plan over ``memory_budget`` up front);
- :mod:`~pase.solvers.dp.kernel`: one step as chunked numpy min-plus;
- :mod:`~pase.solvers.dp.capped.memory`: under a memory cap, the unconstrained
  optimum when it fits, else Pareto fronts of (cost, memory) pruned with
  Lagrangian bounds (:mod:`~pase.solvers.dp.capped.lagrange`,
  :mod:`~pase.solvers.dp.capped.fronts`): still exact;
- :mod:`~pase.solvers.dp.blocks.fold` (option ``blocks``): chains of repeated
  blocks folded into min-plus matrix powers before the recurrence; under a
  binding cap, through the Lagrangian dual (:mod:`~pase.solvers.dp.blocks.capped`);
- :mod:`~pase.solvers.dp.prune` (option ``prune``): configs another config
  of their vertex dominates dropped before the recurrence. Both are exact.
"""
from __future__ import annotations

import math
import sys
import time
from functools import partial
from typing import Any

import numpy as np

from pase.errors import (
    OptionError,
    PaseError,
    TimeLimitError,
    TooLargeError,
    check_choice,
    check_common,
    check_float,
    check_int,
)
from pase.problem import COST_RTOL, Problem, Solution, Status
from pase.solvers.dp.kernel import Ledger, min_plus
from pase.solvers.dp.capped.memory import DEFAULT_MAX_STATES, solve_capped
from pase.solvers.dp.plan import MAX_DEPENDENT_SET, Plan, plan_ordering
from pase.solvers.dp.prune import PruneResult, prune_dominated
from pase.solvers.dp.ordering import ORDERINGS

__all__ = ["DEFAULT_MEMORY_BUDGET", "DP_ENTRIES_PER_SECOND", "dry_run", "min_sum", "plan",
           "solve"]

DEFAULT_MEMORY_BUDGET = 4 * 2**30
# Orderings "auto" compares; bfs is left out: it is the paper's blow-up baseline.
AUTO_ORDERINGS = ("generateseq", "min-fill")
CHOICES = ("auto",) + tuple(ORDERINGS)
# Min-plus table entries the plain dp fills per second on the 2-core machine
# (benchmarks/results/scale.md, blocks off: 8.8e8-1.1e9 at p = 64-256, 5.6e8 for the
# Transformer at p = 1024); 8e8 puts each of those five rows within 1.5x. Dry runs use it.
DP_ENTRIES_PER_SECOND = 8e8
# Below this many table entries (a tenth of a second) the plain dp is not worth
# reducing: blocks are looked for only in larger (or over-budget) Problems.
BLOCKS_MIN_ENTRIES = 10**8
# Below this many table entries the dp runs unpruned (stats["pruned"] is then 0):
# on the paper's Transformer and gpt2 pruning drops 0.5-3% of the configs and
# about as much of the tables, and takes 0.3-1.5 s, a loss on a dp under ~10 s.
PRUNE_MIN_ENTRIES = 10**10


def min_sum(problem: Problem, chosen: Plan, *, keep: bool = False, deadline: float | None = None,
            ledger: Ledger | None = None) -> tuple[float, tuple[int, ...], dict[int, np.ndarray]]:
    """The recurrence over ``chosen``'s steps, then back-substitution.

    ``chosen`` (see :func:`plan`) fixes the order and, per position, ``v(i)``,
    ``D(i)``, the children and the later neighbours. Returns the optimum, a
    minimising choice and, with ``keep``, every table ``R(i)`` by position
    (otherwise a child's table is consumed by its parent).
    """
    ledger = Ledger() if ledger is None else ledger
    values: dict[int, np.ndarray] = {}  # R(i) over D(i), until its parent reads it
    argmins: list[np.ndarray] = []      # the minimising C of v(i), per configuration of D(i)
    for step in chosen.steps:
        v = step.vertex
        children = [values[j] if keep else values.pop(j) for j in step.children]
        terms = children + [problem.edge_matrix(u, v) for u in step.later] \
            + [problem.vertex_costs[v]]
        values[step.position], argmin = min_plus(step, terms, 0 if keep else len(children), ledger)
        argmins.append(argmin)
        if not keep:
            ledger.free(*children)
        if deadline is not None and time.perf_counter() > deadline:
            raise TimeLimitError(f"dp exceeded its time limit after {step.position + 1} of "
                                 f"{len(chosen.steps)} vertices (ordering {chosen.ordering!r}); "
                                 f"the DP has no partial answer")
    total = sum(float(values[r]) for r in chosen.elimination.roots)
    choice = [0] * problem.num_vertices
    for step in reversed(chosen.steps):  # a step's D(i) is chosen before it
        choice[step.vertex] = int(argmins[step.position][tuple(choice[u] for u in step.dependent)])
    return total, tuple(choice), values


def solve(problem: Problem, *, ordering: str = "auto",
          memory_budget: float = DEFAULT_MEMORY_BUDGET,
          max_states: int = DEFAULT_MAX_STATES,
          prune: bool = True, blocks: bool = True,
          time_limit: float | None = None, seed: int | None = None) -> Solution:
    """Exact optimum of ``problem`` by the PaSE dynamic program.

    Args:
        ordering: ``"auto"`` (of generateseq and min-fill, the ordering that
            fits ``memory_budget`` with the fewest table entries), or a name
            in ``ORDERINGS``.
        memory_budget: bytes the DP's tables and buffers may hold at once; a
            larger predicted peak raises TooLargeError before any work.
        max_states: under a memory cap, the most (cost, memory) front points
            the DP may generate at once or keep in all; more raises TooLargeError.
        prune: first drop every config another config of its vertex
            dominates (:mod:`~pase.solvers.dp.prune`; exact) when the plan has
            ``PRUNE_MIN_ENTRIES`` entries or more;
            ``stats["pruned"]`` counts them (``prune_seconds`` the time), the
            plan's figures are the pruned Problem's.
        blocks: first reduce chains of repeated blocks by min-plus powers
            (:mod:`~pase.solvers.dp.blocks.fold`; exact), then solve the rest;
            nothing changes when none is found or when the plain plan fits
            with under ``BLOCKS_MIN_ENTRIES`` entries. Under a memory cap the
            folded uncapped optimum is returned when it fits the cap (then it
            is the capped optimum too); otherwise the cap is relaxed into
            ``cost + lam * memory``, folded per multiplier, and the best fitting
            strategy is returned when the dual bound certifies it
            (:mod:`~pase.solvers.dp.blocks.capped`). A duality gap runs the plain
            capped dp (exact) when its plan fits ``memory_budget``, and is
            otherwise returned as ``feasible`` with the dual bound as lower bound.
        time_limit: seconds; the DP has no partial answer, so exceeding it
            raises TimeLimitError.
        seed: unused (the DP is deterministic); accepted like every solver.
    """
    start = time.perf_counter()
    fell_back: dict[str, Any] = {}
    check_choice("ordering", ordering, CHOICES)
    memory_budget = check_float("memory_budget", memory_budget, 0.0, strict=True, finite=False)
    max_states = check_int("max_states", max_states, 1)
    prune = _check_bool("prune", prune)
    blocks = _check_bool("blocks", blocks)
    check_common(time_limit, seed)
    # Planning stops at a table over the budget: the answer is a refusal anyway.
    chosen, predicted = _choose(problem, ordering, memory_budget, limit_bytes=memory_budget)
    if blocks and not (_fits(chosen, memory_budget) and chosen.table_entries < BLOCKS_MIN_ENTRIES):
        folded, fell_back = _solve_folded(problem, chosen, start, ordering=ordering,
                                          memory_budget=memory_budget, max_states=max_states,
                                          prune=prune, time_limit=time_limit, seed=seed)
        if folded is not None:
            return folded
    _refuse_over_budget(problem, chosen, memory_budget)
    deadline = None if time_limit is None else start + time_limit
    ledger = Ledger()
    base = _forbid_infinite_memory(problem)
    # Pruning ignores memory first: the unconstrained optimum is the answer when it
    # fits the cap, found as without a cap. Only a binding cap prunes again with memory.
    work, pruned, unpruned = base, None, (chosen, predicted)
    prune_seconds = [0.0]
    asked, prune = prune, prune and chosen.table_entries >= PRUNE_MIN_ENTRIES
    if prune:
        work, chosen, predicted, pruned = _pruned(base, False, chosen, predicted, ordering,
                                                  memory_budget, deadline, prune_seconds)
    total, choice, _ = min_sum(work, chosen, deadline=deadline, ledger=ledger)
    found: tuple[tuple[int, ...], float] | None = None
    if total < math.inf:  # else every strategy has infinite cost: infeasible, as exhaustive says
        found = (choice, total)
    capped: dict[str, Any] = {}
    if found is not None and problem.memory_cap is not None:
        if prune and not problem.fits(_original(pruned, found[0])):
            work, chosen, predicted, pruned = _pruned(base, True, *unpruned, ordering,
                                                      memory_budget, deadline, prune_seconds)
            total, choice, _ = min_sum(work, chosen, deadline=deadline, ledger=ledger)
            found = (choice, total)
        found, capped = solve_capped(work, chosen.elimination, found,
                                     partial(min_sum, chosen=chosen, deadline=deadline),
                                     max_states=max_states, deadline=deadline)
    stats: dict[str, Any] = {**chosen.summary(), "peak_table_bytes_used": ledger.peak}
    if ordering == "auto":
        stats["predicted"] = predicted
    if asked:
        stats["pruned"] = 0 if pruned is None else pruned.dropped
        stats["prune_seconds"] = prune_seconds[0]
    stats.update(capped)
    stats.update(fell_back)
    if found is None:
        return Solution(None, math.inf, Status.INFEASIBLE, "dp",
                        wall_time=time.perf_counter() - start, stats=stats)
    found = (_original(pruned, found[0]), found[1])
    if problem.memory_cap is not None:
        stats["memory"] = problem.memory_of(found[0])
    cost = _verified_cost(problem, *found)
    return Solution(found[0], cost, Status.OPTIMAL, "dp", lower_bound=cost,
                    wall_time=time.perf_counter() - start, stats=stats)


def _solve_folded(problem: Problem, chosen: Plan, start: float, *, ordering: str,
                  memory_budget: float, max_states: int, prune: bool,
                  time_limit: float | None, seed: int | None) -> tuple[Solution | None, dict]:
    """The answer with chains of repeated blocks folded (``solve``'s ``blocks``), or
    ``(None, stats)`` when the plain dp must run: no chain found, or a binding cap
    whose Lagrangian route left a gap (``stats`` say so)."""
    from pase.solvers.dp.blocks.fold import solve_blocks  # imports this module

    # Under a cap the folded optimum of the uncapped Problem is the answer when it
    # fits: no strategy under the cap costs less than the best one without it.
    cap = problem.memory_cap
    reduced = solve_blocks(problem if cap is None else problem.with_memory_cap(None),
                           time_limit=time_limit, ordering=ordering,
                           memory_budget=memory_budget, max_states=max_states,
                           prune=prune, seed=seed)
    if reduced is not None and (cap is None or reduced.choice is None
                                or problem.fits(reduced.choice)):
        if cap is not None and reduced.choice is not None:
            reduced.stats.update(memory_cap=cap, capped=False,
                                 memory=problem.memory_of(reduced.choice))
        reduced.wall_time = time.perf_counter() - start
        return reduced, {}
    if reduced is not None:  # the cap binds: the Lagrangian route through the powers
        from pase.solvers.dp.blocks.capped import solve_blocks_capped

        answer, blocks_capped = solve_blocks_capped(
            _forbid_infinite_memory(problem), reduced,
            deadline=None if time_limit is None else start + time_limit,
            fallback=_fits(chosen, memory_budget), ordering=ordering,
            memory_budget=memory_budget, max_states=max_states, prune=prune, seed=seed)
        if answer is not None:
            if answer.choice is not None:
                cost = _verified_cost(problem, answer.choice, answer.cost)
                bound = cost if answer.status is Status.OPTIMAL else answer.lower_bound
                answer = Solution(answer.choice, cost, answer.status, "dp", bound,
                                  stats=answer.stats)
            answer.wall_time = time.perf_counter() - start
            return answer, {}
        return None, {"blocks_capped": f"{blocks_capped['blocks_capped']}: plain capped dp",
                      "blocks_capped_bound": blocks_capped.get("lagrangian_bound"),
                      "blocks_capped_seconds": blocks_capped.get("blocks_capped_seconds")}
    return None, {}


def plan(shape: Any, ordering: str = "auto", *,
         memory_budget: float = DEFAULT_MEMORY_BUDGET) -> Plan:
    """The plan ``solve`` would execute, with its predicted size (for dry runs).

    ``shape`` is a Problem or anything with ``names``, ``sizes``, ``edges``
    and ``num_vertices`` (a ProblemShape): no cost arrays are needed.
    ``memory_budget`` matters to ``"auto"`` only; a plan over it is still
    planned in full (``solve`` stops planning at the first table over it).

    Examples:
        >>> from pase.testing import random_problem
        >>> p = plan(random_problem(6, seed=1))
        >>> p.ordering, p.max_dependent_set <= 2
        ('generateseq', True)
    """
    check_choice("ordering", ordering, CHOICES)
    budget = check_float("memory_budget", memory_budget, 0.0, strict=True, finite=False)
    return _choose(shape, ordering, budget)[0]


def _choose(shape: Any, ordering: str, budget: float, limit_bytes: float | None = None,
            ) -> tuple[Plan, dict[str, dict[str, Any]]]:
    if ordering != "auto":
        return plan_ordering(shape, ordering, limit_bytes=limit_bytes), {}
    plans = [plan_ordering(shape, name, limit_bytes=limit_bytes) for name in AUTO_ORDERINGS]
    return _auto(plans, budget), {p.ordering: p.summary() for p in plans}


def _auto(plans: list[Plan], budget: float) -> Plan:
    """The plan that fits ``budget`` with the fewest table entries; ties keep the first."""
    return min(plans, key=lambda p: (not _fits(p, budget), not p.complete, p.table_entries))


def _fits(chosen: Plan, budget: float) -> bool:
    return chosen.complete and chosen.peak_bytes <= budget


def dry_run(shape: Any, *, memory_budget: float = DEFAULT_MEMORY_BUDGET) -> dict[str, Any]:
    """What the dp would need under each ordering, without cost arrays or solving.

    With a shape that carries a cost model's sharing keys
    (``problem_shape(graph, space, cost_model=...)``), ``blocks`` says which chains
    of repeated blocks ``solve`` would fold, their counts and the folded work
    (:mod:`~pase.solvers.dp.blocks.dry`); ``estimated_seconds`` is then what
    ``solve`` with its defaults would take, the reduction applied.

    Every number is finite (huge ones capped as floats) so the dict is plain
    JSON. A plan that stopped at a step too wide to run (``complete`` false)
    counts the steps up to that one: its figures are lower bounds.
    """
    budget = check_float("memory_budget", memory_budget, 0.0, strict=True, finite=False)
    plans = {name: plan_ordering(shape, name) for name in ORDERINGS}
    rows = []
    for p in plans.values():
        step = p.peak_step if p.complete else p.steps[-1]
        rows.append({"ordering": p.ordering, "max_dependent_set": p.max_dependent_set,
                     "table_entries": _finite(p.table_entries),
                     "peak_table_bytes": _finite(p.peak_bytes),
                     "estimated_seconds": _finite(_finite(p.table_entries) / DP_ENTRIES_PER_SECOND),
                     "within_memory_budget": _fits(p, budget), "complete": p.complete,
                     "peak_vertex": None if step is None else shape.names[step.vertex]})
    auto = _auto([plans[n] for n in AUTO_ORDERINGS], budget)
    return {"vertices": shape.num_vertices, "edges": len(shape.edges),
            "memory_budget": _finite(budget),
            "auto_ordering": auto.ordering,
            "orderings": rows, **_dry_run_blocks(shape, auto, budget)}


def _dry_run_blocks(shape: Any, auto: Plan, budget: float) -> dict[str, Any]:
    """The ``blocks`` part of a dry run, and ``estimated_seconds``: what ``solve`` would
    spend with its defaults (blocks folded where it would fold them)."""
    from pase.solvers.dp.blocks.dry import predict_blocks

    plain_seconds = _finite(_finite(auto.table_entries) / DP_ENTRIES_PER_SECOND)
    if _fits(auto, budget) and auto.table_entries < BLOCKS_MIN_ENTRIES:
        return {"blocks": {"tried": False, "reason": f"the plain plan has under "
                                                     f"{BLOCKS_MIN_ENTRIES:.0e} table entries"},
                "estimated_seconds": plain_seconds}

    def plan_reduced(reduced: Any) -> dict[str, Any]:
        p = _choose(reduced, "auto", budget)[0]
        return {**p.summary(), "vertices": reduced.num_vertices,
                "estimated_seconds": _finite(_finite(p.table_entries) / DP_ENTRIES_PER_SECOND),
                "within_memory_budget": _fits(p, budget)}

    blocks = {"tried": True, **predict_blocks(shape, plan_reduced=plan_reduced)}
    if not blocks.get("blocks_found"):
        return {"blocks": blocks, "estimated_seconds": plain_seconds}
    seconds = blocks["fold_seconds"] + blocks["reduced"]["estimated_seconds"]
    blocks["estimated_seconds"] = _finite(seconds)
    return {"blocks": blocks, "estimated_seconds": _finite(seconds)}


def _finite(x: float) -> float:
    """``x`` as a JSON-safe number: an int when exact in int64, else a float capped finite."""
    if isinstance(x, int) and x < 2**63:
        return x
    return float(x) if x < sys.float_info.max else sys.float_info.max


def _refuse_over_budget(shape: Any, chosen: Plan, budget: float) -> None:
    """TooLargeError naming the step that breaks the budget or numpy's axis limit."""
    names, sizes = shape.names, shape.sizes
    if not chosen.steps:
        return
    widest = max(chosen.steps, key=lambda s: len(s.dependent))
    if len(widest.dependent) + 1 > min(_max_axes(), MAX_DEPENDENT_SET + 1):
        raise TooLargeError(
            f"dp (ordering {chosen.ordering!r}) needs a table over {len(widest.dependent)} "
            f"dependent vertices at vertex {names[widest.vertex]!r}, more axes than numpy "
            f"arrays take; try another ordering, fewer devices, or a heuristic solver "
            f"(greedy, mcmc)")
    if _fits(chosen, budget):
        return
    step = chosen.peak_step if chosen.complete else chosen.steps[-1]
    at_least = "" if chosen.complete else "at least "
    dep = ", ".join(f"{names[u]} ({sizes[u]})" for u in sorted(step.dependent)) or "none"
    others = ", ".join(n for n in AUTO_ORDERINGS if n != chosen.ordering)
    raise TooLargeError(
        f"dp (ordering {chosen.ordering!r}) needs {at_least}{_human(step.peak_bytes)} "
        f"({_count(step.peak_bytes)} bytes) at vertex {names[step.vertex]!r} "
        f"({sizes[step.vertex]} candidates; dependent set with candidate counts: {dep}), over "
        f"memory_budget={_human(budget)} ({_count(budget)} bytes); try another ordering "
        f"({others}), fewer devices, or a larger memory_budget")


def _pruned(problem: Problem, memory: bool, chosen: Plan, predicted: dict[str, Any],
            ordering: str, budget: float, deadline: float | None, seconds: list[float]
            ) -> tuple[Problem, Plan, dict[str, Any], PruneResult | None]:
    """``problem`` without dominated configs (``memory``: compared too) and its plan;
    the given plan, and None, when nothing was dropped. Adds its time to ``seconds[0]``."""
    result = prune_dominated(problem, memory=memory, deadline=deadline)
    seconds[0] += result.seconds
    if not result.dropped:
        return problem, chosen, predicted, None
    chosen, predicted = _choose(result.problem, ordering, budget, limit_bytes=budget)
    return result.problem, chosen, predicted, result


def _original(pruned: PruneResult | None, choice: tuple[int, ...]) -> tuple[int, ...]:
    return choice if pruned is None else pruned.original_choice(choice)


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise OptionError(f"{name} must be true or false, got {value!r}")
    return bool(value)


def _max_axes() -> int:
    """The most axes a numpy array may have (32 before numpy 2, 64 since)."""
    return 64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32


def _human(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{_finite(nbytes) / scale:.3g} {unit}"
    return f"{int(nbytes)} B"


def _count(n: float) -> str:
    """A byte count: exact up to int64, then three digits."""
    return f"{int(n)}" if n < 2**63 else f"{_finite(n):.3g}"


def _forbid_infinite_memory(problem: Problem) -> Problem:
    """Under a cap, a candidate needing ``+inf`` memory never fits: give it cost
    ``+inf`` (forbidden, as the ILP formulation drops it) and memory 0, so that
    no ``inf * 0`` or ``inf - inf`` reaches the Lagrangian and the fronts."""
    if problem.memory_cap is None or problem.memory is None or \
            all(np.isfinite(m).all() for m in problem.memory):
        return problem
    costs = [np.where(np.isinf(m), np.inf, c) for c, m in zip(problem.vertex_costs, problem.memory)]
    memory = [np.where(np.isinf(m), 0.0, m) for m in problem.memory]
    return Problem(costs, problem.edges, problem.edge_costs, problem.names, memory,
                   problem.memory_cap, problem.unit, problem.candidates, problem.devices)


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

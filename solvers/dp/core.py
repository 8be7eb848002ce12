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
The plan (:mod:`~pase.solvers.dp.plan`) fixes every step and its bytes before
any numeric work; the kernel (:mod:`~pase.solvers.dp.kernel`) runs one step.

:func:`solve` chains exact reductions around the recurrence, each
``apply(problem) -> (smaller problem, inverse)`` and ``invert(choice, inverse)``:
chains of repeated blocks folded into min-plus powers
(:mod:`~pase.solvers.dp.blocks.fold`, option ``blocks``), then dominated
configs dropped (:mod:`~pase.solvers.dp.prune`, option ``prune``). Under a
memory cap the unconstrained optimum answers when it fits; otherwise the
Pareto fronts of :mod:`~pase.solvers.dp.capped.memory` (folded: the
Lagrangian route of :mod:`~pase.solvers.dp.blocks.capped`). Nothing below this
module solves: what needs a solve inside gets one from here.
"""
from __future__ import annotations

import dataclasses
import math
import time
from functools import partial
from typing import Any

import numpy as np

from pase.deadline import Deadline, active
from pase.errors import (
    OptionError,
    PaseError,
    TimeLimitError,
    check_choice,
    check_common,
    check_float,
    check_int,
)
from pase.problem import COST_RTOL, Problem, Solution, Status
from pase.solvers.dp import prune
from pase.solvers.dp.blocks import capped as blocks_capped
from pase.solvers.dp.blocks import fold
from pase.solvers.dp.blocks.dry import predict_blocks
from pase.solvers.dp.capped.lagrange import Dual
from pase.solvers.dp.capped.memory import DEFAULT_MAX_STATES, forbid_infinite_memory, solve_capped
from pase.solvers.dp.kernel import Ledger, min_plus
from pase.solvers.dp.ordering import ORDERINGS
from pase.solvers.dp.plan import (
    AUTO_ORDERINGS,
    CHOICES,
    DEFAULT_MEMORY_BUDGET,
    Plan,
    auto,
    choose,
    finite,
    plan_ordering,
    refuse_over_budget,
)

__all__ = ["BLOCKS_MIN_ENTRIES", "DP_ENTRIES_PER_SECOND", "FOLD_ENTRIES_PER_SECOND",
           "PRUNE_MIN_ENTRIES", "dry_run", "plan_seconds",
           "min_sum", "solve", "solve_blocks", "solve_blocks_capped"]

# Min-plus table entries the plain dp fills per second on the 2-core machine
# (benchmarks/results/scale.md, blocks off: 8.8e8-1.1e9 at p = 64-256, 5.6e8 for the
# Transformer at p = 1024); 8e8 puts each of those five rows within 1.5x. Dry runs use it.
DP_ENTRIES_PER_SECOND = 8e8
# Entries the steps' folds pass over per second (Plan.fold_entries: base copies and terms
# added into them), beside the min-plus work: most of a spanning forest's steps, whose
# tables are no larger than their edge matrices. Fitted on the decomposition's relaxed
# steps (llama2-70b, gpt3-175b p = 256 and gpt2-xl p = 1024 under alpha-beta, the paper
# Transformer at p = 1024): each predicted within 0.85-1.3x with the other two rates.
FOLD_ENTRIES_PER_SECOND = 3e9
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

    ``chosen`` (see :func:`~pase.solvers.dp.plan.plan`) fixes the order and, per
    position, ``v(i)``, ``D(i)``, the children and the later neighbours. Returns the
    optimum, a minimising choice and, with ``keep``, every table ``R(i)`` by position
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
            raises TimeLimitError. Checked inside a step (per block of rows), in block
            detection, the block powers and pruning, so the call ends soon after it.
        seed: unused (the DP is deterministic); accepted like every solver.
    """
    start = time.perf_counter()
    options = _checked(ordering, memory_budget, max_states, prune, blocks, time_limit, seed)
    with active(Deadline(options.time_limit, start=start)):
        return _solve(problem, start, options)


def _solve(problem: Problem, start: float, options: _Options) -> Solution:
    # Planning stops at a table over the budget: the answer is a refusal anyway.
    chosen, predicted = choose(problem, options.ordering, options.memory_budget,
                               limit_bytes=options.memory_budget)
    fell_back: dict[str, Any] = {}
    dual = None
    if options.blocks and not (chosen.fits(options.memory_budget)
                               and chosen.table_entries < BLOCKS_MIN_ENTRIES):
        folded, fell_back, dual = _solve_folded(problem, chosen, start, options)
        if folded is not None:
            return folded
    return _solve_plain(problem, chosen, predicted, start, options, fell_back, dual)


def solve_blocks(problem: Problem, *, time_limit: float | None = None,
                 **dp_options: Any) -> Solution | None:
    """The dp's optimum with repeated blocks folded, or None when nothing repeats.

    None also under a memory cap (the folding does not carry memory): the caller
    then runs the ordinary dp. ``dp_options`` (ordering, memory_budget,
    max_states, prune, seed) are :func:`solve`'s for the reduced Problem;
    ``time_limit`` covers the whole call: detection and the powers check it too (the
    reduced dp gets what is left). Stats: the dp's on the
    reduced Problem, plus the folding's (:meth:`~pase.solvers.dp.blocks.fold.Folding.stats`).

    Examples:
        >>> from pase.testing import random_chain
        >>> solve_blocks(random_chain(6, seed=3)) is None
        True
    """
    options = _checked(time_limit=time_limit, **dp_options)
    with active(Deadline(options.time_limit)):
        return _fold_solve(problem, options)[0]


def solve_blocks_capped(problem: Problem, free: Solution, *, deadline: float | None = None,
                        fallback: bool = True, **dp_options: Any
                        ) -> tuple[Solution | None, dict[str, Any]]:
    """The capped optimum with blocks folded, certified by the Lagrangian dual, or None
    (:func:`~pase.solvers.dp.blocks.capped.lagrangian_route`, each multiplier's
    Problem folded and solved as :func:`solve_blocks` does, with ``dp_options``)."""
    options = _checked(**dp_options)
    now = time.perf_counter()
    with active(Deadline(None if deadline is None else deadline - now, start=now)):
        return blocks_capped.lagrangian_route(problem, free, partial(_fold_solve_within, options, None),
                                              deadline=deadline, fallback=fallback)


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
                     "table_entries": finite(p.table_entries),
                     "peak_table_bytes": finite(p.peak_bytes),
                     "estimated_seconds": plan_seconds(p),
                     "within_memory_budget": p.fits(budget), "complete": p.complete,
                     "peak_vertex": None if step is None else shape.names[step.vertex]})
    best = auto([plans[n] for n in AUTO_ORDERINGS], budget)
    return {"vertices": shape.num_vertices, "edges": len(shape.edges),
            "memory_budget": finite(budget),
            "auto_ordering": best.ordering,
            "orderings": rows, **_dry_run_blocks(shape, best, budget)}


# -- the options --------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Options:
    """``solve``'s options, checked."""

    ordering: str
    memory_budget: float
    max_states: int
    prune: bool
    blocks: bool
    time_limit: float | None

    def deadline(self, start: float) -> float | None:
        return None if self.time_limit is None else start + self.time_limit


def _checked(ordering: str = "auto", memory_budget: float = DEFAULT_MEMORY_BUDGET,
             max_states: int = DEFAULT_MAX_STATES, prune: bool = True, blocks: bool = False,
             time_limit: float | None = None, seed: int | None = None) -> _Options:
    """The options checked in ``solve``'s order (the first bad one is the one named)."""
    check_choice("ordering", ordering, CHOICES)
    memory_budget = check_float("memory_budget", memory_budget, 0.0, strict=True, finite=False)
    max_states = check_int("max_states", max_states, 1)
    prune = _check_bool("prune", prune)
    blocks = _check_bool("blocks", blocks)
    check_common(time_limit, seed)
    return _Options(ordering, memory_budget, max_states, prune, blocks, time_limit)


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise OptionError(f"{name} must be true or false, got {value!r}")
    return bool(value)


# -- the reductions, chained -----------------------------------------------------------

def _solve_folded(problem: Problem, chosen: Plan, start: float, options: _Options
                  ) -> tuple[Solution | None, dict[str, Any], Dual | None]:
    """The answer with chains of repeated blocks folded (``solve``'s ``blocks``), or
    ``(None, stats, dual)`` when the plain dp must run: no chain found, or a binding cap
    whose Lagrangian route left a gap (``stats`` say so; ``dual``: its best multiplier and
    fitting strategy, which the plain capped dp starts from)."""
    # Under a cap the folded optimum of the uncapped Problem is the answer when it
    # fits: no strategy under the cap costs less than the best one without it.
    cap = problem.memory_cap
    free, chains = _fold_solve(problem if cap is None else problem.with_memory_cap(None), options)
    if free is None:
        return None, {}, None
    if cap is None or free.choice is None or problem.fits(free.choice):
        if cap is not None and free.choice is not None:
            free.stats.update(memory_cap=cap, capped=False, memory=problem.memory_of(free.choice))
        free.wall_time = time.perf_counter() - start
        return free, {}, None
    # The cap binds: the Lagrangian route through the powers. Its blocks are equal in cost
    # and memory, so equal in cost + lam * memory: each multiplier folds the same chains.
    answer, route = blocks_capped.lagrangian_route(
        forbid_infinite_memory(problem), free, partial(_fold_solve_within, options, chains),
        deadline=options.deadline(start), fallback=chosen.fits(options.memory_budget))
    if answer is None:
        return None, {"blocks_capped": f"{route['blocks_capped']}: plain capped dp",
                      "blocks_capped_bound": route.get("lagrangian_bound"),
                      "blocks_capped_seconds": route.get("blocks_capped_seconds")}, \
            route.get("dual")
    if answer.choice is not None:
        cost = _verified_cost(problem, answer.choice, answer.cost)
        bound = cost if answer.status is Status.OPTIMAL else answer.lower_bound
        answer = Solution(answer.choice, cost, answer.status, "dp", bound, stats=answer.stats)
    answer.wall_time = time.perf_counter() - start
    return answer, {}, None


def _fold_solve(problem: Problem, options: _Options, chains: list | None = None
                ) -> tuple[Solution | None, list]:
    """Fold (:func:`~pase.solvers.dp.blocks.fold.apply`; ``chains``: these, found before on
    a Problem of the same shape), run the plain dp on what is left, invert; None under a cap
    or when no chain was found (see :func:`solve_blocks`). Also the chains folded."""
    start = time.perf_counter()
    if problem.memory_cap is not None:
        return None, []
    reduced, folding = fold.apply(problem, chains=chains)
    if not folding.reductions:
        return None, []
    chains = [r.chain for r in folding.reductions]
    spent = time.perf_counter() - start
    inner_options = options if options.time_limit is None else dataclasses.replace(
        options, time_limit=max(1e-3, options.time_limit - spent))
    inner = _solve_unfolded(reduced, inner_options)
    stats = {**inner.stats, **folding.stats(problem)}
    if inner.choice is None:
        return Solution(None, math.inf, inner.status, "dp", wall_time=time.perf_counter() - start,
                        stats=stats), chains
    choice = fold.invert(inner.choice, folding)
    cost = problem.evaluate(choice)
    if not abs(cost - inner.cost) <= COST_RTOL * max(problem.term_scale(choice), inner.cost):
        raise PaseError(f"dp block folding internal error: the reduced optimum {inner.cost!r} differs "
                        f"from the re-evaluated cost {cost!r} of its expansion; please report this")
    return Solution(choice, cost, Status.OPTIMAL, "dp", lower_bound=cost,
                    wall_time=time.perf_counter() - start, stats=stats), chains


def _fold_solve_within(options: _Options, chains: list | None, problem: Problem,
                       time_limit: float | None) -> Solution | None:
    """:func:`_fold_solve` of ``chains`` under another time limit (the Lagrangian route's
    ``fold_solve``)."""
    return _fold_solve(problem, dataclasses.replace(options, time_limit=time_limit), chains)[0]


def _solve_unfolded(problem: Problem, options: _Options) -> Solution:
    """``solve`` with ``blocks`` off, on options already checked."""
    start = time.perf_counter()
    chosen, predicted = choose(problem, options.ordering, options.memory_budget,
                               limit_bytes=options.memory_budget)
    return _solve_plain(problem, chosen, predicted, start, options, {})


def _solve_plain(problem: Problem, chosen: Plan, predicted: dict[str, Any], start: float,
                 options: _Options, fell_back: dict[str, Any], dual: Dual | None = None
                 ) -> Solution:
    """The recurrence under ``chosen`` (pruned first when large), then under the cap if any
    (``dual``: the folded route's multiplier and best fitting strategy, so the plain
    optimum is known not to fit and the capped dp need not search the multiplier again)."""
    refuse_over_budget(problem, chosen, options.memory_budget)
    deadline = options.deadline(start)
    ledger = Ledger()
    run = _Pruning(forbid_infinite_memory(problem), chosen, predicted, options, deadline,
                   options.prune and chosen.table_entries >= PRUNE_MIN_ENTRIES)
    # Pruning ignores memory first: the unconstrained optimum is the answer when it
    # fits the cap, found as without a cap. Only a binding cap prunes again with memory;
    # after the folded route (``dual``) it is known to bind.
    found: tuple[tuple[int, ...], float] | None = None
    capped: dict[str, Any] = {}
    seeded = dual is not None and problem.memory_cap is not None
    work, chosen, predicted = run.apply(memory=seeded)
    if not seeded:
        total, choice, _ = min_sum(work, chosen, deadline=deadline, ledger=ledger)
        if total < math.inf:  # else every strategy has infinite cost: infeasible, as exhaustive says
            found = (choice, total)
        if found is not None and problem.memory_cap is not None and run.active \
                and not problem.fits(run.invert(found[0])):
            work, chosen, predicted = run.apply(memory=True)
            total, choice, _ = min_sum(work, chosen, deadline=deadline, ledger=ledger)
            found = (choice, total)
    if problem.memory_cap is not None and (found is not None or seeded):
        found, capped = solve_capped(work, chosen.elimination, found,
                                     partial(min_sum, chosen=chosen, deadline=deadline),
                                     max_states=options.max_states, deadline=deadline,
                                     dual=run.forward(dual) if seeded else None)
    stats: dict[str, Any] = {**chosen.summary(), "peak_table_bytes_used": ledger.peak}
    if options.ordering == "auto":
        stats["predicted"] = predicted
    if options.prune:
        stats.update(run.stats())
    stats.update(capped)
    stats.update(fell_back)
    if found is None:
        return Solution(None, math.inf, Status.INFEASIBLE, "dp",
                        wall_time=time.perf_counter() - start, stats=stats)
    choice = run.invert(found[0])
    if problem.memory_cap is not None:
        stats["memory"] = problem.memory_of(choice)
    cost = _verified_cost(problem, choice, found[1])
    return Solution(choice, cost, Status.OPTIMAL, "dp", lower_bound=cost,
                    wall_time=time.perf_counter() - start, stats=stats)


class _Pruning:
    """The prune reduction as ``solve`` chains it: each application's Problem and plan,
    the inverse of the last one, and the time of all of them. Inactive, it is the identity."""

    def __init__(self, base: Problem, chosen: Plan, predicted: dict[str, Any],
                 options: _Options, deadline: float | None, active: bool):
        self.base, self.unpruned = base, (chosen, predicted)
        self.options, self.deadline, self.active = options, deadline, active
        self.inverse: prune.PruneResult | None = None
        self.seconds = 0.0

    def apply(self, memory: bool) -> tuple[Problem, Plan, dict[str, Any]]:
        """``base`` without dominated configs (``memory``: compared too), its plan and
        ``predicted``; ``base`` and its plan when nothing was dropped."""
        self.inverse = None
        if not self.active:
            return (self.base, *self.unpruned)
        reduced, inverse = prune.apply(self.base, memory=memory, deadline=self.deadline)
        self.seconds += inverse.seconds
        if not inverse.dropped:
            return (self.base, *self.unpruned)
        self.inverse = inverse
        budget = self.options.memory_budget
        return (reduced, *choose(reduced, self.options.ordering, budget, limit_bytes=budget))

    def invert(self, choice: tuple[int, ...]) -> tuple[int, ...]:
        return choice if self.inverse is None else prune.invert(choice, self.inverse)

    def forward(self, dual: Dual) -> Dual:
        """``dual`` on the pruned Problem: its fitting strategy dropped when it holds a
        pruned config (a config dominating it would do as well, but none is recorded)."""
        if self.inverse is None or dual.best is None:
            return dual
        choice = []
        for kept, c in zip(self.inverse.kept, dual.best[0]):
            at = int(np.searchsorted(kept, c))
            if at == kept.size or kept[at] != c:
                return Dual(dual.lam, None)
            choice.append(at)
        return Dual(dual.lam, (tuple(choice), dual.best[1]))

    def stats(self) -> dict[str, Any]:
        return {"pruned": 0 if self.inverse is None else self.inverse.dropped,
                "prune_seconds": self.seconds}


def _verified_cost(problem: Problem, choice: tuple[int, ...], dp_value: float) -> float:
    """Re-evaluate the choice; a mismatch beyond rounding is a DP bug."""
    cost = float(problem.evaluate(choice))
    # Rounding scales with the summed magnitudes of the terms, not with their
    # (possibly cancelling) total.
    if cost != dp_value and not abs(cost - dp_value) <= COST_RTOL * problem.term_scale(choice):
        raise PaseError(f"dp internal error: the DP value {dp_value!r} differs from the "
                        f"re-evaluated cost {cost!r} of its choice; please report this")
    return cost


# -- dry runs ---------------------------------------------------------------------------

def _dry_run_blocks(shape: Any, best: Plan, budget: float) -> dict[str, Any]:
    """The ``blocks`` part of a dry run, and ``estimated_seconds``: what ``solve`` would
    spend with its defaults (blocks folded where it would fold them)."""
    plain_seconds = plan_seconds(best)
    if best.fits(budget) and best.table_entries < BLOCKS_MIN_ENTRIES:
        return {"blocks": {"tried": False, "reason": f"the plain plan has under "
                                                     f"{BLOCKS_MIN_ENTRIES:.0e} table entries"},
                "estimated_seconds": plain_seconds}
    report, reduced = predict_blocks(shape)
    blocks = {"tried": True, **report}
    if reduced is None:
        return {"blocks": blocks, "estimated_seconds": plain_seconds}
    p = choose(reduced, "auto", budget)[0]
    blocks["reduced"] = {**p.summary(), "vertices": reduced.num_vertices,
                         "estimated_seconds": plan_seconds(p), "within_memory_budget": p.fits(budget)}
    seconds = finite(blocks["fold_seconds"] + blocks["reduced"]["estimated_seconds"])
    blocks["estimated_seconds"] = seconds
    return {"blocks": blocks, "estimated_seconds": seconds}


def plan_seconds(p: Plan) -> float:
    """The plain dp's predicted seconds for a plan (its min-plus and fold work at
    DP_ENTRIES_PER_SECOND and FOLD_ENTRIES_PER_SECOND)."""
    return finite(finite(p.table_entries) / DP_ENTRIES_PER_SECOND
                  + finite(p.fold_entries) / FOLD_ENTRIES_PER_SECOND)

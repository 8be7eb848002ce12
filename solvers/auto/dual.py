"""The Lagrangian decomposition: a lower bound from a relaxation the dp can solve.

Keep some edges (:mod:`~pase.solvers.auto.split`); for every dropped edge ``(u, v)``
with matrix ``M``, let ``v`` see its own copy ``u'`` of ``u`` and relax ``u' = u``
with multipliers ``lam[c]`` on ``u``'s candidates. The copy is a leaf of ``v``, so it
is eliminated exactly: ``u`` pays ``lam[c]`` and ``v`` pays
``g[j] = min_c (M[c, j] - lam[c])``. For every ``lam`` and every strategy ``x``,
``lam[x_u] + g[x_v] <= M[x_u, x_v]``, so the relaxed optimum ``L(lam)`` is a lower
bound on the true optimum; with ``lam = 0`` it already counts each dropped edge's
cheapest entry per column.

The multipliers climb by subgradient steps (Polyak's step towards the best known
strategy's cost, halved when the bound stalls). A relaxed optimum whose every copy
agrees with its original (``argmin_c (M[c, x_v] - lam[c]) == x_u``) pays exactly the
true cost: the bound meets a strategy, which is then proven optimal. Otherwise the
best polished strategy and the best bound give the gap.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np

from pase.deadline import Deadline
from pase.errors import TimeLimitError
from pase.problem import Problem
from pase.solvers.auto.polish import polish
from pase.solvers.dp.core import min_sum
from pase.solvers.dp.core import solve as dp_solve
from pase.solvers.dp.plan import Plan

# Halve the step after this many steps without a better bound; stop below MIN_THETA.
STALL_STEPS = 10
MIN_THETA = 1e-3


@dataclass
class Progress:
    """The best strategy and bound so far, and how they were found."""

    choice: tuple[int, ...] | None = None
    upper: float = math.inf
    lower: float = -math.inf
    proven: bool = False      # a relaxed optimum met its own true cost
    steps: int = 0
    conflicts: dict[int, int] = field(default_factory=dict)  # dropped edge -> steps in conflict

    def within(self, gap: float) -> bool:
        """A strategy is known and the bound is within ``gap`` (relative) of its cost."""
        return self.upper < math.inf and self.upper - self.lower <= gap * abs(self.upper)

    def offer(self, problem: Problem, choice: tuple[int, ...]) -> None:
        if problem.memory_cap is not None and not problem.fits(choice):
            return
        cost = problem.evaluate(choice)
        if cost < self.upper:
            self.choice, self.upper = choice, cost


class Relaxation:
    """One choice of kept edges and its multipliers; :meth:`ascend` runs the steps."""

    def __init__(self, problem: Problem, kept: list[int], sub: Problem, plan: Plan,
                 multipliers: dict[int, np.ndarray]):
        self.problem, self.sub, self.plan = problem, sub, plan
        held = set(kept)
        self.dropped = [e for e in range(len(problem.edges)) if e not in held]
        self.lam = {e: multipliers.get(e, np.zeros(problem.edge_costs[e].shape[0]))
                    for e in self.dropped}

    def relaxed(self) -> tuple[float, tuple[int, ...] | None, dict[int, np.ndarray]]:
        """``L(lam)``, a relaxed optimum and, per dropped edge, each column's best copy."""
        costs = [c.copy() for c in self.problem.vertex_costs]
        copies = {}
        for e in self.dropped:
            u, v = self.problem.edges[e]
            reduced = self.problem.edge_costs[e] - self.lam[e][:, None]
            best = reduced.argmin(axis=0)
            costs[u] += self.lam[e]
            costs[v] += reduced[best, np.arange(reduced.shape[1])]
            copies[e] = best
        if self.problem.memory_cap is None:
            work = copy.copy(self.sub)
            work.vertex_costs = costs
            value, choice, _ = min_sum(work, self.plan)
            return value, (choice if value < math.inf else None), copies
        capped = Problem(costs, self.sub.edges, self.sub.edge_costs, memory=self.sub.memory,
                         memory_cap=self.sub.memory_cap)
        answer = dp_solve(capped, blocks=False)
        return answer.cost, answer.choice, copies

    def ascend(self, progress: Progress, steps: int, deadline: Deadline, gap: float) -> None:
        """Subgradient steps until proven, within ``gap``, stalled, out of steps or time."""
        theta, stall = 1.0, 0
        for _ in range(steps):
            if deadline.expired() or progress.within(gap):
                return
            try:
                value, choice, copies = self.relaxed()
            except TimeLimitError:  # the kernel checks the ambient deadline: keep what we have
                return
            progress.steps += 1
            if choice is None:  # no relaxed strategy fits: none of the true ones does
                progress.lower = math.inf
                return
            if value > progress.lower:
                progress.lower, stall = value, 0
            else:
                stall += 1
            progress.offer(self.problem, polish(self.problem, choice))
            conflicts = [(e, choice[self.problem.edges[e][0]], int(copies[e][choice[self.problem.edges[e][1]]]))
                         for e in self.dropped]
            conflicts = [(e, a, b) for e, a, b in conflicts if a != b]
            if not conflicts:  # every copy agrees: L(lam) is this strategy's own cost
                progress.offer(self.problem, choice)
                progress.proven = True
                return
            for e, _, _ in conflicts:
                progress.conflicts[e] = progress.conflicts.get(e, 0) + 1
            if stall >= STALL_STEPS:
                theta, stall = theta / 2, 0
                if theta < MIN_THETA:
                    return
            target = progress.upper if progress.upper < math.inf else value + abs(value) + 1.0
            step = theta * max(target - value, 0.0) / (2 * len(conflicts))
            if step == 0.0:
                return
            for e, a, b in conflicts:
                self.lam[e][a] += step
                self.lam[e][b] -= step

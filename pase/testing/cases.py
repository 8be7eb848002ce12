"""The battery's Problems: small enough for exhaustive search, at every cost scale.

A solver's scope picks the shapes: ``chain`` solvers see chains, ``tree``
solvers chains and trees, ``general`` solvers diamonds, fork-joins and random
DAGs as well. Each shape comes at three cost scales (seconds, plain numbers,
FLOP) and, for solvers that honour memory caps, also under a cap some strategies
fit and under one none fits.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from pase.problem import Problem, Solution, Status
from pase.testing.random_problems import (
    add_memory,
    cap_memory,
    random_chain,
    random_dag,
    random_tree,
    scale_costs,
)

SCOPES = ("chain", "tree", "general")
# (label, cost scale, memory scale): seconds-sized costs with byte-sized memory,
# plain small numbers, FLOP-sized costs.
SCALES = (("x1e-9", 1e-9, 2.0**26), ("x1", 1.0, 1.0), ("x1e15", 1e15, 2.0**30))
# Graph-derived Problems are normalised to this largest entry before scaling.
GRAPH_MAX_ENTRY = 100.0
# Where a feasible cap sits between the least and the most memory (0..1).
CAP_FRACTION = 0.4


@dataclass
class Case:
    """One Problem of the battery, with what a solver owes on it."""

    label: str
    problem: Problem
    graph_derived: bool  # from a real graph and cost model: every solver must solve it
    _optimum: Solution | None = field(default=None, repr=False)

    @property
    def optimum(self) -> Solution:
        """Exhaustive search's answer (INFEASIBLE when nothing fits the cap)."""
        if self._optimum is None:
            from pase.solvers import exhaustive

            self._optimum = exhaustive.solve(self.problem)
        return self._optimum

    @property
    def feasible(self) -> bool:
        return self.optimum.status is not Status.INFEASIBLE

    @functools.cached_property
    def magnitude(self) -> float:
        """The largest finite absolute cost entry (a description; tolerances use ``scale``)."""
        return _largest_entry(self.problem)

    def scale(self, choice: tuple[int, ...] | None = None) -> float:
        """The scale costs compare at: the summed magnitudes of the terms the optimum
        pays and, given one, of those ``choice`` pays (never the largest entry of the
        Problem, which a big-M entry would make excuse any error)."""
        scale = self.problem.term_scale(self.optimum.choice) if self.feasible else 0.0
        return max(scale, self.problem.term_scale(choice)) if choice is not None else scale


def _largest_entry(problem: Problem) -> float:
    """The largest finite |cost| (``+inf`` marks a forbidden candidate), 0 if none."""
    finite = [np.abs(a[np.isfinite(a)]) for a in problem.vertex_costs + problem.edge_costs]
    return max((float(a.max()) for a in finite if a.size), default=0.0)


def _graph(model: str, devices: int) -> Problem:
    from pase.api import build_problem

    p = build_problem(model, devices).problem.with_memory_cap(None)
    return scale_costs(p, GRAPH_MAX_ENTRY / (_largest_entry(p) or 1.0))


def _bases(scope: str, seed: int) -> list[tuple[str, Problem, bool]]:
    """(label, Problem at scale 1 without memory, graph-derived) for a scope."""
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}; known: {', '.join(SCOPES)}")
    bases = [("chain p=4", _graph("chain", 4), True), ("mlp p=2", _graph("mlp", 2), True),
             ("random chain 1", random_chain(1, 4, seed), False),
             ("random chain 5", random_chain(5, 5, seed + 1), False)]
    if scope in ("tree", "general"):
        bases += [("random tree 5", random_tree(5, 4, seed + 2), False),
                  ("random tree 7", random_tree(7, 3, seed + 3), False)]
    if scope == "general":
        bases += [("diamond p=4", _graph("diamond", 4), True),
                  ("fork-join p=2", _graph("fork-join", 2), True),
                  ("random dag 5", random_dag(5, 4, 2, seed + 4), False),
                  ("random dag 6", random_dag(6, 3, 4, seed + 5), False)]
    return bases


@functools.lru_cache(maxsize=12)
def battery_cases(scope: str, memory_cap: bool, seed: int = 0) -> tuple[Case, ...]:
    """Every Case a solver of ``scope`` meets; capped ones too when ``memory_cap``."""
    cases = []
    bases = _bases(scope, seed)
    for i, (label, base, graph) in enumerate(bases):
        for tag, cost_scale, memory_scale in SCALES:
            problem = scale_costs(base, cost_scale)
            cases.append(Case(f"{label} {tag}", problem, graph))
            if not memory_cap:
                continue
            with_memory = add_memory(problem, seed + i, memory_scale)
            cases.append(Case(f"{label} {tag} capped", cap_memory(with_memory, CAP_FRACTION),
                              graph))
            if i in (0, len(bases) - 1):
                cases.append(Case(f"{label} {tag} cap below any strategy",
                                  cap_memory(with_memory, -1.0), graph))
    return tuple(cases)


# A big-M entry is this many times the largest other entry (a penalty a user may
# write instead of +inf): a solver that scales its costs by the largest entry loses
# the others' precision and must then not claim OPTIMAL.
BIG_M_FACTORS = (1e6, 1e9, 1e13)


@functools.lru_cache(maxsize=6)
def big_m_cases(scope: str, seed: int = 0) -> tuple[Case, ...]:
    """The random Problems of ``scope`` with one big-M entry the optimum does not pay.

    The entry goes on the first edge (the first vertex with two candidates for an
    edge-less Problem), away from the optimum's pair, so the optimum is the base's.
    """
    from pase.solvers import exhaustive

    cases = []
    for label, base, graph in _bases(scope, seed):
        if graph:
            continue
        best = exhaustive.solve(base).choice
        for factor in BIG_M_FACTORS:
            problem = _with_big_m(base, best, factor * (_largest_entry(base) or 1.0))
            if problem is not None:
                cases.append(Case(f"{label} big-M x{factor:g}", problem, False))
    return tuple(cases)


def _with_big_m(base: Problem, best: tuple[int, ...], big: float) -> Problem | None:
    vertex_costs = [c.copy() for c in base.vertex_costs]
    edge_costs = [m.copy() for m in base.edge_costs]
    for (u, v), m in zip(base.edges, edge_costs):
        if m.size > 1:
            at = (m.shape[0] - 1, m.shape[1] - 1)
            m[at if at != (best[u], best[v]) else (0, 0)] = big
            break
    else:
        for v, c in enumerate(vertex_costs):
            if c.size > 1:
                c[c.size - 1 if best[v] != c.size - 1 else 0] = big
                break
        else:
            return None
    return Problem(vertex_costs, base.edges, edge_costs, base.names, unit=base.unit)


def big_problems(scope: str, seed: int = 0) -> list[tuple[str, Problem]]:
    """Problems too large to finish fast, for the time-limit check, at every scale."""
    if scope == "chain":
        base = random_chain(400, 30, seed)
    elif scope == "tree":
        base = random_tree(200, 30, seed)
    else:
        base = random_dag(40, 20, 20, seed)
    return [(f"a {base.num_vertices}-vertex {scope} Problem {tag}", scale_costs(base, s))
            for tag, s, _ in SCALES]


# Extreme scales (issue 27): (label, cost scale, memory scale or None for uncapped only).
# None as the cost scale puts the largest possible total at NEAR_MAX_SHARE of float64's
# max, where a solver that adds up more than one strategy's terms overflows.
EXTREME_SCALES = (("x1e-300", 1e-300, 1e300), ("x1e-150", 1e-150, None),
                  ("x1e150", 1e150, None), ("x1e300", 1e300, 1e-300), ("near the float max", None, 0.0))
NEAR_MAX_SHARE = 0.25


@functools.lru_cache(maxsize=6)
def extreme_cases(scope: str, memory_cap: bool, seed: int = 0) -> tuple[Case, ...]:
    """The random Problems of ``scope`` with costs from 1e-300 to near float64's max, and
    memory from 1e-300 to near it under a cap (``memory_cap``): every solver must answer
    them honestly or refuse them with a PaseError, never raise anything else."""
    from pase.problem import FLOAT_MAX

    cases = []
    for i, (label, base, graph) in enumerate(_bases(scope, seed)):
        if graph:
            continue
        worst = sum(float(np.abs(a).max()) for a in base.vertex_costs + base.edge_costs) or 1.0
        for tag, cost_scale, memory_scale in EXTREME_SCALES:
            factor = NEAR_MAX_SHARE * FLOAT_MAX / worst if cost_scale is None else cost_scale
            problem = scale_costs(base, factor)
            cases.append(Case(f"{label} {tag}", problem, False))
            if memory_cap and memory_scale is not None:
                # footprints are 1..49 units: near the max, their total is a quarter of it
                units = memory_scale or NEAR_MAX_SHARE * FLOAT_MAX / (49 * base.num_vertices)
                capped = cap_memory(add_memory(problem, seed + i, units), CAP_FRACTION)
                cases.append(Case(f"{label} {tag} capped", capped, False))
    return tuple(cases)

"""The other ways to go on, each priced like the re-plan (steps x step + migration).

- ``keep``: every op keeps its old config on the new setting (when each is still a
  candidate there and the memory cap holds), its state moved as the rule says.
- ``least``: the fastest strategy among those that move the least state. The
  migration is a sum of per-op terms, so the least total is every op at its own
  least (nothing, where an op can stay put): each op is restricted to those
  candidates and the step time is minimised exactly on that restricted Problem.
  With the same devices this is the best strategy that moves nothing (the old
  layout is one of them).
- ``fresh``: the fresh optimum of the new setting (what a plain ``pase solve``
  picks, the re-plan's answer as steps grow), its state moved from the old layout.
- ``restart``: the fresh optimum, every device reloading its state from the
  checkpoint (no device keeps anything): a restart from scratch.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Sequence

import numpy as np

from pase.problem import Problem
from pase.replan.migration import op_migration

if TYPE_CHECKING:
    from pase.replan.plan import Prepared


def baseline_choices(prep: "Prepared") -> dict[str, tuple[str, tuple[int, ...], list | None]]:
    """Per available baseline: what it is, its strategy, and (``restart``) its own migration
    (one config per op); the step count only prices them."""
    out: dict[str, tuple[str, tuple[int, ...], list | None]] = {}
    step = prep.built.problem
    keep = prep.keep
    if keep is not None and all(k is not None for k in keep) and step.fits([int(k) for k in keep]):
        out["keep"] = ("the old configs on the new setting, their state moved",
                       tuple(int(k) for k in keep), None)
    least = _least(prep)
    if least is not None:
        out["least"] = ("the fastest strategy that moves the least state", tuple(least), None)
    fresh = prep.solve(step)
    if fresh.choice is not None:
        out["fresh"] = ("the fresh optimum, its state moved", tuple(fresh.choice), None)
        scratch = dataclasses.replace(prep.setting, survivors=0)
        configs = prep.built.space.configs
        moved = [op_migration(o, c, op, configs[v][[k]], scratch) for v, (o, c, op, k)
                 in enumerate(zip(prep.old_graph.ops, prep.old_cfgs, prep.built.graph.ops, fresh.choice))]
        out["restart"] = ("the fresh optimum, all state read from the checkpoint",
                          tuple(fresh.choice), moved)
    return out


def _least(prep: "Prepared") -> list[int] | None:
    """The fastest strategy with every op at its least migration, or None when none fits."""
    keep = [np.flatnonzero(m.seconds == m.seconds.min()) for m in prep.migrations]
    solution = prep.solve(restrict(prep.built.problem, keep))
    if solution.choice is None:
        return None
    return [int(keep[v][k]) for v, k in enumerate(solution.choice)]


def restrict(problem: Problem, keep: Sequence[np.ndarray]) -> Problem:
    """``problem`` with only the candidates ``keep[v]`` (indices) at each vertex."""
    cands = None if problem.candidates is None else [
        dataclasses.replace(c, configs=c.configs[k]) for c, k in zip(problem.candidates, keep)]
    return Problem([c[k] for c, k in zip(problem.vertex_costs, keep)], problem.edges,
                   [m[np.ix_(keep[u], keep[v])] for (u, v), m in zip(problem.edges, problem.edge_costs)],
                   problem.names, None if problem.memory is None else
                   [m[k] for m, k in zip(problem.memory, keep)], problem.memory_cap, problem.unit,
                   cands, problem.devices)

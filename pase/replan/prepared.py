"""A re-plan built once (the new Problem, every candidate's migration), answered per step count."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from pase import api
from pase.errors import StrategyError
from pase.ir import Graph
from pase.problem import Problem, Solution
from pase.replan.migration import Migration, Setting
from pase.replan.result import OpChange, Plan, ReplanResult, break_even
from pase.strategy import Strategy

WHAT = "the re-plan: steps x step + migration, minimised"


@dataclass
class Prepared:
    """What :func:`pase.replan.prepare` builds: call :meth:`replan` for a step count.

    ``migrations[v]`` holds op ``v``'s migration per candidate; ``keep[v]`` its old
    config's candidate index on the new setting (None where it is not one; ``keep``
    None when no op keeps its config). The baselines' strategies do not depend on the
    step count, so they are solved once, on the first call.
    """

    built: api.Built
    migrations: list[Migration]
    setting: Setting
    old_graph: Graph
    old_cfgs: list[np.ndarray]
    old_devices: int
    keep: list[int | None] | None
    solver: str
    time_limit: float | None
    seed: int | None
    solver_options: dict[str, Any]
    _baselines: dict[str, tuple] | None = field(default=None, repr=False)

    def solve(self, problem: Problem) -> Solution:
        return api.run_solver(self.solver, problem, time_limit=self.time_limit, seed=self.seed,
                              **self.solver_options)

    def problem(self, steps: float) -> Problem:
        from pase.replan.plan import replan_problem

        return replan_problem(self.built.problem, [m.seconds for m in self.migrations], steps)

    def replan(self, steps: float) -> ReplanResult:
        """The best strategy for ``steps`` remaining steps, with the baselines and break-even."""
        from pase.replan.plan import prefer

        problem = self.problem(steps)
        solution = self.solve(problem)
        if solution.choice is not None and self.keep is not None:
            solution = prefer(problem, solution, self.keep)
        return self._result(problem, solution, steps)

    def plan(self, name: str, what: str, choice: Sequence[int], steps: float,
             migrations: list[Migration] | None = None) -> Plan:
        """``choice`` priced: its step time, and its migration (``migrations``: one config
        per op, already the choice's; default this re-plan's vectors)."""
        ms = self.migrations if migrations is None else migrations
        pick = [0] * len(ms) if migrations is not None else [int(c) for c in choice]
        return Plan(name, what, self.built.problem.evaluate(choice),
                    float(sum(m.seconds[k] for m, k in zip(ms, pick))),
                    float(sum(m.total_bytes[k] for m, k in zip(ms, pick))),
                    float(sum(m.restored_bytes[k] for m, k in zip(ms, pick))), steps,
                    tuple(int(c) for c in choice))

    def baselines(self, steps: float) -> dict[str, Plan]:
        from pase.replan.baselines import baseline_choices

        if self._baselines is None:
            self._baselines = baseline_choices(self)
        return {name: self.plan(name, what, choice, steps, moved)
                for name, (what, choice, moved) in self._baselines.items()}

    def _result(self, problem: Problem, solution: Solution, steps: float) -> ReplanResult:
        built = self.built
        args = dict(model=built.graph.name, devices=built.space.devices, old_devices=self.old_devices,
                    survivors=self.setting.survivors,
                    cluster=built.cost_model.for_devices(built.space.devices).cluster.name,
                    steps=steps, solver=self.solver, solution=solution, problem=problem)
        if solution.choice is None:
            return ReplanResult(**args, strategy=None, chosen=None, changes=[], baselines={},
                                break_even_against=None, break_even_steps=None)
        choice = solution.choice
        chosen = self.plan("replan", WHAT, choice, steps)
        others = self.baselines(steps)
        against = "least" if "least" in others else None
        strategy = Strategy.from_choice(built.graph, built.space, built.problem, choice,
                                        cost_model=built.cost_model.name, build_seconds=built.seconds,
                                        meta=api.memory_report(built.problem, choice))
        return ReplanResult(**args, strategy=strategy, chosen=chosen, changes=self.changes(choice),
                            baselines=others, break_even_against=against,
                            break_even_steps=None if against is None else break_even(chosen, others[against]),
                            notes=self.notes(others))

    def notes(self, others: dict[str, Plan]) -> list[str]:
        """Why a baseline is missing (the first op whose old config is not a candidate)."""
        if "keep" in others:
            return []
        space, graph = self.built.space, self.built.graph
        for v, op in enumerate(graph.ops):
            if self.keep is None or self.keep[v] is None:
                old = {n: int(f) for n, f in zip(op.dim_names, self.old_cfgs[v])}
                try:
                    space.index_of(op.name, old)
                except StrategyError as exc:
                    return [f"keep is not available: {exc}"]
        return ["keep is not available: the old configs exceed the memory cap on the new setting"]

    def changes(self, choice: Sequence[int]) -> list[OpChange]:
        """Ops whose config changes or whose state moves, in graph order."""
        out = []
        for v, op in enumerate(self.built.graph.ops):
            m, k = self.migrations[v], int(choice[v])
            old = dict(zip(op.dim_names, (int(f) for f in self.old_cfgs[v])))
            new = self.built.space.config(v, k)
            if old != new or m.seconds[k] > 0:
                out.append(OpChange(op.name, old, new, float(m.seconds[k]), float(m.max_bytes[k]),
                                    float(m.total_bytes[k]), float(m.restored_bytes[k])))
        return out

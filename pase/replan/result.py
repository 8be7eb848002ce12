"""What a re-plan answers: the chosen strategy, its migration, the baselines, the break-even."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pase.problem import Problem, Solution
from pase.strategy import OUTPUT_VERSION, Strategy, finite_json, finite_or_none, json_text
from pase.text import table


@dataclass(frozen=True)
class Plan:
    """One way to go on: a strategy's step time, its migration, and their total over the steps."""

    name: str
    what: str
    step_seconds: float
    migration_seconds: float
    migration_bytes: float  # bytes all devices receive
    restored_bytes: float   # of which read from the checkpoint
    steps: float
    choice: tuple[int, ...] | None = None

    @property
    def total_seconds(self) -> float:
        return self.steps * self.step_seconds + self.migration_seconds

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "what": self.what, "step_seconds": self.step_seconds,
                "migration_seconds": self.migration_seconds, "migration_bytes": self.migration_bytes,
                "restored_bytes": self.restored_bytes, "total_seconds": self.total_seconds}


@dataclass(frozen=True)
class OpChange:
    """An op whose layout changes (or whose state moves): old and new split, its migration."""

    op: str
    old: dict[str, int]
    new: dict[str, int]
    seconds: float
    max_bytes: float
    total_bytes: float
    restored_bytes: float

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "old": self.old, "new": self.new, "migration_seconds": self.seconds,
                "max_device_bytes": self.max_bytes, "bytes": self.total_bytes,
                "restored_bytes": self.restored_bytes}


def break_even(chosen: Plan, base: Plan) -> float | None:
    """Steps from which on ``chosen`` costs no more than ``base`` for every larger step count:
    ``(m_c - m_b) / (s_b - s_c)`` when ``chosen`` has the faster step (0 when it also migrates
    no more); 0 for an equal step and no more migration; None when it never does (an equal
    step and more migration, or a slower step: then ``base`` wins as the steps grow)."""
    if chosen.step_seconds < base.step_seconds:
        return max(0.0, (chosen.migration_seconds - base.migration_seconds)
                   / (base.step_seconds - chosen.step_seconds))
    if chosen.step_seconds == base.step_seconds and chosen.migration_seconds <= base.migration_seconds:
        return 0.0
    return None


@dataclass
class ReplanResult:
    """The answer of :func:`pase.replan.replan`.

    ``strategy`` is the chosen strategy on the new setting, costed per step (its
    ``total_cost`` is the step time); ``chosen`` its :class:`Plan` (step, migration,
    total over ``steps``); ``baselines`` the other ways to go on, by name (``keep``,
    ``least``, ``fresh``, ``restart``; absent when not available:
    :mod:`pase.replan.baselines`); ``break_even_steps`` against ``break_even_against``
    (``least``: the fastest strategy that moves the least state).
    """

    model: str
    devices: int
    old_devices: int
    survivors: int
    cluster: str
    steps: float
    solver: str
    solution: Solution
    strategy: Strategy | None
    chosen: Plan | None
    changes: list[OpChange]
    baselines: dict[str, Plan]
    break_even_against: str | None
    break_even_steps: float | None
    problem: Problem
    notes: list[str] = field(default_factory=list)
    cost_model: str = ""  # the model that priced the step
    record: dict[str, Any] = field(default_factory=dict)  # the new model's options and batch

    @property
    def status(self) -> str:
        return str(self.solution.status)

    def to_dict(self) -> dict[str, Any]:
        c = self.chosen
        out: dict[str, Any] = {
            "version": OUTPUT_VERSION, "model": self.model, "devices": self.devices,
            "old_devices": self.old_devices, "survivors": self.survivors, "cluster": self.cluster,
            "cost_model": self.cost_model,
            "steps": self.steps, "solver": self.solver, "status": self.status,
            "solve_seconds": self.solution.wall_time,
            "total_seconds": None if c is None else c.total_seconds,
            "step_seconds": None if c is None else c.step_seconds,
            "migration": None if c is None else {
                "seconds": c.migration_seconds, "bytes": c.migration_bytes,
                "max_device_bytes": sum(ch.max_bytes for ch in self.changes),
                "restored_bytes": c.restored_bytes},
            "break_even": {"against": self.break_even_against, "steps": self.break_even_steps},
            "changed_ops": [ch.to_dict() for ch in self.changes],
            "baselines": {name: plan.to_dict() for name, plan in self.baselines.items()},
            "strategy": {} if self.strategy is None else dict(self.strategy.configs),
            "notes": list(self.notes), **self.record,
        }
        return finite_json(out)

    def to_json(self) -> str:
        return json_text(self.to_dict())

    def table(self, limit: int = 20) -> str:
        """The text report of ``pase replan``."""
        model = f", {self.cost_model} model" if self.cost_model else ""
        head = (f"{self.model}: {self.old_devices} -> {self.devices} devices on {self.cluster} "
                f"({self.survivors} surviving ranks{model}), {_num(self.steps)} steps, solver {self.solver}: "
                f"{self.status}")
        lines = [head]
        c = self.chosen
        if c is None:
            lines.append("no strategy fits the memory cap on the new setting")
            return "\n".join(lines + self.notes)
        lines.append(f"chosen: {_s(c.total_seconds)} in all = {_num(self.steps)} x {_s(c.step_seconds)} "
                     f"per step + {_s(c.migration_seconds)} migration "
                     f"({_bytes(c.migration_bytes)} moved, {_bytes(c.restored_bytes)} from the checkpoint)")
        base = self.baselines.get(self.break_even_against or "")
        if base is not None:
            be = self.break_even_steps
            text = ("the re-plan is that plan" if base.choice == c.choice else
                    "moving never pays off (no faster step)" if be is None
                    else f"moving pays off after {_num(be)} steps")
            lines.append(f"break-even against {base.name} ({base.what}): {text}")
        rows = []
        for plan in [c, *self.baselines.values()]:
            ratio = plan.total_seconds / c.total_seconds if c.total_seconds > 0 else math.nan
            rows.append((plan.name, _s(plan.step_seconds), _s(plan.migration_seconds),
                         _s(plan.total_seconds), "-" if math.isnan(ratio) else f"{ratio:.3f}x",
                         plan.what))
        lines += ["", table(rows, ("plan", "step", "migration", "total", "vs chosen", "what"))]
        changed = sum(1 for ch in self.changes if ch.old != ch.new)
        moving = sum(1 for ch in self.changes if ch.seconds > 0)
        lines += ["", f"{changed} ops change layout, {moving} move state"
                      f"{f' (the first {limit} shown)' if len(self.changes) > limit else ''}:"]
        rows = []
        for ch in self.changes[:limit]:
            rows.append((ch.op, _split(ch.old), _split(ch.new), _s(ch.seconds), _bytes(ch.max_bytes)))
        lines.append(table(rows, ("op", "old split", "new split", "migration", "max/device")))
        return "\n".join(lines + [f"note: {n}" for n in self.notes])


def _split(cfg: dict[str, int]) -> str:
    return ", ".join(f"{d}={f}" for d, f in cfg.items() if f > 1) or "-"


def _s(seconds: float) -> str:
    return f"{seconds:.4g} s"


def _num(x: float) -> str:
    return f"{x:.4g}" if x != int(x) or x >= 1e6 else str(int(x))


def _bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3f} {unit}"
    return f"{finite_or_none(n):.0f} B"

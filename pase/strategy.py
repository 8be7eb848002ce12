"""Strategy: the config chosen for every op, with its cost broken down."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from pase.errors import StrategyError
from pase.ir import Graph
from pase.problem import Problem, Solution
from pase.space import ConfigSpace

# Version of the JSON that `pase solve/evaluate --format json` print; bump on a breaking change.
OUTPUT_VERSION = 1


@dataclass
class Strategy:
    """A config per op (``{op: {dim: factor}}``) and what it costs.

    ``op_costs`` holds each op's layer cost; ``edge_costs`` each costed edge's
    re-distribution cost as ``(producer, consumer, cost)``. Their sum is
    ``total_cost``, in ``unit``.
    """

    graph_name: str
    devices: int
    configs: dict[str, dict[str, int]]
    total_cost: float
    unit: str
    op_costs: dict[str, float]
    edge_costs: list[tuple[str, str, float]]
    cost_model: str = ""
    solution: Solution | None = None
    build_seconds: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_choice(cls, graph: Graph, space: ConfigSpace, problem: Problem,
                    choice: tuple[int, ...], **kwargs: Any) -> "Strategy":
        c = problem.check_choice(choice)
        names = problem.names
        op_costs = {names[v]: float(problem.vertex_costs[v][c[v]]) for v in range(len(names))}
        edges = [(names[u], names[v], float(m[c[u], c[v]]))
                 for (u, v), m in zip(problem.edges, problem.edge_costs)]
        total = sum(op_costs.values()) + sum(e[2] for e in edges)
        configs = {op.name: space.config(i, int(c[i])) for i, op in enumerate(graph.ops)}
        return cls(graph.name, space.devices, configs, total, problem.unit, op_costs, edges,
                   **kwargs)

    # -- presentation ------------------------------------------------------------
    def split(self, op: str) -> dict[str, int]:
        """Only the dims that are actually split (factor > 1)."""
        return {d: f for d, f in self.configs[op].items() if f > 1}

    def table(self, limit: int | None = None) -> str:
        """A readable per-op table: split dims, layer cost, share of the total."""
        rows = [("op", "split", f"cost ({self.unit})", "share")]
        total = self.total_cost or 1.0
        for name in list(self.configs)[:limit]:
            split = ", ".join(f"{d}={f}" for d, f in self.split(name).items()) or "-"
            rows.append((name, split, f"{self.op_costs[name]:.4g}", f"{100 * self.op_costs[name] / total:.1f}%"))
        edge_total = sum(e[2] for e in self.edge_costs)
        rows.append(("(edges)", f"{sum(1 for e in self.edge_costs if e[2] > 0)} re-distributing",
                     f"{edge_total:.4g}", f"{100 * edge_total / total:.1f}%"))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = ["  ".join(cell.ljust(w) if i < 2 else cell.rjust(w)
                           for i, (cell, w) in enumerate(zip(row, widths))) for row in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON form documented in the README."""
        sol = self.solution
        out: dict[str, Any] = {
            "version": OUTPUT_VERSION,
            "model": self.graph_name,
            "devices": self.devices,
            "solver": sol.solver if sol else None,
            "cost_model": self.cost_model,
            "total_cost": self.total_cost,
            "cost_unit": self.unit,
            "status": str(sol.status) if sol else None,
            "lower_bound": sol.lower_bound if sol else None,
            "gap": sol.gap if sol else None,
            "build_seconds": self.build_seconds,
            "solve_seconds": sol.wall_time if sol else None,
            "stats": _jsonable(sol.stats) if sol else {},
            "strategy": self.configs,
            "op_costs": self.op_costs,
            "edge_costs": [{"src": s, "dst": d, "cost": c} for s, d, c in self.edge_costs],
        }
        out.update(_jsonable(self.meta))
        return out

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=1)
        if path is not None:
            Path(path).write_text(text + "\n")
        return text


def read_strategy_file(path: str | Path) -> dict[str, dict[str, int]]:
    """Read ``{op: {dim: factor}}`` from a JSON file (or a ``pase solve`` output)."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise StrategyError(f"cannot read strategy file {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise StrategyError(f"strategy file {path} is not valid JSON: {exc}") from exc
    if isinstance(data, Mapping) and "strategy" in data:
        data = data["strategy"]
    return check_strategy_mapping(data)


def check_strategy_mapping(data: Any) -> dict[str, dict[str, int]]:
    if not isinstance(data, Mapping):
        raise StrategyError("a strategy must map op names to {dim: factor} objects")
    out = {}
    for op, dims in data.items():
        if not isinstance(dims, Mapping):
            raise StrategyError(f"strategy entry for op {op!r} must be a {{dim: factor}} object")
        for d, f in dims.items():
            if isinstance(f, bool) or not isinstance(f, int) or f < 1:
                raise StrategyError(f"strategy splits dim {d!r} of op {op!r} {f!r} ways; "
                                    f"factors must be integers >= 1")
        out[str(op)] = {str(d): int(f) for d, f in dims.items()}
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None if np.isnan(value) else ("inf" if value > 0 else "-inf")
    return value

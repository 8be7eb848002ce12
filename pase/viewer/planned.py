"""What a page shows one strategy from: the strategy, its graph, and the Problem that priced it.

Every cost on a page is the cost model's own: an op's layer cost and memory are
its vertex cost and memory entries for the chosen config, a re-layout's cost the
edge matrix's entry, read from the Problem the strategy was priced with.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pase.cluster import Cluster
from pase.ir import Graph
from pase.problem import Problem
from pase.strategy import Strategy


@dataclass
class Planned:
    """A strategy with what priced it. ``choice`` indexes the Problem's candidates."""

    strategy: Strategy
    graph: Graph
    problem: Problem
    choice: tuple[int, ...]
    cluster: Cluster | None = None
    bytes_per_element: float = 4.0
    notes: list[str] = field(default_factory=list)  # shown under the summary

    @property
    def devices(self) -> int:
        return self.strategy.devices

    def op_memory(self) -> list[float | None]:
        """Bytes per device each op's chosen config takes (None without a memory model)."""
        memory = self.problem.memory
        if memory is None:
            return [None] * len(self.graph.ops)
        return [float(memory[v][c]) for v, c in enumerate(self.choice)]

    def incoming(self) -> list[list[tuple[int, float]]]:
        """Per op, its costed incoming edges: ``(producer index, edge cost)``."""
        out: list[list[tuple[int, float]]] = [[] for _ in self.graph.ops]
        c = self.choice
        for (u, v), m in zip(self.problem.edges, self.problem.edge_costs):
            out[v].append((u, float(m[c[u], c[v]])))
        return out


def planned_from(built: Any, choice: tuple[int, ...], strategy: Strategy) -> Planned:
    """A :class:`Planned` from an :class:`pase.api.Built` and a choice on its Problem."""
    model = built.cost_model
    cluster = getattr(model, "cluster", None)
    if cluster is not None and hasattr(model, "for_devices"):
        cluster = model.for_devices(built.space.devices).cluster  # grown to the device count
    if not isinstance(cluster, Cluster):
        cluster = None
    per = getattr(model, "bytes_per_element", 4.0)
    return Planned(strategy, built.graph, built.problem, tuple(int(x) for x in np.asarray(choice)),
                   cluster, float(per) if isinstance(per, (int, float)) else 4.0)

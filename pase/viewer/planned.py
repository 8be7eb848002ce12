"""What a page shows one strategy from: the strategy, its graph, and its cluster.

Every cost on a page is the cost model's own, as the Strategy carries it: an op's
layer cost is its ``op_costs`` entry, its memory its carried ``op_prices`` memory
(:mod:`pase.prices`), a re-layout's cost its ``edge_costs`` entry. Nothing here
builds a Problem: a Strategy that carries its prices is drawn as it is
(:func:`carries`); one that does not is priced first (:func:`pase.viewer.write.planned`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pase.cluster import Cluster
from pase.ir import Graph
from pase.strategy import Strategy

# Cost models whose Strategy carries all a page shows: the paper's (costs only, no
# machine) and the calibrated model's (costs, memory, its cluster and element size).
SELF_DRAWN = ("paper", "calibrated")


@dataclass
class Planned:
    """A strategy with its graph and the cluster it runs on (None: the paper's model)."""

    strategy: Strategy
    graph: Graph
    cluster: Cluster | None = None
    bytes_per_element: float = 4.0
    notes: list[str] = field(default_factory=list)  # shown under the summary
    layout: Any = None  # the named layout it was drawn from (``pase view --layout``), if any

    @property
    def devices(self) -> int:
        return self.strategy.devices

    def op_memory(self) -> list[float | None]:
        """Bytes per device each op's chosen config takes (None without a memory model)."""
        prices = self.strategy.op_prices
        return [prices.get(op.name, {}).get("memory") for op in self.graph.ops]

    def incoming(self) -> list[list[tuple[int, float]]]:
        """Per op, its costed incoming edges: ``(producer index, edge cost)``."""
        out: list[list[tuple[int, float]]] = [[] for _ in self.graph.ops]
        for src, dst, cost in self.strategy.edge_costs:
            out[self.graph.index(dst)].append((self.graph.index(src), float(cost)))
        return out


def carries(strategy: Strategy) -> bool:
    """Whether ``strategy`` carries everything its page shows, so it is drawn without
    pricing it again: its costs, and for the calibrated model each op's memory, the
    cluster and the element size it was priced with."""
    if not strategy.op_costs or strategy.cost_model not in SELF_DRAWN:
        return False
    if strategy.cost_model == "paper":
        return True
    return "cluster" in strategy.meta and "bytes_per_element" in strategy.meta and \
        all("memory" in strategy.op_prices.get(op, {}) for op in strategy.configs)


def planned_of(strategy: Strategy, graph: Graph, cluster: Any = None) -> Planned:
    """A :class:`Planned` from a Strategy that :func:`carries` its prices, on ``graph``;
    ``cluster`` (default: the one it was priced on) runs the Time tab's simulation."""
    from pase.cluster import get_cluster

    if cluster is None:
        cluster = strategy.meta.get("cluster")
    resolved = None if cluster is None else get_cluster(cluster, strategy.devices)
    per = strategy.meta.get("bytes_per_element", 4.0)
    return Planned(strategy, graph, resolved, float(per))


def planned_from(built: Any, strategy: Strategy) -> Planned:
    """A :class:`Planned` from an :class:`pase.api.Built` that priced ``strategy``."""
    model = built.cost_model
    cluster = getattr(model, "cluster", None)
    if cluster is not None and hasattr(model, "for_devices"):
        cluster = model.for_devices(built.space.devices).cluster  # grown to the device count
    if not isinstance(cluster, Cluster):
        cluster = None
    per = getattr(model, "bytes_per_element", 4.0)
    return Planned(strategy, built.graph, cluster,
                   float(per) if isinstance(per, (int, float)) else 4.0)

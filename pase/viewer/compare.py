"""Two strategies of one graph side by side: the ops whose configs differ, and the costs.

An op differs when its split or its variant (ZeRO stage, recomputation) differs.
Per differing op the page shows both splits, both layer costs, both incoming
re-layout costs and both memories; the totals compare the whole strategies
(every op, every edge), so ops with the same split whose neighbours changed are
counted in the totals even though they are not listed.
"""
from __future__ import annotations

from typing import Any

from pase.errors import StrategyError
from pase.strategy import finite_or_none
from pase.viewer.plan import short
from pase.viewer.planned import Planned


def differing(a: Planned, b: Planned) -> list[str]:
    """Names of the ops whose split or variant differs, in graph order."""
    out = []
    for op in a.graph.ops:
        ca = {d: f for d, f in a.strategy.configs.get(op.name, {}).items() if f > 1}
        cb = {d: f for d, f in b.strategy.configs.get(op.name, {}).items() if f > 1}
        if ca != cb or a.strategy.variants.get(op.name) != b.strategy.variants.get(op.name):
            out.append(op.name)
    return out


def comparison(a: Planned, b: Planned, rows_a: list[dict], rows_b: list[dict],
               labels: tuple[str, str]) -> dict[str, Any]:
    """Page data: ``ops`` as ``[index, row of b]`` for each differing op, and both totals."""
    if [op.name for op in a.graph.ops] != [op.name for op in b.graph.ops]:
        raise StrategyError(f"--compare: the strategies are for different graphs "
                            f"({a.strategy.graph_name!r} and {b.strategy.graph_name!r})")
    index = {op.name: i for i, op in enumerate(a.graph.ops)}
    ops = [[index[name], rows_b[index[name]]] for name in differing(a, b)]
    return {"labels": list(labels), "ops": ops,
            "totals": [_totals(a, rows_a), _totals(b, rows_b)]}


def _totals(p: Planned, rows: list[dict]) -> dict[str, Any]:
    s = p.strategy
    mem = p.strategy.meta.get("memory_bytes")
    return {"total": finite_or_none(s.total_cost), "compute": finite_or_none(s.compute_cost),
            "communication": finite_or_none(s.communication_cost),
            "memory": short(mem) if mem is not None else None}

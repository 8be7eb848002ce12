"""The simulator's timeline of one step as compact page data.

``rows`` are the resources in the simulator's order (``gpuN`` compute, then its
ports ``gpuN.intra``/``gpuN.inter``; for a pipeline, ``stageN``), ``labels`` the
distinct event labels, ``kinds`` the event kinds, and ``events`` a flat list of
``row, start, end, label, kind`` (seconds, rounded to :data:`DIGITS` digits).
Past :data:`MAX_EVENTS` events the rest are dropped and ``dropped`` says how many
(the page notes it); the step time still counts them all.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

# Most events a page carries: about 2.5 MB of JSON, and a canvas still draws it at once.
MAX_EVENTS = 100_000
DIGITS = 6


def pack(events: Iterable[Any], step_time: float, order: Sequence[str] | None = None) -> dict[str, Any]:
    """Page data of ``events`` (each with ``resource, start, end, label, kind``)."""
    events = list(events)
    kept = events[:MAX_EVENTS]
    rows = list(order) if order is not None else _rows(kept)
    row_of = {r: i for i, r in enumerate(rows)}
    labels: dict[str, int] = {}
    kinds: dict[str, int] = {}
    flat: list[Any] = []
    for ev in kept:
        if ev.resource not in row_of:
            row_of[ev.resource] = len(rows)
            rows.append(ev.resource)
        flat += [row_of[ev.resource], _r(ev.start), _r(ev.end),
                 labels.setdefault(ev.label, len(labels)), kinds.setdefault(ev.kind, len(kinds))]
    return {"rows": rows, "labels": list(labels), "kinds": list(kinds), "events": flat,
            "step": step_time, "dropped": len(events) - len(kept)}


def _r(x: float) -> float:
    return float(f"{x:.{DIGITS}g}")


def _rows(events: Sequence[Any]) -> list[str]:
    """Devices in numeric order, each followed by its ports."""
    names = {ev.resource for ev in events}

    def key(name: str) -> tuple:
        head, _, port = name.partition(".")
        digits = "".join(ch for ch in head if ch.isdigit())
        return (head.rstrip("0123456789"), int(digits) if digits else -1, port)

    return sorted(names, key=key)


def simulated(planned: Any) -> tuple[dict[str, Any] | None, Any]:
    """``(timeline data, SimResult)`` of the strategy on its cluster; ``(None, None)``
    without a cluster (the paper's model prices no machine)."""
    if planned.cluster is None:
        return None, None
    from pase.sim import simulate

    result = simulate(planned.graph, dict(planned.strategy.configs), planned.cluster,
                      planned.devices, variants=planned.strategy.variants,
                      bytes_per_element=planned.bytes_per_element)
    return pack(result.timeline, result.step_time), result

"""The simulator's timeline of one step as compact page data.

``rows`` are the resources (``gpuN`` compute, its ports ``gpuN.intra`` and
``gpuN.inter``; for a pipeline, ``stageN`` and the links), ``labels`` the
distinct event labels and ``kinds`` the event kinds. Times are integer *ticks*
of ``tick`` seconds (a millionth of the step). ``events`` holds, per row, a flat
list of ``start, duration, label, kind`` with each start counted from the
previous event's start in the row; a row whose events equal an earlier row's
(the devices of a data-parallel group do the same work at the same times) is
``same[row]``, that earlier row's index, and holds no list of its own.

Past :data:`MAX_EVENTS` events the rest are dropped and ``dropped`` says how many
(the page notes it); the step time still counts them all.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

# Most events a page carries: a canvas draws this many at once, and the page stays small.
MAX_EVENTS = 100_000
# Ticks per step: time resolution of the drawing (a millionth of the step).
TICKS = 1_000_000


def pack(events: Iterable[Any], step_time: float, order: Sequence[str] | None = None) -> dict[str, Any]:
    """Page data of ``events`` (each with ``resource, start, end, label, kind``)."""
    events = list(events)
    kept = events[:MAX_EVENTS]
    rows = list(order) if order is not None else _rows(kept)
    row_of = {r: i for i, r in enumerate(rows)}
    for ev in kept:
        if ev.resource not in row_of:
            row_of[ev.resource] = len(rows)
            rows.append(ev.resource)
    tick = step_time / TICKS if step_time > 0 else 1e-9
    labels: dict[str, int] = {}
    kinds: dict[str, int] = {}
    per_row: list[list[int]] = [[] for _ in rows]
    last = [0] * len(rows)
    for ev in sorted(kept, key=lambda e: (row_of[e.resource], e.start)):
        r = row_of[ev.resource]
        start = round(ev.start / tick)
        per_row[r] += [start - last[r], max(0, round(ev.end / tick) - start),
                       labels.setdefault(ev.label, len(labels)), kinds.setdefault(ev.kind, len(kinds))]
        last[r] = start
    seen: dict[tuple, int] = {}
    same: list[int | None] = []
    out: list[list[int] | None] = []
    for r, flat in enumerate(per_row):
        key = tuple(flat)
        first = seen.setdefault(key, r) if flat else r
        same.append(None if first == r else first)
        out.append(None if first != r else flat)
    return {"rows": rows, "labels": list(labels), "kinds": list(kinds), "tick": tick,
            "events": out, "same": same, "count": len(kept), "step": step_time,
            "dropped": len(events) - len(kept)}


def _rows(events: Sequence[Any]) -> list[str]:
    """Devices in numeric order, each followed by its ports."""
    names = {ev.resource for ev in events}

    def key(name: str) -> tuple:
        head, _, port = name.partition(".")
        digits = "".join(ch for ch in head if ch.isdigit())
        return (head.rstrip("0123456789"), int(digits) if digits else -1, port)

    return sorted(names, key=key)


def simulated(planned: Any) -> tuple[dict[str, Any] | None, Any]:
    """``(timeline data, SimResult)`` of the strategy on its cluster, at the seconds it
    carries where it carries them (:func:`pase.sim.simulate`); ``(None, None)`` without
    a cluster (the paper's model prices no machine)."""
    if planned.cluster is None:
        return None, None
    from pase.sim import simulate

    # the Strategy itself: a plan that carries its seconds (calibrated) replays at them
    result = simulate(planned.graph, planned.strategy, planned.cluster, planned.devices,
                      bytes_per_element=planned.bytes_per_element)
    return pack(result.timeline, result.step_time), result

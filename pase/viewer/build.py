"""The page model: everything a page shows, as one JSON-able dict.

Keys: ``version``, ``kind`` (``strategy`` or ``pipeline``), ``summary``
(:mod:`pase.viewer.summary`), ``roles`` (the colour groups), ``ops`` (the rows of
:mod:`pase.viewer.plan`), ``folds`` (``[start, period, count]`` segments of
:mod:`pase.viewer.blocks`), ``devices`` (:mod:`pase.viewer.devices`), ``timeline``
(:mod:`pase.viewer.timeline`, null without a cluster), ``compare``
(:mod:`pase.viewer.compare`, null without a second strategy) and, for a pipeline
plan, ``pipeline`` (:mod:`pase.viewer.pipeline`).
"""
from __future__ import annotations

from typing import Any

from pase.viewer import blocks, compare, devices, plan, summary, timeline
from pase.viewer.planned import Planned

VERSION = 1


def page_model(planned: Planned, other: Planned | None = None, *, simulate: bool = True,
               labels: tuple[str, str] = ("A", "B")) -> dict[str, Any]:
    """The page of ``planned`` (compared with ``other`` when given); ``simulate`` runs the
    simulator for the Time tab when the strategy has a cluster."""
    rows = op_rows(planned)
    placed = devices.placements(planned)
    events, sim = timeline.simulated(planned) if simulate else (None, None)
    data = {"version": VERSION, "kind": "strategy", "summary": summary.summary(planned, sim),
            "roles": list(plan.ROLE_GROUPS), "ops": rows,
            "folds": folds(rows, [[e[0] for e in edges] for edges in placed["edges"]]),
            "devices": placed, "timeline": events, "compare": None, "pipeline": None}
    if other is not None:
        data["compare"] = compare.comparison(planned, other, rows, op_rows(other), labels)
    return data


def op_rows(planned: Planned) -> list[dict[str, Any]]:
    comm = [sum(c for _, c in pairs) for pairs in planned.incoming()]
    return plan.rows(planned.graph, planned.strategy, planned.op_memory(), comm)


def folds(rows: list[dict[str, Any]], producers: list[list[int]]) -> list[list[int]]:
    keys = [plan.fold_key(r, producers[i], i) for i, r in enumerate(rows)]
    starts = plan.block_starts([r["n"] for r in rows])
    return [list(seg) for seg in blocks.fold(keys, starts)]

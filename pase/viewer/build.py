"""The page model: everything a page shows, as one JSON-able dict.

Keys: ``version``, ``kind`` (``strategy`` or ``pipeline``), ``summary``
(:mod:`pase.viewer.summary`), ``roles`` (the colour groups), ``ops`` (the rows of
:mod:`pase.viewer.plan`), ``folds`` (``[start, period, count]`` segments of
:mod:`pase.viewer.blocks`), ``devices`` (:mod:`pase.viewer.devices`), ``timeline``
(:mod:`pase.viewer.timeline`, null without a cluster), ``compare``
(:mod:`pase.viewer.compare`, null without a second strategy), ``layout`` (the plan
in one line: :mod:`pase.viewer.layout`), ``made`` (the command that made the page and
pase's version) and, for a pipeline plan, ``pipeline`` (:mod:`pase.viewer.pipeline`).
Rows carry their kernel and communication seconds (:mod:`pase.viewer.comms`) where the
timeline or the plan's carried prices give them.
"""
from __future__ import annotations

from typing import Any

from pase.viewer import blocks, comms, compare, devices, plan, summary, timeline
from pase.viewer.layout import layout_line
from pase.viewer.planned import Planned

VERSION = 1


def page_model(planned: Planned, other: Planned | None = None, *, simulate: bool = True,
               labels: tuple[str, str] = ("A", "B"), command: str | None = None
               ) -> dict[str, Any]:
    """The page of ``planned`` (compared with ``other`` when given); ``simulate`` runs the
    simulator for the Time tab when the strategy has a cluster; ``command`` is the command
    line that made the page (None: ``pase.view`` from Python)."""
    rows = op_rows(planned)
    placed = devices.placements(planned)
    events, sim = timeline.simulated(planned) if simulate else (None, None)
    names = [r["n"] for r in rows]
    parts = comms.from_timeline(names, sim.timeline) if sim is not None else \
        comms.from_prices(names, planned.strategy.op_prices, placed["edges"])
    source = None if parts is None else "timeline" if sim is not None else "prices"
    for r, p in zip(rows, parts or []):
        r.update(p)
    data = {"version": VERSION, "kind": "strategy", "summary": summary.summary(planned, sim),
            "roles": list(plan.ROLE_GROUPS), "ops": rows,
            "folds": folds(rows, [[e[0] for e in edges] for edges in placed["edges"]]),
            "devices": placed, "timeline": events, "compare": None, "pipeline": None,
            "layout": layout_line(planned), "made": made(command), "attributed": source}
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


def made(command: str | None) -> dict[str, Any]:
    """What made the page: the command line (None: ``pase.view`` from Python) and pase's
    version."""
    from pase import __version__

    return {"command": command, "version": __version__}

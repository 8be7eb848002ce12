"""The reproduction's solver runs, through the sweep engine (:mod:`pase.sweeps`).

Every solve of Table I, Table II and Figure 6 is a grid point of a sweep: its
own process, under the experiment's time limit and wall-clock cap (ILP
backends can overrun their limit while building a large model, and a large ILP
can exhaust memory; the process is killed with its backend binaries), recorded
in a SQLite store. One Dask ``LocalCluster`` of one worker serves the whole
reproduction, so runs never share the cores and their times stay comparable.
What is not a solver run stays here: the dp's predicted plans, the GNMT expert
layout, the simulations.
"""
from __future__ import annotations

import json
import logging
import math
import tempfile
from pathlib import Path
from typing import Any, Mapping


class Runs:
    """A context holding the cluster and a temporary store; :meth:`sweep` runs one spec."""

    def __init__(self, workers: int = 1):
        self.workers = workers
        self._count = 0

    def __enter__(self) -> "Runs":
        from distributed import LocalCluster

        self._tmp = tempfile.TemporaryDirectory(prefix="pase-reproduce-")
        self._cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1,
                                     processes=True, dashboard_address=None,
                                     silence_logs=logging.ERROR)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._cluster.close()
        self._tmp.cleanup()

    def sweep(self, spec: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The rows of ``spec``'s grid, in grid order, with JSON columns decoded and
        missing numbers (NaN in the frame) as None."""
        from pase.sweeps import sweep

        self._count += 1
        frame = sweep(spec, Path(self._tmp.name) / f"runs{self._count}.sqlite",
                      scheduler=self._cluster.scheduler_address)
        rows = []
        for record in frame.to_dict("records"):
            row = {k: (None if isinstance(v, float) and math.isnan(v) else v)
                   for k, v in record.items()}
            for name in ("strategy", "stats", "solver_options"):
                row[name] = json.loads(row[name]) if row.get(name) else {}
            rows.append(row)
        return rows


def result(row: Mapping[str, Any], *, peak: bool = False) -> dict[str, Any]:
    """A run as the tables' cells read it: ``status`` ``killed`` when the wall-clock cap
    stopped it, ``error`` with a note when it failed, else the solver's answer."""
    status, error = row["status"], row.get("error") or ""
    if status == "time_limit" and row.get("cost") is None and error.startswith("killed after"):
        return {"status": "killed", "wall_seconds": row["wall_seconds"], "note": error}
    if status in ("out_of_memory", "error", "unavailable"):
        return {"status": "error", "wall_seconds": row["wall_seconds"],
                "note": f"{status}: {error}"[:300]}
    if status == "refused":
        return {"status": "refused", "note": error[:300]}
    out = {"status": status, "cost": row.get("cost"), "lower_bound": row.get("lower_bound"),
           "gap": row.get("gap"), "solve_seconds": row.get("solve_seconds"),
           "formulation_seconds": row["stats"].get("build_seconds"),
           "wall_seconds": row["wall_seconds"]}
    if peak and row.get("peak_memory_bytes") is not None:
        out["peak_rss_gib"] = row["peak_memory_bytes"] / 2**30
    return out

"""``pase report --views``: one page per run of a sweep, for the report to link.

Each run with a strategy is re-priced as it ran (model, devices, cost model,
cluster, memory cap, batch and options from its row of the store) and written
to ``views/run-N.html`` in the report folder, ``N`` the run's row in the store.
Runs without a strategy (failed, infeasible) get no page.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pase.sweeps.store import Store
from pase.viewer.build import page_model
from pase.viewer.write import page_title, planned, write_html

FOLDER = "views"


def write_views(db: str | Path, out_dir: str | Path, simulate: bool = True) -> dict[str, str]:
    """``{run key: page path relative to out_dir}`` of every run with a strategy."""
    from pase.files import regular_file

    with Store(regular_file(db, "sweep store")) as store:
        rows = store.rows()
    folder = Path(out_dir) / FOLDER
    links: dict[str, str] = {}
    for n, row in enumerate(rows):
        strategy = json.loads(row["strategy"]) if row["strategy"] else None
        if not strategy:
            continue
        folder.mkdir(parents=True, exist_ok=True)
        data = page_model(_planned(row, strategy), simulate=simulate,
                          command=f"pase report {db} --views (run {n}, key {row['key']})")
        name = f"run-{n}.html"
        write_html(data, folder / name, page_title(data))
        links[row["key"]] = f"{FOLDER}/{name}"
    return links


def _planned(row: dict[str, Any], strategy: dict[str, Any]) -> Any:
    def options(column: str) -> dict[str, Any]:
        return json.loads(row[column]) if row[column] else {}

    cost_options = options("cost_options")
    cluster = row["cluster"] if row["cluster"] else cost_options.pop("cluster", None)
    return planned({"model": row["model"], "devices": row["devices"],
                    "cost_model": row["cost_model"], "strategy": strategy},
                   cluster=cluster, memory_cap=row["memory_cap"], batch=row["batch"],
                   model_options=options("model_options"), cost_options=cost_options)

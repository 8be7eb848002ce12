"""Reproduction of V. Elango, "PaSE: Parallelization Strategies for Efficient DNN
Training", IPDPS 2021: Table I (search time), Table II (strategies at p = 32) and
Figure 6 (speedup over data parallelism, here simulated).

    >>> from pase.papers.pase_ipdps2021 import reproduce
    >>> files = reproduce("results", quick=True)          # doctest: +SKIP

See ``papers/pase_ipdps2021/README.md`` for what each output is and how it
compares with the paper.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from pase.papers.pase_ipdps2021 import figure6, table1, table2
from pase.papers.pase_ipdps2021.report import write_json
from pase.papers.pase_ipdps2021.runs import Runs
from pase.papers.pase_ipdps2021.settings import FULL, QUICK, Settings, machine
from pase.sweeps.engine import require_dask

__all__ = ["FULL", "QUICK", "Settings", "reproduce"]


def reproduce(out_dir: str | Path, quick: bool = False,
              progress: Callable[[str], Any] | None = print, *,
              settings: Settings | None = None) -> dict[str, Path]:
    """Run every experiment and write its files into ``out_dir``; returns ``{name: path}``.

    ``quick`` runs the reduced grid (:data:`QUICK`: p = 4, 8, two models in
    Table I, 5 s limits), about two minutes of CPU (each solve is a sweep run, a
    process of its own); the full grid (:data:`FULL`) took 19 minutes for the
    committed results (README.md in this folder). ``settings`` overrides both.
    """
    settings = settings or (QUICK if quick else FULL)
    say = progress or (lambda message: None)
    require_dask("pase reproduce")  # before the output folder is made: no empty folder left
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    info = machine()
    start = time.perf_counter()
    files: dict[str, Path] = {}
    timings: dict[str, float] = {}

    with Runs() as runs:  # every solve goes through the sweep engine, one run at a time
        t = time.perf_counter()
        rows = table1.run(settings, say, runs)
        timings["table1"] = time.perf_counter() - t
        files.update(table1.write(rows, settings, info, timings["table1"], out))

        t = time.perf_counter()
        strategies = table2.run(settings, say, runs)
        timings["table2"] = time.perf_counter() - t
        files.update(table2.write(strategies, settings, info, timings["table2"], out))

        t = time.perf_counter()
        points = figure6.run(settings, say, runs)
        timings["figure6"] = time.perf_counter() - t
        files.update(figure6.write(points, settings, info, timings["figure6"], out))

    timings["total"] = time.perf_counter() - start
    files["run.json"] = write_json(out / "run.json", {
        "paper": "pase-ipdps2021", "quick": settings.quick, "machine": info,
        "settings": settings.to_dict(), "seconds": timings,
        "files": sorted(name for name in files)})
    say(f"done in {timings['total']:.0f} s: {', '.join(sorted(files))} in {out}")
    return files

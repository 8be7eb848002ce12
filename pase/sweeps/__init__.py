"""Sweeps: a grid of pase runs on Dask, every run kept in SQLite, resumable, with a report.

    >>> import pase
    >>> frame = pase.sweep({"grid": {"model": ["alexnet"], "devices": [4, 8],
    ...                              "solver": ["dp", "greedy"]}}, db="r.sqlite")  # doctest: +SKIP
    >>> pase.load_results("r.sqlite")                                              # doctest: +SKIP

The spec (:mod:`pase.sweeps.spec`), the store (:mod:`pase.sweeps.store`), one
run under its limits (:mod:`pase.sweeps.runner`), the grid on Dask
(:mod:`pase.sweeps.engine`) and the report (:mod:`pase.sweeps.report`) are
described in docs/sweeps.md. pandas and Dask are imported only when used.
"""
from __future__ import annotations

from pase.sweeps.engine import sweep
from pase.sweeps.spec import Spec, SpecError, load_spec
from pase.sweeps.store import load_results

__all__ = ["Spec", "SpecError", "load_results", "load_spec", "sweep"]

"""Fold exactly repeating consecutive blocks of plan rows into one row each.

A *fold* is a run of ``count >= 2`` consecutive copies of a block of ``period``
rows whose keys are equal position by position (the key says everything a row
shows but the layer number in its name: kind, dims, split, costs, memory). The
folding takes the run covering the most rows first (ties: the one starting where
the op names change block, then the earliest, then the shortest period), then
folds what lies before and after it the same way. GPT-3 175B's 1157 ops are
a few rows, a 96-layer block and a head.

    >>> fold(["e", "a", "b", "a", "b", "a", "b", "h"])
    [(0, 1, 1), (1, 2, 3), (7, 1, 1)]
"""
from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np

# The longest block period tried: a transformer layer is 10-30 ops; a period past
# this would fold only whole halves of a graph, which shows nothing.
MAX_PERIOD = 200

Segment = tuple[int, int, int]  # (start, period, count): count == 1 is one row


def fold(keys: Sequence[Hashable], starts: Sequence[bool] | None = None) -> list[Segment]:
    """Segments covering ``range(len(keys))`` in order: ``(start, period, count)``.

    ``starts[i]`` says row ``i`` begins a named block (its name's first part differs
    from the row before's); it only breaks ties between equally long runs."""
    ids = _intern(keys)
    marks = np.zeros(len(ids), dtype=bool) if starts is None else np.asarray(starts, dtype=bool)
    out: list[Segment] = []
    _fold(ids, marks, 0, len(ids), out)
    return out


def _intern(keys: Sequence[Hashable]) -> np.ndarray:
    seen: dict[Hashable, int] = {}
    return np.asarray([seen.setdefault(k, len(seen)) for k in keys], dtype=np.int64)


def _fold(ids: np.ndarray, marks: np.ndarray, lo: int, hi: int, out: list[Segment]) -> None:
    best = _best_run(ids[lo:hi], marks[lo:hi])
    if best is None:
        out.extend((i, 1, 1) for i in range(lo, hi))
        return
    start, period, count = best
    _fold(ids, marks, lo, lo + start, out)
    out.append((lo + start, period, count))
    _fold(ids, marks, lo + start + period * count, hi, out)


def _best_run(ids: np.ndarray, marks: np.ndarray) -> Segment | None:
    """The run covering the most rows in ``ids`` (an index range), or None."""
    n = len(ids)
    best: tuple | None = None
    for period in range(1, min(MAX_PERIOD, n // 2) + 1):
        same = ids[:-period] == ids[period:]  # row j looks like row j + period
        run = _run_lengths(same)  # run[j]: how many rows from j on look like their next copy
        count = 1 + run // period
        count = np.append(count, np.ones(period, dtype=np.int64))
        covered = np.where(count >= 2, count * period, 0)
        top = int(covered.max(initial=0))
        if top == 0 or (best is not None and top < best[0]):
            continue
        for j in np.flatnonzero(covered == top)[:64].tolist():
            score = (top, bool(marks[j]), -j, -period)
            if best is None or score > best:
                best = score + (int(count[j]),)
    if best is None:
        return None
    return -best[2], -best[3], best[4]


def _run_lengths(same: np.ndarray) -> np.ndarray:
    """``out[j]``: the number of consecutive True values from ``j`` on."""
    out = np.zeros(len(same), dtype=np.int64)
    run = 0
    for j in range(len(same) - 1, -1, -1):
        run = run + 1 if same[j] else 0
        out[j] = run
    return out

"""A Problem's distinct edge matrices, priced on two CPUs where there are many entries.

Pricing the re-layouts is most of a large build (gpt3-175b at p = 1,024 under the
calibrated model: 16 distinct matrices, 5e7 entries, 18 of its 22 CPU seconds), and
nothing else runs beside it. So where the matrices hold at least
:data:`PARALLEL_MIN_ENTRIES` entries and a second CPU is there
(:func:`pase.forked.available`), a forked child prices about half of them (the
largest first, each to the lighter half) into shared memory while this process prices
the rest. Each matrix comes from the same function on the same inputs either way, so
the Problem is the same, entry for entry (``tests/test_edge_sums.py``).
"""
from __future__ import annotations

import math
import mmap
from typing import Callable, Hashable, Mapping, Sequence

import numpy as np

from pase import forked
from pase.deadline import check as check_deadline

# Entries of distinct edge matrices from which half of them are priced in a forked child:
# about 3.5 CPU s of pricing, far above a fork's cost; the tests' models stay below it.
PARALLEL_MIN_ENTRIES = 10**7

# key -> (edge index for the deadline's message, the matrix's shape)
Todo = Mapping[Hashable, tuple[int, tuple[int, int]]]


def edge_sums(todo: Todo, price: Callable[[Hashable], np.ndarray],
              edges: int) -> dict[Hashable, np.ndarray]:
    """``price(key)`` of every key of ``todo`` (in its order; ``edges``: the Problem's edge
    count, for the deadline's message), half in a forked child where it pays."""
    entries = {k: math.prod(shape) for k, (_, shape) in todo.items()}
    if len(todo) < 2 or sum(entries.values()) < PARALLEL_MIN_ENTRIES or not forked.available():
        return {k: _priced(k, todo, price, edges) for k in todo}
    mine, theirs = _halves(entries)
    shared = {k: _shared(todo[k][1]) for k in theirs}

    def child() -> None:
        for k in theirs:
            np.copyto(shared[k], _priced(k, todo, price, edges))

    beside = forked.Forked(child)
    try:
        out = {k: _priced(k, todo, price, edges) for k in mine}
        beside.result()
    except BaseException:
        beside.cancel()
        raise
    for k in theirs:  # off the shared pages, one at a time: a build's peak grows by one matrix
        out[k] = np.array(shared.pop(k))
    return {k: out[k] for k in todo}


def _priced(key: Hashable, todo: Todo, price: Callable[[Hashable], np.ndarray],
            edges: int) -> np.ndarray:
    check_deadline(f"costing edge {todo[key][0] + 1} of {edges}")
    return price(key)


def _halves(entries: Mapping[Hashable, int]) -> tuple[list, list]:
    """Keys in two halves of about equal entries: the largest first, each to the lighter."""
    halves: tuple[list, list] = ([], [])
    load = [0, 0]
    for k in sorted(entries, key=lambda k: -entries[k]):  # stable: ties in todo's order
        side = 0 if load[0] <= load[1] else 1
        halves[side].append(k)
        load[side] += entries[k]
    return halves


def _shared(shape: Sequence[int]) -> np.ndarray:
    """A float64 array in anonymous shared pages: what a forked child writes, the parent reads."""
    count = math.prod(shape)
    pages = mmap.mmap(-1, max(1, count * 8))
    return np.frombuffer(pages, dtype=np.float64, count=count).reshape(tuple(shape))

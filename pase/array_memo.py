"""What is derived from one read-only array, kept while the array lives.

A pipeline search solves many stages over the same shared layer matrices, and a capped
solve folds them again under every multiplier; a read-only array cannot change, so
what was derived from it (row classes, dominance tables, digests, a transposed copy,
its NaN check) holds until it dies. Entries are keyed by the array's id and dropped
with it (a weak reference), so an id reused by a later array never finds a stale entry.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, Hashable

import numpy as np


def kept(memo: dict, matrix: np.ndarray, key: Hashable, derive: Callable[[], Any]) -> Any:
    """``derive()``, remembered in ``memo`` under ``(id(matrix), key)`` while a read-only
    ``matrix`` lives (a writeable one is derived each time)."""
    full = (id(matrix), key)
    held = memo.get(full)
    if held is not None and held[0]() is matrix:
        return held[1]
    out = derive()
    if not matrix.flags.writeable:
        def forget(ref, full=full):  # the matrix died: its id may be reused
            if memo.get(full, (None,))[0] is ref:
                del memo[full]
        memo[full] = (weakref.ref(matrix, forget), out)
    return out


def known(memo: dict, matrix: np.ndarray, key: Hashable) -> bool:
    """Whether :func:`kept` holds ``matrix``'s entry under ``key`` (deriving it is free)."""
    held = memo.get((id(matrix), key))
    return held is not None and held[0]() is matrix

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
    """``derive()``, remembered in ``memo`` under ``matrix`` and ``key`` while a read-only
    ``matrix`` lives (a writeable one is derived each time). A view (a matrix turned the
    other way, made afresh for each Problem) is known by the array owning its memory and
    where in it the view lies, so every such view shares one entry."""
    owner, where = owned_by(matrix)
    full = (id(owner), where, key)
    held = memo.get(full)
    if held is not None and held[0]() is owner:
        return held[1]
    out = derive()
    if not matrix.flags.writeable:
        def forget(ref, full=full):  # the owner died: its id may be reused
            if memo.get(full, (None,))[0] is ref:
                del memo[full]
        memo[full] = (weakref.ref(owner, forget), out)
    return out


def known(memo: dict, matrix: np.ndarray, key: Hashable) -> bool:
    """Whether :func:`kept` holds ``matrix``'s entry under ``key`` (deriving it is free)."""
    owner, where = owned_by(matrix)
    held = memo.get((id(owner), where, key))
    return held is not None and held[0]() is owner


def owned_by(matrix: np.ndarray) -> tuple[np.ndarray, tuple | None]:
    """The array owning ``matrix``'s memory, and for a view its offset, strides, shape and
    type in it (None: ``matrix`` is its own)."""
    base = matrix.base
    if not isinstance(base, np.ndarray):
        return matrix, None
    offset = matrix.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return base, (offset, matrix.strides, matrix.shape, matrix.dtype.str)

"""Sharing keys and the pairwise kernel: what lets a cost model compute each distinct
vertex vector and edge matrix once (:meth:`~pase.costing.CostModel.edge_key`,
:meth:`~pase.costing.CostModel.vertex_key`).
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Hashable, Iterator

import numpy as np

from pase.gather import outer_take
from pase.ir import Op


def pairwise(src_rows: np.ndarray, dst_rows: np.ndarray,
             kernel: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """An edge matrix computed once per distinct pair of key rows.

    ``kernel(a, b)`` gets ``a`` of shape ``(S, 1, c)`` and ``b`` of ``(1, D, c)``
    (the distinct rows of ``src_rows`` ``(K_u, c)`` and ``dst_rows`` ``(K_v, d)``)
    and returns their ``(S, D)`` matrix; the result is expanded to ``(K_u, K_v)``
    with one allocation. Edge costs depend on a config only through a few
    numbers (a port's split factors), so ``S`` and ``D`` are often a tenth of
    ``K``: this saves time and the kernel's ``(K_u, K_v, rank)`` temporaries.

    Examples:
        >>> a = np.array([[1], [2], [1]]); b = np.array([[3], [3]])
        >>> pairwise(a, b, lambda x, y: (x * y)[..., 0])
        array([[3, 3],
               [6, 6],
               [3, 3]])
    """
    src, src_of = np.unique(src_rows, axis=0, return_inverse=True)
    dst, dst_of = np.unique(dst_rows, axis=0, return_inverse=True)
    small = kernel(src[:, None, :], dst[None, :, :])
    return outer_take(small, src_of, dst_of)


def op_signature(op: Op) -> tuple:
    """Everything about ``op`` but its name and its inputs' producers: kind, dims
    (names, sizes, roles), ports (shapes, dim mappings), pinned dims, contiguity and
    attributes. Two ops with equal signatures are the same layer at another place.

    Examples:
        >>> from pase.ir import Dim, Op
        >>> a = Op("a", "Softmax", (Dim("b", 8), Dim("n", 4)), attrs={"axis": 1})
        >>> op_signature(a) == op_signature(Op("z", "Softmax", a.dims, attrs={"axis": 1}))
        True
    """
    ports = tuple(tuple((p.shape, p.dims) for p in group)
                  for group in (op.inputs, op.outputs, op.weights))
    return (op.kind, op.dims, ports, op.pinned, op.contiguous, op.attrs)


def array_key(*parts: object) -> tuple:
    """A hashable key from numpy arrays (by shape, dtype and bytes) and plain values.

    Examples:
        >>> array_key((4, 4), np.array([[1, 2]])) == array_key((4, 4), np.array([[1, 2]]))
        True
        >>> array_key(np.array([1, 2])) == array_key(np.array([[1, 2]]))
        False
    """
    return tuple((p.shape, p.dtype.str, _bytes_of(p)) if isinstance(p, np.ndarray) else p
                 for p in parts)


def _bytes_of(array: np.ndarray) -> bytes:
    """``array.tobytes()``; inside a :func:`build_memo`, one bytes object per read-only
    array that owns its data (a space's configs, a memoised placement): keys built
    from one array then hash it once (a bytes object keeps its hash) and compare
    equal by identity, where a fresh copy per key hashed every byte again."""
    memo = _MEMO.get()
    if memo is None or array.flags.writeable or not array.flags.owndata:
        return array.tobytes()
    got = memo.get(("bytes", id(array)))
    if got is None or got[0] is not array:  # the array is held: its id is not reused
        got = memo[("bytes", id(array))] = (array, array.tobytes())
    return got[1]


# The memo of the Problem build in progress (:func:`build_memo`); None outside one
# (a context variable: a build in another thread has its own).
_MEMO: ContextVar[dict | None] = ContextVar("pase_build_memo", default=None)


@contextmanager
def build_memo() -> Iterator[None]:
    """A memo that lives while one Problem is keyed or built (:func:`memoised`): a
    value computed for one layer's op serves its copies in every other layer, and
    nothing outlives the build (a model edited between builds never reads a stale one).
    Nested scopes share the outer one's memo."""
    if _MEMO.get() is not None:
        yield
        return
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)


def memoised(key: Hashable, compute: Callable[[], Any]) -> Any:
    """``compute()``, remembered under ``key`` inside a :func:`build_memo` scope (computed
    afresh outside one). ``key`` must hold everything ``compute`` reads: a key that
    misses one input makes two different values share one entry."""
    memo = _MEMO.get()
    if memo is None:
        return compute()
    if key not in memo:
        memo[key] = compute()
    return memo[key]

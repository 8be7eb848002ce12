"""Sharing keys and the pairwise kernel: what lets a cost model compute each distinct
vertex vector and edge matrix once (:meth:`~pase.costing.CostModel.edge_key`,
:meth:`~pase.costing.CostModel.vertex_key`).
"""
from __future__ import annotations

from typing import Callable

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
    return tuple((p.shape, p.dtype.str, p.tobytes()) if isinstance(p, np.ndarray) else p
                 for p in parts)

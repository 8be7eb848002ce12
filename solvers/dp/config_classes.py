"""One DP step on classes of configurations: exact, and far smaller where edges read few splits.

An edge matrix reads a config only through its port's split factors, so its
columns fall in few classes: configs of ``v`` whose columns are equal. For a
step over ``D(i) + (v,)`` split the terms in two:

- *fine* terms, which read ``v`` fully: children tables, ``v``'s vertex costs,
  edges to later neighbours that a fine term also spans; their axes besides
  ``v`` are ``X``;
- *coarse* terms: edges ``(u, v)`` to the other later neighbours ``Y``, each
  reading ``v`` through its column class and ``u`` through its row class.

Then, with ``k(v)`` the joint column class of ``v`` over the coarse edges,

    min_v [F(X, v) + sum_u E_u(u, v)]
        = min_k [ min_{v: k(v) = k} F(X, v)  +  sum_u E'_u(row class of u, k) ],

which takes ``|X| K_v`` for the inner minima plus ``|X| * prod(row classes) * n_k``
for the outer one, instead of ``|X| |Y| K_v``. Every sum is the same float
additions in another grouping, and the minimum over a class is exact, so the
value table is the plain step's to rounding and the argmin a true minimiser.

:func:`class_min_plus` returns None when the grouping would not save at least
half the work (the caller runs :func:`pase.solvers.dp.kernel.min_plus`).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from pase.array_memo import kept, known
from pase.deadline import check as check_deadline
from pase.solvers.dp.kernel import argmin_dtype, expand

if TYPE_CHECKING:
    from pase.solvers.dp.plan import Step

__all__ = ["class_min_plus", "edge_classes"]

# The fine sum F(X, v) is built whole: at most this many float64 entries (256 MiB).
MAX_FINE_ENTRIES = 2**25
# Entries of one chunk of the outer minimum's broadcast sum.
OUTER_CHUNK = 2**21
# Rows and columns sampled for the cheap tests before hashing whole matrices, the larger
# only when the smaller did not settle it.
SAMPLES = (128, 512)
# Entries of the row-hash product computed at once (32 MiB of float64).
HASH_CHUNK_ENTRIES = 2**22


def edge_classes(matrix: np.ndarray, memo: dict | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(row_class, col_class, compact)``: ``matrix == compact[row_class][:, col_class]``.

    Examples:
        >>> m = np.array([[1.0, 2.0, 1.0], [1.0, 2.0, 1.0], [0.0, 5.0, 0.0]])
        >>> r, c, small = edge_classes(m)
        >>> r.tolist(), c.tolist(), small.tolist()
        ([0, 0, 1], [0, 1, 0], [[1.0, 2.0], [0.0, 5.0]])
    """
    key = id(matrix)
    if memo is not None and key in memo:
        return memo[key][1]
    out = kept(_KEPT, matrix, None, lambda: _derive_classes(matrix))
    if memo is not None:
        memo[key] = (matrix, out)  # the matrix is kept alive, so its id stays its own
    return out


def _derive_classes(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    col_class, col_first = _classes(matrix.T)
    cols = matrix[:, col_first]
    row_class, row_first = _classes(cols)
    return row_class, col_class, np.ascontiguousarray(cols[row_first])


# (id, None) -> edge_classes of a read-only matrix, while it lives (pase.array_memo.kept)
_KEPT: dict = {}


def _sampled_classes(mats: Sequence[np.ndarray], sample: int) -> int:
    """A lower bound on ``prod(row classes) * n_k`` of :func:`class_min_plus`, from
    ``sample`` evenly spaced rows and columns: columns (rows) that differ on a
    sample differ on the whole matrix, so a sample never counts more classes."""
    joint = []
    rows = 1
    for m in mats:
        r = np.unique(np.linspace(0, m.shape[0] - 1, sample).astype(np.intp))
        c = np.unique(np.linspace(0, m.shape[1] - 1, sample).astype(np.intp))
        joint.append(m[r].T)  # (K_v, sampled rows): each column on the sample
        rows *= np.unique(m[:, c], axis=0).shape[0]
    return rows * np.unique(np.concatenate(joint, axis=1), axis=0).shape[0]


def _classes(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Class of each row (equal rows, equal class; classes numbered by first occurrence)
    and each class's first row. Rows are hashed by two fixed random projections, then
    every row is compared exactly with its class's first; a collision (never seen)
    falls back to sorting."""
    finite = np.where(np.isfinite(rows), rows, np.where(rows > 0, 1.5e300, -1.5e300))
    scale = np.abs(finite).max(initial=0.0)
    probe = np.random.default_rng(0).random((2, rows.shape[1])) + 0.5
    # Row sums, not a matrix product: BLAS may sum equal rows in different orders (by
    # their place in its blocks), so equal rows could hash apart and classes come out
    # finer than the matrix's; numpy's row-wise sum treats every row alike.
    with np.errstate(over="ignore", invalid="ignore"):
        unit = finite / scale if scale > 0 else finite
        h = np.empty((rows.shape[0], 2))
        step = max(1, HASH_CHUNK_ENTRIES // max(1, rows.shape[1]))
        for i in range(0, rows.shape[0], step):  # chunks bound the product's temporary
            part = unit[i:i + step]
            h[i:i + step] = np.stack([(part * probe[0]).sum(axis=1),
                                      (part * probe[1]).sum(axis=1)], axis=1)
    _, first, cls = np.unique(h, axis=0, return_index=True, return_inverse=True)
    cls = cls.reshape(-1)
    # renumber classes by first occurrence, so the answer does not depend on hash order
    rank = np.empty(first.size, dtype=np.intp)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    cls, first = rank[cls], np.sort(first)
    if np.isfinite(h).all() and np.array_equal(rows, rows[first[cls]], equal_nan=False):
        return cls, first
    _, first, cls = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    cls = cls.reshape(-1)
    rank = np.empty(first.size, dtype=np.intp)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[cls], np.sort(first)


def class_min_plus(step: Step, terms: Sequence[np.ndarray], sizes: Sequence[int],
                   memo: dict | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """The step's value and argmin tables over ``D(i)`` by classes (module doc), or None.

    ``terms`` are in ``step.term_axes`` order (children, later edges ``(u, v)``,
    vertex costs) and are not modified; ``sizes`` gives every vertex's candidate count.
    """
    v, dep = step.vertex, step.dependent
    kv = int(sizes[v])
    n_children = len(step.children)
    later = step.later
    fine_axes: set[int] = set()
    for axes in step.term_axes[:n_children]:
        fine_axes |= set(axes) - {v}
    coarse = [k for k, u in enumerate(later) if u not in fine_axes]
    if not coarse or not dep:
        return None
    fine = list(range(n_children)) + [n_children + k for k in range(len(later)) if k not in coarse]
    fine.append(len(terms) - 1)  # the vertex costs
    for t in fine:
        fine_axes |= set(step.term_axes[t]) - {v}
    x_axes = tuple(a for a in dep if a in fine_axes)
    y_axes = tuple(later[k] for k in coarse)
    x_size = math.prod(int(sizes[a]) for a in x_axes)
    if x_size * kv > MAX_FINE_ENTRIES:
        return None
    plain = math.prod(int(sizes[a]) for a in dep) * kv
    mats = [terms[n_children + k] for k in coarse]
    # a sample's estimate spares hashing a matrix whose classes are not known yet
    if any(not (memo is not None and id(m) in memo or known(_KEPT, m, None)) for m in mats):
        for sample in SAMPLES:
            if x_size * kv + x_size * _sampled_classes(mats, sample) > plain // 2:
                return None  # not worth it even on a sample's (fewer) classes: skip hashing
    classes = [edge_classes(m, memo) for m in mats]
    joint = np.stack([c[1] for c in classes], axis=1)  # (K_v, coarse): column class per edge
    keys, k_of_v = np.unique(joint, axis=0, return_inverse=True)
    k_of_v = k_of_v.reshape(-1)
    n_k = keys.shape[0]
    row_sizes = [c[2].shape[0] for c in classes]
    outer = x_size * math.prod(row_sizes) * n_k
    if x_size * kv + outer > plain // 2:
        return None
    # F(X, v): the fine terms' sum, whole (X in table order, then v).
    full = x_axes + (v,)
    fine_sum = np.zeros(tuple(int(sizes[a]) for a in full))
    for t in fine:
        fine_sum += expand(terms[t], step.term_axes[t], full)
    flat = fine_sum.reshape(x_size, kv)
    # Per class: the least F and its first minimiser (in v order).
    order = np.argsort(k_of_v, kind="stable")
    starts = np.flatnonzero(np.diff(np.concatenate(([-1], k_of_v[order]))))
    ordered = flat[:, order]
    best = np.minimum.reduceat(ordered, starts, axis=1)  # (X, n_k)
    counts = np.diff(np.append(starts, kv))
    hit = ordered == np.repeat(best, counts, axis=1)
    # first hit per segment: the largest (kv - position) among hits
    score = np.where(hit, kv - np.arange(kv), 0)
    first = kv - np.maximum.reduceat(score, starts, axis=1)
    best_v = order[first]  # (X, n_k): a minimiser of F within each class
    # E'(rows of Y, k): each coarse edge's compact matrix at its column class of k,
    # summed over the grid of row classes chunk by chunk (never whole).
    grid = tuple(row_sizes)
    parts = [compact[:, keys[:, j]] for j, (_, _, compact) in enumerate(classes)]  # (rows_j, n_k)
    n_rows = math.prod(grid)
    value_xy = np.empty((x_size, n_rows))
    arg_xy = np.empty((x_size, n_rows), dtype=np.intp)
    per = max(1, OUTER_CHUNK // max(1, n_rows * n_k))    # rows of X at once
    cols = n_rows if per > 1 else max(1, OUTER_CHUNK // n_k)  # or rows of Y at once
    buffer = np.empty(min(per, x_size) * min(cols, n_rows) * n_k)
    for c0 in range(0, n_rows, cols):
        c1 = min(n_rows, c0 + cols)
        at = np.unravel_index(np.arange(c0, c1), grid)
        coarse = parts[0][at[0]]
        for j in range(1, len(parts)):
            coarse = coarse + parts[j][at[j]]
        for r0 in range(0, x_size, per):
            check_deadline(f"the dp eliminated vertex {v}; the dp has no partial answer")
            r1 = min(x_size, r0 + per)
            total = buffer[:(r1 - r0) * (c1 - c0) * n_k].reshape(r1 - r0, c1 - c0, n_k)
            np.add(best[r0:r1, None, :], coarse[None, :, :], out=total)
            k = np.argmin(total, axis=2)
            arg_xy[r0:r1, c0:c1] = k
            value_xy[r0:r1, c0:c1] = np.take_along_axis(total, k[..., None], axis=2)[..., 0]
    vertex_xy = np.take_along_axis(best_v, arg_xy, axis=1)  # (X, rows of Y) -> v
    # Expand to D(i): X axes as they are, each Y axis through its row classes.
    x_shape = tuple(int(sizes[a]) for a in x_axes)
    value_xy = value_xy.reshape(x_shape + grid)
    vertex_xy = vertex_xy.reshape(x_shape + grid)
    index = [np.arange(n) for n in x_shape] + [c[0] for c in classes]
    mesh = np.ix_(*index)
    value = value_xy[mesh]
    chosen = vertex_xy[mesh]
    current = x_axes + y_axes
    perm = [current.index(a) for a in dep]
    value = np.ascontiguousarray(np.transpose(value, perm))
    arg = np.ascontiguousarray(np.transpose(chosen, perm)).astype(argmin_dtype(kv))
    return value, arg

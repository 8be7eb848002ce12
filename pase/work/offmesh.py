"""Re-layouts with a side off the mesh: the worst receiver, one tensor axis at a time.

A placement off the mesh (:mod:`pase.work.layout`: an op whose device count does
not divide ``p`` runs on ranks ``0 .. P-1``) has no closed form like
:func:`pase.work.relayout.relayout_elements`; the elements a device receives are
``need - held``, ``held`` the product over tensor axes of the overlap of its source
and destination blocks on that axis, and the worst receiver holds the least.

:func:`by_device` counts that device by device for every pair of source and
destination rows: ``(S, D, p, rank)`` work. :func:`worst_received` gives the same
numbers, bit for bit, from per-axis tables: on one tensor axis the overlap at a
device depends only on that axis's two block indices, and the distinct per-axis
block patterns over devices are few. An axis whose overlap is the same on every
receiver is a constant factor; when at most one axis varies, the least product is
the product with that axis's least overlap (a product of non-negative floats is
monotone in each factor, so this is exact); only pairs with two or more varying
axes are multiplied device by device, once per distinct combination of per-axis
patterns.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def by_device(shape: Sequence[float], src_b: np.ndarray, src_f: np.ndarray, src_h: np.ndarray,
              dst_b: np.ndarray, dst_f: np.ndarray, dst_h: np.ndarray,
              chunk: int = 1 << 20) -> np.ndarray:
    """The reference: ``(S, D)`` most elements a device receives, counted on every device.

    ``src_b`` ``(S, n, rank)`` / ``dst_b`` ``(D, n, rank)`` are block indices on devices
    ``0 .. n-1``, ``src_f`` / ``dst_f`` the split factors per tensor axis, ``src_h`` /
    ``dst_h`` ``(., n)`` which devices hold a source tile / need a destination tile.
    Works in chunks of source rows of about ``chunk`` elements each.
    """
    rows_s, rows_d = len(src_b), len(dst_b)
    out = np.zeros((rows_s, rows_d))
    if rows_s == 0 or rows_d == 0:
        return out
    step = max(1, chunk // max(1, rows_d * src_b.shape[1] * src_b.shape[2]))
    for lo in range(0, rows_s, step):
        hi = lo + step
        out[lo:hi] = _by_device(shape, src_b[lo:hi, None], src_f[lo:hi, None], src_h[lo:hi, None],
                                dst_b[None], dst_f[None], dst_h[None])
    return out


def _by_device(shape, src_b, src_f, src_h, dst_b, dst_f, dst_h) -> np.ndarray:
    t = np.asarray(shape, dtype=np.float64)
    ts = t / src_f[..., None, :]
    td = t / dst_f[..., None, :]
    lo_s, lo_d = src_b * ts, dst_b * td
    per_axis = np.maximum(np.minimum(lo_s + ts, lo_d + td) - np.maximum(lo_s, lo_d), 0.0)
    held = np.where(src_h, np.prod(per_axis, axis=-1), 0.0)
    need = np.prod(td, axis=-1)
    return np.where(dst_h, np.maximum(need - held, 0.0), 0.0).max(axis=-1, initial=0.0)


def worst_received(shape: Sequence[float], src_b: np.ndarray, src_f: np.ndarray, src_h: np.ndarray,
                   dst_b: np.ndarray, dst_f: np.ndarray, dst_h: np.ndarray) -> np.ndarray:
    """:func:`by_device`'s ``(S, D)`` result, from per-axis tables (equal bit for bit)."""
    S, D = len(src_b), len(dst_b)
    out = np.zeros((S, D))
    if S == 0 or D == 0:
        return out
    t = np.asarray(shape, dtype=np.float64)
    src_f, dst_f = np.asarray(src_f, dtype=np.float64), np.asarray(dst_f, dtype=np.float64)
    need = np.prod(t / dst_f, axis=-1)  # as by_device forms it: one product per row
    receives = dst_h.any(axis=1)
    first = np.argmax(dst_h, axis=1)  # a receiver of each destination row
    # A receiver whose source side holds nothing keeps none of its tile: it receives it all.
    bare = _bare(src_h, dst_h)
    held = _least_held(t, src_b, src_f, dst_b, dst_f, dst_h, first)
    held = np.where(bare, 0.0, held)
    out[:] = np.maximum(need[None, :] - held, 0.0)
    out[:, ~receives] = 0.0
    return out


def _bare(src_h: np.ndarray, dst_h: np.ndarray) -> np.ndarray:
    """``(S, D)``: whether some receiver of the destination row holds no source tile."""
    if src_h.all():
        return np.zeros((len(src_h), len(dst_h)), dtype=bool)
    us, i_of = _unique_rows(src_h)
    ud, j_of = _unique_rows(dst_h)
    small = (ud[None, :, :] & ~us[:, None, :]).any(axis=2)  # few distinct masks
    return small[i_of[:, None], j_of[None, :]]


def _axis_tables(t: float, src_b: np.ndarray, src_f: np.ndarray, dst_b: np.ndarray,
                 dst_f: np.ndarray, dst_h: np.ndarray, first: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One tensor axis: each row's pattern index (``(S,)``, ``(D,)``) and the overlap of
    every pair of patterns on every device ``(I, J, n)``. A device that does not receive
    for a destination pattern gets the overlap of that pattern's first receiver, so it
    changes no least value."""
    us, i_of = _unique_rows(np.concatenate([src_f[:, None], src_b.astype(np.float64)], axis=1))
    ud, j_of = _unique_rows(np.concatenate([dst_f[:, None], dst_b.astype(np.float64),
                                            dst_h.astype(np.float64), first[:, None]], axis=1))
    n = src_b.shape[1]
    ts = t / us[:, :1]
    td = t / ud[:, :1]
    lo_s = us[:, 1:] * ts  # the block index (int64 in by_device) times the tile: exact either way
    lo_d = ud[:, 1:n + 1] * td
    ts, td = ts[:, None, :], td[None, :, :]
    lo_s, lo_d = lo_s[:, None, :], lo_d[None, :, :]
    table = np.maximum(np.minimum(lo_s + ts, lo_d + td) - np.maximum(lo_s, lo_d), 0.0)
    gets = ud[:, n + 1:2 * n + 1] > 0
    if not gets.all():
        at = ud[:, -1].astype(np.int64)
        table = np.where(gets[None, :, :], table, table[:, np.arange(len(ud)), at][:, :, None])
    return i_of, j_of, table


def _least_held(t: np.ndarray, src_b: np.ndarray, src_f: np.ndarray, dst_b: np.ndarray,
                dst_f: np.ndarray, dst_h: np.ndarray, first: np.ndarray) -> np.ndarray:
    """``(S, D)``: the least over receivers of the product of the per-axis overlaps,
    multiplied in axis order as :func:`by_device` does."""
    rank = len(t)
    S, D = len(src_b), len(dst_b)
    if rank == 0:
        return np.ones((S, D))
    tables, least, varies, idx = [], [], [], []
    for a in range(rank):
        i_of, j_of, table = _axis_tables(float(t[a]), src_b[:, :, a], src_f[:, a], dst_b[:, :, a],
                                         dst_f[:, a], dst_h, first)
        tables.append(table)
        low = table.min(axis=2)
        least.append(low)
        varies.append((table.max(axis=2) != low))
        idx.append((i_of, j_of))
    held = least[0][idx[0][0][:, None], idx[0][1][None, :]]
    count = varies[0][idx[0][0][:, None], idx[0][1][None, :]].astype(np.int8)
    zero = held == 0
    for a in range(1, rank):
        i, j = idx[a][0][:, None], idx[a][1][None, :]
        low = least[a][i, j]
        held = held * low
        count += varies[a][i, j]
        zero |= low == 0
    # A receiver with no overlap on one axis holds nothing: the least product is 0 then.
    many = np.argwhere((count >= 2) & ~zero)
    if len(many):
        held[many[:, 0], many[:, 1]] = _joint_least(tables, idx, many)
    return held


def _joint_least(tables: list[np.ndarray], idx: list[tuple[np.ndarray, np.ndarray]],
                 pairs: np.ndarray, chunk: int = 1 << 22) -> np.ndarray:
    """Device by device for ``pairs`` (``(M, 2)`` source and destination rows) with two
    or more varying axes, once per distinct combination of per-axis patterns."""
    keys = np.stack([col for i_of, j_of in idx for col in (i_of[pairs[:, 0]], j_of[pairs[:, 1]])],
                    axis=1)
    uniq, inv = _unique_rows(keys)
    n = tables[0].shape[2]
    got = np.empty(len(uniq))
    step = max(1, chunk // max(1, n))
    for lo in range(0, len(uniq), step):
        part = uniq[lo:lo + step].astype(np.int64)
        prod = tables[0][part[:, 0], part[:, 1]]
        for a in range(1, len(tables)):
            prod = prod * tables[a][part[:, 2 * a], part[:, 2 * a + 1]]
        got[lo:lo + step] = prod.min(axis=1)
    return got[inv]


def _unique_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows (sorted) and each row's index among them."""
    if len(rows) == 0:
        return rows, np.zeros(0, dtype=np.int64)
    rows = np.ascontiguousarray(rows)
    view = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1])))[:, 0]
    _, first, inv = np.unique(view, return_index=True, return_inverse=True)
    return rows[first], inv.reshape(-1)

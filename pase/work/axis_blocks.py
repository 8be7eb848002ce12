"""Per tensor axis, which block each device holds: the placement of :mod:`pase.work.layout`,
one axis at a time, for many configs at once.

A re-layout with a side off the mesh (:mod:`pase.work.offmesh`) reads, per tensor axis,
each config's block index on every device. Configs share these far more often than
whole placements: on the mesh an axis's blocks follow from its split factor and its
mesh axes (the :func:`~pase.work.relayout.layout_rows` slots), off it from the strides
and factors of the dims on that axis and the op's device count. So the patterns are
keyed on those few numbers and built once per key (:func:`side_patterns`).
"""
from __future__ import annotations

import numpy as np

from pase.ir import Op, Port
from pase.work.layout import axis_sizes, mesh_coords, mesh_order
from pase.work.offmesh import Patterns


def rank_strides(op: Op, configs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Off the mesh, ranks ``0 .. P-1`` are row-major over the dims in mesh order: each
    dim's stride ``(K, ndims)`` and each config's ``P`` ``(K,)``."""
    configs = np.asarray(configs, dtype=np.int64)
    strides = np.ones(configs.shape, dtype=np.int64)
    step = np.ones(len(configs), dtype=np.int64)
    for d in reversed(mesh_order(op)):
        strides[:, d] = step
        step = step * configs[:, d]
    return strides, step


def rank_blocks(op: Op, port: Port, configs: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Configs off the mesh on devices ``0 .. n-1``: blocks ``(K, n, rank)`` and holding
    masks ``(K, n)``, as :func:`pase.work.layout.port_blocks` gives them config by config
    (``-1`` blocks past ``P``)."""
    configs = np.asarray(configs, dtype=np.int64)
    strides, count = rank_strides(op, configs)
    r = np.arange(n, dtype=np.int64)[None, :, None]
    coords = (r // strides[:, None, :]) % configs[:, None, :]  # (K, n, ndims)
    held = r[:, :, 0] < count[:, None]
    blocks = np.zeros((len(configs), n, len(port.shape)), dtype=np.int64)
    for a, dims in enumerate(op.port_axes(port)):
        for d in dims:
            blocks[:, :, a] = blocks[:, :, a] * configs[:, d][:, None] + coords[:, :, d]
    if configs.shape[1]:
        blocks[~held] = -1
    return blocks, held


def side_patterns(op: Op, port: Port, configs: np.ndarray, rows: np.ndarray, devices: int, n: int,
                  receiving: bool) -> tuple[list[Patterns], np.ndarray]:
    """Per tensor axis the :class:`~pase.work.offmesh.Patterns` of ``configs`` (their
    :func:`~pase.work.relayout.layout_rows` ``rows``) on devices ``0 .. n-1``, and how
    many of those devices hold each config (all ``n`` on the mesh, ``P`` off it; a
    receiving side's devices ``0 .. P-1`` receive)."""
    configs = np.asarray(configs, dtype=np.int64)
    p, rank = int(devices), len(port.shape)
    L = len(axis_sizes(p))
    off = rows[:, rank * (L + 1)] > 0
    on_rows, off_rows = np.flatnonzero(~off), np.flatnonzero(off)
    strides, count = rank_strides(op, configs[off_rows])
    held = np.full(len(configs), n, dtype=np.int64)
    held[off_rows] = np.minimum(count, n)
    out = []
    for a, dims in enumerate(op.port_axes(port)):
        keys_on = rows[on_rows][:, [a] + list(range(rank + a * L, rank + (a + 1) * L))]
        keys_off = np.concatenate([rows[off_rows][:, [a]], held[off_rows][:, None], strides[:, list(dims)],
                                   configs[off_rows][:, list(dims)]], axis=1)
        u_on, of_on = _unique(keys_on)
        u_off, of_off = _unique(keys_off)
        blocks = np.concatenate([_mesh_blocks(u_on[:, 1:], p, n), _rank_blocks(u_off, len(dims), n)])
        factor = np.concatenate([u_on[:, 0], u_off[:, 0]]).astype(np.float64)
        of = np.empty(len(configs), dtype=np.int64)
        of[on_rows], of[off_rows] = of_on, len(u_on) + of_off
        # Runs: a digit of stride s and size m is constant on aligned runs of s and repeats
        # with s * m; the strides of one placement divide each other, so the finest stride
        # is the grain and the coarsest stride * size the period.
        stride, size = _mesh_digits(u_on[:, 1:], p)
        off_stride, off_size = u_off[:, 2:2 + len(dims)], u_off[:, 2 + len(dims):]
        w = max(stride.shape[1], len(dims))
        grain, period = _runs(np.concatenate([_pad(stride, w), _pad(off_stride, w)]),
                              np.concatenate([_pad(size, w), _pad(off_size, w)]), n)
        length = np.concatenate([np.full(len(u_on), n), u_off[:, 1]])
        if receiving:
            gets = np.arange(n)[None, :] < length[:, None]
            out.append(Patterns(of, factor, blocks, gets, np.zeros(len(factor), dtype=np.int64),
                                grain, period, length))
        else:
            out.append(Patterns(of, factor, blocks, grain=grain, period=period))
    return out, held


def _mesh_digits(codes: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray]:
    """Stride and size of each slot's mesh axis (size 1 for padding): ``(U, L)`` each."""
    sizes = np.asarray(axis_sizes(p), dtype=np.int64)
    strides = np.cumprod(np.concatenate([[1], sizes[::-1]]))[:-1][::-1]  # product of the faster axes
    used = codes > 0
    c = np.maximum(codes, 1) - 1
    return np.where(used, strides[c], 1), np.where(used, sizes[c], 1)


def _pad(a: np.ndarray, width: int) -> np.ndarray:
    """``a`` ``(U, w)``, ``w <= width``, padded with ones to ``width`` columns."""
    out = np.ones((len(a), width), dtype=np.int64)
    out[:, :a.shape[1]] = a
    return out


def _runs(stride: np.ndarray, size: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Grain and period of patterns from their digits' strides and sizes (size 1: unused)."""
    used = size > 1
    grain = np.where(used, stride, n).min(axis=1, initial=n)
    period = np.where(used, stride * size, 1).max(axis=1, initial=1)
    return grain, period


def _mesh_blocks(codes: np.ndarray, p: int, n: int) -> np.ndarray:
    """``(U, n)`` blocks on devices ``0 .. n-1`` of an axis on the mesh, from its slots
    (indices + 1 of its mesh axes, slowest first, 0 pads)."""
    L = len(axis_sizes(p))
    mesh = np.concatenate([mesh_coords(p)[:n], np.zeros((n, 1), dtype=np.int64)], axis=1)
    sizes = np.asarray(axis_sizes(p) + (1,), dtype=np.int64)
    blocks = np.zeros((len(codes), n), dtype=np.int64)
    for slot in range(codes.shape[1]):
        if not (codes[:, slot] > 0).any():  # padding only: times 1 plus 0
            continue
        c = np.where(codes[:, slot] > 0, codes[:, slot] - 1, L)
        blocks = blocks * sizes[c][:, None] + mesh[:, c].T
    return blocks


def _rank_blocks(keys: np.ndarray, dims: int, n: int) -> np.ndarray:
    """``(U, n)`` blocks of an axis off the mesh from its keys (factor, devices holding,
    then the strides and factors of its ``dims`` dims): ``-1`` past the holders."""
    r = np.arange(n, dtype=np.int64)[None, :]
    blocks = np.zeros((len(keys), n), dtype=np.int64)
    for k in range(dims):
        stride, factor = keys[:, 2 + k][:, None], keys[:, 2 + dims + k][:, None]
        blocks = blocks * factor + (r // stride) % factor
    return np.where(r < keys[:, 1][:, None], blocks, -1)


def _unique(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(keys) == 0:
        return keys, np.zeros(0, dtype=np.int64)
    uniq, of = np.unique(keys, axis=0, return_inverse=True)
    return uniq, of.reshape(-1)

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
        if receiving:
            length = np.concatenate([np.full(len(u_on), n), u_off[:, 1]])
            gets = np.arange(n)[None, :] < length[:, None]
            out.append(Patterns(of, factor, blocks, gets, np.zeros(len(factor), dtype=np.int64)))
        else:
            out.append(Patterns(of, factor, blocks))
    return out, held


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

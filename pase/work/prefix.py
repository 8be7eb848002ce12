"""Re-layouts between group prefixes of a heterogeneous cluster.

On a cluster of mixed device groups (:mod:`pase.work.hetero`) a config is placed on
the first ``placed[k]`` ranks only; :func:`prefix_relayout` prices a re-layout
between two such prefixes from the tiles each side holds there.
"""
from __future__ import annotations

import numpy as np

from pase.ir import Op, Port
from pase.work.axis_blocks import rank_blocks
from pase.work.layout import axis_sizes, mesh_coords
from pase.work.offmesh import worst_received
from pase.work.relayout import placement_rows, t_of


def prefix_relayout(producer: Op, output: Port, src_configs: np.ndarray, src_placed: np.ndarray,
                    consumer: Op, input: Port, dst_configs: np.ndarray, dst_placed: np.ndarray,
                    devices: int) -> tuple[np.ndarray, np.ndarray]:
    """``(forward, backward)`` elements the worst device receives, ``(K_u, K_v)``, when
    config ``k`` of each side is placed on ranks ``0 .. placed[k] - 1`` of ``devices``
    (a heterogeneous cluster's group prefixes, :mod:`pase.work.hetero`), each inside
    its prefix as :mod:`pase.work.layout` places it on that many devices.

    With prefixes ``m < n``, the side on ``n`` devices has ranks at ``m`` and above
    (its split is wider than ``m``, or it would sit on ``m``) where the other side
    holds nothing: a receiver there gets its whole tile, the most any device can
    receive; so that direction is one tile, and only the other direction is counted
    device by device, on the first ``m`` ranks. Equal prefixes are counted both ways.
    """
    src_placed, dst_placed = np.asarray(src_placed), np.asarray(dst_placed)
    forward = np.zeros((len(src_configs), len(dst_configs)))
    backward = np.zeros_like(forward)
    for nu in np.unique(src_placed).tolist():
        rows_u = np.flatnonzero(src_placed == nu)
        sb, sh, sf, s_of = _prefix_blocks(producer, output, np.asarray(src_configs)[rows_u], int(nu))
        for nv in np.unique(dst_placed).tolist():
            rows_v = np.flatnonzero(dst_placed == nv)
            db, dh, df, d_of = _prefix_blocks(consumer, input, np.asarray(dst_configs)[rows_v], int(nv))
            m = min(int(nu), int(nv))
            at = np.ix_(rows_u, rows_v)
            pick = (s_of[:, None], d_of[None, :])
            if nu < nv:
                forward[at] = np.prod(t_of(output.shape, df), axis=1)[d_of][None, :]
            else:
                forward[at] = worst_received(output.shape, sb[:, :m], sf, sh[:, :m], db[:, :m], df,
                                              dh[:, :m])[pick]
            if nu > nv:
                backward[at] = np.prod(t_of(output.shape, sf), axis=1)[s_of][:, None]
            else:
                backward[at] = worst_received(output.shape, db[:, :m], df, dh[:, :m],
                                               sb[:, :m], sf, sh[:, :m]).T[pick]
    return forward, backward


def _prefix_blocks(op: Op, port: Port, configs: np.ndarray, n: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For the distinct placements of ``configs`` on ``n`` devices: blocks ``(B, n, rank)``,
    holding masks ``(B, n)``, split factors ``(B, rank)``, and each config's index among
    them (vectorised on the mesh, by device off it)."""
    rows = placement_rows(op, port, configs, n)
    uniq, first, of = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    blocks, held = _blocks(op, port, configs[first], uniq, n)
    return blocks, held, uniq[:, :len(port.shape)].astype(np.float64), of.reshape(-1)


def _blocks(op: Op, port: Port, configs: np.ndarray, rows: np.ndarray,
            devices: int) -> tuple[np.ndarray, np.ndarray]:
    """``(B, n, rank)`` blocks and ``(B, n)`` holding masks of ``configs`` (their
    placement ``rows``) on all ``n = devices`` devices: from the rows on the mesh, from
    the ranks (:func:`pase.work.axis_blocks.rank_blocks`) off it."""
    n, rank = int(devices), len(port.shape)
    L = len(axis_sizes(n))
    blocks = np.zeros((len(configs), n, rank), dtype=np.int64)
    active = np.ones((len(configs), n), dtype=bool)
    mesh = np.concatenate([mesh_coords(n), np.zeros((n, 1), dtype=np.int64)], axis=1)
    sizes = np.asarray(axis_sizes(n) + (1,), dtype=np.int64)
    for a in range(rank):
        codes = rows[:, rank + a * L: rank + (a + 1) * L]  # (B, L), 0 pads -> the size-1 column
        for slot in range(L):
            if not (codes[:, slot] > 0).any():  # padding only: times 1 plus 0
                continue
            c = np.where(codes[:, slot] > 0, codes[:, slot] - 1, L)
            blocks[:, :, a] = blocks[:, :, a] * sizes[c][:, None] + mesh[:, c].T
    off = np.flatnonzero(rows[:, rank * (L + 1)] > 0)
    if len(off):
        blocks[off], active[off] = rank_blocks(op, port, configs[off], n)
    return blocks, active

"""The device-by-device re-layout off the mesh: the slow path the fast one is checked against.

:func:`off_mesh_parts_by_device` fills a re-layout's parts where a side is off the mesh
as pase did before :mod:`pase.work.offmesh`: every config's blocks from
:func:`pase.work.layout.port_blocks`, then every device counted
(:func:`pase.work.offmesh.by_device`). It has the signature of
``pase.work.relayout._off_mesh_parts``, so a test can swap it in and compare whole
Problems (tests/test_alpha_beta_build.py).
"""
from __future__ import annotations

import numpy as np

from pase.ir import Op, Port
from pase.work.layout import active_devices, axis_sizes, port_blocks
from pase.work.offmesh import by_device


def _blocks(op: Op, port: Port, configs: np.ndarray, devices: int) -> tuple[np.ndarray, np.ndarray]:
    p = int(devices)
    blocks = np.stack([port_blocks(op, port, c, p) for c in configs])
    held = np.zeros((len(configs), p), dtype=bool)
    for k, c in enumerate(configs):
        held[k, active_devices(op, c, p)] = True
    return blocks, held


def off_mesh_parts_by_device(parts: list, producer: Op, output: Port, src_configs: np.ndarray,
                             src: np.ndarray, consumer: Op, input: Port, dst_configs: np.ndarray,
                             dst: np.ndarray, devices: int) -> None:
    """Fill ``parts`` (on distinct rows ``src`` x ``dst``, one config each) where a side is
    off the mesh, counting every device: a side on the mesh receiving from or for a side
    off it gets its whole tile (device ``p - 1`` is idle off the mesh)."""
    rank, L = len(output.shape), len(axis_sizes(devices))
    off_s, off_d = src[:, rank * (L + 1)] > 0, dst[:, rank * (L + 1)] > 0
    sb, sh = _blocks(producer, output, src_configs, devices)
    db, dh = _blocks(consumer, input, dst_configs, devices)
    sf, df = src[:, :rank].astype(np.float64), dst[:, :rank].astype(np.float64)
    t = np.asarray(output.shape, dtype=np.float64)
    tile_s, tile_d = np.prod(t / sf, axis=1), np.prod(t / df, axis=1)
    full = (1 << L) - 1
    S, J, on = np.flatnonzero(off_s), np.flatnonzero(off_d), ~off_s
    if len(S):
        if len(J):
            parts[0][np.ix_(S, J)] = by_device(output.shape, sb[S], sf[S], sh[S], db[J], df[J], dh[J])
        parts[0][np.ix_(S, np.flatnonzero(~off_d))] = tile_d[~off_d][None, :]
        parts[1][S] = by_device(output.shape, db, df, dh, sb[S], sf[S], sh[S]).T
        parts[2][S] = parts[3][S] = full
    if len(J):
        parts[0][np.ix_(np.flatnonzero(on), J)] = by_device(output.shape, sb[on], sf[on], sh[on],
                                                            db[J], df[J], dh[J])
        parts[1][np.ix_(np.flatnonzero(on), J)] = tile_s[on][:, None]
        parts[2][:, J] = parts[3][:, J] = full

"""Per-device tiles of an op's tensors and the paper's re-distribution volume.

:func:`overlap_elements` is the PaSE paper's rule, kept for the ``paper`` cost
model (and the LSTM's per-step cell re-layout); the alpha-beta model and the
simulator use :mod:`pase.work.relayout` on :mod:`pase.work.layout`'s placement (both
directions, replicas).
"""
from __future__ import annotations

import numpy as np

from pase.ir import Op, Port


def port_factors(op: Op, port: Port, configs: np.ndarray) -> np.ndarray:
    """Per config, the split factor of each axis of ``port``: ``(K, rank)``."""
    out = np.ones((configs.shape[0], len(port.shape)), dtype=np.int64)
    for a, dims in enumerate(op.port_axes(port)):
        for d in dims:
            out[:, a] *= configs[:, d]
    return out


def port_tiles(op: Op, port: Port, configs: np.ndarray) -> np.ndarray:
    """Per config, each device's tile shape of ``port`` (floats): ``(K, rank)``."""
    return np.asarray(port.shape, dtype=np.float64) / port_factors(op, port, configs)


def overlap_elements(shape: tuple[int, ...], src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Elements each device must receive to go from split ``src`` to split ``dst``.

    The PaSE paper's tile-overlap rule (docs/cost-model.md, "Re-distribution (edge) costs"): a device needs its
    destination tile and already holds the overlap with its source tile, credited
    only when the destination uses no more devices than the source. ``src`` and
    ``dst`` broadcast (``(K_u, 1, rank)`` with ``(1, K_v, rank)`` gives a matrix).
    """
    t = np.asarray(shape, dtype=np.float64)
    src_tile, dst_tile = t / src, t / dst
    need = np.prod(dst_tile, axis=-1)
    overlap = np.prod(np.minimum(src_tile, dst_tile), axis=-1)
    overlap = np.where(np.prod(dst, axis=-1) > np.prod(src, axis=-1), 0.0, overlap)
    return np.maximum(need - overlap, 0.0)

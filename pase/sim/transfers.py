"""Which device sends which bytes to which, when a tensor changes layout.

Device by device on the placement of :mod:`pase.work.layout`: each device that
needs the destination tile overlaps some source blocks; a block is held by every
source device with that block (replicas included). A device that holds a block
itself uses it in place; otherwise it reads it from a holder on its own node if
there is one, else from any holder, spreading the load by picking holder
``rank % count``. So each device receives its tile less what it holds, the
bytes :func:`pase.work.relayout.edge_bytes` gives for the worst device.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from pase.cluster import Cluster

# Tiles can be fractional (a pooling input split like its smaller output), so
# block boundaries are compared with this tolerance.
_EPS = 1e-9


def _blocks_needed(lo: np.ndarray, hi: np.ndarray, tile: np.ndarray) -> list[tuple[tuple[int, ...], float]]:
    """Source blocks overlapping the box ``[lo, hi)`` and the elements of each overlap."""
    ranges = []
    for a in range(len(lo)):
        first = int(math.floor(lo[a] / tile[a] + _EPS))
        last = int(math.ceil(hi[a] / tile[a] - _EPS)) - 1
        ranges.append([(i, min(hi[a], (i + 1) * tile[a]) - max(lo[a], i * tile[a]))
                       for i in range(first, last + 1)])
    out = []
    for combo in itertools.product(*ranges):
        elems = math.prod(length for _, length in combo)
        if elems > _EPS:
            out.append((tuple(i for i, _ in combo), elems))
    return out


def plan(shape: tuple[int, ...], src_blocks: np.ndarray, src_factors: np.ndarray,
         dst_blocks: np.ndarray, dst_factors: np.ndarray, cluster: Cluster,
         holders=None, receivers=None) -> tuple[dict[tuple[int, int], float], list[int]]:
    """Transfers for a re-layout of a tensor of ``shape``.

    ``src_blocks`` (``(p, rank)``) and ``dst_blocks`` give each device's block
    index per axis under factors ``src_factors`` / ``dst_factors``; ``holders`` /
    ``receivers`` the devices holding a source tile / needing a destination tile
    (default: every row). Returns ``({(sender, receiver): elements}, receivers
    that use a local copy)``.
    """
    t = np.asarray(shape, dtype=np.float64)
    src_tile, dst_tile = t / src_factors, t / dst_factors
    holding = range(len(src_blocks)) if holders is None else [int(h) for h in holders]
    needing = range(len(dst_blocks)) if receivers is None else [int(r) for r in receivers]
    src_rows, dst_rows = src_blocks.tolist(), dst_blocks.tolist()
    owners: dict[tuple[int, ...], list[int]] = {}
    for rank in holding:
        owners.setdefault(tuple(src_rows[rank]), []).append(rank)
    needed: dict[tuple[int, ...], list[tuple[tuple[int, ...], float]]] = {}
    sends: dict[tuple[int, int], float] = {}
    local: list[int] = []
    for d in needing:
        row = dst_rows[d]
        key = tuple(row)
        if key not in needed:
            lo = np.asarray(row, dtype=np.float64) * dst_tile
            needed[key] = _blocks_needed(lo, lo + dst_tile, src_tile)
        uses_local = False
        for block, elems in needed[key]:
            have = owners[block]
            if d in have:
                uses_local = True
                continue
            near = [h for h in have if cluster.node_of(h) == cluster.node_of(d)] or have
            s = near[d % len(near)]
            sends[(s, d)] = sends.get((s, d), 0.0) + float(elems)
        if uses_local:
            local.append(d)
    return sends, local

"""Seconds of an alpha-beta edge: each direction's bytes on the link its receivers cross.

    edge_seconds(cluster, p, bytes_per_element, forward, backward, fwd_axes, bwd_axes)
    moved_seconds(cluster, p, bytes_per_element, shape, src, dst, parts)

:class:`cost_models.alpha_beta.AlphaBetaCostModel` prices an edge's re-layout here
once :mod:`pase.work.relayout` has counted its elements per direction and the
mesh axes each direction fetches along (a bit mask per axis); ``moved_seconds`` adds
the all-reduces that ``reduce_scatter`` moves onto edges. Every array is over
distinct placement rows; the caller spreads them to config pairs.
"""
from __future__ import annotations

import math

import numpy as np

from pase.cluster import Cluster
from pase.perf.comms import collective_seconds, point_to_point
from pase.perf.hardware import IDEAL
from pase.work.layout import mesh_axes
from pase.work.mapping import spanning_masks, spans_nodes, worst_group

__all__ = ["edge_seconds", "moved_seconds"]


def moved_seconds(cluster: Cluster, p: int, bytes_per_element: float, shape: tuple[int, ...],
                  src: np.ndarray, dst: np.ndarray, parts: tuple) -> np.ndarray:
    """Seconds of the moved all-reduces on distinct row pairs: a reduce-scatter when
    the neighbour slices the result over the whole group, else the all-reduce.
    Groups off the mesh (mask 0 with a split) are never moved: see movable_collectives."""
    forward, backward = parts[0], parts[1]
    rank, L = len(shape), len(mesh_axes(p))
    sizes = [s for _, s in mesh_axes(p)]

    def axes_of(rows):  # every mesh axis a layout uses, as a mask
        codes = rows[:, rank:rank * (L + 1)]
        bits = np.where(codes > 0, np.left_shift(np.int64(1), np.maximum(codes, 1) - 1), 0)
        return np.bitwise_or.reduce(bits, axis=1) if bits.shape[1] else np.zeros(len(rows), np.int64)

    t = np.asarray(shape, dtype=np.float64)
    tile_s = np.prod(t / src[:, :rank], axis=1) * bytes_per_element
    tile_d = np.prod(t / dst[:, :rank], axis=1) * bytes_per_element
    total = np.zeros(forward.shape)
    # forward: the producer's output all-reduce (per src row), sliced by the consumer;
    # backward: the consumer's input-gradient all-reduce (per dst row), sliced by the producer.
    for mask, nbytes, sliced_by, moved, along_src in (
            (src[:, -1], tile_s, axes_of(dst), forward, True),
            (dst[:, -1], tile_d, axes_of(src), backward, False)):
        for m in np.unique(mask).tolist():
            if m == 0:
                continue
            q = math.prod(s for i, s in enumerate(sizes) if m >> i & 1)
            nodes = (worst_group(tuple((s, bool(m >> i & 1)) for i, s in enumerate(sizes)),
                                 cluster.devices_per_node)[0]
                     if cluster.spans_nodes(p) else 1)
            here = np.flatnonzero(mask == m)  # only these rows (columns) take this group
            ar = collective_seconds("all-reduce", nbytes[here], q, nodes, cluster, IDEAL)
            rs = collective_seconds("reduce-scatter", nbytes[here], q, nodes, cluster, IDEAL)
            whole = (sliced_by & m) == m
            if along_src:
                scatter = (moved[here] == 0) & whole[None, :]
                total[here] += np.where(scatter, rs[:, None], ar[:, None])
            else:
                scatter = (moved[:, here] == 0) & whole[:, None]
                total[:, here] += np.where(scatter, rs[None, :], ar[None, :])
    return total


def edge_seconds(cluster: Cluster, p: int, bytes_per_element: float, forward: np.ndarray,
                 backward: np.ndarray, fwd_axes: np.ndarray, bwd_axes: np.ndarray) -> np.ndarray:
    """Seconds of an edge: each direction ``a + bytes/B`` on its link, 0 when no bytes move."""
    shape = np.broadcast(forward, backward).shape
    links = _links(cluster, p)
    total = None
    for elems, masks in ((forward, fwd_axes), (backward, bwd_axes)):
        nbytes = np.broadcast_to(elems * bytes_per_element, shape)
        masks = np.broadcast_to(masks, shape)
        if links is None:  # over 12 mesh axes: the node test on the distinct masks
            latency, bandwidth = point_to_point(cluster, IDEAL, _inter(cluster, p, masks))
            time = nbytes / bandwidth
            time += latency
        elif links[0].ndim == 0:  # no group spans nodes: one link
            time = nbytes / links[1]
            time += links[0]
        else:  # per mask from the tables, into one buffer (valid masks: no bound check)
            time = links[1].take(masks, mode="clip")
            np.divide(nbytes, time, out=time)
            time += links[0].take(masks, mode="clip")
        np.putmask(time, ~(nbytes > 0), 0.0)
        if total is None:
            total = time
        else:
            total += time
    return total


def _inter(cluster: Cluster, p: int, masks: np.ndarray) -> np.ndarray:
    """Whether receivers fetching along the mesh axes in ``masks`` cross nodes."""
    dpn = cluster.devices_per_node
    if not cluster.spans_nodes(p):
        return np.zeros(masks.shape, dtype=bool)
    sizes = tuple(s for _, s in mesh_axes(p))
    if len(sizes) <= 12:  # a table over every mask, memoised
        return spanning_masks(sizes, dpn)[masks]
    uniq, inv = np.unique(masks, return_inverse=True)
    return np.array([spans_nodes(sizes, dpn, m) for m in uniq.tolist()],
                    dtype=bool)[inv.reshape(masks.shape)]


def _links(cluster: Cluster, p: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Latency and bandwidth of a receiver's link per mesh-axis mask (``(2**L,)`` tables,
    or scalars when no group spans nodes); None over 12 mesh axes."""
    if not cluster.spans_nodes(p):
        latency, bandwidth = point_to_point(cluster, IDEAL, False)
        return np.float64(latency), np.float64(bandwidth)
    sizes = tuple(s for _, s in mesh_axes(p))
    if len(sizes) > 12:
        return None
    return point_to_point(cluster, IDEAL, spanning_masks(sizes, cluster.devices_per_node))

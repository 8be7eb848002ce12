"""Where an op's devices sit on nodes: group topology (placement: :mod:`pase.work.layout`).

The placement itself (mesh, device coordinates, groups, port blocks) lives in
:mod:`pase.work.layout`; its names are re-exported here.
"""
from __future__ import annotations

import functools
import math
from typing import Sequence

import numpy as np

from pase.cluster import Cluster, node_of
from pase.ir import Op, Port
from pase.work import layout
from pase.work.layout import device_coords, group_members, mesh_axes, mesh_order, owned_axes

__all__ = ["device_coords", "group_members", "group_topology", "mesh_order", "port_blocks"]


@functools.lru_cache(maxsize=65536)
def worst_group(mesh: tuple[tuple[int, bool], ...], devices_per_node: int) -> tuple[int, int]:
    """(most nodes one group spans, most members of a group on one node).

    ``mesh`` lists ``(factor, in_group)`` for the split dims, slowest first. A pure
    function of small integers, so memoising it is safe and makes building
    Problems with tens of thousands of configs cheap.
    """
    factors = [f for f, _ in mesh]
    ranks = np.arange(math.prod(factors)).reshape(factors) if factors else np.zeros((), dtype=np.int64)
    nodes = node_of(ranks, devices_per_node)
    group_axes = [i for i, (_, g) in enumerate(mesh) if g]
    other_axes = [i for i, (_, g) in enumerate(mesh) if not g]
    q = math.prod(factors[i] for i in group_axes)
    rows = np.transpose(nodes, other_axes + group_axes).reshape(-1, q)
    # Count (group, node) pairs in one pass: group g's members on node n share key g * width + n.
    width = int(nodes.max()) + 1
    keys, counts = np.unique(np.arange(len(rows))[:, None] * width + rows, return_counts=True)
    return int(np.bincount(keys // width).max()), int(counts.max())


def spans_nodes(sizes: tuple[int, ...], devices_per_node: int, mask: int) -> bool:
    """Whether a group along the mesh axes in ``mask`` (bit ``i``: axis ``i`` of ``sizes``)
    spans nodes (:func:`worst_group`)."""
    return worst_group(tuple((s, bool(mask >> i & 1)) for i, s in enumerate(sizes)), devices_per_node)[0] > 1


@functools.lru_cache(maxsize=64)
def group_table(sizes: tuple[int, ...], devices_per_node: int) -> np.ndarray:
    """:func:`worst_group` of the group along the mesh axes of every mask of ``sizes``' axes
    (bit ``i``: axis ``i``): ``(2**L, 2)`` (nodes, local), read-only. A pure function of
    small integers, memoised like :func:`worst_group`."""
    table = np.array([worst_group(tuple((s, bool(m >> i & 1)) for i, s in enumerate(sizes)), devices_per_node)
                      for m in range(1 << len(sizes))], dtype=np.int64).reshape(-1, 2)
    table.flags.writeable = False
    return table


@functools.lru_cache(maxsize=64)
def spanning_masks(sizes: tuple[int, ...], devices_per_node: int) -> np.ndarray:
    """:func:`spans_nodes` for every mask of ``sizes``' axes: ``(2**L,)``, read-only."""
    table = group_table(sizes, devices_per_node)[:, 0] > 1
    table.flags.writeable = False
    return table


def group_topology(op: Op, configs: np.ndarray, dims: Sequence[int],
                   cluster: Cluster, devices: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per config, how a group over ``dims`` sits on nodes: ``(nodes, local)``.

    ``nodes`` is the most nodes any group spans and ``local`` the most members of
    one group on one node (the worst group sets a synchronous step's pace). A
    group inside one node has ``nodes = 1, local = q``. Groups follow
    :mod:`pase.work.layout` on ``devices`` devices (default: the cluster's): on the
    mesh, a group is the devices differing only in the mesh axes of ``dims``
    (replicas form groups of their own); off it, ranks ``0 .. P-1``.
    """
    configs = np.asarray(configs, dtype=np.int64)
    p = cluster.devices if devices is None else int(devices)
    dims = list(dims)
    q = np.prod(configs[:, dims], axis=1) if dims else np.ones(len(configs), dtype=np.int64)
    nodes = np.ones(len(configs), dtype=np.int64)
    local = q.copy()
    if not cluster.spans_nodes(p):
        return nodes, local
    order = mesh_order(op)
    in_group = set(dims)
    flags = [d in in_group for d in order]
    sizes = tuple(size for _, size in mesh_axes(p))
    owns, off = owned_axes(op, configs, p)
    weights = np.left_shift(np.int64(1), np.arange(len(sizes), dtype=np.int64))
    masks = (owns[:, dims, :].any(axis=1) * weights).sum(axis=1) if dims else np.zeros(len(configs), np.int64)
    on = np.flatnonzero(~off & (q > 1))
    if len(on) and len(sizes) <= 12:  # a table over every mask, memoised
        got = group_table(sizes, cluster.devices_per_node)[masks[on]]
        nodes[on], local[on] = got[:, 0], got[:, 1]
    elif len(on):
        uniq, inv = np.unique(masks[on], return_inverse=True)
        got = np.array([worst_group(tuple((s, bool(m >> i & 1)) for i, s in enumerate(sizes)),
                                     cluster.devices_per_node) for m in uniq.tolist()], dtype=np.int64)
        nodes[on], local[on] = got[inv.reshape(-1), 0], got[inv.reshape(-1), 1]
    # Off the mesh: ranks 0 .. P-1, row-major in mesh order.
    spread = np.flatnonzero(off & (q > 1) & cluster.spans_nodes(np.prod(configs, axis=1)))
    for k, row in zip(spread, configs[spread][:, order].tolist()):
        mesh = tuple((f, g) for f, g in zip(row, flags) if f > 1)
        nodes[k], local[k] = worst_group(mesh, cluster.devices_per_node)
    return nodes, local


def port_blocks(op: Op, port: Port, config: Sequence[int], devices: int | None = None) -> np.ndarray:
    """See :func:`pase.work.layout.port_blocks` (kept here for existing imports)."""
    return layout.port_blocks(op, port, config, devices)

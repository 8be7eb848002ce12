"""Where an op's devices sit: the mesh over split dims, groups, and port blocks.

See the package docstring for the convention: ranks ``0 .. prod(config) - 1``,
batch-role dims outermost, then the other dims in op order, the last fastest.
"""
from __future__ import annotations

import functools
import math
from typing import Sequence

import numpy as np

from pase.cluster import Cluster, node_of
from pase.ir import Op, Port


def mesh_order(op: Op) -> tuple[int, ...]:
    """Op dim indices from slowest- to fastest-varying across ranks."""
    batch = [i for i, d in enumerate(op.dims) if d.role == "batch"]
    rest = [i for i, d in enumerate(op.dims) if d.role != "batch"]
    return tuple(batch + rest)


def _strides(op: Op, config: Sequence[int]) -> np.ndarray:
    strides = np.zeros(len(op.dims), dtype=np.int64)
    step = 1
    for d in reversed(mesh_order(op)):
        strides[d] = step
        step *= int(config[d])
    return strides


def device_coords(op: Op, config: Sequence[int]) -> np.ndarray:
    """``(P, ndims)`` mesh coordinates of ranks ``0 .. P-1`` (``P = prod(config)``)."""
    config = [int(f) for f in config]
    ranks = np.arange(math.prod(config), dtype=np.int64)
    strides = _strides(op, config)
    return (ranks[:, None] // strides[None, :]) % np.asarray(config, dtype=np.int64)[None, :]


def group_members(op: Op, config: Sequence[int], dims: Sequence[int]) -> list[np.ndarray]:
    """The groups over ``dims``: ranks whose coordinates differ only in ``dims``.

    Groups come in order of their smallest rank; members in ascending rank order.
    """
    coords = device_coords(op, config)
    others = [d for d in range(len(op.dims)) if d not in set(dims)]
    keys = [tuple(row) for row in coords[:, others]]
    groups: dict[tuple[int, ...], list[int]] = {}
    for rank, key in enumerate(keys):
        groups.setdefault(key, []).append(rank)
    return [np.asarray(g, dtype=np.int64) for g in groups.values()]


@functools.lru_cache(maxsize=65536)
def _worst_group(mesh: tuple[tuple[int, bool], ...], devices_per_node: int) -> tuple[int, int]:
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


def group_topology(op: Op, configs: np.ndarray, dims: Sequence[int],
                   cluster: Cluster) -> tuple[np.ndarray, np.ndarray]:
    """Per config, how a group over ``dims`` sits on nodes: ``(nodes, local)``.

    ``nodes`` is the most nodes any group spans and ``local`` the most members of
    one group on one node (the worst group sets a synchronous step's pace). A
    group inside one node has ``nodes = 1, local = q``.
    """
    configs = np.asarray(configs, dtype=np.int64)
    dims = list(dims)
    q = np.prod(configs[:, dims], axis=1) if dims else np.ones(len(configs), dtype=np.int64)
    nodes = np.ones(len(configs), dtype=np.int64)
    local = q.copy()
    order = mesh_order(op)
    in_group = set(dims)
    flags = [d in in_group for d in order]
    # Groups of ops on one node's ranks stay inside it.
    spread = np.flatnonzero(cluster.spans_nodes(np.prod(configs, axis=1)) & (q > 1))
    for k, row in zip(spread, configs[spread][:, order].tolist()):
        mesh = tuple((f, g) for f, g in zip(row, flags) if f > 1)
        nodes[k], local[k] = _worst_group(mesh, cluster.devices_per_node)
    return nodes, local


def port_blocks(op: Op, port: Port, config: Sequence[int]) -> np.ndarray:
    """``(P, rank)``: the block index of each rank's tile along each tensor axis.

    An axis split by several dims (a Ravel's flat axis) numbers its blocks in
    row-major order of those dims, the first listed slowest.
    """
    coords = device_coords(op, config)
    out = np.zeros((coords.shape[0], len(port.shape)), dtype=np.int64)
    for a, axis_dims in enumerate(op.port_axes(port)):
        for d in axis_dims:
            out[:, a] = out[:, a] * int(config[d]) + coords[:, d]
    return out

"""The one-off cost of moving an op's parameters and optimizer state to a new layout.

Training moves from an old strategy on ``p_old`` devices to a new one on
``p_new`` devices (docs/replan.md). Between two steps only the parameters and
their optimizer state live on the devices; activations and gradients are made
again by the next step. So an op's migration is the re-layout of each of its
parameters (weights it owns; a tied matrix belongs to its owner), carrying
``copies`` values per element (the weight and the optimizer's moments: Adam 3,
momentum 2, SGD 1) of ``bytes_per_element`` bytes each.

Who holds what
--------------
Tiles are placed by :mod:`pase.work.layout`, the placement the rest of pase uses:
the old tiles on ``p_old`` devices under the old config, the new tiles on
``p_new`` devices under each candidate config. On a heterogeneous cluster an op
runs on the smallest group prefix holding its split (:func:`pase.work.hetero.placement`)
and the ranks after it hold nothing of it. Ranks ``0 .. survivors - 1`` are
the same physical devices before and after (``survivors`` defaults to
``min(p_old, p_new)``: a lost node leaves the last ranks, a grown job adds new
ones); they keep what they held. Old ranks at or above ``survivors`` are gone.

What a device receives
----------------------
The old tiles split the tensor into ``prod(old factors)`` blocks. A new device
``d`` needs its new tile; it already holds the part inside its own old block when
it survives. Every other part of the new tile lies in some old block ``b``, and
``d`` fetches it:

- over the intra-node link when a surviving holder of ``b`` sits on ``d``'s node
  (nodes of the new cluster: :meth:`pase.cluster.Cluster.node_of`);
- over the inter-node link when the surviving holders of ``b`` sit on other nodes;
- from the checkpoint (the ``restore`` link) when no surviving device holds ``b``.

Device ``d``'s time is ``a + bytes / B`` for each of the three classes it uses
(in turn, over its own links: its device group's on a heterogeneous cluster), and a
parameter's time is its slowest device's. Parameters and ops
move one after another, so the migration of a strategy is the sum over its ops:
a per-vertex term, which keeps the dp exact. Senders are not a bottleneck in
this model (a block held by one device and needed by many is charged at the
receivers only).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pase.cluster import Cluster, Link
from pase.costing import array_key, op_signature
from pase.ir import Op, Port
from pase.work.hetero import placement
from pase.work.layout import port_blocks
from pase.work.ops import owned_parameters  # the one definition of an op's own parameters
from pase.work.relayout import placement_rows
from pase.work.tiles import port_factors


@dataclass(frozen=True, eq=False)
class Links:
    """Per new rank, the latency (s) and bandwidth (bytes/s) of the three link classes it
    receives over: ``latency[c, d]``, ``bandwidth[c, d]`` for class ``c`` = its node (0),
    other nodes (1), the checkpoint (2). A rank receives over its own device group's links
    on a heterogeneous cluster."""

    latency: np.ndarray
    bandwidth: np.ndarray

    @classmethod
    def of(cls, cluster: Cluster, devices: int, restore: Link | None = None) -> "Links":
        """The links of ranks ``0 .. devices - 1``; the checkpoint is read over each rank's
        inter-node link unless ``restore`` is given."""
        groups = cluster.groups or (cluster,)
        which = np.asarray(cluster.group_of(np.arange(devices)), dtype=np.int64) if cluster.groups \
            else np.zeros(devices, dtype=np.int64)
        rows = []
        for g in groups:
            links = (g.intra, g.inter, restore or g.inter)
            rows.append([[link.latency_s for link in links], [link.bytes_per_second for link in links]])
        table = np.asarray(rows, dtype=np.float64)[which]  # (p, 2, 3)
        return cls(np.ascontiguousarray(table[:, 0, :].T), np.ascontiguousarray(table[:, 1, :].T))


@dataclass(frozen=True)
class Migration:
    """Per candidate config of one op (arrays of length K).

    ``seconds``: the op's migration time. ``max_bytes``: per parameter the most
    bytes one device receives, summed over the op's parameters. ``total_bytes``:
    the bytes all devices receive. ``restored_bytes``: those read from the
    checkpoint (held by no surviving device).
    """

    seconds: np.ndarray
    max_bytes: np.ndarray
    total_bytes: np.ndarray
    restored_bytes: np.ndarray

    @classmethod
    def zeros(cls, k: int) -> "Migration":
        return cls(*(np.zeros(k) for _ in range(4)))


@dataclass(frozen=True, eq=False)
class Setting:
    """Where the state is and where it goes: device counts, survivors, nodes, links, sizes."""

    old_devices: int
    new_devices: int
    survivors: int
    nodes: np.ndarray  # (p_new,) node of each new rank
    links: Links
    bytes_per_value: float  # bytes_per_element x copies
    new_prefixes: tuple[int, ...] = ()  # a heterogeneous cluster's group prefixes (new, old)
    old_prefixes: tuple[int, ...] = ()
    # Layers alike (equal signatures, old config and candidates) migrate alike: one computation.
    memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def make(cls, old_devices: int, new_devices: int, cluster: Cluster, *, survivors: int | None,
             bytes_per_element: float, copies: int, restore: Link | None = None,
             old_cluster: Cluster | None = None) -> "Setting":
        """On ``cluster`` (the new one); ``old_cluster`` (default: homogeneous) only places
        the old tiles: on a heterogeneous cluster an op runs on a group prefix."""
        keep = min(old_devices, new_devices) if survivors is None else int(survivors)
        nodes = np.asarray(cluster.node_of(np.arange(new_devices, dtype=np.int64)), dtype=np.int64)
        old = () if old_cluster is None else old_cluster.prefixes(old_devices)
        return cls(int(old_devices), int(new_devices), keep, nodes,
                   Links.of(cluster, new_devices, restore), float(bytes_per_element) * copies,
                   cluster.prefixes(new_devices), old)


def op_migration(old_op: Op, old_config: np.ndarray, new_op: Op, new_configs: np.ndarray,
                 setting: Setting) -> Migration:
    """The :class:`Migration` of ``new_op`` for each row of ``new_configs`` (``(K, ndims)``)
    from ``old_op`` (the same op in the old graph; same parameters) under ``old_config``."""
    new_configs = np.asarray(new_configs, dtype=np.int64)
    key = (op_signature(old_op), array_key(np.asarray(old_config, dtype=np.int64)),
           op_signature(new_op), array_key(new_configs))
    if key not in setting.memo:
        setting.memo[key] = _op_migration(old_op, old_config, new_op, new_configs, setting)
    return setting.memo[key]


def _op_migration(old_op: Op, old_config: np.ndarray, new_op: Op, new_configs: np.ndarray,
                  setting: Setting) -> Migration:
    total = Migration.zeros(len(new_configs))
    for port in owned_parameters(new_op):
        j = next(i for i, w in enumerate(new_op.weights) if w is port)
        part = _parameter(old_op, old_op.weights[j], np.asarray(old_config, dtype=np.int64),
                          new_op, port, new_configs, setting)
        total = Migration(*(a + b for a, b in zip(
            (total.seconds, total.max_bytes, total.total_bytes, total.restored_bytes),
            (part.seconds, part.max_bytes, part.total_bytes, part.restored_bytes))))
    return total


def _parameter(old_op: Op, old_port: Port, old_config: np.ndarray, new_op: Op, new_port: Port,
               new_configs: np.ndarray, s: Setting) -> Migration:
    """One parameter: per distinct new placement, device by device against the old blocks."""
    shape = np.asarray(new_port.shape, dtype=np.float64)
    f_old = port_factors(old_op, old_port, old_config[None, :])[0]
    own, on_node, anywhere = _holders(old_op, old_port, old_config, f_old, s)
    placed = placement(new_configs, s.new_prefixes, s.new_devices)
    out = np.zeros((len(new_configs), 4))
    for n in np.unique(placed).tolist():
        where = np.flatnonzero(placed == n)
        rows = placement_rows(new_op, new_port, new_configs[where], n)
        _, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
        parts = [_placement(new_op, new_port, new_configs[where[k]], n, shape, f_old, own, on_node,
                            anywhere, s) for k in first.tolist()]
        out[where] = np.asarray(parts, dtype=np.float64).reshape(len(first), 4)[inverse.reshape(-1)]
    return Migration(out[:, 0], out[:, 1], out[:, 2], out[:, 3])


def _blocks(op: Op, port: Port, config: np.ndarray, placed: int, devices: int) -> np.ndarray:
    """``(devices, rank)`` tile blocks of ``port`` with the op on ranks ``0 .. placed - 1``
    (a group prefix; all ranks on a homogeneous cluster), ``-1`` rows where idle."""
    blocks = np.full((devices, len(port.shape)), -1, dtype=np.int64)
    blocks[:placed] = port_blocks(op, port, config, placed)
    return blocks


def _holders(old_op: Op, old_port: Port, old_config: np.ndarray, f_old: np.ndarray, s: Setting):
    """``(own, on_node, anywhere)``: per new rank the old block it still holds (-1: none);
    per old block and node whether a surviving device there holds it; per old block
    whether any surviving device does."""
    placed = int(placement(old_config[None, :], s.old_prefixes, s.old_devices)[0])
    blocks = _blocks(old_op, old_port, old_config, placed, s.old_devices)
    held = (blocks >= 0).all(axis=1) if blocks.shape[1] else np.ones(len(blocks), dtype=bool)
    ids = np.ravel_multi_index(tuple(np.maximum(blocks, 0).T), tuple(int(f) for f in f_old)) \
        if blocks.shape[1] else np.zeros(len(blocks), dtype=np.int64)
    n_blocks = int(np.prod(f_old))
    keep = min(s.survivors, s.old_devices, s.new_devices)
    alive = held & (np.arange(s.old_devices) < keep)
    own = np.full(s.new_devices, -1, dtype=np.int64)
    own[:keep] = np.where(alive[:keep], ids[:keep], -1)
    n_nodes = int(s.nodes.max(initial=0)) + 1
    on_node = np.zeros((n_blocks, n_nodes), dtype=bool)
    survivors = np.flatnonzero(alive)
    on_node[ids[survivors], s.nodes[survivors]] = True
    return own, on_node, on_node.any(axis=1)


def _overlaps(shape: np.ndarray, new_blocks: np.ndarray, f_new: np.ndarray,
              f_old: np.ndarray) -> np.ndarray:
    """``(p_new, n_old_blocks)``: elements of each new device's tile inside each old block
    (old blocks numbered row-major over ``f_old``, as ``np.ravel_multi_index``)."""
    out = np.ones((len(new_blocks), 1))
    for a in range(len(shape)):
        t_new, t_old = shape[a] / f_new[a], shape[a] / f_old[a]
        lo = new_blocks[:, a:a + 1] * t_new
        starts = np.arange(int(f_old[a]))[None, :] * t_old
        ov = np.maximum(np.minimum(lo + t_new, starts + t_old) - np.maximum(lo, starts), 0.0)
        out = (out[:, :, None] * ov[:, None, :]).reshape(len(new_blocks), -1)
    return out


def _placement(new_op: Op, new_port: Port, config: np.ndarray, placed: int, shape: np.ndarray,
               f_old: np.ndarray, own: np.ndarray, on_node: np.ndarray, anywhere: np.ndarray,
               s: Setting) -> tuple[float, float, float, float]:
    """(seconds, max bytes, total bytes, restored bytes) of one new config on ranks
    ``0 .. placed - 1``."""
    blocks = _blocks(new_op, new_port, config, placed, s.new_devices)
    needs = (blocks >= 0).all(axis=1) if blocks.shape[1] else np.ones(len(blocks), dtype=bool)
    f_new = port_factors(new_op, new_port, config[None, :])[0]
    overlap = _overlaps(shape, np.maximum(blocks, 0), f_new, f_old)
    overlap[~needs] = 0.0
    local = np.zeros_like(overlap, dtype=bool)
    mine = np.flatnonzero(own >= 0)
    local[mine, own[mine]] = True
    near = on_node[:, s.nodes].T & ~local           # a surviving holder on the same node
    far = anywhere[None, :] & ~near & ~local        # surviving holders on other nodes only
    lost = ~anywhere[None, :] & ~local               # no surviving holder: the checkpoint
    per = [(overlap * m).sum(axis=1) * s.bytes_per_value for m in (near, far, lost)]
    seconds = np.zeros(len(overlap))
    for c, nbytes in enumerate(per):
        seconds = seconds + np.where(nbytes > 0, s.links.latency[c] + nbytes / s.links.bandwidth[c], 0.0)
    received = per[0] + per[1] + per[2]
    return (float(seconds.max(initial=0.0)), float(received.max(initial=0.0)),
            math.fsum(received.tolist()), math.fsum(per[2].tolist()))

"""Collective and point-to-point times at achieved bus bandwidth (NCCL's convention).

A group of ``n`` ranks runs at the achieved NVLink bus bandwidth when it sits in
one node. Across ``N`` nodes with ``L = n / N`` of its ranks in each, NCCL's rings
and trees cross each node boundary once per chunk and spread the chunks over
the node's ``L`` NICs (one per GPU on rail-optimised DGX/HGX fabrics), so the
bus bandwidth is ``L`` times the achieved per-GPU network bandwidth, capped by
NVLink: a data-parallel group of all 8 GPUs of each node reaches the node's
whole network bandwidth (about 185 of 200 GB/s on DGX A100 in nccl-tests),
one GPU per node (tensor parallelism inside nodes) one NIC's. For ``S`` bytes
(the whole buffer; for all-gather and reduce-scatter the gathered size):

- all-reduce: ring ``2(n-1)/n * S / bw`` plus ``2(n-1)`` hops of latency, or a
  tree ``2 S / bw`` plus ``2 log2(n)`` hops, whichever is faster (NCCL picks by size);
- all-gather, reduce-scatter: ``(n-1)/n * S / bw`` plus ``n-1`` hops;
- all-to-all: ``(n-1)/n * S / bw`` plus ``n-1`` hops;
- send: ``S / bw`` plus one hop.

A hop across nodes costs the network latency, inside a node the NVLink one.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from pase.cluster import Cluster
from pase.perf.hardware import Achieved
from pase.perf.layout import Layout

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "send")


def _link(cluster: Cluster, hw: Achieved, n: int, nodes: int) -> tuple[float, float, float]:
    """(bus bytes/s, latency of an intra hop, latency of an inter hop)."""
    nvlink = cluster.intra.bytes_per_second * hw.nvlink
    if nodes <= 1:
        return nvlink, cluster.intra.latency_s, 0.0
    per_node = max(1, min(n // nodes, cluster.devices_per_node))
    return (min(per_node * cluster.inter.bytes_per_second * hw.network, nvlink),
            cluster.intra.latency_s, cluster.inter.latency_s)


def collective_seconds(kind: str, nbytes: float, n: int, nodes: int, cluster: Cluster,
                       hw: Achieved) -> float:
    """Seconds of one collective of ``nbytes`` over ``n`` ranks on ``nodes`` nodes."""
    if kind not in KINDS:
        raise ValueError(f"unknown collective {kind!r}; allowed: {', '.join(KINDS)}")
    if nbytes <= 0 or (n <= 1 and kind != "send"):
        return 0.0
    bw, intra, inter = _link(cluster, hw, n, nodes)
    per_node = max(1, n // max(nodes, 1))

    def ring_hops(rounds: int) -> float:  # a hierarchical ring: inner hops on NVLink, outer on the network
        return rounds * ((per_node - 1) * intra + (max(nodes, 1) - 1) * inter) if nodes > 1 \
            else rounds * (n - 1) * intra

    if kind == "send":
        return (inter if nodes > 1 else intra) + nbytes / bw
    if kind == "all-reduce":
        ring = 2 * (n - 1) / n * nbytes / bw + ring_hops(2)
        hop = inter if nodes > 1 else intra
        tree = 2 * nbytes / bw + 2 * math.ceil(math.log2(n)) * hop
        return min(ring, tree)
    return (n - 1) / n * nbytes / bw + ring_hops(1)


def group_nodes(cluster: Cluster, sizes_strides: list[tuple[int, int]]) -> int:
    """Nodes spanned by the group of ranks ``sum_i k_i * stride_i`` (``k_i < size_i``)."""
    ranks = np.zeros(1, dtype=np.int64)
    for size, stride in sizes_strides:
        ranks = (ranks[:, None] + np.arange(size, dtype=np.int64)[None, :] * stride).ravel()
    return int(np.unique(ranks // cluster.devices_per_node).size)


def group_collectives(cluster: Cluster, lay: Layout, hw: Achieved) -> Callable[[str, float, str], float]:
    """``coll(kind, nbytes, group)``: seconds of a collective over one of the layout's groups.

    Rank order is ``dp, pp, cp, tp`` (outermost first): ``tp`` is consecutive ranks,
    ``cp`` strides ``tp``, ``pp`` neighbours are ``tp * cp`` apart, and the
    data-parallel group of a parameter (``"dp"``: ``dp x cp`` ranks; ``"edp"``: an
    expert's, ``dp x cp / ep``) spans the rest.
    """
    tp, cp, pp, dp, ep = lay.tp, lay.cp, lay.pp, lay.dp, lay.ep
    groups = {"tp": (tp, group_nodes(cluster, [(tp, 1)])),
              "cp": (cp, group_nodes(cluster, [(cp, tp)])),
              "ep": (ep, group_nodes(cluster, [(ep, tp)])),
              "dp": (dp * cp, group_nodes(cluster, [(cp, tp), (dp, tp * cp * pp)])),
              "edp": (dp * cp // ep, group_nodes(cluster, [(dp * cp // ep, tp * ep)])),
              "pp": (2, group_nodes(cluster, [(2, tp * cp)]))}

    def coll(kind: str, nbytes: float, group: str) -> float:
        n, nodes = groups[group]
        return collective_seconds(kind, nbytes, n, nodes, cluster, hw)

    return coll

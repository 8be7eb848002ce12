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
- all-to-all: inside a node ``(n-1)/n * S / bw`` plus ``n-1`` hops; across nodes each
  rank's share for other nodes, ``(n-L)/n * S``, leaves through its own NIC (no ring
  spreads it over the node's NICs), beside its ``(L-1)/n * S`` on NVLink;
- send: ``S / bw`` plus one hop; exchange (a halo or a re-layout to a neighbour in
  the group, :mod:`pase.work.ops`): a send, nothing when the group is one rank.

A hop across nodes costs the network latency, inside a node the NVLink one.

Every price of a collective in pase comes from here: the calibrated model with a
device type's achieved constants (:mod:`pase.perf.hardware`), the alpha-beta
teaching model and the simulator with :data:`pase.perf.hardware.IDEAL` (every
fraction 1: the bus bandwidth is the raw link figure). :func:`collective_phases`
splits the same seconds by link class for the simulator's flows, and
:func:`point_to_point` gives the link one message crosses (an edge's re-layout).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from pase.cluster import Cluster
from pase.errors import OptionError
from pase.perf.hardware import Achieved
from pase.perf.layout import Layout

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "send", "exchange")


def _link(cluster: Cluster, hw: Achieved, n, nodes):
    """(bus bytes/s, latency of an intra hop, latency of an inter hop), per group."""
    nvlink = cluster.intra.bytes_per_second * hw.nvlink
    per_node = np.maximum(1, np.minimum(n // np.maximum(nodes, 1), cluster.devices_per_node))
    across = np.minimum(per_node * cluster.inter.bytes_per_second * hw.network, nvlink)
    spans = nodes > 1
    return (np.where(spans, across, nvlink), cluster.intra.latency_s,
            np.where(spans, cluster.inter.latency_s, 0.0))


def collective_seconds(kind: str, nbytes, n, nodes, cluster: Cluster, hw: Achieved,
                       latency: bool = True):
    """Seconds of one collective of ``nbytes`` over ``n`` ranks on ``nodes`` nodes.

    Scalars give a float; arrays (one entry per candidate config of an op, as the
    calibrated cost model asks) broadcast and give an array. ``latency=False``: the
    bandwidth term alone, for a tensor that travels in a bucket with others
    (gradient syncs, FSDP's gathers), whose hops the bucket pays once.
    """
    scalar = all(np.ndim(x) == 0 for x in (nbytes, n, nodes))
    seconds, (hops_i, hops_e), (intra, inter), _ = _terms(kind, nbytes, n, nodes, cluster, hw,
                                                          latency)
    out = seconds + (hops_i * intra + hops_e * inter)
    return float(out) if scalar else out


BUCKET_BYTES = 1e12  # a bucket this large runs the ring: NCCL's tree wins only on small ones


def bucket_latency(kind: str, n, nodes, cluster: Cluster, hw: Achieved):
    """Seconds of the hops alone of one large bucketed collective over ``n`` ranks on
    ``nodes`` nodes (a step's gradient sync: what :func:`collective_seconds` adds to the
    bandwidth term for the whole sync, run as a ring); 0 for a group of one."""
    _, (hops_i, hops_e), (intra, inter), _ = _terms(kind, BUCKET_BYTES, n, nodes, cluster, hw)
    out = hops_i * intra + hops_e * inter
    return float(out) if all(np.ndim(x) == 0 for x in (n, nodes)) else out


def _terms(kind: str, nbytes, n, nodes, cluster: Cluster, hw: Achieved, latency: bool = True):
    """The parts :func:`collective_seconds` adds: the bandwidth seconds, the hops
    ``(inside nodes, across nodes)``, their latencies, and whether the bandwidth term
    runs on the network. An idle collective (no bytes, a group of one) has none."""
    if kind not in KINDS:
        raise OptionError(f"unknown collective {kind!r}; allowed: {', '.join(KINDS)}")
    nbytes = np.asarray(nbytes, dtype=np.float64)
    n = np.asarray(n, dtype=np.int64)
    nodes = np.maximum(np.asarray(nodes, dtype=np.int64), 1)
    bw, intra, inter = _link(cluster, hw, n, nodes)
    if not latency:
        intra, inter = 0.0, np.zeros_like(inter)
    per_node = np.maximum(1, n // nodes)
    spans = nodes > 1
    nf = np.maximum(n, 1).astype(np.float64)
    nvlink = cluster.intra.bytes_per_second * hw.nvlink
    on_network = spans & (bw < nvlink)

    def ring_hops(rounds: int):  # a hierarchical ring: inner hops on NVLink, outer on the network
        return (rounds * np.where(spans, per_node - 1, n - 1), rounds * np.where(spans, nodes - 1, 0))

    if kind in ("send", "exchange"):
        seconds, hops = nbytes / bw, (np.where(spans, 0, 1), np.where(spans, 1, 0))
    elif kind == "all-reduce":
        ring = 2 * (nf - 1) / nf * nbytes / bw
        ring_i, ring_e = ring_hops(2)
        steps = 2 * np.ceil(np.log2(nf))
        tree = 2 * nbytes / bw
        tree_i, tree_e = np.where(spans, 0, steps), np.where(spans, steps, 0)
        pick = ring + (ring_i * intra + ring_e * inter) <= tree + (tree_i * intra + tree_e * inter)
        seconds = np.where(pick, ring, tree)
        hops = (np.where(pick, ring_i, tree_i), np.where(pick, ring_e, tree_e))
    elif kind == "all-to-all":
        nic = np.minimum(cluster.inter.bytes_per_second * hw.network, nvlink)
        inside = (per_node - 1) / nf * nbytes / nvlink
        cross = (nf - per_node) / nf * nbytes / nic
        seconds = np.where(spans, np.maximum(inside, cross), (nf - 1) / nf * nbytes / nvlink)
        on_network = spans & (cross >= inside)
        hops = ring_hops(1)
    else:
        seconds = (nf - 1) / nf * nbytes / bw
        hops = ring_hops(1)
    idle = (nbytes <= 0) | (n <= 1) if kind != "send" else nbytes <= 0
    return (np.where(idle, 0.0, seconds), (np.where(idle, 0, hops[0]), np.where(idle, 0, hops[1])),
            (intra, inter), on_network)


@dataclass(frozen=True)
class Phase:
    """A collective's part on one link class, as the simulator runs it: ``steps`` hops
    of the link's latency and ``volume`` bytes per member at the link's bandwidth."""

    link: str
    steps: float
    volume: float


def collective_phases(kind: str, nbytes: float, n: int, nodes: int, cluster: Cluster,
                      hw: Achieved) -> list[Phase]:
    """:func:`collective_seconds` as phases on the ``"intra"`` and ``"inter"`` links: on an
    idle cluster the phases take exactly its seconds. The bandwidth term runs on the
    link that bounds it (the network when a group spanning nodes is held back by its
    NICs), as the bytes that link moves in that time."""
    seconds, (hops_i, hops_e), _, on_network = _terms(kind, nbytes, n, nodes, cluster, hw)
    seconds, on_network = float(seconds), bool(on_network)
    vol_e = seconds * cluster.inter.bytes_per_second if on_network else 0.0
    vol_i = 0.0 if on_network else seconds * cluster.intra.bytes_per_second
    return [Phase("intra", float(hops_i), vol_i), Phase("inter", float(hops_e), vol_e)]


def point_to_point(cluster: Cluster, hw: Achieved, spans):
    """(latency, bytes/s) of one message between two ranks, across nodes where ``spans``:
    a send over a group of two (an edge's re-layout, per receiver)."""
    spans = np.asarray(spans, dtype=bool)
    bw, intra, inter = _link(cluster, hw, np.full(spans.shape, 2), np.where(spans, 2, 1))
    return np.where(spans, inter, intra), bw


ENUMERATED_RANKS = 1 << 16  # a group this small is listed rank by rank


def group_nodes(cluster: Cluster, sizes_strides: list[tuple[int, int]]) -> int:
    """Nodes spanned by the group of ranks ``sum_i k_i * stride_i`` (``k_i < size_i``).

    A small group is listed. A large one (data parallelism over millions of ranks) is
    counted without listing it: an outer term whose stride is a whole number of nodes and
    at least the span of the terms inside it moves every inner rank to nodes of its own,
    so it multiplies the count; a single progression left is counted by its step; what is
    left otherwise is listed (it is small in every layout).
    """
    terms = sorted((int(n), int(s)) for n, s in sizes_strides if n > 1)
    d = cluster.devices_per_node
    factor = 1
    while terms and math.prod(n for n, _ in terms) > ENUMERATED_RANKS:
        n, stride = terms[-1]
        span = sum((m - 1) * t for m, t in terms[:-1]) + 1  # ranks the inner terms cover
        if stride % d or stride < span:
            break  # not separable: list it all
        factor *= n
        terms.pop()
    if len(terms) == 1:  # one progression: steps of a node or more land on new nodes,
        n, stride = terms[0]  # shorter steps skip none between the first and the last
        return factor * (n if stride >= d else (n - 1) * stride // d + 1)
    ranks = np.zeros(1, dtype=np.int64)
    for size, stride in terms:
        ranks = (ranks[:, None] + np.arange(size, dtype=np.int64)[None, :] * stride).ravel()
    return factor * int(np.unique(ranks // d).size)


def group_collectives(cluster: Cluster, lay: Layout, hw: Achieved) -> Callable[[str, float, str], float]:
    """``coll(kind, nbytes, group)``: seconds of a collective over one of the layout's groups.

    Rank order is Megatron-Core's default, ``tp-cp-ep-dp-pp`` (innermost first):
    ``tp`` is consecutive ranks, ``cp`` strides ``tp``, ``dp`` strides ``tp * cp``, and
    ``pp`` is outermost (neighbouring stages ``tp * cp * dp`` ranks apart); the
    data-parallel group of a parameter (``"dp"``) is its ``dp x cp`` ranks. Experts
    follow Megatron-Core's expert ranks (``etp``, then ``ep``, then their data-parallel
    group ``"edp"``, ``dp x cp / ep``), inside one stage.
    """
    tp, cp, dp, ep, etp = lay.tp, lay.cp, lay.dp, lay.ep, lay.expert_tp
    groups = {"tp": (tp, group_nodes(cluster, [(tp, 1)])),
              "cp": (cp, group_nodes(cluster, [(cp, tp)])),
              "ep": (ep, group_nodes(cluster, [(ep, etp)])),
              "dp": (dp * cp, group_nodes(cluster, [(cp, tp), (dp, tp * cp)])),
              "edp": (lay.expert_data, group_nodes(cluster, [(lay.expert_data, etp * ep)])),
              "pp": (2, group_nodes(cluster, [(2, tp * cp * dp)]))}

    def coll(kind: str, nbytes: float, group: str) -> float:
        n, nodes = groups[group]
        return collective_seconds(kind, nbytes, n, nodes, cluster, hw)

    return coll

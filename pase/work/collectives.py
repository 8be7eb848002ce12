"""Collectives as ring phases on link classes: the alpha-beta formulas.

A group of ``q = N x L`` devices (``N`` nodes, ``L`` members per node) runs:

- all-reduce of ``n`` bytes: reduce-scatter inside each node,
  ``(L-1)(a_i + n/(L B_i))``; ring all-reduce of the ``n/L`` shard across nodes,
  ``2(N-1)(a_e + n/(L N B_e))``; all-gather inside each node, ``(L-1)(a_i + n/(L B_i))``.
  With ``N = 1`` this is the flat ring ``2(q-1)(a + n/(q B))``; with ``L = 1`` the
  flat ring on the inter-node link.
- all-gather (``n`` = bytes of the gathered result per device): across nodes
  ``(N-1)(a_e + n/(q B_e))``, then inside nodes ``(L-1)(a_i + n/(L B_i))``; flat:
  ``(q-1)(a + n/(q B))``. Reduce-scatter (``n`` = input bytes) is its mirror.
- exchange: one point-to-point message of ``n`` bytes to a neighbour (halos,
  re-layouts), ``a + n/B`` on the inter-node link if the group spans nodes.

``a`` is a link's latency, ``B`` its bandwidth per device and direction; every
member sends and receives ``volume`` bytes in a phase. References: R. Thakur,
R. Rabenseifner and W. Gropp, "Optimization of Collective Communication
Operations in MPICH", IJHPCA 19(1), 2005 (ring and Rabenseifner algorithms);
NCCL's performance notes (docs.nvidia.com/deeplearning/nccl, "bus bandwidth":
an all-reduce moves ``2(q-1)/q`` of the buffer per rank); hierarchical
all-reduce as in Horovod / NCCL's tree-of-rings across nodes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pase.cluster import Cluster
from pase.errors import OptionError

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "exchange")


@dataclass(frozen=True)
class Phase:
    """One ring phase: ``steps`` messages on ``link``, ``volume`` bytes per device."""

    link: str
    steps: np.ndarray
    volume: np.ndarray


def collective_phases(kind: str, nbytes, nodes, local) -> list[Phase]:
    """The phases of a collective (arrays broadcast over configs).

    Zero-size groups are not special-cased: a phase over one device has zero
    steps and zero volume, so a group of one costs nothing.
    """
    n = np.asarray(nbytes, dtype=np.float64)
    N = np.asarray(nodes, dtype=np.float64)
    L = np.asarray(local, dtype=np.float64)
    q = N * L
    if kind == "all-reduce":
        shard = n / L
        intra = Phase("intra", L - 1.0, (L - 1.0) * shard)
        return [intra, Phase("inter", 2.0 * (N - 1.0), 2.0 * (N - 1.0) * shard / N), intra]
    if kind == "all-gather":
        return [Phase("inter", N - 1.0, (N - 1.0) * n / q), Phase("intra", L - 1.0, (L - 1.0) * n / L)]
    if kind == "reduce-scatter":
        return [Phase("intra", L - 1.0, (L - 1.0) * n / L), Phase("inter", N - 1.0, (N - 1.0) * n / q)]
    if kind == "exchange":
        grouped = q > 1
        spans = N > 1
        one = np.ones_like(q)
        return [Phase("intra", np.where(grouped & ~spans, one, 0.0), np.where(grouped & ~spans, n, 0.0)),
                Phase("inter", np.where(spans, one, 0.0), np.where(spans, n, 0.0))]
    raise OptionError(f"unknown collective kind {kind!r}; allowed: {', '.join(KINDS)}")


def phase_time(phase: Phase, cluster: Cluster) -> np.ndarray:
    link = cluster.link(phase.link)
    return phase.steps * link.latency_s + phase.volume / link.bytes_per_second


def collective_time(kind: str, nbytes, nodes, local, cluster: Cluster) -> np.ndarray:
    """Seconds for one collective on an otherwise idle cluster (alpha-beta)."""
    return sum((phase_time(p, cluster) for p in collective_phases(kind, nbytes, nodes, local)),
               start=np.zeros(np.broadcast(np.asarray(nbytes), np.asarray(nodes),
                                           np.asarray(local)).shape))

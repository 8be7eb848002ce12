"""The alpha-beta model on a heterogeneous cluster (docs/heterogeneous.md).

Called by :class:`pase.cost_models.alpha_beta.AlphaBetaCostModel` when its bound
cluster has groups of several device types; a homogeneous cluster never comes
here, so its costs are the homogeneous model's, bit for bit.

- An op's config runs on the smallest prefix of groups holding its split
  (:func:`pase.work.hetero.placement`) and is priced there as on a homogeneous
  cluster made of the slowest device, intra link and NIC of the groups it touches
  (:meth:`pase.cluster.Cluster.view`): compute at its slowest device (``even``)
  or at the balanced rate ``sum_j s_j / b`` (``balanced``), collectives on the
  slowest link crossed. Activation collectives (phases forward and backward)
  scale by the worst device's share multiple; parameter-gradient syncs do not.
  Memory traffic (an embedding's gather) scales by that multiple too and runs at
  the lowest HBM bandwidth of the groups the prefix touches (:mod:`pase.traffic`).
- Memory: per device type, parameters and optimizer state where the op runs plus
  activations times that type's share multiple; the vector holds, per config,
  the most over types of those bytes times ``M_min / M_type`` (bytes of the
  smallest-memory type), so one cap at ``M_min`` bounds every type: exact for an
  op alone, conservative summed over ops (a sum of maxima).
- An edge between configs on the same prefix is that prefix's homogeneous edge
  cost; between prefixes, the elements the worst device receives are counted
  device by device (:func:`pase.work.prefix.prefix_relayout`) and sent on the
  slowest NIC of the whole cluster when it spans nodes. With ``balanced`` the
  edge's time scales by the larger share multiple of its two ends.
- ``reduce_scatter`` has no effect here: every GEMM all-reduce stays on its op.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from pase.ir import Op, Port
from pase.perf.comms import collective_seconds
from pase.perf.hardware import IDEAL
from pase.traffic import hbm_rate
from pase.work import group_topology
from pase.work.hetero import config_terms
from pase.work.layout import mesh_axes
from pase.work.ops import OpWork
from pase.work.prefix import prefix_relayout


def take(work: OpWork, idx: np.ndarray) -> OpWork:
    """The configs ``idx`` of ``work``: every per-config array (and tuple of them) cut."""
    K = len(work.configs)

    def cut(a):
        if isinstance(a, tuple):
            return tuple(cut(x) for x in a)
        if isinstance(a, np.ndarray) and a.ndim and a.shape[0] == K:
            return a[idx]
        if isinstance(a, np.ndarray) and a.ndim == 0:
            return np.broadcast_to(a, (K,))[idx]
        return a

    colls = tuple(dataclasses.replace(c, nbytes=np.broadcast_to(np.asarray(c.nbytes), (K,))[idx],
                                      rounds=np.broadcast_to(np.asarray(c.rounds), (K,))[idx])
                  for c in work.collectives)
    changes = {f.name: cut(getattr(work, f.name)) for f in dataclasses.fields(work)
               if f.name not in ("op", "collectives")}
    return dataclasses.replace(work, collectives=colls, **changes)


def _terms(model, op: Op, configs: np.ndarray):
    return config_terms(op, configs, model.cluster, model.p, model.split)


def work_costs(model, work: OpWork) -> np.ndarray:
    """Seconds per config on the prefix each config runs on."""
    terms = _terms(model, work.op, work.configs)
    total = np.zeros(len(work.configs))
    for n in np.unique(terms.placed).tolist():
        idx = np.flatnonzero(terms.placed == n)
        sub, part = model._homogeneous(n), take(work, idx)
        seconds = part.flop / (terms.speed[idx] * 1e12 * model.efficiency)
        if part.traffic.any():
            touched = model.cluster.groups[:int(model.cluster.group_of(n - 1)) + 1]
            memory = min(hbm_rate(g.device) for g in touched)
            seconds = seconds + part.traffic * terms.activation[idx] / memory
        for c in part.collectives:  # every collective on the op (reduce_scatter: no effect here)
            nodes, _ = group_topology(part.op, part.configs, c.dims, sub.cluster, n)
            time = c.rounds * collective_seconds(c.kind, c.nbytes, part.group_size(c), nodes,
                                                 sub.cluster, IDEAL)
            if c.phase != "gradient":
                time = time * terms.activation[idx]
            seconds = seconds + time
        total[idx] = seconds
    return total


def memory(model, work: OpWork) -> np.ndarray:
    """Bytes of the smallest-memory device type, per config (see the module doc)."""
    terms = _terms(model, work.op, work.configs)
    caps = np.asarray([g.device.memory_bytes for g in model.cluster.groups])
    scale = model.memory_reference / caps
    present = terms.by_type > 0
    per_type = np.where(present, work.state_bytes[:, None] + work.activation_bytes[:, None]
                        * terms.by_type, 0.0)
    return (per_type * scale[None, :]).max(axis=1)


def edge_costs(model, producer: Op, output: Port, src_configs: np.ndarray,
               consumer: Op, input: Port, dst_configs: np.ndarray) -> np.ndarray:
    """Seconds of an edge for every pair of configs (see the module doc)."""
    tu, tv = _terms(model, producer, src_configs), _terms(model, consumer, dst_configs)
    out = np.zeros((len(src_configs), len(dst_configs)))
    p = model.p
    whole = model._homogeneous(p)
    full = (1 << len(mesh_axes(p))) - 1
    for nu in np.unique(tu.placed).tolist():
        rows = np.flatnonzero(tu.placed == nu)
        for nv in np.unique(tv.placed).tolist():
            cols = np.flatnonzero(tv.placed == nv)
            if nu == nv:
                sub = model._homogeneous(nu)
                block = _plain_edges(sub, producer, output, src_configs[rows], consumer, input,
                                     dst_configs[cols])
            else:
                fwd, bwd = prefix_relayout(producer, output, src_configs[rows], tu.placed[rows],
                                           consumer, input, dst_configs[cols], tv.placed[cols], p)
                masks = np.full(fwd.shape, full, dtype=np.int64)
                block = whole._seconds(fwd, bwd, masks, masks)
            out[np.ix_(rows, cols)] = block
    if model.split == "balanced":
        out = out * np.maximum(tu.activation[:, None], tv.activation[None, :])
    return out


def _plain_edges(sub, producer, output, src_configs, consumer, input, dst_configs) -> np.ndarray:
    """The homogeneous model's edge costs (``sub`` has no groups; no moved all-reduces)."""
    sub.moved = {}
    return sub.edge_costs(producer, output, src_configs, consumer, input, dst_configs)

"""The calibrated model on a mixed cluster (docs/heterogeneous.md, "The calibrated model").

Called by :class:`pase.cost_models.calibrated_rules.CalibratedRules` when its bound
cluster has groups of several device types; a homogeneous cluster never comes here.
The placement is alpha-beta's (:mod:`pase.work.hetero`): a config runs on the
smallest prefix of groups (fastest first) that holds its split, and is priced there
by the homogeneous calibrated rules on that prefix (:func:`at_prefix`):

- **kernels** on each device type that holds a tile, with that type's own achieved
  constants and peaks (:func:`pase.perf.hardware.achieved`): with ``split="even"``
  every device gets the same tile, so the slowest type's kernels pace the op (their
  maximum); with ``split="balanced"`` each type's tile is its share multiple of the even
  one (:func:`pase.work.hetero.config_terms`, shares by peak speed), its kernels scaled
  by it, and the slowest of those paces the op; activation collectives and edges scale
  by the worst multiple, as in alpha-beta's heterogeneous path;
- **collectives** on the prefix's view (:meth:`pase.cluster.Cluster.view`): the
  slowest intra link and NIC of the groups it touches, at the NCCL fractions of its
  slowest device type (:func:`pase.perf.hardware.achieved_of_view`);
- **edges** between configs on one prefix: that prefix's calibrated re-layout (with the
  GEMM all-reduces it takes over, as on a homogeneous cluster); between prefixes, the
  elements the worst device receives (:func:`pase.work.prefix.prefix_relayout`) on the
  whole cluster's slowest links, each micro-batch, plus the all-reduces an edge would
  have taken over, at their full price on each end's prefix;
- **memory**: per device type, states plus kept activations where the op runs, in
  bytes of the smallest-memory type (alpha-beta's rule,
  :func:`cost_models.alpha_beta_hetero.memory`), so one cap checks every type's HBM.
"""
from __future__ import annotations

import copy

import numpy as np

from pase.cluster import Cluster, Device
from pase.cost_models import alpha_beta_edges as edges
from pase.cost_models.alpha_beta_hetero import take
from pase.ir import Op, Port
from pase.perf.hardware import Achieved, achieved, achieved_of_view
from pase.perf.kernels import Pricer, make_pricer
from pase.work.hetero import config_terms, placement
from pase.work.layout import mesh_axes, owned_axes
from pase.work.prefix import prefix_relayout


def touched(cluster: Cluster, devices: int) -> tuple[Device, ...]:
    """The device types ranks ``0 .. devices - 1`` of ``cluster`` hold, fastest first."""
    if not cluster.groups:
        return (cluster.device,)
    last = int(cluster.group_of(max(int(devices), 1) - 1))
    out: list[Device] = []
    for g in cluster.groups[:last + 1]:
        if g.device not in out:
            out.append(g.device)
    return tuple(out)


def slowest_device(cluster: Cluster, devices: int) -> Device:
    """The real device type that paces ranks ``0 .. devices - 1`` (the view's composite
    device has no type's name, peaks or HBM): the one :func:`achieved_of_view` picks."""
    return min(touched(cluster, devices), key=lambda d: d.peak_tflops)


def hardware(cluster: Cluster, devices: int, precision: str) -> tuple[Achieved, Pricer]:
    """The constants and pricer of the slowest type of ranks ``0 .. devices - 1``."""
    hw = achieved_of_view(cluster, devices)
    return hw, make_pricer(slowest_device(cluster, devices), hw, precision)


def kinds(cluster: Cluster, devices: int, precision: str) -> tuple[tuple[Achieved, Pricer], ...]:
    """Per device type of ranks ``0 .. devices - 1``: its own constants and pricer."""
    return tuple((achieved(d), make_pricer(d, achieved(d), precision))
                 for d in touched(cluster, devices))


def at_prefix(model, n: int):
    """``model`` (bound to a mixed cluster) on ranks ``0 .. n - 1`` as a homogeneous
    calibrated model: the prefix's view for links, its slowest type's constants for
    collectives, every type's own for kernels (``kinds``). Memoised on ``model``."""
    cache = model.__dict__.setdefault("_prefix_models", {})
    if n not in cache:
        sub = copy.copy(model)
        sub.__dict__.pop("_prefix_models", None)
        sub.cluster = model.cluster.view(n)
        sub.devices = int(n)
        sub.hw, sub.pricer = hardware(model.cluster, n, model.precision)
        sub.kinds = kinds(model.cluster, n, model.precision)
        sub.activation_scale = None
        cache[n] = sub
    # the share of once-a-step terms follows the model's: a pipeline stage's model sets it
    # while it prices (pase.pipeline.stage_model), after a prefix's copy was made
    cache[n].once_share = model.once_share
    return cache[n]


def placed(model, configs: np.ndarray) -> np.ndarray:
    """Per config, the rank count of the prefix it runs on (:func:`pase.work.hetero.placement`)."""
    return placement(configs, model.cluster.prefixes(model.p), model.p)


def kernels(model, op: Op, configs: np.ndarray, base, ctx) -> tuple[np.ndarray, ...]:
    """Forward and backward kernel seconds per config, and the backward's weight-gradient
    part: on each device type that holds a tile, at its own constants, times its share
    multiple; the slowest type's."""
    by_type = config_terms(op, configs, model.cluster, model.p, model.split).by_type
    out = tuple(np.zeros(len(configs)) for _ in range(3))
    for g, group in enumerate(model.cluster.groups):
        rows = np.flatnonzero(by_type[:, g] > 0)
        if not len(rows):
            continue
        hw = achieved(group.device)
        pricer = make_pricer(group.device, hw, model.precision)
        times = model._kernels_on(op, configs[rows], take(base, rows), ctx, hw, pricer)
        for total, part in zip(out, times):
            total[rows] = np.maximum(total[rows], part * by_type[rows, g])
    return out


def work_costs(model, work) -> np.ndarray:
    """Seconds per step of each config, priced on its prefix."""
    return per_prefix(model, work, lambda sub, part: sub.work_costs(part))


def per_prefix(model, work, price):
    """``price(sub, part)`` of each config's part of ``work`` on its prefix's model, put
    back in config order: an array per config, or a dict of them."""
    where = placed(model, work.configs)
    scale = config_terms(work.op, work.configs, model.cluster, model.p, model.split).activation \
        if model.split == "balanced" else None
    out = None
    for n in np.unique(where).tolist():
        idx = np.flatnonzero(where == n)
        sub = at_prefix(model, n)
        if scale is not None:  # activation collectives at the worst share multiple
            sub = copy.copy(sub)
            sub.activation_scale = scale[idx]
        got = price(sub, take(work, idx))
        if out is None:
            out = {k: np.zeros(len(where)) for k in got} if isinstance(got, dict) \
                else np.zeros(len(where))
        if isinstance(got, dict):
            for k, v in got.items():
                out[k][idx] = v
        else:
            out[idx] = got
    return out


def edge_costs(model, producer: Op, output: Port, src_configs: np.ndarray,
               consumer: Op, input: Port, dst_configs: np.ndarray) -> np.ndarray:
    """Seconds of an edge per pair of configs (see the module doc)."""
    pu, pv = placed(model, src_configs), placed(model, dst_configs)
    out = np.zeros((len(src_configs), len(dst_configs)))
    p = model.p
    links = at_prefix(model, p).link_cluster
    full = (1 << len(mesh_axes(p))) - 1
    for nu in np.unique(pu).tolist():
        rows = np.flatnonzero(pu == nu)
        for nv in np.unique(pv).tolist():
            cols = np.flatnonzero(pv == nv)
            if nu == nv:
                block = at_prefix(model, nu).edge_costs(producer, output, src_configs[rows],
                                                        consumer, input, dst_configs[cols])
            else:
                fwd, bwd = prefix_relayout(producer, output, src_configs[rows], pu[rows],
                                           consumer, input, dst_configs[cols], pv[cols], p)
                masks = np.full(fwd.shape, full, dtype=np.int64)
                block = edges.edge_seconds(links, p, model.bytes_per_element, fwd, bwd,
                                           masks, masks) * model.microbatches
                block = block + _moved_back(model, producer, output, src_configs[rows], nu,
                                            "out")[:, None] \
                    + _moved_back(model, consumer, input, dst_configs[cols], nv, "in")[None, :]
            out[np.ix_(rows, cols)] = block
    if model.split == "balanced":  # the larger share multiple of the two ends
        tu = config_terms(producer, src_configs, model.cluster, p, "balanced").activation
        tv = config_terms(consumer, dst_configs, model.cluster, p, "balanced").activation
        out = out * np.maximum(tu[:, None], tv[None, :])
    return out


def _moved_back(model, op: Op, port: Port, configs: np.ndarray, n: int, side: str) -> np.ndarray:
    """Per config on prefix ``n``: seconds a step of the op's GEMM all-reduces that an edge
    takes over (``op``'s work leaves them out, :meth:`collective_roles`) when this edge
    crosses prefixes and cannot reduce them on the way: charged in full here."""
    sub = at_prefix(model, n)
    if side == "out":
        tag = "out" if any(q is port for q in op.outputs[:1]) else None
    else:
        tag = next((f"in{i}" for i, q in enumerate(op.inputs) if q is port), None)
    out = np.zeros(len(configs))
    if tag is None or tag not in sub.moved.get(op.name, ()):
        return out
    on_mesh = ~owned_axes(op, configs, sub.p)[1]
    for c in sub.op_collectives(op, configs):
        if c.port == tag and c.weight is None and c.phase != "gradient":
            out = out + np.where(on_mesh, sub.collective(op, configs, c), 0.0)
    return out * model.microbatches


def peak_flops(model, devices: int) -> float:
    """The peak FLOP/s of ranks ``0 .. devices - 1``, each at its own type's peak."""
    cl = model.cluster
    if not cl.groups:
        return model.pricer.top_flops * devices
    table = [make_pricer(g.device, achieved(g.device), model.precision).top_flops
             for g in cl.groups]
    return float(sum(table[int(i)] for i in cl.group_of(np.arange(int(devices)))))


__all__ = ["at_prefix", "edge_costs", "hardware", "kernels", "peak_flops", "slowest_device",
           "touched", "work_costs"]

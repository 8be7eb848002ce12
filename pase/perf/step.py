"""One training step of a named layout: time, memory, MFU (:func:`evaluate_layout`).

The step, per pipeline stage and micro-batch (all per device):

- compute: every op's kernels (:mod:`pase.perf.kernels`); under full
  recomputation each block's forward runs again in its backward, under selective
  recomputation the attention core's;
- tensor-parallel collectives on the critical path (Megatron-LM does not overlap
  them); with sequence parallelism each all-reduce is a reduce-scatter plus an
  all-gather, the same bytes on a ring;
- expert all-to-alls on the critical path; context parallelism's key/value ring
  overlapped with the attention blocks it feeds (only the excess is charged);
- ZeRO-3 (FSDP full shard): each unit's parameters all-gathered before its forward
  and again before its backward, its gradients reduce-scattered after; the next
  unit's gather overlaps this unit's compute, so only what exceeds it is charged;
- pipeline sends of the tensors entering each chunk (``1/tp`` of them per rank).

Then the schedule (:mod:`pase.perf.pipeline`), and once per step: the
data-parallel gradient all-reduce (ZeRO-0) or reduce-scatter (ZeRO-1/2) overlapped
with the last micro-batch's backward, ZeRO-1/2's parameter all-gather overlapped
with the first forward, and the optimizer step with gradient clipping at HBM speed.

Memory is the peak stage's states (16 bytes per parameter in mixed precision: 2
weight, 2 gradient, 12 fp32 master weight and Adam moments, sharded by the ZeRO
stage over the data-parallel ranks), its kept activations times the micro-batches
in flight, and, under full recomputation, one block's activations being rebuilt.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from pase.cluster import Cluster, get_cluster
from pase.errors import InternalError, OptionError
from pase.ir import Graph
from pase.perf.comms import group_collectives
from pase.perf.hardware import achieved
from pase.perf.kernels import Pricer, make_pricer
from pase.perf.layout import RECOMPUTE, Layout, check_graph
from pase.perf.memory import stage_memory
from pase.perf.ops import PricedOp, price_ops
from pase.perf.pipeline import crossing_bytes, pipeline_seconds, placement
from pase.schema import attr
from pase.work.ops import op_work

VERSION = 1
OPTIMIZER_BYTES = {"mixed": 30.0, "fp32": 32.0}  # Adam + clipping traffic per parameter updated


@dataclass(frozen=True)
class Estimate:
    """The priced step (JSON keys documented in docs/json-output.md)."""

    step_seconds: float
    tokens_per_second: float
    mfu: float
    hfu: float
    memory_bytes: float
    fits_memory: bool
    breakdown: dict[str, float]
    memory: dict[str, float]
    layout: Layout
    cluster: str
    device_memory_bytes: float
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        lay = self.layout
        return {"version": VERSION, "step_seconds": self.step_seconds,
                "tokens_per_second": self.tokens_per_second, "mfu": self.mfu, "hfu": self.hfu,
                "memory_bytes": self.memory_bytes, "fits_memory": self.fits_memory,
                "device_memory_bytes": self.device_memory_bytes,
                "breakdown": dict(self.breakdown), "memory": dict(self.memory),
                "layout": {"tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "cp": lay.cp, "ep": lay.ep,
                           "micro_batch": lay.micro_batch, "global_batch": lay.global_batch,
                           "microbatches": lay.microbatches,
                           "schedule": lay.schedule if lay.schedule != "interleaved"
                           else f"interleaved:{lay.virtual}",
                           "zero": lay.zero, "recompute": lay.recompute,
                           "sequence_parallel": lay.sequence_parallel, "precision": lay.precision,
                           "attention": lay.attention, "dropout": lay.dropout,
                           "tp_overlap": lay.tp_overlap, "ep_overlap": lay.ep_overlap,
                           "recompute_layers": lay.recompute_layers},
                "cluster": self.cluster, **self.details}


def evaluate_layout(graph: Graph, cluster: str | Cluster, lay: Layout,
                    priced: list[PricedOp] | None = None) -> Estimate:
    """Price one training step of ``graph`` (built at the micro-batch size) under ``lay``.

    ``priced``: the ops already priced for this graph, tp, cp, ep, sequence parallelism,
    precision, attention and dropout (:func:`pase.perf.ops.price_ops`; a layout search
    shares them between layouts that differ only in pp, dp, schedule, ZeRO or
    recomputation).
    """
    if priced is None:
        check_graph(graph, lay)
    if lay.recompute == "auto":
        return least_recompute(graph, cluster, lay, priced)
    cl = get_cluster(cluster, lay.devices)
    if cl.groups:
        raise OptionError("--layout prices a homogeneous cluster; this one mixes device types "
                          f"({cl.name}): price a strategy file with `pase evaluate --strategy`")
    hw = achieved(cl.device)
    mixed = lay.precision != "fp32"
    pricer = make_pricer(cl.device, hw, lay.precision)
    ops = price_ops(graph, lay, pricer) if priced is None else priced
    stages, units, chunks = placement(graph, lay)
    received = crossing_bytes(graph, chunks, lay, pricer.element_bytes)
    pp, replicas = lay.pp, lay.dp * lay.cp
    coll = group_collectives(cl, lay, hw)
    again = recomputed_units(lay, units, stages)
    per_stage = [_stage(lay, [p for p, s in zip(ops, stages) if s == i],
                        [u for u, s in zip(units, stages) if s == i], coll, pricer, mixed, replicas,
                        again,
                        [received[c] for c in sorted(set(c for c, s in zip(chunks, stages) if s == i))
                         if c in received])
                 for i in range(pp)]
    times = [s["time"] for s in per_stage]
    pipe = pipeline_seconds(lay, times)
    slow = max(range(pp), key=lambda i: times[i])
    last = max(per_stage, key=lambda s: s["once_exposed"] + s["optimizer"])  # once per step
    once = last["once_exposed"] + last["optimizer"]
    step = pipe + once
    m = lay.microbatches
    worst = per_stage[slow]
    breakdown = {"compute": m * worst["compute"],
                 "communication": m * worst["exposed"] + last["once_exposed"],
                 "bubble": max(0.0, pipe - m * times[slow]),  # 0 less rounding on one stage
                 "optimizer": last["optimizer"]}
    by_name = {p.op.name: p for p in ops}
    mem = [stage_memory(lay, st, i, by_name, again) for i, st in enumerate(per_stage)]
    peak = max(range(pp), key=lambda i: mem[i]["total"])
    model_flop, hardware_flop = _flop(graph, lay, ops, units, again)
    peak_flops = pricer.top_flops * lay.devices
    tokens = lay.global_batch * _sequence(graph)
    estimate = Estimate(step, tokens / step, model_flop / (step * peak_flops),
                        hardware_flop / (step * peak_flops), mem[peak]["total"],
                        mem[peak]["total"] <= cl.device.memory_bytes, breakdown,
                        {k: v for k, v in mem[peak].items()}, lay, cl.name, cl.device.memory_bytes,
                        {"peak_memory_stage": peak, "stage_seconds": times,
                         "stage_forward_seconds": [s["forward"] for s in per_stage],
                         "stage_backward_seconds": [s["backward"] for s in per_stage],
                         "send_seconds": [max(s["sends"], default=0.0) for s in per_stage],
                         "once_seconds": once,
                         # the part of the breakdown's compute that runs forwards again
                         "recompute_seconds": m * worst["recompute"]})
    check_estimate(estimate, graph.name)
    return estimate


def least_recompute(graph: Graph, cluster: str | Cluster, lay: Layout,
                    priced: list[PricedOp] | None) -> Estimate:
    """``--recompute auto``: the least recomputation that fits: none, then selective, then
    full recomputation of the fewest layers per stage (all of them at most); full
    recomputation of every layer when nothing fits."""
    cl = get_cluster(cluster, lay.devices)
    if priced is None:
        priced = price_ops(graph, lay, make_pricer(cl.device, achieved(cl.device), lay.precision))
    for recompute in RECOMPUTE[:-1]:
        estimate = evaluate_layout(graph, cl, replace(lay, recompute=recompute), priced)
        if estimate.fits_memory:
            return estimate
    # the fewest layers per stage fully recomputed that fit (memory falls as it grows)
    def full(n: int) -> Estimate:
        return evaluate_layout(graph, cl, replace(lay, recompute="full", recompute_layers=n), priced)

    _, units, _ = placement(graph, lay)
    low, high = 1, len(set(units) - {"pre", "post"})
    fitting = full(0)
    if not fitting.fits_memory:
        return fitting
    while low < high:
        middle = (low + high) // 2
        estimate = full(middle)
        if estimate.fits_memory:
            high, fitting = middle, estimate
        else:
            low = middle + 1
    return fitting if fitting.layout.recompute_layers == low else full(low)


def check_estimate(e: Estimate, model: str) -> None:
    """InternalError naming the first broken invariant of a priced step: a number no real step
    can have is a bug in the model, never an answer (the cluster's figures were checked on
    entry, :mod:`pase.cluster.model`)."""
    def fail(what: str) -> None:
        raise InternalError(f"the performance model priced {model!r} on {e.cluster} with an "
                            f"impossible {what}; a bug in pase.perf")

    def finite(value: float, positive: bool) -> bool:
        return math.isfinite(value) and (value > 0 if positive else value >= 0)

    if not finite(e.step_seconds, True):
        fail(f"step of {float(e.step_seconds):.6g} s")
    if not finite(e.tokens_per_second, True):
        fail(f"throughput of {float(e.tokens_per_second):.6g} tokens/s")
    for key, value in e.breakdown.items():
        if not finite(value, False):
            fail(f"{key} time of {float(value):.6g} s")
    total = sum(e.breakdown.values())
    if not math.isclose(total, e.step_seconds, rel_tol=1e-6):
        fail(f"breakdown: its parts sum to {float(total):.6g} s, the step is {float(e.step_seconds):.6g} s")
    for key in ("stage_seconds", "stage_forward_seconds", "stage_backward_seconds"):
        for value in e.details[key]:
            if not finite(value, True):
                fail(f"{key.replace('_', ' ')[:-8]} time of {float(value):.6g} s")
    for value in [*e.details["send_seconds"], e.details["once_seconds"]]:
        if not finite(value, False):
            fail(f"time of {float(value):.6g} s outside the stages")
    # MFU is 0 only for a model without matrix products (nothing for it to count)
    if not (0 <= e.mfu <= e.hfu <= 1 + 1e-12) or (e.mfu == 0 < e.hfu):
        fail(f"MFU {float(e.mfu):.6g} / HFU {float(e.hfu):.6g} (0 < MFU <= HFU <= 1)")
    if not finite(e.memory_bytes, True):
        fail(f"peak memory of {float(e.memory_bytes):.6g} bytes")
    for key, value in e.memory.items():
        if not finite(value, False):
            fail(f"{key.replace('_', ' ')} of {float(value):.6g} bytes")


def recomputed_units(lay: Layout, units: list[str], stages: list[int]) -> set[str]:
    """The layers full recomputation rebuilds: every layer, or the first
    ``recompute_layers`` of each stage (Megatron-LM's block method)."""
    if lay.recompute != "full":
        return set()
    out: set[str] = set()
    for stage in range(lay.pp):
        layers = list(dict.fromkeys(u for u, s in zip(units, stages)
                                    if s == stage and u not in ("pre", "post")))
        out.update(layers[:lay.recompute_layers] if lay.recompute_layers else layers)
    return out


def _stage(lay: Layout, ops: list[PricedOp], units: list[str], coll, pricer: Pricer,
           mixed: bool, replicas: int, again_units: set[str], received: list[float]
           ) -> dict[str, Any]:
    """One stage's per-micro-batch time, its once-per-step exposure and its memory terms."""
    fwd = bwd = exposed_f = exposed_b = rebuilt = 0.0  # rebuilt: recomputed forwards
    hw = pricer.hw
    unit_f: dict[str, float] = {}
    unit_b: dict[str, float] = {}
    unit_params: dict[str, float] = {}
    unit_expert: dict[str, float] = {}  # of which the experts' (split over ep)
    unit_ep: dict[str, list[float]] = {}  # the layer's expert all-to-alls, forward and backward
    for p, unit in zip(ops, units):
        t = p.time
        tp_f = sum(coll(k, b, "tp") for k, b in t.tp_forward)
        tp_b = sum(coll(k, b, "tp") for k, b in t.tp_backward)
        if lay.tp_overlap:  # chunked GEMMs: a reduce-scatter behind this GEMM, the all-gather
            # behind the next one's (about as long), the backward's behind its two GEMMs
            tp_f = hw.overlapped(tp_f, 2 * t.forward_s)
            tp_b = hw.overlapped(tp_b, t.backward_s)
        ep_f = sum(coll(k, b, "ep") for k, b in t.ep_forward)
        ep_b = sum(coll(k, b, "ep") for k, b in t.ep_backward)
        ring_f = ring_b = 0.0
        if t.ring_bytes:  # cp - 1 ring steps, each hidden behind one attention block
            step_send = coll("send", t.ring_bytes, "cp")
            ring_f = (lay.cp - 1) * hw.overlapped(step_send, t.forward_s / lay.cp)
            ring_b = (lay.cp - 1) * hw.overlapped(2 * step_send, t.backward_s / lay.cp)
        again = unit in again_units or \
            (lay.recompute == "selective" and p.attention_core)
        f, b = t.forward_s, t.backward_s + (t.forward_s if again else 0.0)
        fwd, bwd = fwd + f, bwd + b
        rebuilt += t.forward_s if again else 0.0
        if lay.ep_overlap:  # hidden behind the layer's compute, after the loop
            a2a = unit_ep.setdefault(unit, [0.0, 0.0])
            a2a[0] += ep_f
            a2a[1] += ep_b + (ep_f if again else 0.0)
            ep_f = ep_b = 0.0
        exposed_f += tp_f + ep_f + ring_f
        exposed_b += tp_b + ep_b + ring_b + ((tp_f + ep_f) if again else 0.0)
        unit_f[unit] = unit_f.get(unit, 0.0) + f
        unit_b[unit] = unit_b.get(unit, 0.0) + b
        unit_params[unit] = unit_params.get(unit, 0.0) + p.parameter_elements
        if p.expert:
            unit_expert[unit] = unit_expert.get(unit, 0.0) + p.parameter_elements
    for unit, (a2a_f, a2a_b) in unit_ep.items():  # another micro-batch's compute hides them
        exposed_f += hw.overlapped(a2a_f, unit_f[unit])
        exposed_b += hw.overlapped(a2a_b, unit_b[unit])
    grad_bytes = 2.0 if mixed else 4.0
    order = list(unit_f)
    if lay.zero == 3:  # an expert's parameters are sharded over its own replicas (edp)
        def fsdp(kind: str, u: str) -> float:
            expert = unit_expert.get(u, 0.0)
            return coll(kind, (unit_params[u] - expert) * grad_bytes, "dp") + \
                coll(kind, expert * grad_bytes, "edp")

        gathers = [fsdp("all-gather", u) for u in order]
        scatters = [fsdp("reduce-scatter", u) for u in order]
        exposed_f += gathers[0] + sum(hw.overlapped(g, unit_f[u]) for g, u in zip(gathers[1:], order))
        exposed_b += sum(hw.overlapped(g + r, unit_b[u]) for g, r, u in zip(gathers, scatters, order))
    # pipeline sends: each chunk's input forward, its gradient back
    sends = [coll("send", nbytes, "pp") for nbytes in received]
    params = sum(p.parameter_elements for p in ops if not p.expert)
    linear = sum(p.parameter_elements for p in ops if p.linear)
    expert_params = sum(p.parameter_elements for p in ops if p.expert)
    once = 0.0
    if lay.zero < 3:
        kind = "all-reduce" if lay.zero == 0 else "reduce-scatter"
        window = bwd * (1 - 1 / max(1, len(order)))
        sync = coll(kind, params * grad_bytes, "dp") + coll(kind, expert_params * grad_bytes, "edp")
        once += hw.overlapped(sync, window)
        if lay.zero in (1, 2):
            gather = coll("all-gather", params * grad_bytes, "dp") + \
                coll("all-gather", expert_params * grad_bytes, "edp")
            once += hw.overlapped(gather, fwd * (1 - 1 / max(1, len(order))))
    shards = (replicas, lay.expert_data)
    updated = params / (shards[0] if lay.zero else 1) + expert_params / (shards[1] if lay.zero else 1)
    optimizer = pricer.memory(updated * OPTIMIZER_BYTES["mixed" if mixed else "fp32"], 10)
    exposed = exposed_f + exposed_b + 2 * sum(sends)
    return {"time": fwd + bwd + exposed, "compute": fwd + bwd, "exposed": exposed,
            "recompute": rebuilt,
            "forward": fwd + exposed_f, "backward": bwd + exposed_b, "sends": sends,
            "once_exposed": once, "optimizer": optimizer, "ops": ops, "units": units,
            "params": params, "expert_params": expert_params, "shards": shards,
            "unit_params": unit_params, "unit_expert": unit_expert, "mixed": mixed,
            # low-precision weights (row- and column-wise copies) kept across micro-batches
            "linear_params": linear, "weight_copies": 2 * pricer.quantised_bytes * linear}


def _flop(graph: Graph, lay: Layout, ops: list[PricedOp], units: list[str],
          again_units: set[str]) -> tuple[float, float]:
    """Model FLOP of a step (2 per multiply-add, dense attention, forward x 3; an expert
    counts the tokens routed to it, not its padded capacity) and the hardware FLOP (every
    capacity slot, plus the recomputed forward)."""
    model = hardware = again = 0.0
    active = active_fractions(graph)
    for p, unit in zip(ops, units):
        if p.op.kind == "Einsum":
            full = 2.0 * math.prod(d.size for d in p.op.dims)
        elif p.op.kind in ("Conv", "FC", "LSTM"):  # their matrix products, as pase.counts has them
            full = float(op_work(p.op, np.ones((1, len(p.op.dims)), dtype=np.int64)).matmul_flop[0])
        else:  # an embedding is a lookup, not a product (MFU formulas leave it out)
            continue
        model += full * active.get(p.op.name, 1.0)
        hardware += full
        if unit in again_units or (lay.recompute == "selective" and p.attention_core):
            again += full
    scale = lay.global_batch / lay.micro_batch
    return 3 * model * scale, (3 * hardware + again) * scale


def active_fractions(graph: Graph) -> dict[str, float]:
    """Op name -> the share of its expert capacity slots that hold routed tokens, for the ops
    between a MoEDispatch and its MoECombine: ``k * tokens / (experts * capacity)`` (at most
    1; under 1 when the capacity factor pads the buffers)."""
    share: dict[str, float] = {}
    for op in graph.ops:  # in topological order: a buffer's readers come after its writer
        if op.kind == "MoEDispatch":
            size = {d.name: d.size for d in op.dims}
            share[op.name] = min(1.0, attr(op, "k") * size["l"] / (size["x"] * size["c"]))
        elif op.kind != "MoECombine":
            fed = [share[port.source[0]] for port in op.inputs
                   if port.source is not None and port.source[0] in share]
            if fed:
                share[op.name] = min(fed)
    return share


def _sequence(graph: Graph) -> int:
    """Tokens per sample: the first sequence-role dim's size (1 for models without one)."""
    for op in graph.ops:
        for d in op.dims:
            if d.role == "sequence":
                return d.size
    return 1

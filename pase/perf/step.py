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
from pase.perf.cuts import Frame
from pase.perf.hardware import achieved
from pase.perf.kept import KeptIndex
from pase.perf.kernels import Pricer, make_pricer
from pase.perf.layout import RECOMPUTE, Layout, check_graph
from pase.perf.memory import stage_memory
from pase.perf.ops import PricedOp, price_ops
from pase.perf.pipeline import crossing_bytes, pipeline_seconds, placement
from pase.perf.schedule import Work
from pase.schema import attr
from pase.work.ops import op_work

VERSION = 1
OPTIMIZER_BYTES = {"mixed": 30.0, "fp32": 32.0}  # Adam + clipping traffic per parameter updated
OPTIMIZER_KERNELS = 10  # the step's fixed kernels (multi-tensor Adam, clipping), once a stage


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
                           "etp": lay.expert_tp,
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
                    priced: list[PricedOp] | None = None,
                    shared: Shared | None = None) -> Estimate:
    """Price one training step of ``graph`` (built at the micro-batch size) under ``lay``.

    ``priced``: the ops already priced for this graph, tp, cp, ep, sequence parallelism,
    precision, attention and dropout (:func:`pase.perf.ops.price_ops`; a layout search
    shares them between layouts that differ only in pp, dp, schedule, ZeRO or
    recomputation). ``shared``: a :class:`Shared` of those ops, which keeps what the
    layouts have in common (placements, each layer's sums, FLOP, kept activations);
    the price is the same with it, up to the order of floating-point sums.
    """
    if priced is None:
        check_graph(graph, lay)
    if lay.recompute == "auto":
        return least_recompute(graph, cluster, lay, priced, shared)
    cl = get_cluster(cluster, lay.devices)
    if cl.groups:
        raise OptionError("--layout prices a homogeneous cluster; this one mixes device types "
                          f"({cl.name}): price a strategy file with `pase evaluate --strategy`")
    hw = achieved(cl.device)
    mixed = lay.precision != "fp32"
    pricer = make_pricer(cl.device, hw, lay.precision)
    ops = price_ops(graph, lay, pricer) if priced is None else priced
    if shared is not None and shared.ops is not ops:
        raise InternalError("evaluate_layout: shared was made for other priced ops")
    pp, replicas = lay.pp, lay.dp * lay.cp
    coll = group_collectives(cl, lay, hw)
    if shared is None:
        stages, units, chunks = placement(graph, lay)
        received = crossing_bytes(graph, chunks, lay, pricer.element_bytes)
        again = recomputed_units(lay, units, stages)
        per_stage = [_stage(lay, [p for p, s in zip(ops, stages) if s == i],
                            [u for u, s in zip(units, stages) if s == i], coll, pricer, mixed,
                            replicas, again,
                            [received[c] for c in sorted(set(c for c, s in zip(chunks, stages)
                                                             if s == i)) if c in received])
                     for i in range(pp)]
        by_name = {p.op.name: p for p in ops}
        mem = [stage_memory(lay, st, i, by_name, again) for i, st in enumerate(per_stage)]
        model_flop, hardware_flop = _flop(graph, lay, ops, units, again)
    else:
        shared.placement(lay, pricer.element_bytes)
        again = shared.again(lay)
        coll = shared.coll(lay, coll)
        per_stage = [shared.stage(lay, i, again, coll, pricer, mixed) for i in range(pp)]
        mem = [stage_memory(lay, st, i, shared.by_name, again, shared.kept(lay, i, again))
               for i, st in enumerate(per_stage)]
        model_flop, hardware_flop = _flop(graph, lay, ops, [], again, shared.flop())
    times = [s["time"] for s in per_stage]
    if lay.schedule in ("zb-h1", "dualpipe"):  # they move weight gradients into bubbles
        pipe = pipeline_seconds(lay, [Work(s["forward"] + sum(s["sends"]),
                                           s["backward"] + sum(s["sends"]), s["weight"])
                                      for s in per_stage])
        if lay.schedule == "dualpipe" and pp > 1:  # the report's bubble, (p/2 - 1)(F + 2B - 3W),
            # is negative where W > (F + 2B) / 3, outside the shape it was stated for: no
            # bubble is less than none, so the step is at least the busiest device's work
            pipe = max(pipe, lay.microbatches / 2 * max(times[i] + times[pp - 1 - i]
                                                       for i in range(pp)))
    else:
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
    if pipe < m * times[slow]:  # DualPipe's busiest device may be faster than m slowest stages
        breakdown["compute"] = pipe * worst["compute"] / times[slow]
        breakdown["communication"] = pipe * worst["exposed"] / times[slow] + last["once_exposed"]
    peak = max(range(pp), key=lambda i: mem[i]["total"])
    peak_flops = pricer.top_flops * lay.devices
    tokens = lay.global_batch * _sequence(graph)
    estimate = Estimate(step, tokens / step, model_flop / (step * peak_flops),
                        hardware_flop / (step * peak_flops), mem[peak]["total"],
                        mem[peak]["total"] <= cl.device.memory_bytes, breakdown,
                        {k: v for k, v in mem[peak].items()}, lay, cl.name, cl.device.memory_bytes,
                        {"peak_memory_stage": peak, "stage_seconds": times,
                         "stage_forward_seconds": [s["forward"] for s in per_stage],
                         "stage_backward_seconds": [s["backward"] for s in per_stage],
                         "stage_weight_seconds": [s["weight"] for s in per_stage],
                         "send_seconds": [max(s["sends"], default=0.0) for s in per_stage],
                         "once_seconds": once,
                         # the part of the breakdown's compute that runs forwards again
                         "recompute_seconds": m * worst["recompute"]})
    check_estimate(estimate, graph.name)
    return estimate


@dataclass(frozen=True)
class Placed:
    """One (pp, V) cut of a graph: per stage its layers in order and the bytes its chunks
    receive; per op its unit."""

    layers: list[list[str]]
    received: list[list[float]]
    all_units: list[str]


class Shared:
    """What the layouts priced on one list of priced ops have in common, computed once:
    each (pp, V) cut, each layer's sums (:func:`_unit_sums`) per recomputation and
    overlap, its FLOP, and each stage's kept activations per recomputation. A layout
    search keeps one per (micro-batch, tp, cp, ep, etp) and hands it to
    :func:`evaluate_layout`. One Shared serves one cluster (its collective prices are kept
    by group sizes, not by cluster)."""

    def __init__(self, graph: Graph, ops: list[PricedOp], cuts: dict | None = None):
        # cuts: the graph's :class:`pase.perf.cuts.Frame` and each (pp, V)'s Cut, which
        # depend on the graph alone: a search shares one dict between a graph's Shareds
        self.graph, self.ops, self._cuts = graph, ops, {} if cuts is None else cuts
        self.by_name = {p.op.name: p for p in ops}
        self._placed: dict[tuple, Placed] = {}
        self._sums: dict[tuple, list[float]] = {}
        self._stage_sums: dict[tuple, dict[str, list[float]]] = {}
        self._kept_at: dict[tuple, tuple[float, float]] = {}
        self._stages: dict[tuple, dict[str, Any]] = {}
        self._equal: dict[tuple, list[float]] = {}
        self._again: dict[tuple, set[str]] = {}
        self._index: KeptIndex | None = None
        self._coll: dict[tuple, float] = {}
        self._flop: dict[str, list[float]] | None = None
        self._unit_ops: dict[str, list[PricedOp]] | None = None
        self.memo: dict[str, dict] = {}  # what its users keep of it (pase.perf.bound's terms)

    def placement(self, lay: Layout, element_bytes: float) -> Placed:
        key = (lay.pp, lay.virtual)
        if key not in self._placed:
            if key not in self._cuts:
                if "frame" not in self._cuts:
                    self._cuts["frame"] = Frame(self.graph)
                self._cuts[key] = self._cuts["frame"].cut(lay)
            cut = self._cuts[key]
            self._placed[key] = Placed(cut.layers, cut.received(lay.tp * lay.cp, element_bytes),
                                       cut.units)
            if self._unit_ops is None:
                self._unit_ops = {}
                for p, u in zip(self.ops, cut.units):
                    self._unit_ops.setdefault(u, []).append(p)
                self._index = KeptIndex(self.ops, cut.units, lay)
        return self._placed[key]

    def again(self, lay: Layout) -> set[str]:
        """:func:`recomputed_units` of ``lay``, from its cut's layers per stage."""
        if lay.recompute != "full":
            return set()
        key = (lay.pp, lay.virtual, lay.recompute_layers)
        if key not in self._again:
            out: set[str] = set()
            for layers in self._placed[key[:2]].layers:
                layers = [u for u in layers if u not in ("pre", "post")]
                out.update(layers[:lay.recompute_layers] if lay.recompute_layers else layers)
            self._again[key] = out
        return self._again[key]

    def sums(self, lay: Layout, stage: int, again: set[str], coll, hw) -> dict[str, list[float]]:
        """Stage ``stage``'s :func:`_unit_sums`, each layer's taken from the cache (``again``:
        :meth:`again` of ``lay``, which the stage's are kept by). Not to be changed."""
        base = (lay.tp, lay.cp, lay.ep, lay.expert_tp, lay.recompute, lay.tp_overlap,
                lay.ep_overlap)
        where = (lay.pp, lay.virtual, stage, lay.recompute_layers if again else -1,
                 len(again)) + base
        out = self._stage_sums.get(where)
        if out is not None:
            return out
        out = {}
        for unit in self._placed[lay.pp, lay.virtual].layers[stage]:
            key = (unit, unit in again) + base
            if key not in self._sums:
                ops = self._unit_ops[unit]
                sums = _unit_sums(lay, ops, [unit] * len(ops), again & {unit}, coll, hw)[unit]
                self._sums[key] = self._equal.setdefault(tuple(sums), sums)  # equal layers: one
            out[unit] = self._sums[key]
        self._stage_sums[where] = out
        return out

    def stage(self, lay: Layout, stage: int, again: set[str], coll, pricer: Pricer,
              mixed: bool) -> dict[str, Any]:
        """:func:`_stage` of stage ``stage``, shared by the stages with the same layer sums
        and sends under the same groups and ZeRO stage."""
        place = self._placed[lay.pp, lay.virtual]
        sums = self.sums(lay, stage, again, coll, pricer.hw)
        key = (tuple(id(v) for v in sums.values()), tuple(place.received[stage]), lay.tp,
               lay.cp, lay.pp, lay.dp, lay.ep, lay.expert_tp, lay.zero, lay.ep_overlap)
        if key not in self._stages:
            # its ops are not needed: the layer sums and kept activations are the Shared's
            self._stages[key] = _stage(lay, None, None, coll, pricer, mixed, lay.dp * lay.cp,
                                       again, place.received[stage], sums)
        return self._stages[key]

    def coll(self, lay: Layout, coll):
        """``coll`` remembered across the layouts with the same groups (a ZeRO-3 stage asks
        for the same gather once per layer)."""
        groups = (lay.tp, lay.cp, lay.pp, lay.dp, lay.ep, lay.expert_tp)

        def remembered(kind: str, nbytes: float, group: str) -> float:
            key = (kind, nbytes, group) + groups
            value = self._coll.get(key)
            if value is None:
                value = self._coll[key] = coll(kind, nbytes, group)
            return value

        return remembered

    def kept(self, lay: Layout, stage: int, again: set[str]) -> tuple[float, float]:
        """Stage ``stage``'s kept activation bytes per micro-batch and recompute working set
        (:func:`pase.perf.memory.activation_bytes`, from its layers: :mod:`pase.perf.kept`)."""
        where = (lay.pp, lay.virtual, stage, lay.recompute, lay.recompute_layers)
        if where not in self._kept_at:
            self._kept_at[where] = self._index.stage(
                self._placed[lay.pp, lay.virtual].layers[stage], again, lay.recompute)
        return self._kept_at[where]

    def memory(self, lay: Layout, coll, pricer: Pricer, mixed: bool) -> float:
        """The peak bytes :func:`evaluate_layout` finds for ``lay`` (its ``memory_bytes``),
        without pricing its time: each stage's states (from its layers' sums without
        recomputation, which hold the same parameters) and kept activations."""
        self.placement(lay, pricer.element_bytes)
        again = self.again(lay)
        plain = replace(lay, recompute="none", recompute_layers=0)
        peak = 0.0
        for i in range(lay.pp):
            st = stage_states(lay, self.sums(plain, i, set(), coll, pricer.hw), pricer, mixed,
                              lay.dp * lay.cp)
            total = stage_memory(lay, st, i, self.by_name, again, self.kept(lay, i, again))
            peak = max(peak, total["total"])
        return peak

    def fits(self, cl: Cluster, lay: Layout):
        """A function of a layout differing from ``lay`` only in recomputation: whether
        :func:`evaluate_layout` finds that it fits ``cl``'s device memory."""
        hw = achieved(cl.device)
        pricer = make_pricer(cl.device, hw, lay.precision)
        coll = self.coll(lay, group_collectives(cl, lay, hw))
        mixed, capacity = lay.precision != "fp32", cl.device.memory_bytes
        return lambda other: self.memory(other, coll, pricer, mixed) <= capacity

    def flop(self) -> dict[str, list[float]]:
        if self._flop is None:
            self._flop = _unit_flop(self.graph, self.ops, self.placed_units())
        return self._flop

    def placed_units(self) -> list[str]:
        return next(iter(self._placed.values())).all_units

    def layer_units(self) -> list[str]:
        """Per op its unit (the same under every cut)."""
        if not self._placed:
            raise InternalError("Shared.layer_units before any placement")
        return self.placed_units()


def least_recompute(graph: Graph, cluster: str | Cluster, lay: Layout,
                    priced: list[PricedOp] | None, shared: Shared | None = None) -> Estimate:
    """``--recompute auto``: the least recomputation that fits: none, then selective, then
    full recomputation of the fewest layers per stage (all of them at most); full
    recomputation of every layer when nothing fits."""
    cl = get_cluster(cluster, lay.devices)
    if priced is None:
        priced = price_ops(graph, lay, make_pricer(cl.device, achieved(cl.device), lay.precision))
    for recompute in RECOMPUTE[:-1]:
        estimate = evaluate_layout(graph, cl, replace(lay, recompute=recompute), priced, shared)
        if estimate.fits_memory:
            return estimate
    return fewest_full(graph, cl, lay, priced, shared)


def fewest_full(graph: Graph, cl: Cluster, lay: Layout, priced: list[PricedOp],
                shared: Shared | None = None) -> Estimate:
    """Full recomputation of the fewest layers per stage that fit (memory falls as it
    grows; Megatron-LM's ``--recompute-num-layers``); of every layer when none fits.
    With ``shared`` the layers are found by the memory alone (:meth:`Shared.memory`), and
    only the answer is priced."""
    def full(n: int) -> Estimate:
        return evaluate_layout(graph, cl, replace(lay, recompute="full", recompute_layers=n),
                               priced, shared)

    if shared is not None:
        fits = shared.fits(cl, lay)
        return full(fewest_layers(lambda n: fits(replace(lay, recompute="full",
                                                         recompute_layers=n)),
                                  len(set(shared.layer_units()) - {"pre", "post"})))
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


def fewest_layers(fits, layers: int) -> int:
    """The fewest fully recomputed layers per stage ``n`` with ``fits(n)`` (memory falls as
    ``n`` grows; 0, every layer, when that does not fit), by bisection over 1..``layers``."""
    if not fits(0):
        return 0
    low, high = 1, layers
    while low < high:
        middle = (low + high) // 2
        if fits(middle):
            high = middle
        else:
            low = middle + 1
    return low


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


def overlapped(overlap: float, comm: float, compute: float) -> float:
    """:meth:`pase.perf.hardware.Achieved.overlapped` of two numbers, the same to the bit
    (its numpy functions cost microseconds a call on plain numbers)."""
    return max(0.0, comm - compute) + overlap * min(comm, compute)


def _op_terms(lay: Layout, p: PricedOp, again: bool, coll, hw) -> tuple[float, ...]:
    """One op's seconds per micro-batch: forward, backward, its weight-gradient part,
    exposed collectives each way, and the expert all-to-alls each way that another
    micro-batch's compute hides (``ep_overlap``; else they are in the exposed ones)."""
    t = p.time
    tp_f = sum(coll(k, b, "tp") for k, b in t.tp_forward)
    tp_b = sum(coll(k, b, "tp") for k, b in t.tp_backward)
    if lay.tp_overlap:  # chunked GEMMs: a reduce-scatter behind this GEMM, the all-gather
        # behind the next one's (about as long), the backward's behind its two GEMMs
        tp_f = overlapped(hw.overlap, tp_f, 2 * t.forward_s)
        tp_b = overlapped(hw.overlap, tp_b, t.backward_s)
    ep_f = sum(coll(k, b, "ep") for k, b in t.ep_forward)
    ep_b = sum(coll(k, b, "ep") for k, b in t.ep_backward)
    ring_f = ring_b = 0.0
    if t.ring_bytes:  # cp - 1 ring steps, each hidden behind one attention block
        step_send = coll("send", t.ring_bytes, "cp")
        ring_f = (lay.cp - 1) * overlapped(hw.overlap, step_send, t.forward_s / lay.cp)
        ring_b = (lay.cp - 1) * overlapped(hw.overlap, 2 * step_send, t.backward_s / lay.cp)
    f, b = t.forward_s, t.backward_s + (t.forward_s if again else 0.0)
    hidden_f = hidden_b = 0.0
    if lay.ep_overlap:  # hidden behind the layer's compute, by the stage
        hidden_f, hidden_b = ep_f, ep_b + (ep_f if again else 0.0)
        ep_f = ep_b = 0.0
    return (f, b, t.weight_s, tp_f + ep_f + ring_f,
            tp_b + ep_b + ring_b + ((tp_f + ep_f) if again else 0.0), hidden_f, hidden_b)


def _unit_sums(lay: Layout, ops: list[PricedOp], units: list[str], again_units: set[str],
               coll, hw) -> dict[str, list[float]]:
    """Per unit, in order: the sums of :func:`_op_terms` over its ops, then its parameter
    elements (all, expert, low-precision linear, not expert), then its recomputed forward
    seconds."""
    out: dict[str, list[float]] = {}
    for p, unit in zip(ops, units):
        again = unit in again_units or (lay.recompute == "selective" and p.attention_core)
        sums = out.setdefault(unit, [0.0] * 12)
        for i, v in enumerate(_op_terms(lay, p, again, coll, hw)):
            sums[i] += v
        sums[7] += p.parameter_elements
        sums[8] += p.parameter_elements if p.expert else 0.0
        sums[9] += p.parameter_elements if p.linear else 0.0
        sums[10] += 0.0 if p.expert else p.parameter_elements
        sums[11] += p.time.forward_s if again else 0.0  # recomputed forwards
    return out


def _stage(lay: Layout, ops: list[PricedOp], units: list[str], coll, pricer: Pricer,
           mixed: bool, replicas: int, again_units: set[str], received: list[float],
           sums: dict[str, list[float]] | None = None) -> dict[str, Any]:
    """One stage's per-micro-batch time, its once-per-step exposure and its memory terms
    (``sums``: its :func:`_unit_sums`, when a search has them already)."""
    hw = pricer.hw
    if sums is None:
        sums = _unit_sums(lay, ops, units, again_units, coll, hw)
    fwd = bwd = weight = exposed_f = exposed_b = rebuilt = 0.0
    for s in sums.values():
        fwd, bwd, weight, rebuilt = fwd + s[0], bwd + s[1], weight + s[2], rebuilt + s[11]
        exposed_f, exposed_b = exposed_f + s[3], exposed_b + s[4]
    states = stage_states(lay, sums, pricer, mixed, replicas)
    params, expert_params = states["params"], states["expert_params"]
    unit_params, unit_expert = states["unit_params"], states["unit_expert"]
    if lay.ep_overlap:  # another micro-batch's compute hides each layer's all-to-alls
        for s in sums.values():
            exposed_f += overlapped(hw.overlap, s[5], s[0])
            exposed_b += overlapped(hw.overlap, s[6], s[1])
    grad_bytes = 2.0 if mixed else 4.0
    order = list(sums)
    if lay.zero == 3:  # an expert's parameters are sharded over its own replicas (edp)
        def fsdp(kind: str, u: str) -> float:
            expert = unit_expert.get(u, 0.0)
            return coll(kind, (unit_params[u] - expert) * grad_bytes, "dp") + \
                coll(kind, expert * grad_bytes, "edp")

        gathers = [fsdp("all-gather", u) for u in order]
        scatters = [fsdp("reduce-scatter", u) for u in order]
        exposed_f += gathers[0] + sum(overlapped(hw.overlap, g, sums[u][0])
                                      for g, u in zip(gathers[1:], order))
        exposed_b += sum(overlapped(hw.overlap, g + r, sums[u][1]) for g, r, u in zip(gathers, scatters, order))
    # pipeline sends: each chunk's input forward, its gradient back
    sends = [coll("send", nbytes, "pp") for nbytes in received]
    once = 0.0
    if lay.zero < 3:
        kind = "all-reduce" if lay.zero == 0 else "reduce-scatter"
        window = bwd * (1 - 1 / max(1, len(order)))
        sync = coll(kind, params * grad_bytes, "dp") + coll(kind, expert_params * grad_bytes, "edp")
        once += overlapped(hw.overlap, sync, window)
        if lay.zero in (1, 2):
            gather = coll("all-gather", params * grad_bytes, "dp") + \
                coll("all-gather", expert_params * grad_bytes, "edp")
            once += overlapped(hw.overlap, gather, fwd * (1 - 1 / max(1, len(order))))
    shards = states["shards"]
    updated = params / (shards[0] if lay.zero else 1) + expert_params / (shards[1] if lay.zero else 1)
    optimizer = pricer.memory(updated * OPTIMIZER_BYTES["mixed" if mixed else "fp32"],
                              OPTIMIZER_KERNELS)
    exposed = exposed_f + exposed_b + 2 * sum(sends)
    return {"time": fwd + bwd + exposed, "compute": fwd + bwd, "exposed": exposed,
            "recompute": rebuilt,
            "forward": fwd + exposed_f, "backward": bwd + exposed_b, "weight": weight,
            "sends": sends, "once_exposed": once, "optimizer": optimizer, "ops": ops,
            "units": units, **states}


def stage_states(lay: Layout, sums: dict[str, list[float]], pricer: Pricer, mixed: bool,
                 replicas: int) -> dict[str, Any]:
    """What :func:`pase.perf.memory.stage_memory` reads of a stage's states, from its
    :func:`_unit_sums`: its parameters (not experts', experts', per unit, low-precision
    linear ones), their shards and precision."""
    params = linear = expert_params = 0.0
    for s in sums.values():
        params, expert_params, linear = params + s[10], expert_params + s[8], linear + s[9]
    return {"params": params, "expert_params": expert_params,
            "shards": (replicas, lay.expert_data),
            "unit_params": {u: s[7] for u, s in sums.items()},
            "unit_expert": {u: s[8] for u, s in sums.items() if s[8]},  # of which the experts'
            "mixed": mixed, "linear_params": linear,
            # low-precision weights (row- and column-wise copies) kept across micro-batches
            "weight_copies": 2 * pricer.quantised_bytes * linear}


def _unit_flop(graph: Graph, ops: list[PricedOp], units: list[str]) -> dict[str, list[float]]:
    """Per unit: its model FLOP and hardware FLOP of one forward, all its matrix products'
    and its attention core's (what recomputation runs again)."""
    out: dict[str, list[float]] = {}
    active = active_fractions(graph)
    for p, unit in zip(ops, units):
        if p.op.kind == "Einsum":
            full = 2.0 * math.prod(d.size for d in p.op.dims)
        elif p.op.kind in ("Conv", "FC", "LSTM"):  # their matrix products, as pase.counts has them
            full = float(op_work(p.op, np.ones((1, len(p.op.dims)), dtype=np.int64)).matmul_flop[0])
        else:  # an embedding is a lookup, not a product (MFU formulas leave it out)
            continue
        sums = out.setdefault(unit, [0.0] * 4)
        sums[0] += full * active.get(p.op.name, 1.0)
        sums[1] += full
        sums[2] += full
        sums[3] += full if p.attention_core else 0.0
    return out


def _flop(graph: Graph, lay: Layout, ops: list[PricedOp], units: list[str],
          again_units: set[str], per_unit: dict[str, list[float]] | None = None
          ) -> tuple[float, float]:
    """Model FLOP of a step (2 per multiply-add, dense attention, forward x 3; an expert
    counts the tokens routed to it, not its padded capacity) and the hardware FLOP (every
    capacity slot, plus the recomputed forward); ``per_unit``: :func:`_unit_flop`, if known."""
    if per_unit is None:
        per_unit = _unit_flop(graph, ops, units)
    model = hardware = again = 0.0
    for unit, (m, h, full, core) in per_unit.items():
        model, hardware = model + m, hardware + h
        if unit in again_units:
            again += full
        elif lay.recompute == "selective":
            again += core
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

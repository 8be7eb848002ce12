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

from dataclasses import replace

from pase.cluster import Cluster, get_cluster
from pase.errors import InternalError, OptionError
from pase.ir import Graph
from pase.perf.comms import group_collectives
from pase.perf.estimate import Estimate, check_estimate
from pase.perf.flop import sequence_length, step_flop
from pase.perf.hardware import achieved
from pase.perf.kernels import make_pricer
from pase.perf.layout import RECOMPUTE, Layout, check_graph
from pase.perf.memory import mirrored, stage_memory
from pase.perf.ops import PricedOp, price_ops
from pase.perf.pipeline import (
    check_recompute_layers,
    crossing_bytes,
    pipeline_seconds,
    placement,
    recomputed_units,
)
from pase.perf.schedule import Work
from pase.perf.shared import Shared
from pase.perf.stage import OPTIMIZER_BYTES, OPTIMIZER_KERNELS, stage_terms  # noqa: F401

# cost_models.calibrated_plan and calibrated_rules price a plan with these, and the
# optimizer's figures above, under their names from before pase.perf.flop and .stage
_flop, _sequence = step_flop, sequence_length


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
        check_recompute_layers(graph, lay)
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
        per_stage = [stage_terms(lay, [p for p, s in zip(ops, stages) if s == i],
                            [u for u, s in zip(units, stages) if s == i], coll, pricer, mixed,
                            replicas, again,
                            [received[c] for c in sorted(set(c for c, s in zip(chunks, stages)
                                                             if s == i)) if c in received])
                     for i in range(pp)]
        by_name = {p.op.name: p for p in ops}
        mem = mirrored(lay, [stage_memory(lay, st, i, by_name, again)
                             for i, st in enumerate(per_stage)])
        model_flop, hardware_flop = step_flop(graph, lay, ops, units, again)
    else:
        shared.placement(lay, pricer.element_bytes)
        again = shared.again(lay)
        coll = shared.coll(lay, coll)
        per_stage = [shared.stage(lay, i, again, coll, pricer, mixed) for i in range(pp)]
        mem = mirrored(lay, [stage_memory(lay, st, i, shared.by_name, again,
                                          shared.kept(lay, i, again))
                             for i, st in enumerate(per_stage)])
        model_flop, hardware_flop = step_flop(graph, lay, ops, [], again, shared.flop())
    times = [s["time"] for s in per_stage]
    if lay.schedule in ("zb-h1", "dualpipe"):  # they move weight gradients into bubbles
        pipe = pipeline_seconds(lay, [Work(s["forward"] + sum(s["sends"]),
                                           s["backward"] + sum(s["sends"]), s["weight"])
                                      for s in per_stage])
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
    tokens = lay.global_batch * sequence_length(graph)
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

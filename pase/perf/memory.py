"""Peak memory of a pipeline stage: states, kept activations in flight, recomputation.

States follow the ZeRO stage (16 bytes per parameter in mixed precision: 2 weight,
2 gradient, 12 fp32 master weight and Adam moments; fp32: 4 + 4 + 8), sharded
over the data-parallel ranks. Activations are the stage's kept tensors
(:mod:`pase.perf.ops`) times the micro-batches in flight
(:func:`pase.perf.pipeline.in_flight`); full recomputation keeps only each
block's input, plus one block's activations while it is rebuilt; selective
recomputation drops the attention core's ``L x M`` tensors.
"""
from __future__ import annotations

import math
from typing import Any

from pase.perf import schedule
from pase.perf.layout import Layout
from pase.perf.ops import PricedOp
from pase.perf.pipeline import in_flight


def stage_memory(lay: Layout, st: dict[str, Any], index: int,
                 by_name: dict[str, PricedOp], again: set[str],
                 kept: tuple[float, float] | None = None) -> dict[str, float]:
    """Peak bytes of one stage: states, activations in flight, the recompute working set
    (``kept``: its :func:`activation_bytes`, when a layout search has them already)."""
    mixed = st["mixed"]
    w, g, o = (2.0, 2.0, 12.0) if mixed else (4.0, 4.0, 8.0)
    d, de = st["shards"]

    def states(params: float, shards: int) -> float:
        if lay.zero == 0:
            return params * (w + g + o)
        if lay.zero == 1:
            return params * (w + g + o / shards)
        if lay.zero == 2:
            return params * (w + (g + o) / shards)
        return params * (w + g + o) / shards

    state = states(st["params"], d) + states(st["expert_params"], de)
    if lay.zero < 3:  # FSDP gathers each unit's low-precision weights afresh (and drops them)
        state += st["weight_copies"]
    if lay.zero in (1, 2):  # the distributed optimizer's fp32 master is the weights' only
        state -= st["linear_params"] * w  # 16-bit source: the low-precision copies replace them
    if lay.zero == 3 and st["unit_params"]:
        state += max(st["unit_params"].values()) * (2 * w + g)  # gathered current + next, full gradient
    if schedule.parameter_copies(lay.schedule) > 1:  # DualPipe: each device runs two stages
        state *= schedule.parameter_copies(lay.schedule)
    kept_bytes, working = activation_bytes(lay, st, by_name, again) if kept is None else kept
    activations = kept_bytes * in_flight(lay, index)
    return {"total": state + activations + working, "states": state, "activations": activations,
            "recompute_working_set": working}


def activation_bytes(lay: Layout, st: dict[str, Any], by_name: dict[str, PricedOp],
                     again: set[str]) -> tuple[float, float]:
    """A stage's kept activation bytes per micro-batch and its recompute working set."""
    kept: dict[tuple, float] = {}
    blocks: dict[str, dict[tuple, float]] = {}
    # selective recomputation rebuilds the attention core's L x M tensors (the softmax's),
    # and under fused attention the norms' and gated activations' outputs
    rebuilt = {p.op.name for p in st["ops"] if p.attention_core and p.op.kind != "Einsum"} \
        if lay.recompute == "selective" else set()
    for p, unit in zip(st["ops"], st["units"]):
        if unit in again:
            blocks.setdefault(unit, {}).update(p.kept)
        else:
            for k, v in p.kept.items():  # a tensor kept by two ops at two sizes: the larger
                if k[0] not in rebuilt:
                    kept[k] = max(v, kept.get(k, 0.0))
    working = 0.0
    if blocks:
        made = {p.op.name: u for p, u in zip(st["ops"], st["units"])}
        for p, unit in zip(st["ops"], st["units"]):
            if unit in blocks:
                for port in p.op.inputs:  # the block's input, the only tensor full recompute keeps
                    if port.source is not None and made.get(port.source[0]) != unit:
                        key = (port.source[0], int(port.source[1]))
                        kept[key] = tensor_bytes(by_name[key[0]], key[1], lay)
        working = max(sum(b.values()) for b in blocks.values())
    return sum(kept.values()), working


def tensor_bytes(producer: PricedOp, output: int, lay: Layout) -> float:
    """Bytes of output ``output`` of ``producer`` (its per-device tile)."""
    port = producer.op.outputs[output]
    total = 1.0
    for size, names in zip(port.shape, port.dims):
        total *= math.ceil(size / math.prod(producer.splits[n] for n in names))
    return total * (2.0 if lay.precision != "fp32" else 4.0)

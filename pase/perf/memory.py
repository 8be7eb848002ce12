"""Peak memory of a pipeline stage: states, kept activations in flight, recomputation.

States follow the ZeRO stage (16 bytes per parameter in mixed precision: 2 weight,
2 gradient, 12 fp32 master weight and Adam moments; fp32: 4 + 4 + 8), sharded
over the data-parallel ranks (the rules of :mod:`pase.work.memory`, which every cost
model uses too). Activations are the stage's kept tensors
(:mod:`pase.perf.ops`) times the micro-batches in flight
(:func:`pase.perf.pipeline.in_flight`); full recomputation keeps only each
block's input, plus what one block makes while it is rebuilt (its output too); selective
recomputation drops the attention core's ``L x M`` tensors.
"""
from __future__ import annotations

import math
from typing import Any

from pase.perf import schedule
from pase.perf.layout import Layout
from pase.perf.ops import PricedOp
from pase.perf.pipeline import in_flight
from pase.work.memory import activation_element_bytes, sharded_states, state_split


def stage_memory(lay: Layout, st: dict[str, Any], index: int,
                 by_name: dict[str, PricedOp], again: set[str],
                 kept: tuple[float, float] | None = None) -> dict[str, float]:
    """Peak bytes of one stage: states, activations in flight, the recompute working set
    (``kept``: its :func:`activation_bytes`, when a layout search has them already)."""
    mixed = st["mixed"]
    w, g, o = state_split(2.0 if mixed else 4.0, "adam")
    d, de = st["shards"]

    def states(params: float, shards: int) -> float:
        return sharded_states(params, lay.zero, shards, w, g, o)

    state = states(st["params"], d) + states(st["expert_params"], de)
    if lay.zero < 3:  # FSDP gathers each unit's low-precision weights afresh (and drops them)
        state += st["weight_copies"]
    if lay.zero in (1, 2):  # the distributed optimizer's fp32 master is the weights' only
        state -= st["linear_params"] * w  # 16-bit source: the low-precision copies replace them
    if lay.zero == 3 and st["unit_params"]:  # gathered current + next, full gradient; an
        # expert's weights held whole (no expert-data-parallel replicas) are never gathered
        held = st.get("unit_expert", {}) if de == 1 else {}
        state += max(v - held.get(u, 0.0) for u, v in st["unit_params"].items()) * (2 * w + g)
    kept_bytes, working = activation_bytes(lay, st, by_name, again) if kept is None else kept
    activations = kept_bytes * in_flight(lay, index)
    return {"total": state + activations + working, "states": state, "activations": activations,
            "recompute_working_set": working}


def activation_bytes(lay: Layout, st: dict[str, Any], by_name: dict[str, PricedOp],
                     again: set[str]) -> tuple[float, float]:
    """A stage's kept activation bytes per micro-batch and its recompute working set."""
    kept: dict[tuple, float] = {}
    blocks: dict[str, dict[tuple, float]] = {}  # the rebuilt blocks' kept tensors
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
        # the block being rebuilt holds what its own ops make, its output included (alive
        # until its backward ends, as Megatron-LM's checkpoint keeps the rebuilt outputs),
        # not its input: that is the checkpoint, counted above
        held: dict[tuple, float] = {}
        for p in st["ops"]:
            for k, v in p.kept.items():
                held[k] = max(v, held.get(k, 0.0))
        made_in: dict[str, float] = {}
        for k, v in held.items():
            if made.get(k[0]) in blocks:
                made_in[made[k[0]]] = made_in.get(made[k[0]], 0.0) + v
        working = max(made_in.values(), default=0.0)
    return sum(kept.values()), working


def tensor_bytes(producer: PricedOp, output: int, lay: Layout) -> float:
    """Bytes of output ``output`` of ``producer`` (its per-device tile)."""
    port = producer.op.outputs[output]
    total = 1.0
    for size, names in zip(port.shape, port.dims):
        total *= math.ceil(size / math.prod(producer.splits[n] for n in names))
    return total * activation_element_bytes(lay.precision)


def mirrored(lay: Layout, memory: list[dict[str, float]]) -> list[dict[str, float]]:
    """Each stage's :func:`stage_memory` as its device group holds it: with the states of
    the other stage it runs too (:func:`pase.perf.schedule.mirror`, DualPipe's)."""
    out = []
    for i, mem in enumerate(memory):
        j = schedule.mirror(lay.schedule, lay.pp, i)
        other = 0.0 if j is None else memory[j]["states"]
        out.append({**mem, "states": mem["states"] + other, "total": mem["total"] + other})
    return out

"""A step's FLOP: per layer its model and hardware FLOP of one forward (:func:`unit_flop`),
the step's (:func:`step_flop`, for MFU and HFU), the experts' active share and the tokens
per sample."""
from __future__ import annotations

import math

import numpy as np

from pase.ir import Graph
from pase.perf.layout import Layout
from pase.perf.ops import PricedOp
from pase.schema import attr
from pase.work.ops import op_work


def unit_flop(graph: Graph, ops: list[PricedOp], units: list[str]) -> dict[str, list[float]]:
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


def step_flop(graph: Graph, lay: Layout, ops: list[PricedOp], units: list[str],
          again_units: set[str], per_unit: dict[str, list[float]] | None = None
          ) -> tuple[float, float]:
    """Model FLOP of a step (2 per multiply-add, dense attention, forward x 3; an expert
    counts the tokens routed to it, not its padded capacity) and the hardware FLOP (every
    capacity slot, plus the recomputed forward); ``per_unit``: :func:`unit_flop`, if known."""
    if per_unit is None:
        per_unit = unit_flop(graph, ops, units)
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


def sequence_length(graph: Graph) -> int:
    """Tokens per sample: the first sequence-role dim's size (1 for models without one)."""
    for op in graph.ops:
        for d in op.dims:
            if d.role == "sequence":
                return d.size
    return 1

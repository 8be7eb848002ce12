"""What an op's price depends on beyond the op itself: its place in the graph.

The performance model prices a named layout by walking the whole graph
(:func:`pase.perf.ops.price_ops`); a cost model that prices every candidate
config of every op on its own (:mod:`pase.cost_models.calibrated`) needs the
same graph facts per op, computed once. :func:`op_contexts` gives them:

- **fused attention**: the scores einsum of a scores -> softmax -> context chain
  prices the one fused kernel; the softmax and the context einsum add nothing;
- **kept tensors**: which of the op's outputs some consumer keeps for its
  backward pass, and the op's own extras (an activation's input, the loss's fp32
  probabilities), by :mod:`pase.perf.ops`'s rules; a kept tensor is charged once,
  to its producer, at the producer's tile, as the layout pricing counts it;
- **block inputs**: outputs read by an op of another block, the only tensors a
  recomputed block keeps;
- **one all-reduce per tensor gradient**: when several projections read one tensor
  (query, key and value; a gated MLP's gate and up), their partial input
  gradients are summed on the device and all-reduced once, by the first reader;
- the op's block (``"pre"``, ``"post"`` or the layer) and whether it is part of
  the attention core (what selective recomputation recomputes).
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from pase.cluster import Device
from pase.ir import Graph
from pase.perf.hardware import GENERIC
from pase.perf.kernels import Pricer, is_linear, value_share
from pase.perf.layout import Layout
from pase.perf.ops import fused_attention, price_ops, selective_rebuilds
from pase.perf.pipeline import placement
from pase.schema import attr

# Any device serves: only which tensors are kept is read, never a time.
_ANY = Pricer(Device("any", 1.0, 1.0, bf16_tflops=1.0, hbm_gbps=1.0), GENERIC, 1e12, 2.0)


@dataclass(frozen=True)
class OpContext:
    """One op's graph facts (see the module docstring)."""

    attention: str | None = None  # "scores" (the fused kernel), "inner" (priced by the scores op)
    causal: bool = False
    kept_outputs: tuple[int, ...] = ()
    extras: tuple[str, ...] = ()  # "pre-activation", "probabilities"
    block_outputs: tuple[int, ...] = ()  # outputs an op of another block reads
    shares_input_gradient: bool = False  # another reader all-reduces input 0's gradient
    unit: str = "pre"
    core: bool = False  # attention core: selective recomputation recomputes it
    window: int = 0  # sliding-window attention: keys per query (0: all)
    values: float = 1.0  # a scores op: its context's work over its own (kernels.value_share)
    # of kept_outputs, those only linear layers keep: quantised under a low precision
    linear_kept: tuple[int, ...] = ()

    def key(self) -> tuple:
        return (self.attention, self.causal, self.kept_outputs, self.extras, self.block_outputs,
                self.shares_input_gradient, self.unit in ("pre", "post"), self.core, self.window,
                self.values, self.linear_kept)


# The last graphs' contexts, by identity (a Graph is immutable; an entry holds its graph so
# its id stays its own): a pipeline plan's price binds one graph once or twice a stage.
CONTEXTS_KEPT = 4
_CONTEXTS: OrderedDict = OrderedDict()


def op_contexts(graph: Graph, attention: str = "fused") -> dict[str, OpContext]:
    """Every op's :class:`OpContext` under fused (or unfused) attention."""
    key = (id(graph), attention)
    hit = _CONTEXTS.get(key)
    if hit is not None and hit[0] is graph:
        _CONTEXTS.move_to_end(key)
        return dict(hit[1])
    out = _contexts(graph, attention)
    _CONTEXTS[key] = (graph, out)
    while len(_CONTEXTS) > CONTEXTS_KEPT:
        del _CONTEXTS[next(iter(_CONTEXTS))]
    return dict(out)


def _contexts(graph: Graph, attention: str) -> dict[str, OpContext]:
    fused = fused_attention(graph) if attention == "fused" else {}
    cores = selective_rebuilds(graph, attention)
    priced = price_ops(graph, Layout(attention=attention), _ANY)
    kept: dict[str, set[int]] = {}
    by_other: set[tuple[str, int]] = set()  # kept by an op other than a linear layer
    extras: dict[str, list[str]] = {}
    for p in priced:
        for producer, which in p.kept:
            if isinstance(which, int):
                kept.setdefault(producer, set()).add(which)
                if not is_linear(p.op) or producer == p.op.name:
                    by_other.add((producer, which))
            elif which in ("pre-activation", "probabilities"):
                extras.setdefault(producer, []).append(which)
    _, units, _ = placement(graph, Layout())
    unit_of = {op.name: u for op, u in zip(graph.ops, units)}
    block_outputs: dict[str, set[int]] = {}
    for op in graph.ops:  # the head's norm reads the last layer's output: kept too
        for port in op.inputs:
            if port.source is not None and unit_of[port.source[0]] != unit_of[op.name]:
                block_outputs.setdefault(port.source[0], set()).add(int(port.source[1]))
    first_reader: dict[tuple, str] = {}
    shares = set()
    for op in graph.ops:
        if op.kind != "Einsum" or not op.inputs or op.inputs[0].source is None or op.name in fused:
            continue
        source = (op.inputs[0].source[0], int(op.inputs[0].source[1]))
        if source in first_reader:
            shares.add(op.name)
        else:
            first_reader[source] = op.name
    out = {}
    for op in graph.ops:
        triple = fused.get(op.name)
        role = None if triple is None else ("scores" if op.name == triple[0] else "inner")
        causal = bool(attr(graph.op(triple[1]), "causal")) if triple is not None else False
        window = int(attr(graph.op(triple[1]), "window")) if triple is not None else 0
        values = value_share(op, graph.op(triple[2])) if role == "scores" else 1.0
        out[op.name] = OpContext(role, causal, tuple(sorted(kept.get(op.name, ()))),
                                 tuple(sorted(set(extras.get(op.name, ())))),
                                 tuple(sorted(block_outputs.get(op.name, ()))),
                                 op.name in shares, unit_of[op.name], op.name in cores, window,
                                 values, tuple(sorted(i for i in kept.get(op.name, ())
                                                      if (op.name, i) not in by_other)))
    return out


def recomputed(ctx: OpContext, mode: str) -> bool:
    """Whether an op runs its forward again under ``selective`` or ``full`` recomputation:
    full, every op of a layer; selective, the attention core but its context product
    (its output is the projection's input, which stays kept)."""
    if mode == "full":
        return ctx.unit not in ("pre", "post")
    if mode == "selective":
        return ctx.core and not (ctx.attention == "inner" and ctx.kept_outputs)
    return False

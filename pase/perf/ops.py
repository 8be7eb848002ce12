"""Each op of a graph under a layout: its time (:mod:`pase.perf.kernels`) and what it keeps.

:func:`price_ops` walks the graph once: per op it takes the layout's splits, finds
whether it belongs to a fused attention (a scores einsum -> softmax -> context
einsum chain), prices it, and lists the tensors it keeps for the backward pass.

A kept tensor is named by the tensor it is (producer, output), so a tensor two
ops keep is counted once, and sized by its producer's per-device tile: under
sequence parallelism a norm's output is kept sharded, as Megatron-LM keeps it.
The rules (bytes at the activation precision unless said):

- an einsum keeps each activation operand; one with an activation function also
  keeps its pre-activation output; a norm keeps its input; an unfused softmax
  keeps its output; a product of two tensors keeps both; an add keeps nothing;
- the loss keeps its fp32 probabilities (4 bytes);
- fused attention keeps its query, key and value (and its output, which the next
  projection keeps anyway), never the ``L x M`` scores;
- with dropout: a 1-byte mask and the dropped output on attention probabilities,
  a 1-byte mask on each einsum output that feeds a residual add.

On a plain GPT layer this is Korthikanti et al.'s count: ``s b h (34 + 5 a s / h)``
bytes with dropout and no parallelism (tests/perf/test_memory.py checks it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from pase.ir import Graph, Op
from pase.perf import ops_memo
from pase.perf.kernels import (
    MEMORY_BOUND,
    VIEWS,
    OpTime,
    Pricer,
    attention_time,
    einsum_time,
    is_linear,
    memory_bound_time,
    port_elements,
    value_share,
)
from pase.perf.layout import Layout, experts_of, op_splits, tile
from pase.schema import attr
from pase.work.ops import op_work, owned_parameters  # owned: who holds a tied matrix


@dataclass
class PricedOp:
    """One op under the layout."""

    op: Op
    time: OpTime
    splits: dict[str, int]
    kept: dict[tuple, float] = field(default_factory=dict)  # tensor id -> bytes per micro-batch
    parameter_elements: float = 0.0  # per device
    expert: bool = False  # its parameters are split over ep
    attention_core: bool = False  # selective recomputation rebuilds it (selective_rebuilds)
    linear: bool = False  # a linear layer run in a low precision (its weights get copies)


def fused_attention(graph: Graph) -> dict[str, tuple[str, str, str]]:
    """Op name -> (scores, softmax, context) for each softmax between two einsums
    whose output only the context einsum reads."""
    readers: dict[tuple, list[str]] = {}
    for op in graph.ops:
        for port in op.inputs:
            if port.source is not None:
                readers.setdefault((port.source[0], int(port.source[1])), []).append(op.name)
    out: dict[str, tuple[str, str, str]] = {}
    for op in graph.ops:
        if op.kind != "Softmax" or len(op.inputs) != 1 or op.inputs[0].source is None:
            continue
        scores = graph.op(op.inputs[0].source[0])
        users = readers.get((op.name, 0), [])
        if scores.kind == "Einsum" and len(users) == 1 and graph.op(users[0]).kind == "Einsum" \
                and readers.get((scores.name, 0), []) == [op.name]:
            triple = (scores.name, op.name, users[0])
            for name in triple:
                out[name] = triple
    return out


def selective_rebuilds(graph: Graph, attention: str) -> set[str]:
    """The ops selective recomputation runs again: the attention core (Korthikanti et al.);
    with fused attention, whose core keeps no ``L x M`` tensor, also the norms and the gated
    activations' products, as current recipes do (Megatron-Core's recompute modules
    ``core_attn``, ``layernorm`` and ``moe_act``; torchtitan's per-op policy keeps the
    matrix products' outputs and rebuilds the element-wise ops)."""
    out = set(fused_attention(graph))
    if attention == "fused":
        out |= {op.name for op in graph.ops if op.kind == "Norm" or (
            op.kind == "Elementwise" and attr(op, "fn") == "mul" and any(
                p.source is not None and _activated(graph.op(p.source[0])) for p in op.inputs))}
    return out


def price_ops(graph: Graph, lay: Layout, pricer: Pricer, memo: bool = True,
              copies: bool = True) -> list[PricedOp]:
    """Every op of ``graph`` priced for one micro-batch on one device. ``memo``: an op
    equal to one priced before in every way its price reads (:mod:`pase.perf.ops_memo`:
    a repeated layer's) is a copy of that price; False prices each op afresh (the same
    prices, tests/perf/test_ops_memo.py). ``copies=False``: such an op is the first one's
    PricedOp itself (its op and kept tensors named as that one's), for a caller that reads
    only the times (:class:`pase.perf.bound.Bounds`)."""
    fused, cores, kinds, ids = ops_memo.per_graph(graph, ("price_ops", lay.attention),
                                                  lambda: _analysis(graph, lay.attention))
    out_elems: dict[tuple, float] = {}
    reduced: set = set()  # tensors whose input gradient is all-reduced over tp already
    seen: dict[tuple, tuple] = {}  # memo key -> (price, its kept tensors, adds to reduced)
    priced = []
    e = pricer.element_bytes
    for i, op in enumerate(graph.ops):
        if memo:
            sources = [port.source for port in op.inputs if port.source is not None]
            key = (ids[i], tuple((out_elems[s], s in reduced) for s in sources))
            hit = seen.get(key)
            if hit is not None:
                p = ops_memo.copy(hit[0], hit[1], op) if copies else hit[0]
                for n, elems in enumerate(hit[3]):
                    out_elems[(op.name, n)] = elems
                if hit[2]:
                    reduced.add(op.inputs[0].source)
                priced.append(p)
                continue
        adds = False
        splits_t, held = token_splits(op, lay), op_splits(op, lay)
        splits = {d.name: s for d, s in zip(op.dims, splits_t)}
        t = tile(op, splits_t)
        for i, port in enumerate(op.outputs):
            out_elems[(op.name, i)] = port_elements(op, port, t, splits)
        time = OpTime(op.name)
        p = PricedOp(op, time, splits, attention_core=op.name in cores)
        triple = fused.get(op.name)
        if triple is not None:
            if op.name == triple[0]:
                softmax = graph.op(triple[1])
                attention_time(op, value_share(op, graph.op(triple[2])),
                               bool(attr(softmax, "causal")), t, pricer,
                               time, int(attr(softmax, "window")))
                if lay.cp > 1:  # each ring step passes one rank's chunk of the keys and values
                    keys = sum(port_elements(op, q, t, splits) for q in op.inputs[1:])
                    time.ring_bytes = 2 * keys * e / lay.cp
        elif op.kind == "Einsum":
            einsum_time(op, expert_tile(op, t, lay), splits, pricer, time)
            source = op.inputs[0].source if op.inputs else None
            if time.tp_backward and source is not None:
                # partial input gradients of one tensor (a gated MLP's gate and up) are
                # summed on the device and all-reduced once, as a fused projection is
                if source in reduced:
                    time.tp_backward.clear()
                reduced.add(source)
                adds = True
        elif op.kind in VIEWS:
            pass
        elif op.kind in MEMORY_BOUND:
            axis_split = op.kind in ("Softmax", "SoftmaxCrossEntropy") and _reduce_split(op, splits)
            memory_bound_time(op, t, splits, pricer, time, axis_split)
        else:
            _fallback(op, splits_t, pricer, time)
        if lay.dropout:
            _dropout_time(op, fused, out_elems, kinds, t, splits, pricer, time)
        _expert_exchange(op, t, splits, pricer, time, lay)
        p.expert = lay.ep > 1 and experts_of(op) is not None and bool(owned_parameters(op))
        weight_splits = {d.name: s for d, s in zip(op.dims, held if p.expert else splits_t)}
        p.parameter_elements = sum(port_elements(op, w, t, weight_splits) for w in owned_parameters(op))
        p.linear = pricer.quantised_bytes > 0 and is_linear(op)
        p.kept = _kept(op, lay, fused, out_elems, t, splits,
                       pricer.quantised_bytes if p.linear else e, kinds, graph, e)
        priced.append(p)
        if memo:
            seen[key] = (p, ops_memo.template(p, op), adds,
                         [out_elems[(op.name, n)] for n in range(len(op.outputs))])
    return priced


def _analysis(graph: Graph, attention: str) -> tuple:
    """What :func:`price_ops` reads of the whole graph, the same for every layout: the
    fused attentions, the ops selective recomputation rebuilds, the kinds by name and
    each op's memo class (:func:`pase.perf.ops_memo.classes`)."""
    fused = fused_attention(graph) if attention == "fused" else {}
    cores = selective_rebuilds(graph, attention)
    return (fused, cores, {op.name: op.kind for op in graph.ops},
            ops_memo.classes(graph, fused, cores, _activated))


def _activated(op: Op) -> bool:
    """An einsum with a fused activation function (it keeps its pre-activation)."""
    return op.kind == "Einsum" and attr(op, "pw") >= 1


def _reduce_split(op: Op, splits: dict[str, int]) -> bool:
    if op.kind == "SoftmaxCrossEntropy":
        return any(splits[d.name] > 1 for d in op.dims if d.role == "vocabulary")
    return splits[op.dims[int(attr(op, "axis"))].name] > 1


# -- expert parallelism ------------------------------------------------------------------
# ``ep`` splits the experts, not the tokens: a rank holds experts/ep experts and runs them on
# the tokens the whole ep group routes to them (its own and ep - 1 neighbours' share, received
# by the dispatch's all-to-all). So the data an expert op touches per rank is the size of the
# rank's own tokens' buffer for every expert, whatever ep is, and only the experts' weights
# (and their gradients and optimizer states) shrink by ep.

def token_splits(op: Op, lay: Layout) -> tuple[int, ...]:
    """Per dim of ``op``, how many ways the layout splits its data: the layout's splits
    (:func:`pase.perf.layout.op_splits`) without ep's split of the experts."""
    return op_splits(op, replace(lay, ep=1)) if lay.ep > 1 else op_splits(op, lay)


def expert_tile(op: Op, t: dict[str, float], lay: Layout) -> dict[str, float]:
    """The per-rank GEMM extents of an expert einsum under ep: experts/ep experts, each with
    ep times the rank's tokens (its first batch dim, else sequence dim, not in a weight)."""
    expert = experts_of(op) if lay.ep > 1 else None
    if expert is None:
        return t
    in_weights = {n for port in op.weights for axis in port.dims for n in axis}
    roles = {d.name: d.role for d in op.dims}
    tokens = next((n for role in ("batch", "sequence") for n in t
                   if roles[n] == role and n not in in_weights), None)
    if tokens is None:
        return t
    size = next(d.size for d in op.dims if d.name == expert)
    return {**t, expert: float(math.ceil(size / lay.ep)), tokens: t[tokens] * lay.ep}


def _expert_exchange(op: Op, t, splits, pricer: Pricer, time: OpTime, lay: Layout) -> None:
    """Expert parallelism: the dispatch's output and the combine's input cross the ep group
    (all-to-all of the rank's own tokens' buffer for every expert: ``splits`` leave the experts
    whole, :func:`token_splits`)."""
    if lay.ep == 1 or op.kind not in ("MoEDispatch", "MoECombine"):
        return
    port = op.outputs[0] if op.kind == "MoEDispatch" else op.inputs[0]
    nbytes = port_elements(op, port, t, splits) * pricer.element_bytes
    time.ep_forward.append(("all-to-all", nbytes))
    time.ep_backward.append(("all-to-all", nbytes))


def _dropout_time(op: Op, fused: dict, sizes: dict, kinds: dict, tile: dict, splits: dict,
                  pricer: Pricer, time: OpTime) -> None:
    """Dropout kernels: on unfused attention probabilities, and on each einsum output
    entering a residual add (read, write, a 1-byte mask; the same back)."""
    e = pricer.element_bytes
    tensors = []
    if op.kind == "Softmax" and op.name not in fused:
        tensors.append(sizes[(op.name, 0)])
    elif op.kind == "Elementwise" and len(op.inputs) == 2 and attr(op, "fn") == "add":
        tensors += [port_elements(op, q, tile, splits) for q in op.inputs
                    if q.source is not None and kinds[q.source[0]] == "Einsum"]
    for elems in tensors:
        time.forward_s += pricer.memory(elems * (2 * e + 1))
        time.backward_s += pricer.memory(elems * (2 * e + 1))
        time.kernels += 2


def _fallback(op: Op, splits: tuple[int, ...], pricer: Pricer, time: OpTime) -> None:
    """Kinds without a kernel model: pase.work's FLOP at large-GEMM efficiency."""
    work = op_work(op, np.asarray([splits]), pricer.element_bytes)
    rate = pricer.peak_flops * pricer.hw.gemm
    time.forward_flop += float(work.forward_flop[0])
    time.backward_flop += float(work.backward_flop[0])
    time.forward_s += float(work.forward_flop[0]) / rate + pricer.hw.launch_s
    time.backward_s += float(work.backward_flop[0]) / rate + 2 * pricer.hw.launch_s
    time.kernels += 3


def _kept(op: Op, lay: Layout, fused: dict, sizes: dict, t, splits, e: float,
          kinds: dict[str, str], graph: Graph, activation: float) -> dict[tuple, float]:
    """Tensor id -> bytes this op keeps for its backward pass (module docstring); ``e``
    the bytes of an input it keeps (a low-precision linear layer keeps its quantised
    input), ``activation`` those of its own outputs."""
    kept: dict[tuple, float] = {}

    def keep_input(port) -> None:
        if port.source is not None:
            key = (port.source[0], int(port.source[1]))
            kept[key] = sizes[key] * e

    own = sizes.get((op.name, 0), 0.0)
    e_out = activation
    triple = fused.get(op.name)
    if triple is not None:
        if op.name != triple[1]:
            for port in op.inputs:
                if port.source is None or port.source[0] != triple[1]:
                    keep_input(port)
        return kept
    if op.kind == "Einsum":
        for port in op.inputs:
            keep_input(port)
        if attr(op, "pw") >= 1:  # an activation function: its input is kept too
            kept[(op.name, "pre-activation")] = own * activation
    elif op.kind == "Norm":
        keep_input(op.inputs[0])
    elif op.kind == "Softmax":
        kept[(op.name, 0)] = own * e_out
        if lay.dropout:
            kept[(op.name, "dropout mask")] = own
            kept[(op.name, "dropout output")] = own * e_out
    elif op.kind == "Elementwise":
        if attr(op, "fn") == "mul":  # a gated activation (SwiGLU) is one fused kernel: the
            for port in op.inputs:  # activation's output is rebuilt from its kept input
                if port.source is None or not _activated(graph.op(port.source[0])):
                    keep_input(port)
    elif op.kind == "SoftmaxCrossEntropy":
        kept[(op.name, "probabilities")] = sum(port_elements(op, p, t, splits) for p in op.inputs) * 4
    elif op.kind in VIEWS or op.kind == "Embedding":
        pass
    else:
        for port in op.inputs:
            keep_input(port)
    if lay.dropout and op.kind == "Elementwise" and len(op.inputs) == 2 and attr(op, "fn") == "add":
        for port in op.inputs:  # hidden dropout on the branch (an einsum's output) before the add
            if port.source is not None and kinds[port.source[0]] == "Einsum":  # after the
                # reduce-scatter of sequence parallelism: the add's tile, not the einsum's
                kept[(port.source[0], "dropout mask")] = port_elements(op, port, t, splits)
    return kept

"""Identical ops priced once (:func:`pase.perf.ops.price_ops`'s memo).

A model's layers repeat: Llama 3.1 405B's 126 blocks are the same ops on the same shapes,
so :func:`pase.perf.ops.price_ops` need price each op of one block only. An op's price
depends on the op itself (kind, dims, ports, attributes), the layout and pricer (the same
for a whole call) and on its neighbours: what its inputs are (their producers' kinds,
whether they carry an activation function), the fused attention it belongs to, whether
selective recomputation rebuilds it, and two things that the walk over the graph
accumulates: its inputs' per-device sizes and whether their gradient is all-reduced
already. :func:`classes` gives each op an id of everything but the last two, once per
graph; the memo's key is that id with those two, so an op whose key was seen is a copy of
the first one's price (:func:`copy`), its tensors renamed to its own.
"""
from __future__ import annotations

from typing import Callable

from pase.ir import Graph, Op

# A few graphs (one per micro-batch of a layout search), each with its classes per
# (attention, whatever the caller keys on): the graph is held so its id stays its own.
_CACHE: dict[tuple, tuple[Graph, object]] = {}
_KEEP = 16


def per_graph(graph: Graph, key: tuple, make: Callable[[], object]) -> object:
    """``make()`` once per (graph, key), remembered for the last few graphs."""
    full = (id(graph),) + key
    hit = _CACHE.get(full)
    if hit is not None and hit[0] is graph:
        return hit[1]
    if len(_CACHE) >= _KEEP:
        _CACHE.pop(next(iter(_CACHE)))
    value = make()
    _CACHE[full] = (graph, value)
    return value


def _shape(op: Op) -> tuple:
    """Everything of ``op`` but its name and where its inputs come from."""
    return (op.kind, op.dims, tuple((p.shape, p.dims, p.source is None) for p in op.inputs),
            op.outputs, op.weights, op.pinned, op.contiguous, op.attrs)


def classes(graph: Graph, fused: dict[str, tuple[str, str, str]], cores: set[str],
            activated: Callable[[Op], bool]) -> list[int]:
    """Per op an id; two ops with the same id price the same wherever their inputs have the
    same sizes and reduction state (module docstring). Names become offsets in the graph's
    order, so the n-th op of two equal blocks gets the same id."""
    index = {op.name: i for i, op in enumerate(graph.ops)}
    ids: dict[tuple, int] = {}
    out = []
    for i, op in enumerate(graph.ops):
        inputs = []
        for port in op.inputs:
            if port.source is None:
                inputs.append(None)
            else:
                src = graph.ops[index[port.source[0]]]
                inputs.append((index[src.name] - i, port.source[1], src.kind, activated(src)))
        triple = fused.get(op.name)
        attention = None if triple is None else tuple(
            (index[name] - i, _shape(graph.ops[index[name]])) for name in triple)
        key = (_shape(op), tuple(inputs), attention, op.name in cores)
        out.append(ids.setdefault(key, len(ids)))
    return out


def template(p, op: Op) -> tuple:
    """A priced op's kept tensors with their producers written as who they are to ``op``
    (itself or its n-th input), for :func:`copy`."""
    where = {op.name: -1}
    for n, port in enumerate(op.inputs):
        if port.source is not None:
            where.setdefault(port.source[0], n)
    return tuple((where[k[0]], k[1], v) for k, v in p.kept.items())


def copy(p, kept: tuple, op: Op):
    """``p`` (a PricedOp) for ``op``: its time under ``op``'s name (lists copied), its
    kept tensors renamed (:func:`template`). Field by field, not dataclasses.replace:
    a 126-layer model copies some 2,000 ops per layout group."""
    t = p.time
    time = object.__new__(type(t))
    time.__dict__.update(t.__dict__)
    time.name = op.name
    time.tp_forward, time.tp_backward = list(t.tp_forward), list(t.tp_backward)
    time.ep_forward, time.ep_backward = list(t.ep_forward), list(t.ep_backward)
    out = object.__new__(type(p))
    out.__dict__.update(p.__dict__)
    out.op, out.time, out.splits = op, time, dict(p.splits)
    name = {-1: op.name}
    for n, port in enumerate(op.inputs):
        name[n] = port.source[0] if port.source is not None else None
    out.kept = {(name[n], k): v for n, k, v in kept}
    return out

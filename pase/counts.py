"""Parameter and FLOP counts of a graph, whole and per op.

- ``parameters``: trainable elements: every weight port with no batch-role axis
  (weights with a batch axis are data, such as an embedding's one-hot ids). A tied
  weight (an op with ``tied``: its first parameter is the first parameter of the
  named op) counts once, at the op that owns it.
- ``forward_flops``: the forward FLOP of the unsplit op as :mod:`pase.work`
  prices it for the alpha-beta model and the simulator, in standard units: a
  multiply-add is TWO FLOP (a GEMM ``m n k`` is ``2 m n k`` FLOP), as device
  peaks and MFU count them. An Embedding is a gather (memory traffic, priced at
  memory speed), so 0 here, as torch counts a lookup; only the paper's model
  prices it as the product of one-hot ids with the table. What is not a
  multiply-add (a GEMM's bias and point-wise tail, the other ops' element counts,
  one third of an op's total being its forward part) is one FLOP per element
  operation, the paper's counts.
- ``matmul_flops``: the part of ``forward_flops`` that is matrix products (Conv,
  FC, Einsum, LSTM, MoE dispatch and combine; 2 per multiply-add, no bias, no
  point-wise tail): what ``torch.utils.flop_counter.FlopCounterMode`` counts for a
  whole imported model. An Einsum without a contracted dim (a broadcast multiply, as
  the importer writes ``x * w``) is no matrix product: its FLOP count in
  ``forward_flops`` only, as torch counts it in neither.

>>> from pase.api import load_graph
>>> c = counts(load_graph("mlp", batch=1, width=4, layers=1, classes=2))
>>> c.parameters, [(o.name, o.parameters) for o in c.ops]
(24, [('fc1', 16), ('classifier', 8), ('loss', 0)])
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pase.errors import GraphError
from pase.ir import Graph, Op, Port
from pase.work.ops import op_work

__all__ = ["Counts", "OpCounts", "counts", "forward_flops", "parameters"]


@dataclass(frozen=True)
class OpCounts:
    """One op's trainable elements (tied weights at their owner), forward FLOP and
    the part of those that is matrix products."""

    name: str
    kind: str
    parameters: int
    forward_flops: float
    matmul_flops: float


@dataclass(frozen=True)
class Counts:
    """A graph's totals and its per-op counts, in build order."""

    parameters: int
    forward_flops: float
    matmul_flops: float
    ops: tuple[OpCounts, ...]

    def by_op(self) -> dict[str, OpCounts]:
        return {o.name: o for o in self.ops}


def _parameter_ports(op: Op) -> list[Port]:
    return [p for p in op.weights if op.is_parameter(p)]


def _owned(graph: Graph, op: Op) -> list[Port]:
    ports = _parameter_ports(op)
    tied = op.attrs.get("tied")
    if tied is None:
        return ports
    where = f"op {op.name!r} ({op.kind}) is tied to {tied!r}"
    if tied not in graph or tied == op.name:
        raise GraphError(f"{where}, which is not another op of graph {graph.name!r}")
    owner = _parameter_ports(graph.op(tied))
    if not ports or not owner:
        raise GraphError(f"{where}, but both need a parameter weight (the tied one comes first)")
    if math.prod(ports[0].shape) != math.prod(owner[0].shape):
        raise GraphError(f"{where}, but its first parameter has shape {ports[0].shape} and "
                         f"{tied!r}'s has {owner[0].shape}; a tied weight has one size")
    return ports[1:]


def _op_counts(graph: Graph, op: Op) -> OpCounts:
    params = sum(math.prod(p.shape) for p in _owned(graph, op))
    ones = np.ones((1, len(op.dims)), dtype=np.int64)
    with np.errstate(over="ignore"):  # an overflow is refused below, naming the op
        work = op_work(op, ones)
    forward, matmul = float(work.forward_flop[0]), float(work.matmul_flop[0])
    if not (math.isfinite(forward) and math.isfinite(matmul)):
        raise GraphError(f"op {op.name!r} ({op.kind}): its FLOP count overflows float64; its "
                         f"sizes or attributes are too large ({_attrs(op)})")
    return OpCounts(op.name, op.kind, int(params), forward, matmul)


def _attrs(op: Op) -> str:
    shown = ", ".join(f"{k}={v:.3g}" for k, v in op.attrs.items()
                      if isinstance(v, float) and abs(v) > 1e15)
    return shown or "dims " + ", ".join(f"{d.name}={d.size}" for d in op.dims)


def counts(graph: Graph) -> Counts:
    """Parameters, forward FLOP and matrix-product FLOP of ``graph`` and of each op."""
    ops = tuple(_op_counts(graph, op) for op in graph.ops)
    if not math.isfinite(sum(o.forward_flops for o in ops)):
        raise GraphError(f"graph {graph.name!r}: its total FLOP count overflows float64")
    return Counts(sum(o.parameters for o in ops), float(sum(o.forward_flops for o in ops)),
                  float(sum(o.matmul_flops for o in ops)), ops)


def parameters(graph: Graph) -> int:
    """Trainable elements of ``graph`` (a tied weight once)."""
    return sum(math.prod(p.shape) for op in graph.ops for p in _owned(graph, op))


def forward_flops(graph: Graph) -> float:
    """Forward FLOP of ``graph`` (a multiply-add is 2 FLOP; see the module docstring)."""
    return counts(graph).forward_flops

"""Where a pipeline may cut a graph: positions in its op order, and what crosses them.

A cut at position ``v`` puts ops ``0 .. v-1`` before it and ``v .. n-1`` after it
(the graph's op order is topological). The tensors crossing it are the outputs
of earlier ops that later ops read; each is sent once per micro-batch forward,
and its gradient once backward.

:func:`cut_points` offers two sets of cuts, both only where exactly one tensor
crosses (a stage boundary never splits a layer's internals):

- ``"blocks"`` (default): between two numbered blocks, ops whose names start
  ``<stem><i>`` and ``<stem><i+1>`` (``h3.mlp_residual`` | ``h4.attn_norm``), as
  the model builders name transformer layers; the ops before the first block
  (embeddings) join the first block and those after the last (the head, the
  loss) join the last. A graph without numbered blocks uses ``"all"``.
- ``"all"``: every single-tensor cut (in a transformer also between a block's
  attention and MLP halves, and around the embedding and the head).

``every = g`` keeps every ``g``-th cut (units of ``g`` blocks: a smaller search).
"""
from __future__ import annotations

import math
import re

from pase.errors import OptionError
from pase.ir import Graph


def crossing(graph: Graph, v: int) -> list[tuple[str, int]]:
    """``(producer, output index)`` of every tensor made before position ``v`` and read at or after it."""
    index = {op.name: i for i, op in enumerate(graph.ops)}
    out: dict[tuple[str, int], None] = {}
    for op in graph.ops[v:]:
        for port in op.inputs:
            if port.source is not None and index[port.source[0]] < v:
                out.setdefault((port.source[0], int(port.source[1])), None)
    return list(out)


def crossing_elements(graph: Graph, v: int) -> int:
    """Elements of the tensors crossing the cut at ``v`` (one micro-batch)."""
    total = 0
    for name, k in crossing(graph, v):
        total += math.prod(graph.op(name).outputs[k].shape)
    return total


CUTS = ("blocks", "all")
_BLOCK = re.compile(r"(\D+?)(\d+)$")


def cut_points(graph: Graph, cuts: str = "blocks", every: int = 1) -> list[int]:
    """Unit boundaries ``[0, c1, ..., n]`` (see the module docstring)."""
    if cuts not in CUTS:
        raise OptionError(f"unknown cuts {cuts!r}; allowed: {', '.join(CUTS)}")
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise OptionError(f"cut spacing (every) must be an integer >= 1, got {every!r}")
    n = len(graph.ops)
    single = [v for v in range(1, n) if len(crossing(graph, v)) == 1]
    if cuts == "blocks":
        blocks = [v for v in single if _consecutive(graph.ops[v - 1].name, graph.ops[v].name)]
        single = blocks or single
    kept = single[every - 1::every]
    return [0] + kept + [n]


def _consecutive(before: str, after: str) -> bool:
    a, b = _BLOCK.match(before.split(".")[0]), _BLOCK.match(after.split(".")[0])
    return bool(a and b and a.group(1) == b.group(1) and int(b.group(2)) == int(a.group(2)) + 1)

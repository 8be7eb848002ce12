"""A graph's pipeline cuts for the layout search, each (pp, V) from one pass over the graph.

:func:`pase.perf.pipeline.placement` walks every op for each cut and
:func:`pase.perf.pipeline.crossing_bytes` every input port; a search asks for some 200
cuts of each graph. What they read does not depend on the cut (each op's block, its
unit, the tensors its inputs are), so :class:`Frame` reads it once per graph and
:meth:`Frame.cut` places a cut by its layers: an op's chunk is its layer's (the ops
before the layers in the first chunk, those after in the last, as ``placement`` puts
them), and the tensors that cross chunks are picked from the graph's edges at once.
tests/perf/test_cuts.py checks each cut against ``placement`` and ``crossing_bytes``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pase.ir import Graph
from pase.perf.pipeline import blocks, chunk_sizes, placement


@dataclass(frozen=True)
class Cut:
    """One (pp, V) cut: per op its unit (the block, ``"pre"`` or ``"post"``); per stage its
    layers in order and its chunks, ascending; per chunk the elements of each tensor it
    receives from another chunk, in :func:`pase.perf.pipeline.crossing_bytes`'s order (so
    its bytes for a tp x cp and element size are that function's, to the bit)."""

    units: list[str]
    layers: list[list[str]]
    held: list[list[int]]
    crossing: dict[int, list[float]]

    def received(self, scale: int, element_bytes: float) -> list[list[float]]:
        """Per stage the bytes per rank its chunks receive (``scale``: tp x cp), summed
        as :func:`pase.perf.pipeline.crossing_bytes` sums them."""
        total = {}
        for c, elems in self.crossing.items():
            nbytes = 0.0
            for e in elems:
                nbytes += e / scale * element_bytes
            total[c] = nbytes
        return [[total[c] for c in h if c in total] for h in self.held]


class Frame:
    """What every cut of ``graph`` reads: per op its unit and layer, the units in order,
    and each input edge (consumer, producer, elements)."""

    def __init__(self, graph: Graph):
        self.graph = graph
        names = blocks(graph)
        order = list(dict.fromkeys(n for n in names if n is not None))
        where = {n: i for i, n in enumerate(order)}
        self.layers = len(order)
        units, layer, seen = [], [], False
        for name in names:
            if name is None:
                units.append("post" if seen else "pre")
                layer.append(self.layers if seen else -1)
            else:
                seen = True
                units.append(name)
                layer.append(where[name])
        self.units = units
        self.order = list(dict.fromkeys(units))  # units in the order their first op comes
        first = {u: i for i, u in reversed(list(enumerate(units)))}
        self._unit_layer = np.asarray([layer[first[u]] for u in self.order]) + 1
        self._layer = np.asarray(layer) + 1  # 0: before the layers, layers + 1: after
        index = {op.name: i for i, op in enumerate(graph.ops)}
        into, out, elements = [], [], []
        for i, op in enumerate(graph.ops):
            for port in op.inputs:
                if port.source is not None:
                    elems = 1.0
                    for size in port.shape:
                        elems *= size
                    into.append(i)
                    out.append(index[port.source[0]])
                    elements.append(elems)
        self._into, self._from = np.asarray(into, dtype=np.int64), np.asarray(out, dtype=np.int64)
        self._elements = elements

    def cut(self, lay) -> Cut:
        """The cut of ``lay``'s pp and V (``placement``'s error when there are too few
        layers)."""
        pp, chunks = lay.pp, lay.pp * lay.virtual
        if chunks > 1 and self.layers < chunks:
            placement(self.graph, lay)  # raises its OptionError
        table = np.asarray([0] + chunk_sizes(self.layers, chunks, expand=True) + [chunks - 1])
        op_chunk = table[self._layer]
        unit_chunk = table[self._unit_layer].tolist()
        layers: list[list[str]] = [[] for _ in range(pp)]
        held: list[set[int]] = [set() for _ in range(pp)]
        for u, c in zip(self.order, unit_chunk):
            layers[c % pp].append(u)
            held[c % pp].add(c)
        crossing: dict[int, list[float]] = {}
        into = op_chunk[self._into]
        for e in np.flatnonzero(into != op_chunk[self._from]).tolist():
            crossing.setdefault(int(into[e]), []).append(self._elements[e])
        return Cut(self.units, layers, [sorted(h) for h in held], crossing)

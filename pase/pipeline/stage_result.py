"""A pipeline stage's solved plan (:class:`StageResult`), its memory by the one price's
count (:func:`stage_memory`), and the helpers the stage oracle (:mod:`pase.pipeline.stages`)
builds and caches its sub-Problems with."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from pase.pipeline.layered import Layered
from pase.problem import Problem


@dataclass(frozen=True)
class StageResult:
    """A stage's plan: seconds per micro-batch (under the calibrated model with its sends,
    without its tail; under alpha-beta with its syncs amortised), its tail (once a step),
    bytes per device, each op's split, and whether the dp proved it optimal for its
    weight; ``out``: bytes per micro-batch of its kept tensors that the next stage holds."""

    seconds: float
    memory: float
    configs: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]
    optimal: bool
    choice: tuple[int, ...] = ()
    variants: tuple[tuple[str, int, bool], ...] = ()  # (op, zero, recompute), non-default only
    tail: float = 0.0
    out: float = 0.0

    def memory_with(self, lay: Layered, first: int, in_flight: float) -> float:
        """Bytes per device with ``in_flight`` micro-batches' activations held."""
        return self.memory_at(lay, range(first, first + len(self.choice)), in_flight)

    def memory_at(self, lay: Layered, index, in_flight: float) -> float:
        """States and ``in_flight`` micro-batches' kept activations of the ops at positions
        ``index`` (one per choice)."""
        return float(sum(lay.state[i][c] + in_flight * lay.activation[i][c]
                         for i, c in zip(index, self.choice)))


def stage_memory(lay: Layered, ranges, choice, in_flight: float, incoming: float = 0.0
                 ) -> tuple[float, float]:
    """Bytes per device of a stage at ``choice`` by the one price's count, and the bytes per
    micro-batch it passes on (kept tensors only a later stage reads); ``incoming``: those
    it holds for the stage before."""
    index = _indices(ranges)
    at = dict(zip(index, choice))
    out = sum(float(lay.moved(i, end)[at[i]]) for first, end in ranges for i in range(first, end)
              if lay.moved(i, end).any())
    linear = sum(lay.state[i][c] + in_flight * lay.activation[i][c] for i, c in at.items())
    return float(linear + in_flight * (incoming - out) + lay.extras(index, choice)), out


def _joined(parts: list[StageResult]) -> StageResult:
    """Several ranges' results as one (seconds summed, choices and configs in order)."""
    if len(parts) == 1:
        return parts[0]
    return StageResult(sum(r.seconds for r in parts), 0.0,
                       tuple(c for r in parts for c in r.configs),
                       all(r.optimal for r in parts), tuple(c for r in parts for c in r.choice),
                       tuple(v for r in parts for v in r.variants))


def _indices(ranges: tuple[tuple[int, int], ...]) -> list[int]:
    return [i for first, end in ranges for i in range(first, end)]


def _named(result: StageResult, names: list[str]) -> StageResult:
    """A cached result (maybe solved for an identical range elsewhere) under this range's op names."""
    index = {old: j for j, (old, _) in enumerate(result.configs)}
    return replace(result,
                   configs=tuple((names[j], cfg) for j, (_, cfg) in enumerate(result.configs)),
                   variants=tuple((names[index[op]], z, r) for op, z, r in result.variants))


def _variant_map(lay: Layered, i: int) -> Any:
    variants = getattr(lay.problem, "variants", None)
    return None if variants is None else variants[i]


def _induced(lay: Layered, ranges: tuple[tuple[int, int], ...],
             w: float = 0.0) -> tuple[Problem, list[str]]:
    """The Problem (at tail weight ``w``) of the vertices of ``ranges`` (each
    ``first .. end-1``) and the edges inside each range."""
    p = lay.weighted(w)
    index = _indices(ranges)
    at = {i: j for j, i in enumerate(index)}
    edges, mats = [], []
    for (u, v), m in zip(p.edges, p.edge_costs):
        if any(first <= u < end and first <= v < end for first, end in ranges):
            edges.append((at[u], at[v]))
            mats.append(m)
    names = [p.names[i] for i in index]
    return Problem([p.vertex_costs[i] for i in index], edges, mats, names=names, unit=p.unit,
                   devices=p.devices), names


def _structure(lay: Layered, first: int, end: int) -> tuple:
    """A key equal for two ranges whose time and tail costs, edge matrices and memory terms
    are equal (content digests, memoised per array; layers by their first op)."""
    p, digest = lay.problem, lay.digest
    once = lay.once or [None] * len(p.vertex_costs)
    vertices = tuple((digest(p.vertex_costs[i]), digest(lay.state[i]), digest(lay.activation[i]),
                      None if once[i] is None else digest(once[i]),
                      digest(lay.moved(i, end)) if lay.moved(i, end).any() else None,
                      None if lay.gathered is None else (digest(lay.gathered[i]),
                                                         digest(lay.layer[i])))
                     for i in range(first, end))
    edge_once = lay.edge_once or [None] * len(p.edges)
    edges = tuple((u - first, v - first, digest(m), None if o is None else digest(o))
                  for (u, v), m, o in zip(p.edges, p.edge_costs, edge_once)
                  if first <= u < end and first <= v < end)
    units = lay.units[first:end] if lay.units else []
    layers = tuple(units.index(u) for u in units)
    return vertices, edges, layers

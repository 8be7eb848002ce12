"""The whole graph at one micro-batch size on a ``d``-device sub-mesh, as the stage oracle
solves its stages (:mod:`pase.pipeline.stages`): the Problem, each candidate's bytes, and
under the calibrated model each candidate's once-a-step tail apart from its time.

Under the calibrated model a candidate's seconds are two numbers: per micro-batch
(kernels, critical collectives, ZeRO-3's gathers at the tax) and once a step (its
gradient syncs at the tax and its optimizer step: the tail). The Problem holds the first;
:meth:`Layered.weighted` gives the Problem whose costs are ``time + w * tail``, the
scalarisation a stage is solved at. Under alpha-beta there is no tail (``once`` is None):
its Problem charges each sync ``1 / m`` per micro-batch itself.

Memory per device of a stage, as the plan's one price counts it
(:mod:`pase.cost_models.calibrated_pipeline`): states, ``k`` micro-batches' kept
activations, full recomputation's working set (the largest layer's activations),
ZeRO-3's gathered weights (the largest layer's parameters, three times), and a kept
tensor read only by later stages moved from its producer's stage to its reader's.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pase.deadline import check as check_deadline
from pase.errors import OptionError
from pase.ir import Graph
from pase.problem import Problem
from pase.space import ConfigSpace


@dataclass
class Layered:
    """The whole graph at one micro-batch size on ``d`` devices (module docstring)."""

    graph: Graph
    space: ConfigSpace
    problem: Problem
    state: list[np.ndarray]
    activation: list[np.ndarray]
    microbatches: int = 1
    digests: dict[int, tuple] = field(default_factory=dict)
    slack: list[np.ndarray] | None = None  # calibrated: each candidate's sync slack
    once: list[np.ndarray] | None = None  # calibrated: each candidate's tail (once a step)
    # calibrated: each edge's tail (a tied matrix's sync), None on an edge without one:
    # a zero matrix per edge would copy every layer's shared edge matrix (GBs at scale)
    edge_once: list[np.ndarray | None] | None = None
    bound: Any = None  # the cost model bound to the graph on d devices
    layer: list[np.ndarray] | None = None  # full recomputation: activations rebuilt per op
    gathered: list[np.ndarray] | None = None  # ZeRO-3's parameter bytes per candidate
    units: list[str] = field(default_factory=list)  # each op's layer (its unit)
    recompute_full: bool = False
    _weighted: dict[float, Problem] = field(default_factory=dict)
    _moved: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    _readers: dict[int, dict[int, int]] | None = None
    _least: tuple | None = None  # least(): per op and per edge their cheapest, and the edges

    def digest(self, array: np.ndarray) -> tuple:
        """Shape and a 128-bit digest of ``array``'s bytes, memoised by identity (the
        arrays live as long as this object)."""
        key = id(array)
        if key not in self.digests:
            data = np.ascontiguousarray(array)
            self.digests[key] = (data.shape, hashlib.blake2b(data.tobytes(), digest_size=16).digest())
        return self.digests[key]

    def weighted(self, weight: float) -> Problem:
        """The Problem whose costs are each candidate's time plus ``weight`` times its tail
        (the Problem itself without tails)."""
        if self.once is None or not weight:
            return self.problem
        if weight not in self._weighted:
            p, w = self.problem, float(weight)
            once = self.edge_once or [None] * len(p.edges)
            made: dict[tuple[int, int], np.ndarray] = {}

            def plus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
                """``a + w * b``, once per pair of arrays and read-only: layers that shared
                their terms share the sum, so the dp still sees them as identical."""
                if (id(a), id(b)) not in made:
                    made[id(a), id(b)] = out = a + w * b
                    out.flags.writeable = False
                return made[id(a), id(b)]
            edges = [m if o is None else plus(m, o) for m, o in zip(p.edge_costs, once)]
            self._weighted[weight] = Problem(
                [plus(v, o) for v, o in zip(p.vertex_costs, self.once)], p.edges, edges, p.names,
                p.memory, p.memory_cap, p.unit, p.candidates, p.devices, p.variants)
        return self._weighted[weight]

    def time_and_tail(self, index, choice, ranges) -> tuple[float, float]:
        """The charged seconds per micro-batch and tail of ops ``index`` at ``choice``, with
        the edges inside ``ranges``."""
        at = dict(zip(index, choice))
        p = self.problem
        t = float(sum(p.vertex_costs[i][c] for i, c in at.items()))
        tail = 0.0 if self.once is None else float(sum(self.once[i][c] for i, c in at.items()))
        for e, ((u, v), mat) in enumerate(zip(p.edges, p.edge_costs)):
            if any(a <= u < b and a <= v < b for a, b in ranges):
                t += float(mat[at[u], at[v]])
                if self.edge_once is not None and self.edge_once[e] is not None:
                    tail += float(self.edge_once[e][at[u], at[v]])
        return t, tail

    def least(self, ranges) -> float:
        """A lower bound on the seconds per micro-batch of ops ``ranges`` with the edges
        inside them, by any choice: each op's cheapest candidate and each edge's cheapest
        pair, apart (no solve)."""
        if self._least is None:
            p = self.problem
            self._least = (np.array([v.min() for v in p.vertex_costs]),
                           np.array([u for u, _ in p.edges], dtype=np.int64),
                           np.array([v for _, v in p.edges], dtype=np.int64),
                           np.array([m.min() for m in p.edge_costs]))
        vertex, u, v, edge = self._least
        total = 0.0
        for a, b in ranges:
            inside = (u >= a) & (u < b) & (v >= a) & (v < b)
            total += float(vertex[a:b].sum()) + float(edge[inside].sum())
        return total

    def moved(self, i: int, end: int) -> np.ndarray:
        """Per candidate of op ``i``, the bytes of its kept outputs that no op before ``end``
        reads (they live on the stage of their reader, not of op ``i``)."""
        if self.bound is None:
            return np.zeros(len(self.state[i]))
        key = (i, end)
        if key not in self._moved:
            self._moved[key] = _moved(self, i, end)
        return self._moved[key]

    def extras(self, index, choice) -> float:
        """Full recomputation's working set and ZeRO-3's gathered weights of ops ``index``
        at ``choice`` (each the largest layer's; :func:`pase.cost_models.calibrated_plan.
        tally`)."""
        if self.gathered is None:
            return 0.0
        work: dict[str, float] = {}
        params: dict[str, float] = {}
        for i, c in zip(index, choice):
            unit = self.units[i]
            params[unit] = params.get(unit, 0.0) + float(self.gathered[i][c])
            if self.recompute_full and unit not in ("pre", "post"):
                work[unit] = work.get(unit, 0.0) + float(self.layer[i][c])
        return max(work.values(), default=0.0) + 3.0 * max(params.values(), default=0.0)


def build(graph: Graph, space: ConfigSpace, model: Any, microbatches: int) -> Layered:
    """The Layered of ``graph`` on ``space``'s devices priced by ``model`` (a stage model of
    :func:`pase.pipeline.stage_model.stage_cost_model`: calibrated with its tail apart, or
    alpha-beta)."""
    devices = space.devices
    apart = hasattr(model, "once_costs")
    if apart:
        model.once_share = 0.0
    problem = model.problem(graph, space)
    bound = model.bind(graph, devices) if hasattr(model, "bind") else model.for_devices(devices)
    state, activation, once, layer, gathered = _terms(bound, graph, space, problem, apart)
    lay = Layered(graph, space, problem, state, activation, microbatches)
    if apart:
        lay.once, lay.layer, lay.gathered = once, layer, gathered
        lay.bound = bound
        lay.units = [bound.context(op).unit for op in graph.ops]
        lay.recompute_full = bound.recompute_mode == "full"
        from pase.costing import tied_connections

        tied = {(u, v) for u, _, v, _ in tied_connections(graph)}
        tied |= {(v, u) for u, v in tied}
        if tied:  # a tied matrix's sync is charged on its edge, once a step: its matrix
            # priced again with the sync (that edge alone: a whole second Problem was GBs)
            model.once_share = 1.0
            synced = model.bind(graph, devices)
            model.once_share = 0.0
            lay.edge_once = [synced.edge_matrix(graph, space, edge, problem.variants) - m
                             if edge in tied else None
                             for edge, m in zip(problem.edges, problem.edge_costs)]
    return lay


def _terms(model: Any, graph: Graph, space: ConfigSpace, problem: Problem, apart: bool):
    """Per vertex and candidate: state bytes, kept activation bytes per micro-batch, and
    (``apart``) the tail seconds, the activations full recomputation rebuilds and ZeRO-3's
    parameter bytes (candidates are configs, or configs x variants:
    :mod:`pase.costing.variants`)."""
    from pase.work.variants import apply_variant

    cache: dict[Any, tuple] = {}
    out: tuple[list, ...] = ([], [], [], [], [])
    # what an op keeps per micro-batch: the model's own rule where it has one (the
    # calibrated model: a recomputed op keeps its layer's outputs), else the work's figure
    kept = getattr(model, "kept_activation_bytes", lambda w: w.activation_bytes)
    maps = getattr(problem, "variants", None)
    for i, op in enumerate(graph.ops):
        check_deadline(f"pricing the states of op {op.name!r} ({i + 1} of {len(graph.ops)})")
        vm = None if maps is None else maps[i]
        key = (model.vertex_key(op, space.configs[i]), None if vm is None else id(vm))
        if key not in cache:
            work = model.work(op, space.configs[i])
            groups = [(0, False, slice(None), work)] if vm is None else [
                (z, r, (vm.zero == z) & (vm.recompute == r),
                 apply_variant(work, int(z), bool(r)))
                for z, r in sorted(set(zip(vm.zero.tolist(), vm.recompute.tolist())))]
            size = len(space.configs[i]) if vm is None else len(vm.config)
            rows = [np.zeros(size) for _ in range(5)]
            for z, _, mask, w in groups:
                pick = slice(None) if vm is None else vm.config[mask]
                rows[0][mask] = np.asarray(w.state_bytes, dtype=np.float64)[pick]
                rows[1][mask] = np.asarray(kept(w), dtype=np.float64)[pick]
                if apart:
                    rows[2][mask] = np.asarray(model.once_costs(w), dtype=np.float64)[pick]
                    rows[3][mask] = np.asarray(work.activation_bytes, dtype=np.float64)[pick]
                    if int(z) == 3:  # as the one price's tally reads it: the candidate's
                        rows[4][mask] = np.asarray(work.parameter_bytes, dtype=np.float64)[pick]
            cache[key] = tuple(rows)
        rows = cache[key]
        if rows[0].shape != problem.vertex_costs[i].shape:
            raise OptionError(f"op {op.name!r}: the cost model lists {problem.vertex_costs[i].size} "
                              f"candidates but its work {rows[0].size}; pipeline stages need one "
                              f"candidate per config")
        for acc, row in zip(out, rows):
            acc.append(row)
    return out


def _moved(lay: Layered, i: int, end: int) -> np.ndarray:
    """:meth:`Layered.moved`: per candidate, :func:`kept_output_bytes` of the outputs whose
    first reader is at or past ``end``."""
    graph, p = lay.graph, lay.problem
    op = graph.ops[i]
    if lay._readers is None:  # per op, per output: its first reader
        lay._readers = {}
        for j, other in enumerate(graph.ops):
            for port in other.inputs:
                if port.source is not None:
                    first = lay._readers.setdefault(graph.index(port.source[0]), {})
                    idx = int(port.source[1])
                    first[idx] = min(first.get(idx, j), j)
    later = tuple(idx for idx, j in lay._readers.get(i, {}).items() if j >= end)
    out = np.zeros(len(lay.state[i]))
    for c in range(len(out) if later else 0):
        out[c] = kept_output_bytes(lay.bound, p, i, op, c, later)
    return out


def recomputes_at(bound: Any, problem: Problem, i: int, op: Any, c: int) -> bool:
    """Whether op ``i`` at candidate ``c`` runs its forward again in the backward pass: by
    the candidate's variant, else by the model's fixed variant (full or selective)."""
    if problem.variants is not None and problem.variants[i].variant(c)[1]:
        return True
    return bool((getattr(bound, "fixed_variants", None) or {}).get(op.name, (0, False))[1])


def kept_output_bytes(bound: Any, problem: Problem, i: int, op: Any, c: int,
                      outputs: tuple[int, ...]) -> float:
    """Bytes op ``i`` keeps for the backward pass at candidate ``c`` of its ``outputs``: its
    layer's outputs where the candidate (or the model's fixed variant) recomputes it, else
    its kept outputs (the calibrated model's rule; the one price's ``_kept_across`` and the
    search's :meth:`Layered.moved`)."""
    ctx = bound.context(op)
    again = recomputes_at(bound, problem, i, op, c)
    keep = ctx.block_outputs if again else ctx.kept_outputs
    idx = tuple(k for k in outputs if k in keep)
    if not idx:
        return 0.0
    configs = np.asarray(problem.candidates[i].configs[c:c + 1])
    return float(bound._kept_bytes(op, configs, idx, (), () if again else ctx.linear_kept)[0])

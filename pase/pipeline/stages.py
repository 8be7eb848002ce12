"""One pipeline stage: a contiguous range of ops on a sub-mesh, solved by the per-layer dp.

A :class:`StageOracle` answers "what does ops ``a .. b-1`` cost per micro-batch on
``d`` devices at micro-batch size ``batch / m``, with ``k`` micro-batches'
activations held?". It builds the whole graph's alpha-beta Problem once per
``(d, m)`` (at the micro-batch size, on a ``d``-device cluster of the same kind),
and solves the Problem induced by the range's vertices (their vertex costs and
the edges between them) with the exact dp. Edges leaving the range are the
pipeline's point-to-point transfers, priced by :mod:`pase.pipeline.cost`.

Inside a stage, the per-micro-batch cost is the alpha-beta cost of the ops'
forward and backward compute and in-layer collectives, with one change: a
parameter-gradient sync (phase ``gradient``) happens once per step, after the
micro-batches' gradients are accumulated, so each micro-batch is charged
``1/m`` of it (:class:`GradientShare`). Memory is the ops' parameter and
optimizer state (once) plus ``k`` copies of their kept activations.

Results are cached by the range's structure: the Problem shares one cost array
between identical ops and one matrix between identical edges, so two ranges
whose vertices and edges use the same arrays (a stage of identical blocks at
another place in the model) are solved once per ``(d, m, k)``.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import numpy as np

from pase import api
from pase.costing import CostModel
from pase.errors import OptionError
from pase.ir import Graph
from pase.problem import Problem, Status
from pase.space import ConfigSpace
from pase.work.ops import OpWork

# A stage solve slower than this is reported to the progress callback.
SLOW_SOLVE_SECONDS = 5.0


class GradientShare:
    """Mixed into the alpha-beta model for one micro-batch of a pipeline stage: a
    parameter-gradient sync is charged ``1 / microbatches`` per micro-batch (it runs
    once per step). The model class comes from the registry (:func:`stage_cost_model`)."""

    microbatches: int = 1

    def work_costs(self, work: OpWork) -> np.ndarray:
        """Seconds per config for one micro-batch (ZeRO's gradient collectives included)."""
        if self.microbatches > 1:
            share = 1.0 / self.microbatches
            work = replace(work, collectives=tuple(
                replace(c, rounds=c.rounds * share) if c.phase == "gradient" else c
                for c in work.collectives))
        return super().work_costs(work)  # the registered alpha-beta class, after this mixin


@functools.lru_cache(maxsize=None)
def _stage_class(base: type) -> type:
    """``base`` (the registered alpha-beta class) with :class:`GradientShare` in front."""
    return type("StageCostModel", (GradientShare, base), {"__doc__": GradientShare.__doc__})


def stage_cost_model(options: Mapping[str, Any], microbatches: int,
                     name: str = "alpha-beta") -> CostModel:
    """The registry's model ``name`` from cost ``options`` (validated by its signature),
    pricing one of ``microbatches`` micro-batches: the calibrated model charges its
    once-per-step terms (gradient syncs, the optimizer step) ``1 / microbatches`` per
    micro-batch itself; alpha-beta gets :class:`GradientShare`."""
    if name == "calibrated":
        model = api.make_cost_model("calibrated", **dict(options))
        model.once_share = 1.0 / int(microbatches)
        return model
    model = api.make_cost_model(name, **dict(options))
    cls = _stage_class(type(model))
    stage = cls.__new__(cls)
    stage.__dict__.update(model.__dict__)
    stage.microbatches = int(microbatches)
    return stage


@dataclass
class Layered:
    """The whole graph at one micro-batch size on ``d`` devices: its Problem (costs per
    micro-batch) and each vertex's state and activation bytes per device."""

    graph: Graph
    space: ConfigSpace
    problem: Problem
    state: list[np.ndarray]
    activation: list[np.ndarray]
    microbatches: int = 1
    digests: dict[int, tuple] = field(default_factory=dict)
    slack: list[np.ndarray] | None = None  # calibrated: each candidate's sync slack

    def digest(self, array: np.ndarray) -> tuple:
        """Shape and a 128-bit digest of ``array``'s bytes, memoised by identity (the
        arrays live as long as this object)."""
        key = id(array)
        if key not in self.digests:
            data = np.ascontiguousarray(array)
            self.digests[key] = (data.shape, hashlib.blake2b(data.tobytes(), digest_size=16).digest())
        return self.digests[key]


@dataclass(frozen=True)
class StageResult:
    """A stage's best per-layer plan: seconds per micro-batch (gradient syncs amortised),
    bytes per device, each op's split, and whether the dp proved it optimal."""

    seconds: float
    memory: float
    configs: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]
    optimal: bool
    choice: tuple[int, ...] = ()
    variants: tuple[tuple[str, int, bool], ...] = ()  # (op, zero, recompute), non-default only

    def memory_with(self, lay: "Layered", first: int, in_flight: float) -> float:
        """Bytes per device with ``in_flight`` micro-batches' activations held."""
        return self.memory_at(lay, range(first, first + len(self.choice)), in_flight)

    def memory_at(self, lay: "Layered", index, in_flight: float) -> float:
        """The same, for the ops at positions ``index`` (one per choice)."""
        return float(sum(lay.state[i][c] + in_flight * lay.activation[i][c]
                         for i, c in zip(index, self.choice)))


class StageOracle:
    """Solves stages of ``model`` (cached); see the module docstring.

    Args:
        load: ``load(microbatch_size) -> Graph``.
        cost_options: alpha-beta options (cluster, efficiency, bytes_per_element, ...).
        memory_cap: bytes per device, or None for no cap.
        space_options: ConfigSpace keywords (cutoff, powers_of_two).
        solve: ``solve(problem) -> Solution`` for one stage (default: the dp).
    """

    def __init__(self, load: Callable[[int], Graph], batch: int, cost_options: Mapping[str, Any],
                 memory_cap: float | None, space_options: Mapping[str, Any] | None = None,
                 solve: Callable[[Problem], Any] | None = None,
                 progress: Callable[[str], None] | None = None, cost_model: str = "alpha-beta"):
        self.load, self.batch = load, int(batch)
        self.cost_model = cost_model
        self.progress = progress
        self.cost_options = dict(cost_options)
        self.memory_cap = memory_cap
        self.space_options = dict(space_options or {})
        self.solve = solve or (lambda problem: api.run_solver("auto", problem))
        self._layered: dict[tuple[int, int], Layered] = {}
        self._stages: dict[tuple, StageResult | None] = {}
        self._graphs: dict[int, Graph] = {}
        self._keys: dict[tuple[int, int, int, int], tuple] = {}
        self.solves = 0
        self.all_optimal = True  # False once a stage's solver could not prove its optimum
        self.lift = 0.0  # x of the lifted search (:meth:`lifted`): 0 charges syncs at the tax
        self._lifted: dict[tuple[int, int], Layered] = {}

    def lifted(self, x: float) -> "StageOracle":
        """This oracle with each candidate's cost raised by ``x`` times its sync slack per
        micro-batch (``x`` in [0, 1]: still at most every stage's own price, so the search's
        optimum over it is a lower bound too; :mod:`pase.pipeline.price`). It shares the
        built Problems and graphs, not the solved stages."""
        other = copy.copy(self)
        other.lift = float(x)
        other._stages, other._keys, other._lifted = {}, {}, {}
        return other

    def graph(self, microbatches: int) -> Graph:
        size = self.microbatch_size(microbatches)
        if size not in self._graphs:
            self._graphs[size] = self.load(size)
        return self._graphs[size]

    def microbatch_size(self, microbatches: int) -> int:
        if self.batch % microbatches:
            raise OptionError(f"microbatches {microbatches} does not divide the batch "
                              f"{self.batch}; allowed: divisors of the batch")
        return self.batch // microbatches

    def layered(self, devices: int, microbatches: int) -> Layered:
        key = (devices, microbatches)
        if key not in self._layered:
            graph = self.graph(microbatches)
            space = ConfigSpace(graph, devices, **self.space_options)
            model = stage_cost_model(self.cost_options, microbatches, self.cost_model)
            problem = model.problem(graph, space)
            bound = model.bind(graph, devices) if hasattr(model, "bind") else \
                model.for_devices(devices)
            state, activation = _memory_terms(bound, graph, space, problem)
            self._layered[key] = Layered(graph, space, problem, state, activation, microbatches)
        return self._layered[key]

    @property
    def slack_applies(self) -> bool:
        """Whether the cost model charges syncs at a tax (calibrated) and has a slack."""
        return hasattr(stage_cost_model(self.cost_options, 1, self.cost_model), "sync_slack")

    def searched(self, devices: int, microbatches: int) -> Layered:
        """The Layered the stages are solved on: :meth:`layered`, lifted by :attr:`lift`."""
        lay = self.layered(devices, microbatches)
        if not self.lift:
            return lay
        key = (devices, microbatches)
        if key not in self._lifted:
            slack = self.slack(devices, microbatches)
            p, x = lay.problem, self.lift / microbatches  # the slack is once a step
            problem = Problem([v + x * d for v, d in zip(p.vertex_costs, slack)], p.edges,
                              p.edge_costs, p.names, p.memory, p.memory_cap, p.unit, p.candidates,
                              p.devices, p.variants)
            self._lifted[key] = replace(lay, problem=problem, digests={})
        return self._lifted[key]

    def slack(self, devices: int, microbatches: int) -> list[np.ndarray] | None:
        """Each candidate's sync slack (the calibrated model's ``sync_slack``), or None for
        a model that charges syncs in full."""
        model = stage_cost_model(self.cost_options, microbatches, self.cost_model)
        if not hasattr(model, "sync_slack"):
            return None
        lay = self.layered(devices, microbatches)
        if lay.slack is None:
            lay.slack = model.sync_slack(lay.graph, lay.problem)
        return lay.slack

    def stage(self, first: int, end: int, devices: int, microbatches: int,
              in_flight: float) -> StageResult | None:
        """Ops ``first .. end-1`` on ``devices`` devices; None when no plan fits the cap."""
        return self.group(((first, end),), devices, microbatches, in_flight)

    def group(self, ranges: tuple[tuple[int, int], ...], devices: int, microbatches: int,
              in_flight: float) -> StageResult | None:
        """The op ranges ``ranges`` (an interleaved group's chunks, or one stage) on the same
        ``devices`` devices, each range's ops with the edges between them (a tensor from one
        range to another is a pipeline send): seconds summed over the ranges, memory the
        ranges' state plus ``in_flight`` micro-batches' activations of them all, one
        memory-capped solve of them together when their own optima do not fit."""
        lay = self.searched(devices, microbatches)
        parts = []
        for first, end in ranges:
            where = (first, end, devices, microbatches)
            if where not in self._keys:
                self._keys[where] = (_structure(lay, first, end), devices, microbatches)
            key = self._keys[where]
            free = self._stages.get(key + (0,), False)
            if free is False:
                free = self._solve(lay, ((first, end),), None)
                self._stages[key + (0,)] = free
            if free is None:
                return None
            parts.append(_named(free, [op.name for op in lay.graph.ops[first:end]]))
        result = _joined(parts)
        index = _indices(ranges)
        memory = result.memory_at(lay, index, in_flight)
        if self.memory_cap is None or memory <= self.memory_cap:
            return replace(result, memory=memory)
        key = (tuple(self._keys[(a, b, devices, microbatches)] for a, b in ranges), in_flight)
        capped = self._stages.get(key, False)
        if capped is False:
            capped = self._solve(lay, ranges, in_flight)
            self._stages[key] = capped
        names = [lay.graph.ops[i].name for i in index]
        return None if capped is None else _named(capped, names)

    def _solve(self, lay: Layered, ranges: tuple[tuple[int, int], ...],
               in_flight: float | None) -> StageResult | None:
        sub, names = _induced(lay, ranges)
        index = _indices(ranges)
        if in_flight is not None:
            memory = [lay.state[i] + in_flight * lay.activation[i] for i in index]
            sub = Problem(sub.vertex_costs, sub.edges, sub.edge_costs, names=names, memory=memory,
                          memory_cap=self.memory_cap, unit=sub.unit, devices=sub.devices)
        self.solves += 1
        start = time.perf_counter()
        solution = self.solve(sub)
        took = time.perf_counter() - start
        if self.progress and took > SLOW_SOLVE_SECONDS:
            self.progress(f"  stage {names[0]} .. {names[-1]} on {lay.space.devices} devices, "
                          f"m={lay.microbatches}: "
                          f"{'capped at ' + str(in_flight) + ' in flight' if in_flight else 'free'}"
                          f", {took:.0f} s")
        if solution.status is not Status.OPTIMAL and solution.status is not Status.INFEASIBLE:
            self.all_optimal = False
        if solution.choice is None or not math.isfinite(solution.cost):
            return None
        choice = tuple(int(c) for c in solution.choice)
        configs, variants = [], []
        for i, c in zip(index, choice):
            name, vm = lay.graph.ops[i].name, _variant_map(lay, i)
            k = c if vm is None else int(vm.config[c])
            configs.append((name, tuple(lay.space.config(i, k).items())))
            if vm is not None and (vm.zero[c] or vm.recompute[c]):
                variants.append((name, int(vm.zero[c]), bool(vm.recompute[c])))
        result = StageResult(float(solution.cost), 0.0, tuple(configs),
                             solution.status is Status.OPTIMAL, choice, tuple(variants))
        return replace(result, memory=result.memory_at(lay, index, in_flight or 1))


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


def _memory_terms(model: Any, graph: Graph, space: ConfigSpace,
                  problem: Problem) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per vertex and candidate, state bytes and activation bytes per device (candidates
    are configs, or configs x variants: :mod:`pase.costing.variants`)."""
    from pase.work.variants import apply_variant

    cache: dict[Any, tuple[np.ndarray, np.ndarray]] = {}
    state, activation = [], []
    # what an op keeps per micro-batch: the model's own rule where it has one (the
    # calibrated model: a recomputed op keeps its layer's outputs), else the work's figure
    kept = getattr(model, "kept_activation_bytes", lambda w: w.activation_bytes)
    maps = getattr(problem, "variants", None)
    for i, op in enumerate(graph.ops):
        vm = None if maps is None else maps[i]
        key = (model.vertex_key(op, space.configs[i]), None if vm is None else id(vm))
        if key not in cache:
            work = model.work(op, space.configs[i])
            if vm is None:
                cache[key] = (np.asarray(work.state_bytes, dtype=np.float64),
                              np.asarray(kept(work), dtype=np.float64))
            else:
                st, act = np.zeros(len(vm.config)), np.zeros(len(vm.config))
                for z, r in sorted(set(zip(vm.zero.tolist(), vm.recompute.tolist()))):
                    mask = (vm.zero == z) & (vm.recompute == r)
                    w = apply_variant(work, int(z), bool(r))
                    st[mask] = np.asarray(w.state_bytes, dtype=np.float64)[vm.config[mask]]
                    act[mask] = np.asarray(kept(w), dtype=np.float64)[vm.config[mask]]
                cache[key] = (st, act)
        s, a = cache[key]
        if s.shape != problem.vertex_costs[i].shape:
            raise OptionError(f"op {op.name!r}: the cost model lists {problem.vertex_costs[i].size} "
                              f"candidates but its work {s.size}; pipeline stages need one "
                              f"candidate per config")
        state.append(s)
        activation.append(a)
    return state, activation


def _induced(lay: Layered, ranges: tuple[tuple[int, int], ...]) -> tuple[Problem, list[str]]:
    """The Problem of the vertices of ``ranges`` (each ``first .. end-1``) and the edges
    inside each range."""
    p = lay.problem
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
    """A key equal for two ranges whose vertex costs, edge matrices and memory terms are
    equal (content digests, memoised per array)."""
    p, digest = lay.problem, lay.digest
    vertices = tuple((digest(p.vertex_costs[i]), digest(lay.state[i]), digest(lay.activation[i]))
                     for i in range(first, end))
    edges = tuple((u - first, v - first, digest(m)) for (u, v), m in zip(p.edges, p.edge_costs)
                  if first <= u < end and first <= v < end)
    return vertices, edges

"""One pipeline stage: a contiguous range of ops on a sub-mesh, solved by the per-layer dp.

A :class:`StageOracle` answers "what does ops ``a .. b-1`` cost per micro-batch on
``d`` devices at micro-batch size ``batch / m``, with ``k`` micro-batches'
activations held?". It builds the whole graph's Problem once per ``(d, m)`` (at the
micro-batch size, on a ``d``-device cluster of the same kind: :mod:`pase.pipeline.layered`)
and solves the Problem induced by the range's vertices (their vertex costs and the edges
between them) with the exact dp.

Under the calibrated model a stage has two prices: its time per micro-batch (kernels,
in-layer collectives, its own re-layouts, and the sends it receives from the stage
before, both ways: :mod:`pase.pipeline.sends`) and its tail, what it runs once a step
after its last backward (its gradient syncs, the optimizer step). The plan's step takes
the schedule over the times and the largest tail once, so a stage offers the search a
few plans: the dp's optima of ``time + w * tail`` for ``w`` in :data:`WEIGHTS` (each
lowest in time for its tail among the plans the weight sees), and the corners of that
lower hull, which bound every plan of the stage from below (:meth:`StageOracle.corners`).
Under alpha-beta a sync is charged ``1/m`` per micro-batch inside the stage
(:class:`pase.pipeline.stage_model.GradientShare`) and the sends are the search's links.

Memory is the one price's count (:mod:`pase.pipeline.layered`): states, ``k`` copies of the
kept activations, full recomputation's working set, ZeRO-3's gathered weights, a kept
tensor moved to the stage that reads it. A plan that does not fit is re-solved by the
memory-capped dp with its own ``k``.

Results are cached by the range's structure: the Problem shares one cost array
between identical ops and one matrix between identical edges, so two ranges
whose vertices and edges use the same arrays (a stage of identical blocks at
another place in the model) are solved once per ``(d, m, k)``.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import replace
from typing import Any, Callable, Mapping

import numpy as np

from pase import api
from pase.cluster import get_cluster
from pase.deadline import Deadline, active
from pase.errors import OptionError, TimeLimitError, TooLargeError
from pase.ir import Graph
from pase.pipeline.layered import Layered, build
from pase.pipeline.sends import stage_sends
from pase.pipeline.stage_model import stage_cost_model
from pase.pipeline.stage_result import (  # noqa: F401 (StageResult, stage_memory: re-exported)
    StageResult,
    _indices,
    _induced,
    _joined,
    _named,
    _structure,
    _variant_map,
    stage_memory,
)
from pase.problem import Problem, Status
from pase.space import ConfigSpace

# A stage solve or Problem build slower than this is reported to the progress callback.
SLOW_SOLVE_SECONDS = 5.0
# Re-solves of a stage whose capped plan is over the cap by its working set or gathers.
REFITS = 4


class StageOracle:
    """Solves stages of ``model`` (cached); see the module docstring.

    Args:
        load: ``load(microbatch_size) -> Graph``.
        cost_options: the cost model's options (cluster, ...).
        memory_cap: bytes per device, or None for no cap.
        space_options: ConfigSpace keywords (cutoff, powers_of_two).
        solve: ``solve(problem) -> Solution`` for one stage (default: the dp).
        devices: the plan's devices (the cluster the sends run on).
    """

    def __init__(self, load: Callable[[int], Graph], batch: int, cost_options: Mapping[str, Any],
                 memory_cap: float | None, space_options: Mapping[str, Any] | None = None,
                 solve: Callable[[Problem], Any] | None = None,
                 progress: Callable[[str], None] | None = None, cost_model: str = "alpha-beta",
                 devices: int | None = None):
        self.load, self.batch = load, int(batch)
        self.cost_model = cost_model
        self.progress = progress
        self.cost_options = dict(cost_options)
        self.memory_cap = memory_cap
        self.space_options = dict(space_options or {})
        self.solve = solve or (lambda problem: api.run_solver("auto", problem))
        self.devices = devices
        self._layered: dict[tuple[int, int], Layered] = {}
        self._stages: dict[tuple, Any] = {}
        self._graphs: dict[int, Graph] = {}
        self._keys: dict[tuple, tuple] = {}
        self.solves = 0
        # False once a stage's solver could not prove its optimum, or found it too large
        self.all_optimal = True
        self.lift = 0.0  # x of the lifted search (:meth:`lifted`): 0 charges syncs at the tax
        self._lifted: dict[tuple[int, int], Layered] = {}
        # the search's time limit (:meth:`check`); None: none
        self.deadline: Deadline | None = None

    def check(self, doing: str) -> None:
        """Raise :class:`~pase.errors.TimeLimitError` once past :attr:`deadline`: called
        between units of work (before a stage's solve, a Problem's build, a step of the
        search); the dp checks it between its steps too, and a solve it cuts is not
        cached, so what is cached is always a finished answer."""
        if self.deadline is not None:
            self.deadline.check(doing)

    @property
    def tails(self) -> bool:
        """Whether stages have a tail of their own (the calibrated model) and fold their sends."""
        return self.cost_model == "calibrated"

    def weights(self, microbatches: int) -> tuple[float, ...]:
        """The weights of a stage's tail its plans are solved at (ascending)."""
        if not self.tails:
            return (0.0,)
        return tuple(sorted({0.0, 1.0 / microbatches, 1.0}))

    def lifted(self, x: float) -> "StageOracle":
        """This oracle with each candidate's tail raised by ``x`` times its sync slack
        (``x`` in [0, 1]: still at most every stage's own tail, so the search's bound over
        it is a bound too; :mod:`pase.pipeline.price`). It shares the built Problems and
        graphs, not the solved stages."""
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
            self.check(f"building the stages' Problem on {devices} devices at m={microbatches}")
            with active(self.deadline):  # the cost build checks it between ops
                graph = self.graph(microbatches)
                model = stage_cost_model(self.cost_options, microbatches, self.cost_model,
                                         apart=self.tails)
                space = ConfigSpace(graph, devices, **self.space_options,
                                    padded_roles=model.padded_roles)
                start = time.perf_counter()
                self._layered[key] = build(graph, space, model, microbatches)
                took = time.perf_counter() - start
            if self.progress and took > SLOW_SOLVE_SECONDS:
                self.progress(f"  built the stages' Problem on {devices} devices at "
                              f"m={microbatches}: {len(graph.ops)} ops, {took:.0f} s")
        return self._layered[key]

    @property
    def slack_applies(self) -> bool:
        """Whether the cost model charges syncs at a tax (calibrated) and has a slack."""
        return hasattr(stage_cost_model(self.cost_options, 1, self.cost_model), "sync_slack")

    def searched(self, devices: int, microbatches: int) -> Layered:
        """The Layered the stages are solved on: :meth:`layered`, its tails lifted by
        :attr:`lift` times the sync slack."""
        lay = self.layered(devices, microbatches)
        if not self.lift or lay.once is None:
            return lay
        key = (devices, microbatches)
        if key not in self._lifted:
            slack = self.slack(devices, microbatches)
            once = [o + self.lift * d for o, d in zip(lay.once, slack)]
            self._lifted[key] = replace(lay, once=once, digests={}, _weighted={})
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

    def sends(self, ranges, devices: int, microbatches: int) -> float:
        """Seconds per micro-batch of the sends into the stage, both ways (0 under alpha-beta,
        whose search prices them as links)."""
        if not self.tails:
            return 0.0
        lay = self.layered(devices, microbatches)
        cluster = self.cost_options.get("cluster", "dgx-a100")
        whole = get_cluster(cluster, self.devices or devices)
        return stage_sends(lay.graph, ranges, devices, whole, lay.bound.bytes_per_element,
                           lay.bound.hw)

    def stage(self, first: int, end: int, devices: int, microbatches: int,
              in_flight: float) -> StageResult | None:
        """Ops ``first .. end-1`` on ``devices`` devices at the first weight; None when no plan
        fits the cap."""
        return self.group(((first, end),), devices, microbatches, in_flight)

    def group(self, ranges: tuple[tuple[int, int], ...], devices: int, microbatches: int,
              in_flight: float, incoming: float = 0.0) -> StageResult | None:
        """:meth:`options`' first plan (the lowest in time)."""
        found = self.options(ranges, devices, microbatches, in_flight, incoming)
        return None if not found else found[0]

    def options(self, ranges: tuple[tuple[int, int], ...], devices: int, microbatches: int,
                in_flight: float, incoming: float = 0.0) -> list[StageResult]:
        """The op ``ranges`` (an interleaved group's chunks, or one stage) on the same
        ``devices`` devices, each range's ops with the edges between them (a tensor from one
        range to another is a pipeline send): the plans of :data:`WEIGHTS` that fit the cap
        with ``incoming`` bytes per micro-batch held for the stage before, lowest time
        first, distinct; [] when none fits."""
        out: list[StageResult] = []
        for w in self._weights(ranges, devices, microbatches):
            r = self._fitted(ranges, devices, microbatches, in_flight, incoming, w)
            if r is not None and all(r.choice != o.choice for o in out):
                out.append(r)
        return sorted(out, key=lambda r: (r.seconds, r.tail))

    def least_step(self, ranges: tuple[tuple[int, int], ...], devices: int,
                   microbatches: int, quick: bool = False) -> float | None:
        """A lower bound of ``m t + tail`` over the stage's plans, memory not counted (``t``
        its seconds per micro-batch with its sends, ``m`` the micro-batches): ``m`` times
        its optimum at tail weight ``1 / m``, one of the weights its plans are solved at;
        None: it has no plan. Under 1F1B and GPipe a plan's step is at least this for
        each of its stages (the sum of the stage times and ``m - 1`` periods are each at
        least the stage's time, the largest tail at least its tail). ``quick``: ``m`` times
        a bound of ``t`` with no solve (:meth:`Layered.least`)."""
        m = microbatches
        if quick:
            return m * (self.layered(devices, m).least(ranges) + self.sends(ranges, devices, m))
        free = self._free(ranges, devices, m, 1.0 / m if self.tails else 0.0)
        return None if free is None else m * free.seconds + free.tail

    def corners(self, ranges: tuple[tuple[int, int], ...], devices: int, microbatches: int,
                in_flight: float, last: bool = True, alone: bool = False
                ) -> list[tuple[float, float]] | None:
        """Points ``(time, tail)`` one of which every plan of the stage is at least, in both,
        or, below the last weight's tail, no better in a 1F1B or GPipe step: ``(t_k,
        tail_k+1)`` for the weights' optima ``k`` in order and ``(t_K, tail_K)``
        (``last`` false: ``(t_K, 0)``, for a schedule whose step may not grow with a
        stage's time). Solved with the linear part of the memory count alone and nothing
        held for the stage before (both only add bytes); ``alone``: the stage is the plan's
        only one (1F1B or GPipe). None: no plan fits."""
        if alone:  # the one stage: its step is m t + tail, so m L(1/m) bounds it
            r = self._relaxed(ranges, devices, microbatches, in_flight, 1.0 / microbatches)
            return None if r is None else [(r.seconds, r.tail)]
        pts = []
        for w in self._weights(ranges, devices, microbatches):
            r = self._relaxed(ranges, devices, microbatches, in_flight, w)
            if r is None:
                return None
            pts.append((r.seconds, r.tail))
        out = [(pts[k][0], pts[k + 1][1]) for k in range(len(pts) - 1)]
        return out + [pts[-1] if last else (pts[-1][0], 0.0)]

    # -- solving ------------------------------------------------------------------------
    def _weights(self, ranges, devices: int, microbatches: int) -> tuple[float, ...]:
        """The weights worth solving: all of :meth:`weights`, unless the lowest and the highest
        give one plan (then it is every weight's between)."""
        ws = self.weights(microbatches)
        if len(ws) > 2:
            lo = self._free(ranges, devices, microbatches, ws[0])
            hi = self._free(ranges, devices, microbatches, ws[-1])
            if lo is not None and hi is not None and lo.choice == hi.choice:
                return (ws[0],)
        return ws

    def _key(self, lay: Layered, first: int, end: int, devices: int, microbatches: int) -> tuple:
        where = (first, end, devices, microbatches)
        if where not in self._keys:
            self._keys[where] = (_structure(lay, first, end), devices, microbatches)
        return self._keys[where]

    def _free(self, ranges, devices: int, microbatches: int, w: float) -> StageResult | None:
        """Each range's own optimum at weight ``w``, joined (memory not counted)."""
        lay = self.searched(devices, microbatches)
        parts = []
        for first, end in ranges:
            key = self._key(lay, first, end, devices, microbatches) + ("free", w)
            if key not in self._stages:
                self._stages[key] = self._solve(lay, ((first, end),), w, None, 0.0)
            free = self._stages[key]
            if free is None:
                return None
            parts.append(_named(free, [op.name for op in lay.graph.ops[first:end]]))
        result = _joined(parts)
        t, tail = lay.time_and_tail(_indices(ranges), result.choice, ranges)
        return replace(result, seconds=t + self.sends(ranges, devices, microbatches), tail=tail)

    def _capped(self, ranges, devices: int, microbatches: int, in_flight: float, w: float,
                room: float) -> StageResult | None:
        """The memory-capped optimum at weight ``w`` whose linear memory count fits ``room``."""
        lay = self.searched(devices, microbatches)
        key = (tuple(self._key(lay, a, b, devices, microbatches) for a, b in ranges), in_flight,
               w, room)
        if key not in self._stages:
            self._stages[key] = self._solve(lay, ranges, w, in_flight, room)
        capped = self._stages[key]
        if capped is None:
            return None
        capped = _named(capped, [lay.graph.ops[i].name for i in _indices(ranges)])
        t, tail = lay.time_and_tail(_indices(ranges), capped.choice, ranges)
        return replace(capped, seconds=t + self.sends(ranges, devices, microbatches), tail=tail)

    def _relaxed(self, ranges, devices: int, microbatches: int, in_flight: float,
                 w: float) -> StageResult | None:
        """The optimum at weight ``w`` under the linear part of the memory count."""
        lay = self.searched(devices, microbatches)
        free = self._free(ranges, devices, microbatches, w)
        if free is None or self.memory_cap is None:
            return free
        linear = stage_memory(lay, ranges, free.choice, in_flight)[0] - \
            lay.extras(_indices(ranges), free.choice)
        if linear <= self.memory_cap:
            return free
        return self._capped(ranges, devices, microbatches, in_flight, w, self.memory_cap)

    def _fitted(self, ranges, devices: int, microbatches: int, in_flight: float, incoming: float,
                w: float) -> StageResult | None:
        """The optimum at weight ``w`` that fits the cap by the whole count (re-solved with
        less room while its working set or gathered weights put it over)."""
        lay = self.searched(devices, microbatches)
        cap = self.memory_cap
        found = self._free(ranges, devices, microbatches, w)
        room = None if cap is None else cap - in_flight * incoming
        capped = False  # the free plan's overshoot says nothing of a capped plan's
        for _ in range(REFITS + 1):
            if found is None:
                return None
            memory, out = stage_memory(lay, ranges, found.choice, in_flight, incoming)
            if cap is None or memory <= cap:
                return replace(found, memory=memory, out=out)
            if capped:  # its working set or gathered weights put it over: less room
                room -= max(memory - cap, 1e-9 * cap)
            if room <= 0:
                return None
            found = self._capped(ranges, devices, microbatches, in_flight, w, room)
            capped = True
        return None

    def _solve(self, lay: Layered, ranges: tuple[tuple[int, int], ...], w: float,
               in_flight: float | None, room: float) -> StageResult | None:
        sub, names = _induced(lay, ranges, w)
        index = _indices(ranges)
        if in_flight is not None:  # the linear count: states, activations, tensors passed on
            moved = {i: lay.moved(i, end) for first, end in ranges for i in range(first, end)}
            made: dict[tuple, np.ndarray] = {}
            memory = []
            for i in index:  # equal terms, one read-only array: identical layers stay identical
                key = tuple(map(lay.digest, (lay.state[i], lay.activation[i], moved[i])))
                if key not in made:
                    made[key] = lay.state[i] + in_flight * (lay.activation[i] - moved[i])
                    made[key].flags.writeable = False
                memory.append(made[key])
            sub = Problem(sub.vertex_costs, sub.edges, sub.edge_costs, names=names, memory=memory,
                          memory_cap=room, unit=sub.unit, devices=sub.devices)
        self.check("solving a pipeline stage")
        self.solves += 1
        start = time.perf_counter()
        with active(self.deadline):  # the dp checks it between steps: the limit holds
            try:
                solution = self.solve(sub)
            except TooLargeError as exc:  # no plan of this stage, so the answer claims no bound
                self.all_optimal = False
                if self.progress:
                    self.progress(f"  stage {names[0]} .. {names[-1]} on {lay.space.devices} "
                                  f"devices, m={lay.microbatches}: left out, too large for its "
                                  f"solver ({exc}); the answer carries no bound")
                return None
        took = time.perf_counter() - start
        if solution.status is Status.TIME_LIMIT:  # cut mid-solve: nothing to cache
            self.check("solving a pipeline stage")
            raise TimeLimitError(f"the time limit passed while solving a pipeline stage "
                                 f"({names[0]} .. {names[-1]})")
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

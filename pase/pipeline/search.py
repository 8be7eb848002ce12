"""The outer search: stage boundaries, sub-mesh sizes and micro-batch count, exactly.

The priced step of a pipeline with stages ``0 .. s-1`` (per-micro-batch times
``t_i``, boundary transfers ``x_b`` per direction) and ``m`` micro-batches is

    step = sum_i t_i + sum_b 2 x_b + (m - 1) * P

(:func:`step_seconds`): the first micro-batch crosses every stage and link
forward and backward (fill and drain), and the other ``m - 1`` follow one
period ``P`` apart. GPipe queues every forward, so the busiest server sets the
pace: ``P = max(max_i t_i, max_b x_b)``. 1F1B alternates one forward and one
backward, and a stage's next backward waits for a round trip through the later
stages, so each period also pays a transfer each way:
``P = max_i t_i + 2 max_b x_b``. For equal stages and free links both are the
textbook ``(m + s - 1) t``, a bubble of ``(s - 1) / (m + s - 1)``; the
simulator (:mod:`pase.sim.pipeline`) runs the schedules event by event and
agrees with these periods for equal stages and links.

The objective grows with ``S = sum``, ``T = max_i t_i`` and ``X = max_b x_b``,
so the best plan is on the Pareto front of ``(T, X, S)`` over partitions.
:func:`search` builds that front by a dynamic program over suffixes: state
``(unit u, devices left R, stages left r, previous stage's devices)``; a stage
is the ``r``-th from the end, which fixes its activations in flight under
1F1B. Every point kept is a real partition, and a dominated point can never
give a lower objective, so the minimum over the front is the optimum over the
space:

- stages are contiguous ranges of units (:mod:`pase.pipeline.cuts`), every
  unit in exactly one stage, stages in op order on consecutive device ranges;
- a stage's device count is one of ``sizes`` and the counts sum to ``p``
  (``uniform``: all stages the same count ``p / s``);
- ``m`` is one of ``microbatches`` (each dividing the batch);
- inside a stage, the per-layer dp's optimum (exact; a stage whose dp could
  not prove optimality under a memory cap makes the plan ``feasible``).

Before the fronts of each ``(m, s)`` the search prices the plan whose ``s`` stages hold
equal unit counts; the best plan so far is then an incumbent, and a stage whose least
time (its optimum with memory not counted) times ``m`` reaches it is left out of both
fronts unsolved: every plan holding it costs at least that, so neither the best plan nor
the bound below the incumbent changes, and the memory-capped solves of hopeless stages
(a stage of most layers on a small sub-mesh) are never run.

Interleaved 1F1B (``interleaved:V``) is searched beside them by enumeration: for each
``s`` with ``p / s`` one of the sizes and ``m`` a multiple of ``s``, the units are cut
into ``s V`` chunks as the layout path cuts layers, chunk ``c`` on group ``c mod s``,
each group's chunks solved together (one memory cap over them all), and the step is the
closed form of :mod:`pase.pipeline.schedules`.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from pase.cluster import Cluster
from pase.errors import OptionError, TimeLimitError
from pase.pipeline import schedules
from pase.pipeline.schedules import period, step_seconds  # noqa: F401 (benchmarks read it here)
from pase.pipeline.stages import StageOracle, StageResult

SCHEDULES = ("1f1b", "gpipe")  # the plain ones; schedules.parse also reads interleaved:V
# A front point: (max stage time T, max link time X, fill-and-drain sum S, max tail O, stages:
# ((first op, end op, devices, StageResult or None), ...)).
Point = tuple[float, float, float, float, tuple[tuple[int, int, int, Any], ...]]
# A plan's device groups: ((op ranges of the group, in order), devices) per group.
Groups = tuple[tuple[tuple[tuple[int, int], ...], int], ...]


def in_flight(schedule: str, microbatches: int, stages: int, index: int) -> float:
    """Micro-batches whose activations stage ``index`` holds at its peak.

    GPipe runs every forward before any backward: ``m``. 1F1B lets stage ``i``
    start ``s - i`` forwards before its first backward, then alternates: at
    most ``min(m, s - i)``. ``interleaved:V``: :mod:`pase.pipeline.schedules`."""
    name, virtual = schedules.unlabel(schedule)
    return schedules.in_flight(name, virtual, microbatches, stages, index)


@dataclass
class Space:
    """The declared search space (module docstring)."""

    units: list[int]
    devices: int
    sizes: tuple[int, ...]
    microbatches: tuple[int, ...]
    schedule: str | Sequence[str] = "1f1b"
    uniform: bool = False
    max_stages: int | None = None

    def __post_init__(self) -> None:
        self.schedules = schedules.parse(self.schedule)
        if not self.sizes or any(d < 1 or d > self.devices for d in self.sizes):
            raise OptionError(f"stage sizes must be device counts in 1..{self.devices}, "
                              f"got {list(self.sizes)}")

    @property
    def stage_limit(self) -> int:
        limit = len(self.units) - 1
        return limit if self.max_stages is None else min(limit, self.max_stages)


@dataclass
class Found:
    """The best plan: its device groups (each one op range, or an interleaved group's
    chunks), their results, m, the schedule, the links (per cut, per direction; under the
    calibrated model the sends, already in the stage times) and its charged step ``cost``
    (:func:`search` returns the bound beside it)."""

    cost: float
    microbatches: int
    groups: Groups
    results: list[StageResult]
    links: list[float]
    optimal: bool
    schedule: str = "1f1b"
    stats: dict[str, Any] = field(default_factory=dict)
    prices: list[Any] = field(default_factory=list)  # each group's own price (solve.certified)
    step: float = 0.0  # the plan's own step (its groups' own prices)
    folded: bool = False  # the links are in the stage times (the calibrated model)
    stopped: bool = False  # the time limit cut the search: the best of what it visited

    @property
    def stages(self) -> tuple[tuple[int, int, int], ...]:
        """``(first op, end op, devices)`` per group (its first chunk's range)."""
        return tuple((r[0][0], r[0][1], d) for r, d in self.groups)

    def step_of(self, times, tails) -> float:
        """The step of this plan's schedule over stage ``times`` and ``tails``."""
        return schedules.plan_step(self.schedule, self.microbatches, times,
                                   [] if self.folded else self.links, tails)


class LinkPricer:
    """Seconds per micro-batch per direction to send the tensors crossing a cut between two
    sub-meshes: ``a + bytes / (w * B)``, the boundary spread over ``w = min(d_a, d_b)``
    device pairs sending in parallel, on the inter-node link when the two sub-meshes
    are not on one node (else the intra-node one)."""

    def __init__(self, cluster: Cluster, boundary_bytes: Callable[[int, int], float]):
        self.cluster, self.boundary_bytes = cluster, boundary_bytes

    def __call__(self, cut: int, microbatches: int, prev_start: int, prev_devices: int,
                 devices: int) -> float:
        return self.between(cut, microbatches, prev_start, prev_devices,
                            prev_start + prev_devices, devices)

    def between(self, cut: int, microbatches: int, src_start: int, src_devices: int,
                dst_start: int, dst_devices: int) -> float:
        """The same between any two sub-meshes (an interleaved plan's last group sends
        to its first)."""
        nbytes = self.boundary_bytes(cut, microbatches)
        if nbytes <= 0:
            return 0.0
        low = min(src_start, dst_start)
        high = max(src_start + src_devices, dst_start + dst_devices) - 1
        kind = "intra" if self.cluster.node_of(low) == self.cluster.node_of(high) else "inter"
        link = self.cluster.link(kind)
        width = min(src_devices, dst_devices)
        return link.latency_s + nbytes / (width * link.bytes_per_second)


def search(space: Space, oracle: StageOracle, links: LinkPricer,
           progress: Callable[[str], None] | None = None,
           incumbent: float = math.inf, label: str = "") -> tuple[Found | None, float | None]:
    """``(plan, bound)``: the best plan over ``space`` at the search's charge (None when no
    plan fits the memory cap, or none is charged less than ``incumbent``) and the least
    charge of any plan, or ``incumbent`` if less (None: not proven).

    ``incumbent``: the price of a plan found elsewhere (:mod:`pase.pipeline.seed`). Stages
    are skipped against it as against the search's own incumbent: a plan holding one is
    charged at least it, so the bound covers them only up to it.

    Past the oracle's deadline (:meth:`StageOracle.check`, between stage solves) the search
    stops: the best plan it found is returned with ``stopped`` and no bound (the plans it
    did not visit have none); with none found the TimeLimitError is raised. ``label``
    starts its progress lines (a bounding search's charges are its own, lifted ones)."""
    start = time.perf_counter()
    best: Found | None = None
    bound = incumbent
    folded = oracle.tails
    m = space.microbatches[0]

    def limit() -> float:
        """What a plan must beat: the incumbent, or the best plan so far if cheaper."""
        return incumbent if best is None else min(incumbent, best.cost)

    try:
        for m in space.microbatches:
            counts = range(1, space.stage_limit + 1)
            for name, virtual in space.schedules:
                if name == "interleaved":
                    for found, low in _interleaved(space, oracle, links, m, virtual, limit()):
                        bound = min(bound, low)
                        if found is not None and (best is None
                                                  or found.cost < best.cost * (1 - 1e-12)):
                            best = found
                    continue
                for s, sizes in _size_sets(space, counts):
                    oracle.check("searching pipeline plans")
                    # an incumbent first (equal unit counts), so the fronts skip the stages
                    # no plan better than it can hold (_Front.limit)
                    for cost, plan in _costed(_Front(_balanced(space, s), oracle, links, m,
                                                     sizes, name, False, limit()), s, name, m):
                        if best is None or cost < best.cost * (1 - 1e-12):
                            best = _found(oracle, links, m, plan, cost, name, folded)
                    for cost, _ in _costed(_Front(space, oracle, links, m, sizes, name, True,
                                                  limit()), s, name, m):
                        bound = min(bound, cost)
                    for cost, plan in _costed(_Front(space, oracle, links, m, sizes, name,
                                                     False, limit()), s, name, m):
                        if best is None or cost < best.cost * (1 - 1e-12):
                            best = _found(oracle, links, m, plan, cost, name, folded)
            if progress:
                so_far = limit()  # the start's step counts: it is a plan too
                progress(f"{label}m={m}: least charge so far "
                         f"{f'{so_far:.6g} s' if so_far < math.inf else 'none'}, "
                         f"{oracle.solves} stage solves, {time.perf_counter() - start:.1f} s")
    except TimeLimitError as exc:
        if best is None:
            raise  # the caller's one-line error says it all
        if progress:
            progress(f"{label}time limit: the search stopped at m={m} ({exc}); "
                     f"least charge so far {best.cost:.6g} s")
        best.stopped = True
    if best is None:
        return None, bound if oracle.all_optimal else None
    best.stats.update(stage_solves=oracle.solves, search_seconds=time.perf_counter() - start)
    if best.stopped:
        best.stats["stopped"] = "time limit"
    # a cut search bounds only the plans it visited: no bound
    return best, min(bound, best.cost) if oracle.all_optimal and not best.stopped else None


def _costed(front: "_Front", stages: int, name: str, m: int):
    """``(charged step, plan)`` of each point of ``front``'s ``stages``-stage front."""
    for T, X, S, tails, plan in front.points(stages):
        yield S + (m - 1) * period(name, T, X) + tails, plan


def _balanced(space: Space, stages: int) -> Space:
    """``space`` with cuts only where ``stages`` stages get equal unit counts (to within
    one): a plan of the space found with few stage solves, the search's first incumbent."""
    n = len(space.units) - 1
    units = [space.units[k * n // stages] for k in range(stages)] + [space.units[-1]]
    return replace(space, units=units)


def _size_sets(space: Space, counts: range):
    if space.uniform:
        for s in counts:
            if space.devices % s == 0 and space.devices // s in space.sizes:
                yield s, (space.devices // s,)
    else:
        for s in counts:
            yield s, space.sizes


class _Front:
    """Pareto fronts of suffixes for one ``m`` and one set of stage sizes (memoised): of the
    stages' plans, or (``bound``) of their corners (:meth:`StageOracle.corners`)."""

    def __init__(self, space: Space, oracle: StageOracle, links: LinkPricer, m: int,
                 sizes: tuple[int, ...], schedule: str, bound: bool = False,
                 limit: float = math.inf):
        self.space, self.oracle, self.links, self.m, self.sizes = space, oracle, links, m, sizes
        self.schedule, self.bound, self.limit = schedule, bound, limit
        self.memo: dict[tuple, list[Point]] = {}
        self.smallest, self.largest = min(sizes), max(sizes)

    def points(self, stages: int) -> list[Point]:
        self.stages = stages
        self.memo.clear()
        return self._suffix(0, self.space.devices, stages, 0, 0.0)

    def _plans(self, u: int, v: int, d: int, k: float, incoming: float):
        """``(time, tail, result)`` of the stage's plans (or corners, result None)."""
        self.oracle.check("searching pipeline plans")
        ranges = ((self.space.units[u], self.space.units[v]),)
        if self.limit < math.inf:
            # a plan's step is at least m t + tail of each of its stages (1F1B and GPipe),
            # whose least with memory not counted bounds it: past the incumbent, no plan
            # holding the stage is better (and its bound is above the incumbent, which
            # bounds the space itself). A bound with no solve first, then the optimum.
            for quick in (True, False):
                least = self.oracle.least_step(ranges, d, self.m, quick)
                if least is None or least >= self.limit:
                    return []
        if self.bound:
            return [(t, o, None) for t, o in
                    self.oracle.corners(ranges, d, self.m, k, alone=self.stages == 1) or []]
        return [(r.seconds, r.tail, r) for r in
                self.oracle.options(ranges, d, self.m, k, incoming)]

    def _suffix(self, u: int, left: int, r: int, prev: int, incoming: float) -> list[Point]:
        key = (u, left, r, prev, incoming)
        if key in self.memo:
            return self.memo[key]
        units, n_units = self.space.units, len(self.space.units) - 1
        out: list[Point] = []
        if r == 0:
            out = [(0.0, 0.0, 0.0, 0.0, ())] if u == n_units and left == 0 else []
        else:
            k = in_flight(self.schedule, self.m, self.stages, self.stages - r)
            offset = self.space.devices - left
            # the last stage ends at the last unit: no other stage solve is of use
            for v in range(u + 1, n_units - r + 2) if r > 1 else (n_units,):
                for d in self.sizes:
                    rest = left - d
                    if not (r - 1) * self.smallest <= rest <= (r - 1) * self.largest:
                        continue
                    x = 0.0 if u == 0 or self.oracle.tails else \
                        self.links(units[u], self.m, offset - prev, prev, d)
                    for t, tail, res in self._plans(u, v, d, k, incoming):
                        passed = 0.0 if res is None else res.out
                        for T, X, S, tails, plan in self._suffix(v, rest, r - 1, d, passed):
                            out.append((max(T, t), max(X, x), S + t + 2 * x, max(tails, tail),
                                        ((units[u], units[v], d, res),) + plan))
        self.memo[key] = out = _pareto(out)
        return out


def _pareto(points: list[Point]) -> list[Point]:
    """The points no other point beats in T, X, S and O (ties: the first in sorted order)."""
    kept: list[Point] = []
    for p in sorted(points, key=lambda q: q[:4]):
        if not any(k[0] <= p[0] and k[1] <= p[1] and k[2] <= p[2] and k[3] <= p[3] for k in kept):
            kept.append(p)
    return kept


def _found(oracle: StageOracle, links: LinkPricer, m: int, plan, cost: float, schedule: str,
           folded: bool) -> Found:
    results, xs, offset = [], [], 0
    for i, (first, end, d, result) in enumerate(plan):
        results.append(result)
        if i:
            prev = plan[i - 1][2]
            xs.append(oracle.sends(((first, end),), d, m) / 2 if folded else
                      links(first, m, offset - prev, prev, d))
        offset += d
    optimal = all(r.optimal for r in results) and oracle.all_optimal
    groups = tuple((((first, end),), d) for first, end, d, _ in plan)
    return Found(cost, m, groups, results, xs, optimal, schedule, folded=folded)


def _interleaved(space: Space, oracle: StageOracle, links: LinkPricer, m: int, virtual: int,
                 limit: float = math.inf):
    """Each ``s`` of interleaved plans of ``m`` micro-batches and ``V = virtual`` chunks per
    group: ``(the best plan or None, the least charge of any)``. ``s`` equal groups of
    ``p / s`` devices (one of the stage sizes), the units cut into ``s V`` chunks as the
    layout path cuts layers, chunk ``c`` on group ``c mod s``; each group's plans held
    with the most bytes its neighbour's plans pass on. Where the least charge reaches
    ``limit`` (an incumbent's) no plan is built: none is cheaper than the incumbent."""
    n_units = len(space.units) - 1
    label = schedules.label("interleaved", virtual)
    for s in range(2, space.stage_limit + 1):
        d = space.devices // s
        if space.devices % s or d not in space.sizes or \
                not schedules.interleavable(s, virtual, m, n_units):
            continue
        bounds = [0]
        for size in schedules.chunk_units(n_units, s, virtual):
            bounds.append(bounds[-1] + size)
        chunks = [(space.units[a], space.units[b]) for a, b in zip(bounds, bounds[1:])]
        ranges = [tuple(chunks[g::s]) for g in range(s)]
        ks = [schedules.in_flight("interleaved", virtual, m, s, g) for g in range(s)]
        corners = [oracle.corners(ranges[g], d, m, ks[g], last=False) for g in range(s)]
        if any(c is None for c in corners):
            continue
        if oracle.tails:  # folded into the stage times; here for the plan to show
            xs = [oracle.sends((chunks[c],), d, m) / 2 for c in range(1, len(chunks))]
        else:
            xs = [links.between(chunks[c][0], m, ((c - 1) % s) * d, d, (c % s) * d, d)
                  for c in range(1, len(chunks))]
        low = _combine(label, m, [[(t, o, None) for t, o in c] for c in corners],
                       [] if oracle.tails else xs)[0]
        if low >= limit:
            yield None, low
            continue
        first = [oracle.options(ranges[g], d, m, ks[g]) for g in range(s)]
        if not all(first):
            yield None, low
            continue
        passed = [max(r.out for r in opts) for opts in first]
        plans = [oracle.options(ranges[g], d, m, ks[g], passed[(g - 1) % s]) for g in range(s)]
        if not all(plans):
            yield None, low
            continue
        cost, results = _combine(label, m, [[(r.seconds, r.tail, r) for r in opts]
                                            for opts in plans], [] if oracle.tails else xs)
        optimal = all(r.optimal for r in results) and oracle.all_optimal
        groups = tuple((ranges[g], d) for g in range(s))
        yield Found(cost, m, groups, results, xs, optimal, label, folded=oracle.tails), low


def _combine(schedule: str, m: int, plans, links) -> tuple[float, list]:
    """The least step of one plan per group (``plans[g]``: ``(time, tail, result)``): for
    each tail ``O`` the largest may be, each group's fastest plan with its tail within."""
    best, picked = math.inf, []
    for cap in sorted({o for opts in plans for _, o, _ in opts}):
        pick = [min((p for p in opts if p[1] <= cap), key=lambda p: p[0], default=None)
                for opts in plans]
        if any(p is None for p in pick):
            continue
        step = schedules.plan_step(schedule, m, [p[0] for p in pick], links,
                                   [p[1] for p in pick])
        if step < best:
            best, picked = step, [p[2] for p in pick]
    return best, picked

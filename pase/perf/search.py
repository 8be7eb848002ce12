"""Search the layouts of a run under the performance model (``pase solve --layouts``).

The family is every Megatron-LM/FSDP layout of ``p`` devices and a global batch ``B``
with:

- tensor parallelism ``tp`` inside a node (up to the devices per node, dividing ``p``),
  with sequence parallelism whenever ``tp > 1`` (it never costs time and saves memory);
- context parallelism ``cp`` (for sequences of 8,192 and more);
- pipeline stages ``pp`` up to the layers, equal stages as :mod:`pase.perf.pipeline` cuts them;
- the data-parallel rest ``dp``;
- for a model with experts, expert parallelism ``ep`` (every divisor of the experts) and
  expert tensor parallelism ``etp`` of 1 or ``tp``, wherever ``ep x etp`` divides
  ``tp x dp x cp`` (Megatron-Core's parallel folding: the experts' groups may span the
  tensor-parallel ranks);
- every micro-batch size dividing the per-rank batch (up to ``max_micro_batch``);
- the schedules 1F1B; interleaved with ``V`` chunks per device for every ``V`` from 2 to
  the layers per stage (``pp x V`` at most the layers, cut as :func:`pase.perf.pipeline.chunk_sizes`
  does; the micro-batches a multiple of ``pp``); ZB-H1 (``pp > 1``, at least ``pp``
  micro-batches); DualPipe (``pp`` even, an even
  number of micro-batches, at least ``2 pp``; its two parameter copies counted in memory);
- ZeRO 0-3;
- no, selective or full recomputation of the fewest layers per stage that fit (Megatron-LM's
  ``--recompute-num-layers``; of every layer when none fits).

The best layout is the optimum over the family under the model, not a heuristic's guess,
found by branch and bound (:mod:`pase.perf.bound`): every shape's bound first, then the
shapes best bound first, each layout skipped (counted ``pruned``) whose bound is over the
``keep``-th best step priced so far, so the best and the ranked ``keep`` are those of
pricing every layout (``prune=False``). The ops are priced once per (micro-batch, tp,
cp, ep, etp), a repeated layer's once (:mod:`pase.perf.ops_memo`), and the rest of a
layout's price is shared through :class:`pase.perf.shared.Shared`:
each (pp, V) cut, each layer's sums per recomputation, the FLOP and each stage's kept
activations are computed once, so a layout costs a pass over its stages' layers, not its
ops. ``shared=False`` prices each layout on its own (the reference path, kept for
benchmarks/layout_search_speed.py and the tests that check the two agree).

Recomputation: none is priced first and, when it fits, is the best at that rest of the
layout (recomputation only adds time); otherwise both selective recomputation and the
fewest fully recomputed layers that fit are priced (either may be the faster), the layers
by bisection (memory falls as they grow).

The family is counted before anything is priced (one recomputation option counts as
one layout), so a family that does not exist is refused with its reason and one over
:data:`MAX_LAYOUTS` with its size. Under an ambient deadline (:mod:`pase.deadline`;
``pase solve --layouts --time-limit``) the search stops when it passes and returns the
best layout priced so far, marked not exhaustive.
"""
from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from pase.cluster import get_cluster
from pase.deadline import current
from pase.errors import OptionError, TooLargeError
from pase.ir import Graph
from pase.perf.bound import Bounds, layout_bound
from pase.perf.comms import group_collectives
from pase.perf.estimate import Estimate
from pase.perf.family import (  # noqa: F401 (LONG, divisors: used from here too)
    LONG,
    SCHEDULE_KINDS,
    Group,
    divisors,
    family,
    nearest_first,
    probe,
)
from pase.perf.hardware import achieved
from pase.perf.kernels import Pricer, make_pricer
from pase.perf.layout import make_layout
from pase.perf.ops import price_ops
from pase.perf.shared import Shared
from pase.perf.tries import RECOMPUTE_ORDER, fitting_tries, recompute_tries

ZERO_STAGES = (0, 1, 2, 3)
# The largest family priced (about half an hour of one CPU at the ~2 ms a layout of the
# 1,024-GPU GPT-3 row takes, docs/performance-model.md).
MAX_LAYOUTS = 1_000_000  # the MoE families of the published runs reach 600,000
PROGRESS_SECONDS = 2.0  # a long search reports to ``progress`` this often (wall seconds)


@dataclass(frozen=True)
class SearchResult:
    """The best layout found, how many were priced, and the search's CPU seconds.

    ``family`` counts the layouts of the family (each recomputation option one);
    ``pruned`` those the branch and bound skipped (their bound over the ``keep``-th best
    step so far, or states that overflow the device); ``fitting`` counts the fitting
    layouts among those priced; ``exhaustive`` is False when a deadline stopped the
    search, so ``best`` is the best of those priced, not of the family."""

    best: Estimate | None
    priced: int
    fitting: int
    seconds: float
    ranked: tuple[Estimate, ...]
    family: int = 0
    exhaustive: bool = True
    pruned: int = 0




def search_layouts(build: Callable[[int], Graph], devices: int, cluster, global_batch: int, *,
                   precision: str = "bf16", attention: str = "fused", dropout: bool = False,
                   max_micro_batch: int = 64, virtual: tuple[int, ...] | None = None,
                   schedules: tuple[str, ...] = SCHEDULE_KINDS, experts: bool = True,
                   context: bool = True, keep: int = 5, max_layouts: int | None = None,
                   progress: Callable[[str], None] | None = None,
                   shared: bool = True, warm_start=None, prune: bool = True) -> SearchResult:
    """Price every layout of the family (module docstring); ``build(m)`` gives the
    graph at micro-batch size ``m``. The result ranks fitting layouts by step time.

    ``virtual``: the interleaved chunk counts to try (default: the family's, 2 to 4 and
    every divisor of the layers per stage); ``schedules``: which of
    :data:`SCHEDULE_KINDS`; ``experts``: search ep and etp on a model with experts;
    ``shared``: price through :class:`pase.perf.shared.Shared` (False: each layout on its own,
    every one); ``prune``: skip the layouts whose bound cannot rank (False: price them all);
    ``warm_start``: a Layout whose neighbourhood is priced first (its micro-batch, tp, cp, ep
    and etp, then its pp), so a search stopped by a deadline has priced it: the order
    changes nothing else.
    An empty family is an OptionError that says why, a family over ``max_layouts``
    (default :data:`MAX_LAYOUTS`) a TooLargeError, both before any pricing; ``progress``
    gets a line every :data:`PROGRESS_SECONDS` of a long search."""
    start, clock = time.process_time(), time.perf_counter()
    unknown = sorted(set(schedules) - set(SCHEDULE_KINDS))
    if unknown or not schedules:
        raise OptionError(f"search_layouts: unknown schedule {unknown[0] if unknown else 'none'!r};"
                          f" allowed: {', '.join(SCHEDULE_KINDS)}")
    cl = get_cluster(cluster, devices)
    if cl.groups:
        raise OptionError(f"the layout family (--layouts) is priced on one device type; "
                          f"{cl.name} mixes device types: search per-op plans instead")
    hw = achieved(cl.device)
    pricer = make_pricer(cl.device, hw, precision)
    graph1 = build(1)
    options = dict(precision=precision, attention=attention, dropout=dropout)
    groups = family(graph1, devices, cl.devices_per_node, global_batch, max_micro_batch,
                     virtual, tuple(schedules), experts, context, options)
    if warm_start is not None:
        groups = nearest_first(groups, warm_start)
    size = sum(len(s) for *_, shapes in groups for _, _, s in shapes) * len(ZERO_STAGES) * \
        len(RECOMPUTE_ORDER)
    max_layouts = MAX_LAYOUTS if max_layouts is None else max_layouts
    if size > max_layouts:
        raise TooLargeError(f"the layout family of {graph1.name} on {devices} devices for global "
                            f"batch {global_batch} has {size:,} layouts, over the limit of "
                            f"{max_layouts:,}; price one with `pase evaluate --layout`")
    if progress is not None:
        progress(f"layouts: a family of {size:,} to search")
    run = _Run(keep, size, progress, clock)
    if prune and shared:
        _pruned_search(run, groups, build, graph1, pricer, options, warm_start is not None,
                       cl, devices, global_batch)
    else:
        for graph, ops, cache, degrees, micro, schedule, zero in _cells(
                groups, build, graph1, pricer, shared, options):
            if run.expired():
                break
            run.price(graph, cl, ops, cache, make_layout(
                degrees, devices=devices, micro_batch=micro, global_batch=global_batch,
                schedule=schedule, zero=zero, sequence_parallel=degrees["tp"] > 1, **options))
    # equal steps: the one that holds less memory first (ZeRO-2 over ZeRO-1 at one price)
    found = sorted(run.found, key=lambda e: (e.step_seconds, e.memory_bytes, _key(e)))
    return SearchResult(found[0] if found else None, run.priced, run.fitting,
                        time.process_time() - start, tuple(found[:keep]), size, not run.stopped,
                        run.pruned)


class _Run:
    """A search's state: the fitting estimates that may still rank in the top ``keep``,
    the counts, the deadline and the progress lines."""

    def __init__(self, keep: int, size: int, progress, clock: float):
        self.keep, self.size, self.progress = keep, size, progress
        self.found: list[Estimate] = []
        self.best: list[float] = []  # a heap of the keep best steps, negated
        self.priced = self.fitting = self.examined = self.pruned = 0
        self.stopped = False
        self.deadline = current()
        self.clock = self.reported = clock

    def expired(self) -> bool:
        if self.deadline is not None and self.deadline.expired():
            self.stopped = True
        return self.stopped

    def threshold(self) -> float:
        """The keep-th best step so far: a layout whose bound is above it cannot rank."""
        return -self.best[0] if len(self.best) >= self.keep else math.inf

    def price(self, graph: Graph, cl, ops, cache, lay, bound=None) -> None:
        """Price ``lay``'s recomputation tries; ``bound(recompute)``: the bound of one,
        those over the threshold skipped."""
        keep = None if bound is None else (lambda rc: bound(rc) <= self.threshold())
        if cache is None:
            tries = recompute_tries(graph, cl, lay, ops, cache, keep)
            tried, fitting = len(tries), [e for e in tries if e.fits_memory]
            plain = tries[0].fits_memory
        else:
            plain, tried, fitting = fitting_tries(graph, cl, lay, ops, cache, keep)
        if not plain:
            self.pruned += len(RECOMPUTE_ORDER) - tried
        self.priced += tried
        for e in fitting:
            self.fitting += 1
            if e.step_seconds <= self.threshold():
                self.found.append(e)
                heapq.heappush(self.best, -e.step_seconds)
                if len(self.best) > self.keep:
                    heapq.heappop(self.best)
        self.examined += len(RECOMPUTE_ORDER)
        self.report()

    def skip(self, layouts: int) -> None:
        self.pruned += layouts
        self.examined += layouts

    def report(self, line: str | None = None) -> None:
        if self.progress is not None and time.perf_counter() - self.reported >= PROGRESS_SECONDS:
            self.reported = time.perf_counter()
            if line is not None:
                self.progress(f"{line}, {self.reported - self.clock:.0f} s")
                return
            self.progress(f"layouts: {self.examined:,} of {self.size:,} examined "
                          f"({self.examined / self.size:.0%}), {self.priced:,} priced, "
                          f"{self.pruned:,} pruned, {self.fitting:,} fit, "
                          f"{self.reported - self.clock:.0f} s")


def _pruned_search(run: _Run, groups: list[Group], build, graph1: Graph, pricer: Pricer,
                   options: dict, warm: bool, cl, devices: int, global_batch: int) -> None:
    """Branch and bound over the family (:mod:`pase.perf.bound`): every shape's bound first,
    then the groups in the order of their least bound and in each its shapes in the order of
    theirs, each skipped while its bound is over the keep-th best step so far. A warm start's
    group (``groups[0]``, :func:`pase.perf.family.nearest_first`) is priced first, before any
    bound."""
    graphs = {1: graph1}
    cuts: dict[int, dict] = {}  # per graph, the cuts its groups' Shareds share

    def priced(group: Group, copies: bool = True):
        micro, tp, cp, ep, etp, _ = group
        if micro not in graphs:
            graphs[micro] = build(micro)
        base = dict(tp=tp, cp=cp, ep=ep, etp=etp)
        return graphs[micro], price_ops(graphs[micro], probe(base, micro, **options), pricer,
                                        copies=copies)

    def bounded(group: Group, graph: Graph, ops) -> list[tuple]:
        micro, tp, cp, ep, etp, _ = group
        one = probe(dict(tp=tp, cp=cp, ep=ep, etp=etp), micro, **options)
        bounds = Bounds(graph, ops, one, group_collectives(cl, one, pricer.hw), pricer.hw)
        return [(bounds.step(pp, global_batch // (micro * dp), s), pp, dp, s)
                for pp, dp, schedules in group[5] for s in schedules]

    def search(group: Group, shapes: list[tuple], graph: Graph, ops) -> None:
        cache = Shared(graph, ops, cuts.setdefault(id(graph), {}))
        micro, tp, cp, ep, etp, _ = group
        for bound, pp, dp, schedule in shapes:
            if bound > run.threshold():
                run.skip(len(ZERO_STAGES) * len(RECOMPUTE_ORDER))
                continue
            groups = None  # the collectives of the shape's groups, whatever its ZeRO stage
            for zero in ZERO_STAGES:
                if run.expired():
                    return
                lay = make_layout(dict(tp=tp, cp=cp, ep=ep, etp=etp, pp=pp, dp=dp),
                                  devices=devices, micro_batch=micro, global_batch=global_batch,
                                  schedule=schedule, zero=zero, sequence_parallel=tp > 1,
                                  **options)
                groups = groups or group_collectives(cl, lay, pricer.hw)
                coll = cache.coll(lay, groups)
                bound = layout_bound(cache, lay, coll, pricer, lay.precision != "fp32",
                                     cl.device.memory_bytes)
                if bound > run.threshold() or bound == math.inf:  # inf: it never fits
                    run.skip(len(RECOMPUTE_ORDER))
                else:
                    run.price(graph, cl, ops, cache, lay, lambda rc, lay=lay, coll=coll: layout_bound(
                        cache, lay, coll, pricer, lay.precision != "fp32", rebuilt=rc))

    rest = groups
    if warm:  # its shapes in their order (its pp first), not the bounds'
        graph, ops = priced(groups[0])
        search(groups[0], bounded(groups[0], graph, ops), graph, ops)
        rest = groups[1:]
    plan = []
    for n, group in enumerate(rest):
        if run.expired():
            return
        shapes = sorted(bounded(group, *priced(group, copies=False)),
                        key=lambda shape: shape[0])
        plan.append((shapes[0][0], group, shapes))
        run.report(f"layouts: bounds of {n + 1:,} of {len(rest):,} groups (micro-batch, tp, cp, "
                   f"ep, etp)")
    plan.sort(key=lambda entry: entry[0])
    for least, group, shapes in plan:
        if run.expired():
            return
        if least > run.threshold():
            run.skip(len(shapes) * len(ZERO_STAGES) * len(RECOMPUTE_ORDER))
            continue
        search(group, shapes, *priced(group))


def _cells(groups: list[Group], build: Callable[[int], Graph], graph1: Graph, pricer: Pricer,
           shared: bool, options: dict) -> Iterator[tuple]:
    """Each (graph, its priced ops, their Shared or None, degrees, micro-batch, schedule,
    ZeRO stage) of the family, the graph built per micro-batch and its ops priced once per
    (micro-batch, tp, cp, ep, etp)."""
    graphs = {1: graph1}
    for micro, tp, cp, ep, etp, shapes in groups:
        if micro not in graphs:
            graphs = {1: graph1, micro: build(micro)}  # groups come micro-batch by micro-batch
        graph = graphs[micro]
        base = dict(tp=tp, cp=cp, ep=ep, etp=etp)
        ops = price_ops(graph, probe(base, micro, **options), pricer)
        cache = Shared(graph, ops) if shared else None
        for pp, dp, schedules in shapes:
            for schedule in schedules:
                for zero in ZERO_STAGES:
                    yield graph, ops, cache, dict(base, pp=pp, dp=dp), micro, schedule, zero


def _key(e: Estimate) -> tuple:
    """Ties broken by the layout's fields (deterministic)."""
    lay = e.layout
    return (lay.tp, lay.pp, lay.dp, lay.cp, lay.ep, lay.expert_tp, lay.micro_batch, lay.schedule,
            lay.virtual, lay.zero, lay.recompute, lay.recompute_layers)

"""Search the layouts of a run under the performance model (``pase solve --layouts``).

The family is every Megatron-LM/FSDP layout of ``p`` devices and a global batch
``B``: tensor parallelism inside a node (``tp`` up to the devices per node, dividing
``p``), pipeline stages, context parallelism (for sequences of 8,192 and more),
the data-parallel rest, every
micro-batch size dividing the per-rank batch (up to ``max_micro_batch``), the
1F1B schedule and interleaved ones with ``V`` chunks, ZeRO 0-3 and no, selective
or full recomputation; sequence parallelism whenever ``tp > 1`` (it never costs
time and saves memory). Every layout of the family is priced, so the best one
is the optimum over the family under the model, not a heuristic's guess; the ops are
priced once per (micro-batch, tp, cp) and shared by the layouts that differ
only in the rest.

Recomputation is tried from none upwards and stops at the first that fits: at a
fixed rest of the layout, more recomputation only adds time.

The family is counted before anything is priced (one recomputation option counts as
one layout), so a family that does not exist is refused with its reason and one over
:data:`MAX_LAYOUTS` with its size. Under an ambient deadline (:mod:`pase.deadline`;
``pase solve --layouts --time-limit``) the search stops when it passes and returns the
best layout priced so far, marked not exhaustive.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterator

from pase.cluster import get_cluster
from pase.deadline import current
from pase.errors import OptionError, TooLargeError
from pase.ir import Graph
from pase.perf.hardware import achieved
from pase.perf.kernels import Pricer, make_pricer
from pase.perf.layout import check_graph, make_layout
from pase.perf.ops import price_ops
from pase.perf.pipeline import blocks
from pase.perf.step import Estimate, evaluate_layout

RECOMPUTE_ORDER = ("none", "selective", "full")
ZERO_STAGES = (0, 1, 2, 3)
LONG = 8192  # context parallelism is searched from this sequence length up
# The largest family priced: about 40 minutes of one CPU at the ~25 ms a layout of the
# 1,024-GPU GPT-3 row takes (docs/performance-model.md).
MAX_LAYOUTS = 100_000
PROGRESS_SECONDS = 2.0  # a long search reports to ``progress`` this often (wall seconds)


@dataclass(frozen=True)
class SearchResult:
    """The best layout found, how many were priced, and the search's CPU seconds.

    ``family`` counts the layouts of the family (each recomputation option one);
    ``exhaustive`` is False when a deadline stopped the search, so ``best`` is the best
    of those priced, not of the family."""

    best: Estimate | None
    priced: int
    fitting: int
    seconds: float
    ranked: tuple[Estimate, ...]
    family: int = 0
    exhaustive: bool = True


# (micro-batch, tp, cp) and, under it, each (pp, dp, schedules): the family's shapes
Group = tuple[int, int, int, list[tuple[int, int, list[str]]]]


def divisors(n: int, limit: int | None = None) -> list[int]:
    """The divisors of ``n`` (up to ``limit``), ascending, from its prime factors found
    by trial division up to the square root: instant for device counts (at most 2**24),
    never a loop up to ``n``."""
    factors: dict[int, int] = {}
    rest, p = n, 2
    while p * p <= rest:
        while rest % p == 0:
            factors[p] = factors.get(p, 0) + 1
            rest //= p
        p += 1 if p == 2 else 2
    if rest > 1:
        factors[rest] = factors.get(rest, 0) + 1
    out = [1]
    for prime, power in factors.items():
        out = [d * prime ** k for d in out for k in range(power + 1)]
    return sorted(d for d in out if limit is None or d <= limit)


def search_layouts(build: Callable[[int], Graph], devices: int, cluster, global_batch: int, *,
                   precision: str = "bf16", attention: str = "fused", dropout: bool = False,
                   max_micro_batch: int = 64,
                   virtual: tuple[int, ...] = (2, 3, 4), context: bool = True, keep: int = 5,
                   max_layouts: int | None = None,
                   progress: Callable[[str], None] | None = None) -> SearchResult:
    """Price every layout of the family (module docstring); ``build(m)`` gives the
    graph at micro-batch size ``m``. The result ranks fitting layouts by step time.

    An empty family is an OptionError that says why, a family over ``max_layouts``
    (default :data:`MAX_LAYOUTS`) a TooLargeError, both before any pricing; ``progress`` gets a line every :data:`PROGRESS_SECONDS` of a long search."""
    start, clock = time.process_time(), time.perf_counter()
    cl = get_cluster(cluster, devices)
    hw = achieved(cl.device)
    pricer = make_pricer(cl.device, hw, precision)
    graph1 = build(1)
    groups = _family(graph1, devices, cl.devices_per_node, global_batch, max_micro_batch,
                     virtual, context, dict(precision=precision, attention=attention,
                                            dropout=dropout))
    size = sum(len(s) for *_, shapes in groups for _, _, s in shapes) * len(ZERO_STAGES) * \
        len(RECOMPUTE_ORDER)
    max_layouts = MAX_LAYOUTS if max_layouts is None else max_layouts
    if size > max_layouts:
        raise TooLargeError(f"the layout family of {graph1.name} on {devices} devices for global "
                            f"batch {global_batch} has {size:,} layouts, over the limit of "
                            f"{max_layouts:,}; price one with `pase evaluate --layout`")
    deadline = current()
    if progress is not None:
        progress(f"layouts: a family of {size:,} to search")
    found: list[Estimate] = []
    priced = examined = 0
    reported = clock
    stopped = False
    for graph, ops, degrees, micro, schedule, zero in _cells(groups, build, graph1, pricer,
                                                             precision, attention, dropout):
        for recompute in RECOMPUTE_ORDER:
            if deadline is not None and deadline.expired():
                stopped = True
                break
            lay = make_layout(degrees, devices=devices, micro_batch=micro,
                              global_batch=global_batch, schedule=schedule, zero=zero,
                              recompute=recompute, sequence_parallel=degrees["tp"] > 1,
                              precision=precision, attention=attention, dropout=dropout)
            est = evaluate_layout(graph, cl, lay, ops)
            priced += 1
            if est.fits_memory:
                found.append(est)
            if progress is not None and time.perf_counter() - reported >= PROGRESS_SECONDS:
                reported = time.perf_counter()
                progress(f"layouts: {examined:,} of {size:,} examined ({examined / size:.0%}), "
                         f"{priced:,} priced, {len(found):,} fit, {reported - clock:.0f} s")
            if est.fits_memory:
                break
        if stopped:
            break
        examined += len(RECOMPUTE_ORDER)
    found.sort(key=lambda e: (e.step_seconds, _key(e)))
    return SearchResult(found[0] if found else None, priced, len(found),
                        time.process_time() - start, tuple(found[:keep]), size, not stopped)


def _cells(groups: list[Group], build: Callable[[int], Graph], graph1: Graph, pricer: Pricer,
           precision: str, attention: str, dropout: bool) -> Iterator[tuple]:
    """Each (graph, its priced ops, degrees, micro-batch, schedule, ZeRO stage) of the
    family, the graph built and its ops priced once per (micro-batch, tp, cp)."""
    for micro, tp, cp, shapes in groups:
        graph = graph1 if micro == 1 else build(micro)
        ops = price_ops(graph, _probe(dict(tp=tp, cp=cp), micro, precision, attention, dropout),
                        pricer)
        for pp, dp, schedules in shapes:
            for schedule in schedules:
                for zero in ZERO_STAGES:
                    yield graph, ops, dict(tp=tp, cp=cp, pp=pp, dp=dp), micro, schedule, zero


def _family(graph1: Graph, devices: int, per_node: int, global_batch: int, max_micro: int,
            virtual: tuple[int, ...], context: bool, options: dict) -> list[Group]:
    """The family's shapes, without pricing anything; an OptionError naming the reason
    when there are none."""
    layers = len({b for b in blocks(graph1) if b is not None})
    seq = next((d.size for op in graph1.ops for d in op.dims if d.role == "sequence"), 1)
    pairs = []  # (tp, cp) the graph can run (its checks do not depend on the batch)
    for tp in divisors(devices, per_node):
        for cp in (divisors(devices // tp) if context and seq >= LONG else [1]):
            try:
                check_graph(graph1, _probe(dict(tp=tp, cp=cp), 1, **options))
            except OptionError:
                continue
            pairs.append((tp, cp))
    groups: list[Group] = []
    for micro in divisors_up_to(global_batch, max_micro):
        for tp, cp in pairs:
            shapes = []
            for pp in divisors(devices // (tp * cp), max(layers, 1)):
                dp = devices // (tp * cp * pp)
                if global_batch % (micro * dp):
                    continue
                m = global_batch // (micro * dp)
                shapes.append((pp, dp, ["1f1b"] + [f"interleaved:{v}" for v in virtual
                                                   if pp > 1 and m % pp == 0 and pp * v <= layers]))
            if shapes:
                groups.append((micro, tp, cp, shapes))
    if not groups:
        raise OptionError(_why_none(devices, per_node, global_batch, layers, pairs))
    return groups


def divisors_up_to(n: int, limit: int) -> list[int]:
    """The divisors of ``n`` not above ``limit`` (``limit`` steps, however large ``n``)."""
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _why_none(devices: int, per_node: int, global_batch: int, layers: int,
              pairs: list[tuple[int, int]]) -> str:
    """Why the family is empty: tp = cp = 1 always runs and micro-batch 1 always divides,
    so no data-parallel degree divides the global batch."""
    least = min(devices // (tp * cp * pp) for tp, cp in pairs
                for pp in divisors(devices // (tp * cp), max(layers, 1)))
    return (f"no layout of the family exists on {devices} devices for global batch "
            f"{global_batch}: the data-parallel degree, devices / (tp x cp x pp) with tp up to "
            f"{per_node} and pp up to {max(layers, 1)} layers, must divide the global batch; "
            f"the least here is {least}")


def _probe(base: dict, micro: int, precision: str, attention: str, dropout: bool):
    """The layout of one (tp, cp) group on its own devices, for checks and op prices."""
    tp, cp = base["tp"], base["cp"]
    return make_layout(base, devices=tp * cp, micro_batch=micro, global_batch=micro,
                       sequence_parallel=tp > 1, precision=precision, attention=attention,
                       dropout=dropout)


def _key(e: Estimate) -> tuple:
    """Ties broken by the layout's fields (deterministic)."""
    lay = e.layout
    return (lay.tp, lay.pp, lay.dp, lay.cp, lay.micro_batch, lay.schedule, lay.virtual, lay.zero,
            lay.recompute)

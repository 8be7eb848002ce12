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
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from pase.cluster import get_cluster
from pase.errors import OptionError
from pase.ir import Graph
from pase.perf.hardware import achieved
from pase.perf.kernels import Pricer
from pase.perf.layout import check_graph, make_layout
from pase.perf.ops import price_ops
from pase.perf.pipeline import blocks
from pase.perf.step import Estimate, evaluate_layout

RECOMPUTE_ORDER = ("none", "selective", "full")
LONG = 8192  # context parallelism is searched from this sequence length up


@dataclass(frozen=True)
class SearchResult:
    """The best layout found, how many were priced, and the search's CPU seconds."""

    best: Estimate | None
    priced: int
    fitting: int
    seconds: float
    ranked: tuple[Estimate, ...]


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def search_layouts(build: Callable[[int], Graph], devices: int, cluster, global_batch: int, *,
                   precision: str = "bf16", attention: str = "fused", dropout: bool = False,
                   max_micro_batch: int = 64,
                   virtual: tuple[int, ...] = (2, 3, 4), context: bool = True, keep: int = 5,
                   progress: Callable[[str], None] | None = None) -> SearchResult:
    """Price every layout of the family (module docstring); ``build(m)`` gives the
    graph at micro-batch size ``m``. The result ranks fitting layouts by step time."""
    start = time.process_time()
    cl = get_cluster(cluster, devices)
    hw = achieved(cl.device)
    pricer = Pricer(cl.device, hw, cl.device.peak(precision) * 1e12,
                    4.0 if precision == "fp32" else 2.0)
    graph1 = build(1)
    layers = len({b for b in blocks(graph1) if b is not None})
    seq = next((d.size for op in graph1.ops for d in op.dims if d.role == "sequence"), 1)
    tps = [t for t in divisors(devices) if t <= cl.devices_per_node]
    found: list[Estimate] = []
    priced = 0
    for micro in [m for m in divisors(global_batch) if m <= max_micro_batch]:
        graph = graph1 if micro == 1 else build(micro)
        for tp in tps:
            for cp in (divisors(devices // tp) if context and seq >= LONG else [1]):
                base = dict(tp=tp, cp=cp)
                probe = make_layout(base, devices=tp * cp, micro_batch=micro, global_batch=micro,
                                    sequence_parallel=tp > 1, precision=precision,
                                    attention=attention, dropout=dropout)
                try:
                    check_graph(graph, probe)
                except OptionError:
                    continue
                ops = price_ops(graph, probe, pricer)
                for pp in divisors(devices // (tp * cp)):
                    dp = devices // (tp * cp * pp)
                    if pp > max(layers, 1) or global_batch % (micro * dp):
                        continue
                    m = global_batch // (micro * dp)
                    schedules = ["1f1b"] + [f"interleaved:{v}" for v in virtual
                                            if pp > 1 and m % pp == 0 and pp * v <= layers]
                    for schedule in schedules:
                        for zero in (0, 1, 2, 3):
                            for recompute in RECOMPUTE_ORDER:
                                lay = make_layout(dict(base, pp=pp, dp=dp), devices=devices,
                                                  micro_batch=micro, global_batch=global_batch,
                                                  schedule=schedule, zero=zero, recompute=recompute,
                                                  sequence_parallel=tp > 1, precision=precision,
                                                  attention=attention, dropout=dropout)
                                est = evaluate_layout(graph, cl, lay, ops)
                                priced += 1
                                if est.fits_memory:
                                    found.append(est)
                                    break
        if progress is not None:
            progress(f"micro-batch {micro}: {priced} layouts priced, {len(found)} fit")
    found.sort(key=lambda e: (e.step_seconds, _key(e)))
    return SearchResult(found[0] if found else None, priced, len(found),
                        time.process_time() - start, tuple(found[:keep]))


def _key(e: Estimate) -> tuple:
    """Ties broken by the layout's fields (deterministic)."""
    lay = e.layout
    return (lay.tp, lay.pp, lay.dp, lay.cp, lay.micro_batch, lay.schedule, lay.virtual, lay.zero,
            lay.recompute)

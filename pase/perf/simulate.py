"""Simulate a priced layout's pipeline step, event by event (the analytic check).

:func:`simulate_step` replays one step of an :class:`~pase.perf.Estimate`: every
stage runs its schedule's program (:mod:`pase.perf.schedule`) of forwards and
backwards of every micro-batch and chunk, a task starts when its device is free
and its input has arrived over the pipeline link, and the step ends with the
once-per-step tail (gradient sync, optimizer). The analytic price uses the
schedule's closed forms; the two agree within a few percent
(benchmarks/published.py prints both), exactly for equal stages.
"""
from __future__ import annotations

from pase.perf.schedule import Work, build, replay
from pase.perf.step import Estimate


def programs(schedule: str, p: int, m: int, v: int) -> list[list[tuple[str, int, int]]]:
    """Per stage, its tasks ``(kind, chunk, micro-batch)`` in order (chunk: the
    global chunk index ``c * p + s`` for the stage's ``c``-th chunk)."""
    pipe = build(schedule, p, m, v)
    return [[tuple(task) for step in prog for task in step] for prog in pipe.programs]


def simulate_step(estimate: Estimate) -> float:
    """The simulated step time of ``estimate``'s layout, in seconds."""
    lay = estimate.layout
    d = estimate.details
    p = lay.pp
    v = lay.virtual if lay.schedule == "interleaved" else 1
    pipe = build(lay.schedule, p, lay.microbatches, v)
    work = [Work(d["stage_forward_seconds"][c % p] / v, d["stage_backward_seconds"][c % p] / v)
            for c in range(p * v)]
    sends = [d["send_seconds"][c % p] for c in range(p * v)]
    return max(replay(pipe, work, sends).ends) + d["once_seconds"]

"""The pipeline search's schedules: names, micro-batches in flight, the priced step.

Three schedules, with ``s`` stages (device groups), ``m`` micro-batches, per-micro-batch
stage times ``t_i`` and per-direction link times ``x_b``:

- ``gpipe`` and ``1f1b``: :func:`step_seconds` (:mod:`pase.pipeline.search` explains the
  periods); stage ``i`` holds ``m`` (GPipe) or ``min(m, s - i)`` (1F1B) micro-batches;
- ``interleaved:V``: Megatron-LM's interleaved 1F1B, the model cut into ``s V`` chunks
  placed round-robin (chunk ``c`` on group ``c mod s``), ``m`` a multiple of ``s``. Its
  step and in-flight counts are the closed forms the layout path prices
  (:func:`pase.perf.pipeline.pipeline_seconds`, :func:`pase.perf.pipeline.in_flight`):
  ``(m + (s - 1) / V) T`` with ``T`` the slowest group's time per micro-batch (its
  chunks' times and the sends into them), and group ``i`` holds
  ``(s - i) (1 + (s - 1) / (s V))`` micro-batches' activations of all its chunks.

A plan may also run ``zb-h1`` or ``dualpipe`` (:data:`PLAN_ONLY`: a layout written as a
plan, which the op-level search does not search): each stage's time per micro-batch is
then a :class:`pase.perf.schedule.Work` (forward, backward, the weight-gradient part it
puts off) and the step is the closed form :func:`pase.perf.schedule.step_seconds` prices
such a layout with; every stage holds ``min(m, s)`` micro-batches under ZB-H1, ``s + 1``
under DualPipe, whose device group ``i`` runs stage ``i`` of one direction and stage
``s - 1 - i`` of the other (:func:`mirror`).

These few functions are the only place the search reads schedule math, so they can be
pointed at one schedule module later.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pase.errors import OptionError
from pase.perf import pipeline as closed_forms
from pase.perf import schedule as forms
from pase.perf.schedule import Work

PLAIN = ("1f1b", "gpipe")
VIRTUAL = (2, 3, 4)  # the interleavings the layout search tries (pase.perf.search)
NAMES = ("1f1b", "gpipe", "interleaved", "interleaved:V", "auto")
PLAN_ONLY = ("zb-h1", "dualpipe")  # run by a plan (a layout's), not searched op by op


@dataclass(frozen=True)
class Shape:
    """What the layout path's closed forms read of a layout: pp, m, schedule, V."""

    pp: int
    microbatches: int
    schedule: str
    virtual: int = 1


def parse(schedule: str | Sequence[str]) -> tuple[tuple[str, int], ...]:
    """``(name, V)`` pairs from ``1f1b``, ``gpipe``, ``interleaved`` (V in 2, 3, 4),
    ``interleaved:V``, ``auto`` (1F1B and the interleavings) or a list of them."""
    items = [schedule] if isinstance(schedule, str) else list(schedule)
    out: list[tuple[str, int]] = []
    for item in items:
        text = str(item).strip().lower()
        if text in PLAIN:
            found = [(text, 1)]
        elif text == "auto":
            found = [("1f1b", 1)] + [("interleaved", v) for v in VIRTUAL]
        elif text == "interleaved":
            found = [("interleaved", v) for v in VIRTUAL]
        elif text.startswith("interleaved:") and text[12:].isdigit() and int(text[12:]) >= 2:
            found = [("interleaved", int(text[12:]))]
        else:
            raise OptionError(f"unknown schedule {item!r}; allowed: {', '.join(NAMES)} "
                              f"(V an integer >= 2)")
        out.extend(f for f in found if f not in out)
    if not out:
        raise OptionError(f"no schedule given; allowed: {', '.join(NAMES)}")
    return tuple(out)


def label(name: str, virtual: int) -> str:
    """``1f1b``, ``gpipe`` or ``interleaved:V`` (the plan's ``schedule`` field)."""
    return name if name in PLAIN else f"{name}:{virtual}"


def unlabel(text: str) -> tuple[str, int]:
    """The inverse of :func:`label` (one schedule), or a :data:`PLAN_ONLY` one."""
    if str(text).strip().lower() in PLAN_ONLY:
        return str(text).strip().lower(), 1
    pairs = parse(text)
    if len(pairs) != 1:
        raise OptionError(f"schedule {text!r} names {len(pairs)} schedules; a plan runs one")
    return pairs[0]


def in_flight(name: str, virtual: int, microbatches: int, stages: int, index: int) -> float:
    """Micro-batches whose activations group ``index`` of ``stages`` holds at its peak."""
    if name in ("gpipe", *PLAN_ONLY):
        return forms.in_flight(name, stages, microbatches, index)
    if name == "interleaved":
        return closed_forms.in_flight(Shape(stages, microbatches, name, virtual), index)
    return min(microbatches, stages - index)


def period(name: str, slowest_stage: float, slowest_link: float) -> float:
    """GPipe and 1F1B: seconds between two micro-batches in the steady state."""
    if name == "gpipe":
        return max(slowest_stage, slowest_link)
    return slowest_stage + 2 * slowest_link


def step_seconds(times: Sequence[float], links: Sequence[float], microbatches: int,
                 schedule: str = "1f1b") -> float:
    """GPipe and 1F1B's priced step from stage times and per-direction link times."""
    pace = period(schedule, max(times), max(links, default=0.0))
    return sum(times) + 2 * sum(links) + (microbatches - 1) * pace


def interleaved_seconds(group_times: Sequence[float], microbatches: int, virtual: int) -> float:
    """Interleaved 1F1B's step from each group's time per micro-batch (sends included)."""
    shape = Shape(len(group_times), microbatches, "interleaved", virtual)
    return closed_forms.pipeline_seconds(shape, list(group_times))


def chunk_units(units: int, stages: int, virtual: int) -> list[int]:
    """Units per chunk of an interleaved plan, as the layout path cuts layers
    (:func:`pase.perf.pipeline.chunk_sizes`)."""
    return closed_forms.chunk_sizes(units, stages * virtual)


def interleavable(stages: int, virtual: int, microbatches: int, units: int) -> bool:
    """Whether ``s`` groups of ``V`` chunks run ``m`` micro-batches: ``s >= 2``, ``m`` a
    multiple of ``s`` (Megatron-LM's rule, as the layout family has it), a unit a chunk."""
    return stages >= 2 and microbatches % stages == 0 and stages * virtual <= units


def priced_step(schedule: str, microbatches: int, times: Sequence[float | Work],
                links: Sequence[float]) -> float:
    """A plan's step from its groups' times per micro-batch and its links (per cut and
    direction; an interleaved plan's cut ``c`` feeds chunk ``c`` on group ``c mod s``).
    ``zb-h1``: each time a :class:`Work` with the sends in it, no links."""
    name, virtual = unlabel(schedule)
    if name in PLAN_ONLY:
        if links or not all(isinstance(t, Work) for t in times):
            raise OptionError(f"a {name} plan's step reads each stage's Work, sends included")
        return forms.step_seconds(name, times, microbatches)
    if name != "interleaved":
        return step_seconds(times, links, microbatches, name)
    total = list(times)
    for c, x in enumerate(links, start=1):
        total[c % len(total)] += 2 * x  # a chunk's input forward, its gradient back
    return interleaved_seconds(total, microbatches, virtual)


def plan_step(schedule: str, microbatches: int, times: Sequence[float | Work],
              links: Sequence[float],
              tails: Sequence[float] = ()) -> float:
    """The one rule a pipeline plan's step is priced by, as the layout path prices a pipeline
    layout (:func:`pase.perf.step.evaluate_layout`): the schedule over the stages' times per
    micro-batch and the links (:func:`priced_step`), then once a step the largest stage
    tail (its exposed gradient sync and optimizer step: the stages run them in parallel
    after the drain, so the slowest one ends the step)."""
    return priced_step(schedule, microbatches, times, links) + max(tails, default=0.0)


def mirror(schedule: str, stages: int, index: int) -> int | None:
    """:func:`pase.perf.schedule.mirror` of a plan's schedule (DualPipe's other stage)."""
    return forms.mirror(unlabel(schedule)[0], stages, index)

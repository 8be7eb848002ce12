"""Pipeline schedules, kept once: their programs, closed forms and event replay.

- :mod:`.programs`: per device, its ordered steps of tasks (:func:`build`) for GPipe,
  1F1B, interleaved 1F1B, ZB-H1 and DualPipe;
- :mod:`.forms`: the closed forms (step seconds, bubble, micro-batches in flight, the
  stages a device group holds);
- :mod:`.replay`: the event replay of a program (:func:`replay`).

The layout path (:mod:`pase.perf.step`, :mod:`pase.perf.memory`) prices with the
closed forms; :mod:`pase.perf.simulate` and :mod:`pase.sim.pipeline` replay the
programs; the two agree exactly for equal stages (tests/perf/test_schedule.py).
:data:`SCHEDULES` spells the names as a ``--schedule`` option takes them (:func:`parse`).
"""
from pase.perf.schedule.forms import (
    bubble_fraction,
    bubble_seconds,
    in_flight,
    mirror,
    parameter_copies,
    period,
    step_seconds,
)
from pase.perf.schedule.programs import NAMES, SCHEDULES, Pipe, Step, Task, build, parse
from pase.perf.schedule.replay import Ran, Replay, Work, replay

__all__ = ["NAMES", "SCHEDULES", "Pipe", "Ran", "Replay", "Step", "Task", "Work", "build",
           "bubble_fraction", "bubble_seconds", "in_flight", "mirror", "parameter_copies", "parse",
           "period", "replay", "step_seconds"]

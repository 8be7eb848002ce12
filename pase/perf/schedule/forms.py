"""Closed forms: a step's seconds, its bubble, and the micro-batches in flight.

With ``p`` stages, ``m`` micro-batches, per micro-batch of a stage ``F`` forward,
``B`` the whole backward and ``W`` its weight-gradient part, and ``T = F + B``:

===========  ===============================  ==========================
schedule     bubble (equal stages)            in flight, first stage
===========  ===============================  ==========================
gpipe        ``(p - 1) T``                    ``m``
1f1b         ``(p - 1) T``                    ``min(m, p)``
interleaved  ``(p - 1) T / V``                ``p (1 + (p - 1) / (p V))``
zb-h1        ``(p - 1) (F + B - 2W)`` (*)     ``min(m, p)``
dualpipe     ``(p/2 - 1) (F&B + B - 3W)``     ``p + 1`` (and 2x parameters)
===========  ===============================  ==========================

(Narayanan et al., SC'21; Korthikanti et al., MLSys'23 for the interleaved memory;
Qi et al., ICLR 2024, section 2.1: ZB-H1's ``(p - 1)(T_F + T_B - T_W)`` with their
``T_B`` the input gradient alone, written here as DeepSeek-V3's table writes it, ZB1P;
DeepSeek-V3 technical report, table 2, for DualPipe, ``F&B`` a forward and a backward
run together, ``F + B`` unless they overlap.) The step is ``m T`` plus the bubble.

(*) while ``W <= F`` and ``W <= B - W``, as the paper has them; a longer weight
gradient fills no more than the slot it waits in, so ZB-H1's bubble is ``(p - 1)
max(F + B - 2W, F, B - W)`` (found by the event replay, exact for equal stages).
DualPipe's table is exact in the replay (which runs ``F&B`` as ``F + B``) for equal
stages with ``F = B - W`` and ``W <= F``; elsewhere it is the paper's estimate.
"""
from __future__ import annotations

from typing import Sequence

from pase.errors import OptionError
from pase.perf.schedule.programs import NAMES
from pase.perf.schedule.replay import Work


def period(schedule: str, slowest_stage: float, slowest_link: float) -> float:
    """GPipe and 1F1B: seconds between two micro-batches in the steady state, with
    transfers of ``slowest_link`` each way at a boundary: GPipe queues every forward, so
    the busiest server sets the pace; 1F1B's next backward waits for a round trip."""
    if schedule == "gpipe":
        return max(slowest_stage, slowest_link)
    if schedule == "1f1b":
        return slowest_stage + 2 * slowest_link
    raise OptionError(f"a period with links is priced for gpipe and 1f1b, not {schedule!r}")


def step_seconds(schedule: str, times: Sequence[float | Work], microbatches: int, *,
                 links: Sequence[float] = (), virtual: int = 1, fb: float | None = None) -> float:
    """One step's pipeline seconds from each stage's per-micro-batch time (a number, or a
    :class:`Work` where the weight gradient matters).

    - one stage: ``m T``;
    - gpipe, 1f1b: ``sum_i T_i + 2 sum_b x_b + (m - 1) P`` (``links``: per boundary, the
      seconds of a transfer each way; :func:`period` ``P``);
    - interleaved: ``(m + (p - 1) / V) T_max``;
    - zb-h1: 1F1B's form with the slowest stage's bubble shrunk to ZB-H1's, at least the
      slowest stage's ``m T``;
    - dualpipe: the busiest device's ``m/2`` micro-batches of both its chunks, plus the
      slowest stage's bubble (none where the report's form is negative: ``W > (F + 2B) /
      3``, outside the shape it was stated for, and no bubble is less than none).

    The last three take the sends folded into the stage times (``links`` empty)."""
    _known(schedule)
    work = [t if isinstance(t, Work) else Work(float(t), 0.0) for t in times]
    total = [t if not isinstance(t, Work) else t.forward + t.backward for t in times]
    p, m, slowest = len(total), microbatches, max(total)
    if links and schedule not in ("gpipe", "1f1b"):
        raise OptionError(f"schedule {schedule} takes the sends inside the stage times, not as links")
    if p == 1:
        return m * slowest
    if schedule == "interleaved":
        return (m + (p - 1) / virtual) * slowest
    if schedule in ("gpipe", "1f1b"):
        pace = period(schedule, slowest, max(links, default=0.0))
        return sum(total) + 2 * sum(links) + (m - 1) * pace
    pacing = work[max(range(p), key=lambda i: total[i])]
    if schedule == "zb-h1":  # no less than the slowest stage's own m micro-batches: with
        # stages far apart the form would give less (the fill and drain of the fast ones
        # cannot hide under the slow one's bubble; the replay is the check)
        return max(m * slowest,
                   (m - 1) * slowest + sum(total) - (p - 1) * (slowest - _zb_h1_slot(pacing)))
    busiest = max(total[i] + total[p - 1 - i] for i in range(p))
    return m / 2 * busiest + max(0.0, bubble_seconds(schedule, p, pacing, fb=fb))


def bubble_seconds(schedule: str, stages: int, work: Work | float, *, virtual: int = 1,
                   fb: float | None = None) -> float:
    """Idle seconds of a step over ``stages`` equal stages of ``work`` each (the table)."""
    _known(schedule)
    w = work if isinstance(work, Work) else Work(float(work), 0.0)
    p, t = stages, w.forward + w.backward
    if p == 1:
        return 0.0
    if schedule in ("gpipe", "1f1b"):
        return (p - 1) * t
    if schedule == "interleaved":
        return (p - 1) * t / virtual
    if schedule == "zb-h1":
        return (p - 1) * _zb_h1_slot(w)
    together = t if fb is None else fb
    return (p / 2 - 1) * (together + w.backward - 3 * w.weight)


def bubble_fraction(schedule: str, stages: int, microbatches: int, work: Work | float, *,
                    virtual: int = 1, fb: float | None = None) -> float:
    """The bubble's share of the step (equal stages): idle / (busy + idle)."""
    w = work if isinstance(work, Work) else Work(float(work), 0.0)
    idle = bubble_seconds(schedule, stages, w, virtual=virtual, fb=fb)
    return idle / (microbatches * (w.forward + w.backward) + idle)


def in_flight(schedule: str, stages: int, microbatches: int, stage: int,
              virtual: int = 1) -> float:
    """Micro-batches whose activations stage ``stage`` holds at its peak (a weight
    gradient put off keeps its micro-batch counted)."""
    _known(schedule)
    p, m = stages, microbatches
    if schedule == "gpipe":
        return m
    if schedule == "interleaved":  # exact on the first stage; on the others the replay
        # holds p + (p - 2 stage - 1) / V, more than this (the first stage stays the most)
        return min(float(m), (p - stage) * (1 + (p - 1) / (p * virtual)))
    if schedule == "zb-h1":  # every stage: p - stage - 1 warm-up forwards, stage W put off
        return min(m, p)
    if schedule == "dualpipe":
        return p + 1
    return min(m, p - stage)


def parameter_copies(schedule: str) -> int:
    """Copies of its stage's parameters a device holds: DualPipe's two directions run the
    same stages on opposite devices, so each holds two (DeepSeek-V3, table 2)."""
    _known(schedule)
    return 2 if schedule == "dualpipe" else 1


def mirror(schedule: str, stages: int, stage: int) -> int | None:
    """The other stage that stage ``stage``'s device group runs: DualPipe's ``stages - 1 -
    stage`` (the other direction's; the group holds both stages' parameters), None under
    every other schedule and on one stage."""
    _known(schedule)
    return stages - 1 - stage if schedule == "dualpipe" and stages > 1 else None


def _zb_h1_slot(w: Work) -> float:
    """ZB-H1's idle seconds per stage boundary (module docstring, (*))."""
    return max(w.forward + w.backward - 2 * w.weight, w.forward, w.backward - w.weight)


def _known(schedule: str) -> None:
    if schedule not in NAMES:
        raise OptionError(f"unknown schedule {schedule!r}; allowed: {', '.join(NAMES)}")

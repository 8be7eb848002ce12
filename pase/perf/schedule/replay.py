"""The event replay of a pipeline program (:func:`replay`).

Each device runs its steps in order; a step starts when the device is free and
every input of its tasks has arrived: a forward's activations from the device of
the chunk before, a backward's gradient from the device of the chunk after (and
its own forward done), a weight gradient's own input gradient done. A finished
forward sends its output on, a finished backward its input gradient back; each
direction of each device pair carries one transfer at a time, first come first
served, for the receiving chunk's send time. Nothing else is modelled: a
DualPipe ``F&B`` step takes its two tasks' sum (no overlap), and the step's tail
(gradient sync, optimizer) is the caller's.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

from pase.errors import InternalError, OptionError
from pase.perf.schedule.programs import Pipe, Step, Task


class Work(NamedTuple):
    """Seconds of one chunk for one micro-batch: forward, whole backward, and the part of
    the backward that is the weight gradient (0: not split)."""

    forward: float
    backward: float
    weight: float = 0.0

    def seconds(self, kind: str) -> float:
        if kind == "F":
            return self.forward
        if kind == "B":
            return self.backward
        return self.weight if kind == "W" else self.backward - self.weight


class Ran(NamedTuple):
    """One step or one transfer as it ran: ``where`` is the device (a step) or the
    ``(from, to)`` device pair (a transfer)."""

    where: int | tuple[int, int]
    start: float
    end: float
    tasks: Step


class Replay(NamedTuple):
    """Per device, the end of its last step and its most micro-batches in flight (a
    forward done whose backward, or weight gradient when split, is not); every step and
    every transfer that took time."""

    ends: list[float]
    peak: list[int]
    steps: list[Ran]
    transfers: list[Ran]


def replay(pipe: Pipe, work: Sequence[Work], sends: Sequence[float]) -> Replay:
    """Run ``pipe`` with ``work[c]`` per micro-batch of chunk ``c`` and ``sends[c]`` seconds to
    move chunk ``c``'s input to it (and its gradient back; a line's first chunk's is unused)."""
    chunks = len(pipe.device)
    if len(work) != chunks or len(sends) != chunks:
        raise OptionError(f"{pipe.schedule} on {pipe.stages} stages has {chunks} chunks; got "
                          f"{len(work)} chunk times and {len(sends)} send times")
    progs, device = pipe.programs, pipe.device
    done: dict[Task, float] = {}
    arrive: dict[Task, float] = {}  # a task's input from another device, there
    link_free: dict[tuple[int, int], float] = {}
    at, free = [0] * pipe.stages, [0.0] * pipe.stages
    held, peak = [0] * pipe.stages, [0] * pipe.stages
    steps: list[Ran] = []
    transfers: list[Ran] = []

    def send(task: Task, end: float, to: int) -> None:
        """The output of ``task`` (just ended) to chunk ``to``'s device."""
        if device[to] == device[task.chunk]:
            arrive[task] = end
            return
        pair = (device[task.chunk], device[to])
        t0 = max(end, link_free.get(pair, 0.0))
        t1 = t0 + sends[max(to, task.chunk)]
        link_free[pair] = arrive[task] = t1
        if t1 > t0:
            transfers.append(Ran(pair, t0, t1, (task,)))

    def run(d: int, step: Step, start: float) -> None:
        end = start
        for task in step:
            end += work[task.chunk].seconds(task.kind)
        free[d] = end
        steps.append(Ran(d, start, end, step))
        for task in step:
            done[task] = end
            if task.kind == "F":
                held[d] += 1
                peak[d] = max(peak[d], held[d])
                if not pipe.last(task.chunk):
                    send(task, end, task.chunk + 1)
                continue
            if task.kind != "I":  # an input gradient leaves its W holding the activations
                held[d] -= 1
            if task.kind != "W" and not pipe.first(task.chunk):
                send(task, end, task.chunk - 1)

    while any(at[d] < len(progs[d]) for d in range(pipe.stages)):
        moved = False
        for d in range(pipe.stages):
            while at[d] < len(progs[d]):
                ready = [_ready(pipe, task, done, arrive) for task in progs[d][at[d]]]
                if None in ready:
                    break
                run(d, progs[d][at[d]], max(free[d], *ready))
                at[d] += 1
                moved = True
        if not moved:
            raise InternalError(f"the {pipe.schedule} program deadlocked at p={pipe.stages}, "
                                f"m={pipe.microbatches}; a bug in pase.perf.schedule")
    return Replay(free, peak, steps, transfers)


def _ready(pipe: Pipe, task: Task, done: dict, arrive: dict) -> float | None:
    """When ``task``'s inputs are there, or None if one is not made yet."""
    kind, c, j = task
    if kind == "F":
        return 0.0 if pipe.first(c) else arrive.get(Task("F", c - 1, j))
    if kind == "W":
        return done.get(Task("I", c, j))
    own = done.get(Task("F", c, j))
    if own is None or pipe.last(c):
        return own
    later = arrive.get(Task("B", c + 1, j), arrive.get(Task("I", c + 1, j)))
    return None if later is None else max(own, later)

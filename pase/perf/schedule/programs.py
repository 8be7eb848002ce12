"""Pipeline programs: per device, its steps in order (:func:`build`).

A micro-batch runs the chunks of its line in order: chunk ``c`` feeds ``c + 1``
forward and gets its gradient back from it. Chunks are pipeline positions (a
stage's layers, or a part of them when interleaved); ``Pipe.device[c]`` is the
device that runs chunk ``c``. Task kinds: ``F`` forward, ``B`` the whole backward,
and, for the schedules that split it (Qi et al., ICLR 2024), ``I`` its
input-gradient part (their B) and ``W`` its weight-gradient part, which waits for
nothing but its own ``I`` and so can fill bubbles. A step is the tasks a device
runs as one block: one task, or DualPipe's forward of one direction paired with a
backward of the other (its overlapped ``F&B``).
"""
from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

from pase.errors import OptionError

NAMES = ("1f1b", "gpipe", "interleaved", "zb-h1", "dualpipe")
# As a --schedule option spells them (interleaved takes its chunks per device).
SCHEDULES = ("1f1b", "gpipe", "interleaved:V", "zb-h1", "dualpipe")


class Task(NamedTuple):
    kind: str  # F, B, I or W (module docstring)
    chunk: int
    micro: int


Step = tuple[Task, ...]


@dataclass(frozen=True)
class Pipe:
    """A schedule laid out: chunks, their devices, and each device's program."""

    schedule: str
    stages: int
    microbatches: int
    virtual: int
    device: tuple[int, ...]  # per chunk
    lines: int  # separate chains of chunks: 2 for DualPipe's two directions, else 1
    programs: tuple[tuple[Step, ...], ...]  # per device

    def first(self, chunk: int) -> bool:
        return chunk % (len(self.device) // self.lines) == 0

    def last(self, chunk: int) -> bool:
        per = len(self.device) // self.lines
        return chunk % per == per - 1


def parse(text: str) -> tuple[str, int]:
    """A --schedule spelling as (name, chunks per device): ``interleaved:4`` is ("interleaved", 4)."""
    text = str(text)
    if text in NAMES and text != "interleaved":
        return text, 1
    match = re.fullmatch(r"interleaved:([1-9]\d*)", text)
    if match:
        return "interleaved", int(match.group(1))
    raise OptionError(f"unknown schedule {text!r}; allowed: {', '.join(SCHEDULES)}")


def build(schedule: str, stages: int, microbatches: int, virtual: int = 1) -> Pipe:
    """``schedule``'s programs on ``stages`` devices for ``microbatches`` micro-batches
    (``virtual`` chunks per device when interleaved)."""
    p, m = stages, microbatches
    if schedule not in NAMES:
        raise OptionError(f"unknown schedule {schedule!r}; allowed: {', '.join(NAMES)}")
    if p < 1 or m < 1 or virtual < 1:
        raise OptionError(f"a pipeline needs stages, micro-batches and chunks per device >= 1, "
                          f"got {p}, {m}, {virtual}")
    if schedule == "dualpipe":
        if p % 2 or m % 2 or m < 2 * p:
            raise OptionError(f"schedule dualpipe needs an even number of stages and an even number "
                              f"of micro-batches of at least twice the stages, got {p} stages, "
                              f"{m} micro-batches")
        device = tuple(range(p)) + tuple(range(p - 1, -1, -1))
        return Pipe(schedule, p, m, 1, device, 2, tuple(_dualpipe(p, m, r) for r in range(p)))
    v = virtual if schedule == "interleaved" else 1
    device = tuple(c % p for c in range(p * v))
    if schedule == "gpipe":
        progs = [[(Task("F", s, j),) for j in range(m)] + [(Task("B", s, j),) for j in range(m)]
                 for s in range(p)]
    elif schedule == "zb-h1":
        progs = [_zb_h1(p, m, s) for s in range(p)]
    else:
        progs = [_one_f_one_b(p, m, v, s) for s in range(p)]
    return Pipe(schedule, p, m, v, device, 1, tuple(tuple(x) for x in progs))


def _one_f_one_b(p: int, m: int, v: int, s: int) -> list[Step]:
    """1F1B (``v = 1``: ``p - s - 1`` warm-up forwards) and interleaved 1F1B
    (``2 (p - s - 1) + (v - 1) p`` warm-up forwards; the k-th forward runs chunk
    ``(k // p) mod v`` of micro-batch ``(k // pv) p + k mod p``, the backwards the chunks
    in reverse; Narayanan et al., SC'21); then one forward one backward, then the
    remaining backwards."""
    total = m * v
    warm = min(total, 2 * (p - s - 1) + (v - 1) * p if v > 1 else p - s - 1)
    prog = [_task("F", k, s, p, v) for k in range(warm)]
    for k in range(total - warm):
        prog += [_task("F", warm + k, s, p, v), _task("B", k, s, p, v)]
    return prog + [_task("B", k, s, p, v) for k in range(total - warm, total)]


def _task(kind: str, k: int, s: int, p: int, v: int) -> Step:
    """Stage ``s``'s ``k``-th forward (or backward) under (interleaved) 1F1B."""
    c = (k // p) % v
    if kind == "B":
        c = v - 1 - c
    return (Task(kind, c * p + s, (k // (p * v)) * p + k % p),)


def _zb_h1(p: int, m: int, s: int) -> list[Step]:
    """ZB-H1 (Qi et al., ICLR 2024, section 2.1): 1F1B's forwards and input gradients, each
    weight gradient put off until ``s`` are waiting on stage ``s``, the rest at the end;
    so every stage starts its input gradients a slot earlier and the late weight
    gradients fill the drain."""
    prog: list[Step] = [(Task("F", s, j),) for j in range(min(m, p - s - 1))]
    ahead, waiting = len(prog), deque()
    for j in range(m):
        if ahead < m:
            prog.append((Task("F", s, ahead),))
            ahead += 1
        prog.append((Task("I", s, j),))
        waiting.append(j)
        if len(waiting) > s:
            prog.append((Task("W", s, waiting.popleft()),))
    return prog + [(Task("W", s, j),) for j in waiting]


def _dualpipe(p: int, m: int, rank: int) -> list[Step]:
    """DualPipe (DeepSeek-V3 technical report, section 3.2.1; the order of DeepSeek's
    reference implementation): half the micro-batches enter at device 0, half at device
    ``p - 1``. Phase 0 is the direction in which this device is among the first half of
    the stages (position ``h``), phase 1 the other; ``(F0, B1)`` is a forward of phase 0
    overlapped with a backward of phase 1. Steps: ``2 (p/2 - h - 1)`` F0; ``h + 1`` x
    (F0, F1); ``p/2 - h - 1`` x (I1, W, F1); ``m/2 - p + h + 1`` x ((F0, B1), (F1, B0));
    ``p/2 - h - 1`` x (B1, (F1, B0)); ``h + 1`` x (B1, B0), the input gradient alone from
    the middle one on; ``p/2 - h - 1`` x (W, I0); ``h + 1`` x W. The middle devices run
    their first (F0, B1) as two steps."""
    half, n = p // 2, m // 2
    h = min(rank, p - 1 - rank)
    # phase -> (line, chunk of this device): line 0 runs chunks 0..p-1 on devices 0..p-1,
    # line 1 chunks p..2p-1 on devices p-1..0; its micro-batches are n..m-1
    lines = (0, 1) if rank < half else (1, 0)
    chunk = [lines[0] * p + h, lines[1] * p + p - 1 - h]
    ahead, behind = [0, 0], [0, 0]
    waiting: deque[Task] = deque()

    def f(ph: int) -> Task:
        ahead[ph] += 1
        return Task("F", chunk[ph], lines[ph] * n + ahead[ph] - 1)

    def b(ph: int, split: bool = False) -> Task:
        behind[ph] += 1
        t = Task("I" if split else "B", chunk[ph], lines[ph] * n + behind[ph] - 1)
        if split:
            waiting.append(Task("W", t.chunk, t.micro))
        return t

    prog: list[Step] = [(f(0),) for _ in range(2 * (half - h - 1))]
    for _ in range(h + 1):
        prog += [(f(0),), (f(1),)]
    for _ in range(half - h - 1):
        prog += [(b(1, True),), (waiting.popleft(),), (f(1),)]
    for i in range(n - p + h + 1):
        if i == 0 and h == half - 1:
            prog += [(f(0),), (b(1),)]
        else:
            prog.append((f(0), b(1)))
        prog.append((f(1), b(0)))
    for _ in range(half - h - 1):
        prog += [(b(1),), (f(1), b(0))]
    split = False
    for i in range(h + 1):
        if i == (h + 1) // 2 and h % 2 == 1:
            split = True
        prog.append((b(1, split),))
        if i == (h + 1) // 2 and h % 2 == 0:
            split = True
        prog.append((b(0, split),))
    for _ in range(half - h - 1):
        prog.append((waiting.popleft(),))
        prog.append((b(0, True),))
    return prog + [(w,) for w in waiting]

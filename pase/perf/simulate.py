"""Simulate a priced layout's pipeline step, event by event (the analytic check).

:func:`simulate_step` replays one step of an :class:`~pase.perf.Estimate`: every
stage runs its program of forwards and backwards of every micro-batch (and
chunk, when interleaved) in Megatron-LM's order, a task starts when its device is
free and its input has arrived over the pipeline link, and the step ends with the
once-per-step tail (gradient sync, optimizer). The analytic price uses the
closed forms of :mod:`pase.perf.pipeline`; the two agree within a few percent
(benchmarks/published.py prints both), exactly for equal stages under 1F1B.

Programs (``p`` stages, ``m`` micro-batches, ``V`` chunks per stage):

- GPipe: every forward, then every backward;
- 1F1B: ``p - s - 1`` warm-up forwards on stage ``s``, then one forward one
  backward, then the remaining backwards;
- interleaved: ``2 (p - s - 1) + (V - 1) p`` warm-up forwards, then 1F1B; the
  k-th forward runs chunk ``(k // p) mod V`` of micro-batch ``(k // pV) p + k mod p``,
  the k-th backward the chunks in reverse (Narayanan et al., SC'21).
"""
from __future__ import annotations

from pase.errors import OptionError
from pase.perf.step import Estimate


def programs(schedule: str, p: int, m: int, v: int) -> list[list[tuple[str, int, int]]]:
    """Per stage, its tasks ``(kind, chunk, micro-batch)`` in order (chunk: the
    global chunk index ``c * p + s`` for the stage's ``c``-th chunk)."""
    out = []
    for s in range(p):
        if schedule == "gpipe":
            prog = [("F", s, j) for j in range(m)] + [("B", s, j) for j in range(m)]
        else:
            vv = v if schedule == "interleaved" else 1
            total = m * vv
            warm = min(total, (2 * (p - s - 1) + (vv - 1) * p) if vv > 1 else (p - s - 1))
            prog = [_task("F", k, s, p, vv) for k in range(warm)]
            for k in range(total - warm):
                prog += [_task("F", warm + k, s, p, vv), _task("B", k, s, p, vv)]
            prog += [_task("B", k, s, p, vv) for k in range(total - warm, total)]
        out.append(prog)
    return out


def _task(kind: str, k: int, s: int, p: int, v: int) -> tuple[str, int, int]:
    """Stage ``s``'s ``k``-th forward (or backward): its global chunk and micro-batch."""
    c = (k // p) % v
    if kind == "B":
        c = v - 1 - c
    return (kind, c * p + s, (k // (p * v)) * p + k % p)


def simulate_step(estimate: Estimate) -> float:
    """The simulated step time of ``estimate``'s layout, in seconds."""
    lay = estimate.layout
    d = estimate.details
    p, m = lay.pp, lay.microbatches
    v = lay.virtual if lay.schedule == "interleaved" else 1
    fwd = [f / v for f in d["stage_forward_seconds"]]
    bwd = [b / v for b in d["stage_backward_seconds"]]
    link = [x for x in d["send_seconds"]]
    chunks = p * v
    progs = programs(lay.schedule, p, m, v)
    done: dict[tuple[str, int, int], float] = {}
    at, free = [0] * p, [0.0] * p
    while any(at[s] < len(progs[s]) for s in range(p)):
        moved = False
        for s in range(p):
            while at[s] < len(progs[s]):
                kind, c, j = progs[s][at[s]]
                ready = _ready(kind, c, j, chunks, done, link, p)
                if ready is None:
                    break
                start = max(free[s], ready)
                free[s] = done[(kind, c, j)] = start + (fwd[s] if kind == "F" else bwd[s])
                at[s] += 1
                moved = True
        if not moved:
            raise OptionError(f"the {lay.schedule} program deadlocked at p={p}, m={m}")
    return max(free) + d["once_seconds"]


def _ready(kind: str, c: int, j: int, chunks: int, done: dict, link: list[float],
           p: int) -> float | None:
    """When task (kind, chunk c, micro-batch j)'s input is there, or None if not yet made."""
    if kind == "F":
        if c == 0:
            return 0.0
        prev = done.get(("F", c - 1, j))
        return None if prev is None else prev + link[c % p]
    own = done.get(("F", c, j))
    if own is None:
        return None
    if c == chunks - 1:
        return own
    nxt = done.get(("B", c + 1, j))
    return None if nxt is None else max(own, nxt + link[(c + 1) % p])

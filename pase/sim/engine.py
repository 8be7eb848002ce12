"""A deterministic discrete-event engine: compute queues and fair-shared links.

A :class:`TaskGraph` holds three kinds of tasks joined by dependencies:

- compute: runs on one device for a fixed time; a device runs one task at a
  time, the ready task with the smallest priority key first;
- flow: waits ``latency`` seconds, then moves ``volume`` bytes through a set of
  link resources (a transfer uses the sender's and the receiver's port; a
  collective phase uses every member's). Bandwidth is processor-shared: a
  resource's capacity is split equally between its active flows, and a flow
  moves at the smallest share among its resources. Rates are recomputed when a
  flow starts or ends (the share a flow leaves unused on its other resources is
  not redistributed: simple, deterministic, and never faster than max-min);
- join: zero-time bookkeeping nodes.

Events at equal times are ordered by a sequence number, so runs are exactly
reproducible.
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

COMPUTE, FLOW, JOIN = 0, 1, 2
_ACTIVATE, _FLOW_DONE, _COMPUTE_DONE = 0, 1, 2
# Flows with less than this many bytes left count as done (float round-off).
_BYTES_EPS = 1e-6


@dataclass
class TaskGraph:
    """Tasks as parallel lists indexed by task id."""

    capacity: list[float]                       # bytes/s per link resource
    devices: int
    kind: list[int] = field(default_factory=list)
    succ: list[list[int]] = field(default_factory=list)
    ndeps: list[int] = field(default_factory=list)
    device: list[int] = field(default_factory=list)
    duration: list[float] = field(default_factory=list)
    priority: list[tuple] = field(default_factory=list)
    resources: list[tuple[int, ...]] = field(default_factory=list)
    volume: list[float] = field(default_factory=list)
    latency: list[float] = field(default_factory=list)
    label: list[str] = field(default_factory=list)
    category: list[str] = field(default_factory=list)
    shows: list[tuple[str, ...]] = field(default_factory=list)

    def _add(self, kind: int, device: int = -1, duration: float = 0.0, priority: tuple = (),
             resources: tuple[int, ...] = (), volume: float = 0.0, latency: float = 0.0,
             label: str = "", category: str = "", shows: tuple[str, ...] = ()) -> int:
        self.kind.append(kind)
        self.succ.append([])
        self.ndeps.append(0)
        self.device.append(device)
        self.duration.append(duration)
        self.priority.append(priority)
        self.resources.append(resources)
        self.volume.append(volume)
        self.latency.append(latency)
        self.label.append(label)
        self.category.append(category)
        self.shows.append(shows)
        return len(self.kind) - 1

    def compute(self, device: int, duration: float, priority: tuple, label: str, category: str) -> int:
        return self._add(COMPUTE, device=device, duration=duration, priority=priority, label=label,
                         category=category, shows=(f"gpu{device}",))

    def flow(self, resources: tuple[int, ...], volume: float, latency: float, label: str,
             category: str, shows: tuple[str, ...]) -> int:
        return self._add(FLOW, resources=resources, volume=volume, latency=latency, label=label,
                         category=category, shows=shows)

    def join(self) -> int:
        return self._add(JOIN)

    def after(self, task: int, *before: int) -> None:
        """``task`` starts only when every task in ``before`` has finished."""
        for b in before:
            self.succ[b].append(task)
            self.ndeps[task] += 1

    def __len__(self) -> int:
        return len(self.kind)


@dataclass
class Trace:
    """When each task started (flows: became ready) and ended, plus bytes per resource."""

    start: list[float]
    end: list[float]
    resource_bytes: list[float]
    events: int


def run(tg: TaskGraph) -> Trace:
    """Execute the task graph; every task must become ready (the graph is a DAG)."""
    n = len(tg)
    ndeps = list(tg.ndeps)
    start = [float("nan")] * n
    end = [float("nan")] * n
    res_bytes = [0.0] * len(tg.capacity)
    heap: list[tuple[float, int, int, int, int]] = []
    seq = 0
    now = 0.0
    queues: list[list[tuple[tuple, int]]] = [[] for _ in range(tg.devices)]
    busy = [False] * tg.devices
    dirty: set[int] = set()
    active: list[dict[int, None]] = [{} for _ in tg.capacity]
    remaining = [0.0] * n
    rate = [0.0] * n
    last = [0.0] * n
    version = [0] * n
    pending: deque[int] = deque(i for i in range(n) if ndeps[i] == 0)
    events = 0

    def push(t: float, etype: int, task: int, ver: int = 0) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (t, seq, etype, task, ver))

    def finish(task: int) -> None:
        end[task] = now
        for s in tg.succ[task]:
            ndeps[s] -= 1
            if ndeps[s] == 0:
                pending.append(s)

    def reshare(flows: dict[int, None]) -> None:
        for f in flows:
            if rate[f] > 0.0:
                remaining[f] = max(0.0, remaining[f] - rate[f] * (now - last[f]))
            last[f] = now
            rate[f] = min(tg.capacity[r] / len(active[r]) for r in tg.resources[f])
            version[f] += 1
            push(now + remaining[f] / rate[f], _FLOW_DONE, f, version[f])

    def drain() -> None:
        while pending:
            t = pending.popleft()
            start[t] = now
            k = tg.kind[t]
            if k == COMPUTE:
                heapq.heappush(queues[tg.device[t]], (tg.priority[t], t))
                dirty.add(tg.device[t])
            elif k == FLOW and (tg.volume[t] > _BYTES_EPS or tg.latency[t] > 0.0):
                push(now + tg.latency[t], _ACTIVATE, t)
            else:
                finish(t)

    def dispatch() -> None:
        for d in sorted(dirty):
            if not busy[d] and queues[d]:
                _, t = heapq.heappop(queues[d])
                busy[d] = True
                start[t] = now
                push(now + tg.duration[t], _COMPUTE_DONE, t)
        dirty.clear()

    drain()
    dispatch()
    while heap:
        now, _, etype, t, ver = heapq.heappop(heap)
        events += 1
        if etype == _COMPUTE_DONE:
            busy[tg.device[t]] = False
            dirty.add(tg.device[t])
            finish(t)
        elif etype == _ACTIVATE:
            if tg.volume[t] <= _BYTES_EPS:
                finish(t)
            else:
                affected: dict[int, None] = {t: None}
                for r in tg.resources[t]:
                    affected.update(active[r])
                    active[r][t] = None
                    res_bytes[r] += tg.volume[t]
                remaining[t] = tg.volume[t]
                reshare(affected)
        elif ver == version[t]:  # a flow's latest completion estimate
            remaining[t] = 0.0
            rate[t] = 0.0
            affected = {}
            for r in tg.resources[t]:
                del active[r][t]
                affected.update(active[r])
            reshare(affected)
            finish(t)
        drain()
        if not heap or heap[0][0] > now:
            dispatch()
    stuck = [i for i in range(n) if end[i] != end[i]]
    if stuck:
        raise RuntimeError(f"{len(stuck)} tasks never ran (first: {tg.label[stuck[0]]!r}); "
                           f"the task graph has a cycle")
    return Trace(start, end, res_bytes, events)

"""What a simulation reports: step time, per-device and per-link usage, a timeline."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np


class Event(NamedTuple):
    """One bar of the timeline: ``resource`` is ``gpuN`` or a link ``gpuN.intra``/``gpuN.inter``."""

    resource: str
    start: float
    end: float
    label: str
    kind: str  # forward, backward, communication, gradient-sync


@dataclass
class SimResult:
    """One simulated training step.

    Attributes:
        step_time: seconds until every task of the step has finished.
        compute_busy: seconds of compute per device.
        peak_memory: bytes per device at its peak (parameters and optimizer
            state of every op it runs, plus output activations held from an op's
            forward until its backward finishes).
        link_busy: seconds each device port (``gpuN.intra``, ``gpuN.inter``)
            had a message in flight in either direction, latency included.
        link_traffic: bytes through the port's busier direction divided by its
            bandwidth: the time it would need at full speed (a lower bound on
            the step).
        timeline: every compute task and, per port, a bar for each span in which
            messages of one re-layout (or one collective) cross it (the blocks a
            re-layout moves at once make one bar, not one each).
        device_memory: bytes of memory each device has (None: not known).
    """

    model: str
    cluster: str
    devices: int
    step_time: float
    compute_busy: np.ndarray
    peak_memory: np.ndarray
    link_busy: dict[str, float]
    link_traffic: dict[str, float]
    timeline: list[Event] = field(repr=False)
    stats: dict[str, Any] = field(default_factory=dict)
    device_memory: np.ndarray | None = None

    @property
    def fits_memory(self) -> bool | None:
        """Whether every device's simulated peak stays within its memory (None: unknown)."""
        if self.device_memory is None:
            return None
        return bool(np.all(self.peak_memory <= self.device_memory))

    def to_dict(self, timeline: bool = False) -> dict[str, Any]:
        """Plain JSON-ready data (seconds and bytes); the timeline only if asked."""
        out: dict[str, Any] = {
            "model": self.model, "cluster": self.cluster, "devices": self.devices,
            "step_time": self.step_time, "compute_busy": self.compute_busy.tolist(),
            "peak_memory": self.peak_memory.tolist(), "link_busy": dict(self.link_busy),
            "link_traffic": dict(self.link_traffic), "stats": dict(self.stats),
            "memory_cap_bytes": None if self.device_memory is None else
            float(self.device_memory.min()), "fits_memory": self.fits_memory}
        if timeline:
            out["timeline"] = [ev._asdict() for ev in self.timeline]
        return out

    def summary(self) -> str:
        busiest = max(self.link_busy.values(), default=0.0)
        return (f"{self.model} on {self.devices} x {self.cluster}: step {self.step_time * 1e3:.3f} ms; "
                f"compute busy max {self.compute_busy.max() * 1e3:.3f} ms, "
                f"busiest link {busiest * 1e3:.3f} ms, "
                f"peak memory max {self.peak_memory.max() / 2**30:.2f} GiB"
                + ("" if self.fits_memory is not False else
                   f" (over the {self.device_memory.min() / 2**30:.3g} GiB a device has)")
                + (f"; timed by {self.stats['timing']}" if "timing" in self.stats else ""))


def merge_busy(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of intervals."""
    return sum(e - s for s, e in merged(intervals))


def merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of intervals as disjoint intervals, in time order (touching ones join)."""
    out: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def peak_memory(devices: int, static: np.ndarray,
                changes: list[tuple[int, float, float]]) -> np.ndarray:
    """Peak per device of ``static`` plus ``(device, time, +/-bytes)`` changes.

    At equal times frees apply before allocations.
    """
    peak = static.astype(np.float64).copy()
    level = static.astype(np.float64).copy()
    for d, _, delta in sorted(changes, key=lambda c: (c[0], c[1], c[2])):
        level[d] += delta
        peak[d] = max(peak[d], level[d])
    return peak

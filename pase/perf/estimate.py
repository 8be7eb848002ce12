"""A priced training step (:class:`Estimate`, what :func:`pase.perf.step.evaluate_layout`
returns) and the invariants every one must hold (:func:`check_estimate`)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pase.errors import InternalError
from pase.perf.layout import Layout

VERSION = 1


@dataclass(frozen=True)
class Estimate:
    """The priced step (JSON keys documented in docs/json-output.md)."""

    step_seconds: float
    tokens_per_second: float
    mfu: float
    hfu: float
    memory_bytes: float
    fits_memory: bool
    breakdown: dict[str, float]
    memory: dict[str, float]
    layout: Layout
    cluster: str
    device_memory_bytes: float
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        lay = self.layout
        return {"version": VERSION, "step_seconds": self.step_seconds,
                "tokens_per_second": self.tokens_per_second, "mfu": self.mfu, "hfu": self.hfu,
                "memory_bytes": self.memory_bytes, "fits_memory": self.fits_memory,
                "device_memory_bytes": self.device_memory_bytes,
                "breakdown": dict(self.breakdown), "memory": dict(self.memory),
                "layout": {"tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "cp": lay.cp, "ep": lay.ep,
                           "etp": lay.expert_tp,
                           "micro_batch": lay.micro_batch, "global_batch": lay.global_batch,
                           "microbatches": lay.microbatches,
                           "schedule": lay.schedule if lay.schedule != "interleaved"
                           else f"interleaved:{lay.virtual}",
                           "zero": lay.zero, "recompute": lay.recompute,
                           "sequence_parallel": lay.sequence_parallel, "precision": lay.precision,
                           "attention": lay.attention, "dropout": lay.dropout,
                           "tp_overlap": lay.tp_overlap, "ep_overlap": lay.ep_overlap,
                           "recompute_layers": lay.recompute_layers},
                "cluster": self.cluster, **self.details}


def check_estimate(e: Estimate, model: str) -> None:
    """InternalError naming the first broken invariant of a priced step: a number no real step
    can have is a bug in the model, never an answer (the cluster's figures were checked on
    entry, :mod:`pase.cluster.model`)."""
    def fail(what: str) -> None:
        raise InternalError(f"the performance model priced {model!r} on {e.cluster} with an "
                            f"impossible {what}; a bug in pase.perf")

    def finite(value: float, positive: bool) -> bool:
        return math.isfinite(value) and (value > 0 if positive else value >= 0)

    if not finite(e.step_seconds, True):
        fail(f"step of {float(e.step_seconds):.6g} s")
    if not finite(e.tokens_per_second, True):
        fail(f"throughput of {float(e.tokens_per_second):.6g} tokens/s")
    for key, value in e.breakdown.items():
        if not finite(value, False):
            fail(f"{key} time of {float(value):.6g} s")
    total = sum(e.breakdown.values())
    if not math.isclose(total, e.step_seconds, rel_tol=1e-6):
        fail(f"breakdown: its parts sum to {float(total):.6g} s, the step is {float(e.step_seconds):.6g} s")
    for key in ("stage_seconds", "stage_forward_seconds", "stage_backward_seconds"):
        for value in e.details[key]:
            if not finite(value, True):
                fail(f"{key.replace('_', ' ')[:-8]} time of {float(value):.6g} s")
    for value in [*e.details["send_seconds"], e.details["once_seconds"]]:
        if not finite(value, False):
            fail(f"time of {float(value):.6g} s outside the stages")
    # MFU is 0 only for a model without matrix products (nothing for it to count)
    if not (0 <= e.mfu <= e.hfu <= 1 + 1e-12) or (e.mfu == 0 < e.hfu):
        fail(f"MFU {float(e.mfu):.6g} / HFU {float(e.hfu):.6g} (0 < MFU <= HFU <= 1)")
    if not finite(e.memory_bytes, True):
        fail(f"peak memory of {float(e.memory_bytes):.6g} bytes")
    for key, value in e.memory.items():
        if not finite(value, False):
            fail(f"{key.replace('_', ' ')} of {float(value):.6g} bytes")

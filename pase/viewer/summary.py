"""The page's summary cards: what was solved, how well, and what it costs.

Step time is the cost model's total when its unit is seconds, and the
simulator's step beside it when the strategy ran on a cluster. MFU is the
model's FLOP per step (three times its forward matrix products: forward and the
two backward products, a multiply-add being two FLOP) over the step time and
the devices' peak; it is shown only where a cluster gives the peak and the unit
is seconds.
"""
from __future__ import annotations

import math
from typing import Any

from pase.counts import counts
from pase.strategy import finite_or_none
from pase.viewer.planned import Planned

# A step's matrix-product FLOP: the forward products, then two backward products each.
FLOP_PER_FORWARD = 3


def summary(planned: Planned, sim: Any = None) -> dict[str, Any]:
    s = planned.strategy
    sol = s.solution
    meta = s.meta
    cluster = planned.cluster
    out: dict[str, Any] = {
        "model": s.graph_name, "devices": s.devices, "ops": len(planned.graph.ops),
        "cluster": cluster.name if cluster is not None else None,
        "per_node": cluster.devices_per_node if cluster is not None else None,
        "cost_model": s.cost_model, "unit": s.unit,
        "solver": sol.solver if sol else None, "method": sol.stats.get("method") if sol else None,
        "status": str(sol.status) if sol else "evaluated",
        "gap": finite_or_none(sol.gap) if sol else None,
        "total": finite_or_none(s.total_cost), "compute": finite_or_none(s.compute_cost),
        "communication": finite_or_none(s.communication_cost),
        "memory": meta.get("memory_bytes"), "memory_cap": meta.get("memory_cap_bytes"),
        "fits": meta.get("fits_memory_cap"),
        "step": finite_or_none(s.total_cost) if s.unit == "s" else None,
        "simulated_step": sim.step_time if sim is not None else None,
        "simulated_memory": float(sim.peak_memory.max()) if sim is not None else None,
        "notes": list(planned.notes),
    }
    out["mfu"] = mfu(planned, out["step"])
    return out


def mfu(planned: Planned, step: float | None) -> float | None:
    """Model FLOP utilisation of a step of ``step`` seconds, or None when not known."""
    cluster = planned.cluster
    if cluster is None or not step or not math.isfinite(step) or cluster.groups:
        return None
    flop = FLOP_PER_FORWARD * counts(planned.graph).matmul_flops
    return flop / (step * planned.devices * cluster.device.peak_tflops * 1e12)

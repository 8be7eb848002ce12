"""The page's summary cards: what was solved, how well, and what it costs.

Step time is the cost model's total when its unit is seconds (with its parts,
where the price report gives them), and the simulator's step beside it when the
strategy ran on a cluster; the page says what the simulation adds. ``dims`` is the
key to the dim letters the graph uses. MFU is the
model's FLOP per step (three times its forward matrix products: forward and the
two backward products, a multiply-add being two FLOP) over the step time and
the devices' peak; it is shown only where a cluster gives the peak and the unit
is seconds (a calibrated plan's price gives its own, at its precision's peak).
"""
from __future__ import annotations

import math
from typing import Any

from pase.counts import counts
from pase.schema import DIM_LETTERS
from pase.strategy import finite_or_none
from pase.viewer.plan import role_group
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
        "step": _step(s),
        "simulated_step": sim.step_time if sim is not None else None,
        "simulated_memory": float(sim.peak_memory.max()) if sim is not None else None,
        "notes": list(planned.notes),
        "breakdown": _breakdown(meta),
        "dims": dim_key(planned.graph),
    }
    out["mfu"] = mfu(planned, out["step"])
    return out


def _step(s: Any) -> float | None:
    """The plan's step in seconds: its price's (the calibrated model's ``step_seconds``),
    else the cost model's total when its unit is seconds."""
    priced = s.meta.get("step_seconds")
    if isinstance(priced, (int, float)) and not isinstance(priced, bool):
        return finite_or_none(float(priced))
    return finite_or_none(s.total_cost) if s.unit == "s" else None


def mfu(planned: Planned, step: float | None) -> float | None:
    """Model FLOP utilisation of a step of ``step`` seconds, or None when not known: the
    price's own where it gives one (at the plan's precision's peak), else the graph's
    FLOP over each of the step's micro-batches at the device's dense peak."""
    priced = planned.strategy.meta.get("mfu")
    if isinstance(priced, (int, float)) and not isinstance(priced, bool):
        return finite_or_none(float(priced))
    cluster = planned.cluster
    if cluster is None or not step or not math.isfinite(step) or cluster.groups:
        return None
    m = planned.strategy.meta.get("microbatches", 1)
    m = m if isinstance(m, int) and not isinstance(m, bool) and m >= 1 else 1
    flop = FLOP_PER_FORWARD * counts(planned.graph).matmul_flops * m
    return flop / (step * planned.devices * cluster.device.peak_tflops * 1e12)


def _breakdown(meta: dict[str, Any]) -> dict[str, float] | None:
    """The priced step's parts (a calibrated plan's price report), or None."""
    parts = meta.get("breakdown")
    if not isinstance(parts, dict):
        return None
    out = {k: float(parts[k]) for k in ("compute", "communication", "optimizer", "bubble")
           if isinstance(parts.get(k), (int, float))}
    if isinstance(meta.get("exposed_sync_seconds"), (int, float)):
        out["exposed_sync"] = float(meta["exposed_sync_seconds"])
    return out


def dim_key(*graphs: Any) -> list[list[Any]]:
    """``[letter, meaning, [colour groups]]`` for each dim letter the graphs' ops use: the
    letters of docs/glossary.md (a letter is local to an op; its role says what it is)."""
    roles: dict[str, set[str]] = {}
    for op in (op for g in graphs for op in g.ops):
        for d in op.dims:
            roles.setdefault(d.name, set()).add(role_group(d.role))
    return [[n, DIM_LETTERS.get(n, ""), sorted(roles[n])] for n in sorted(roles)]

"""Scaled costs and memory row for the float MIP backends (HiGHS, CBC).

Float MIP solvers decide with ABSOLUTE tolerances: HiGHS prunes every node that
cannot beat the incumbent by more than its MIP feasibility tolerance (1e-6), CBC
by its cutoff increment, and an LP counts as optimal once no reduced cost is
below -1e-7. Costs in seconds (1e-6 s per layer) sit entirely below those
numbers, and both solvers "proved" answers up to 12% above the optimum. Costs of
1e13 FLOP, on the other hand, are fine as they are.

So the objective is multiplied by the power of two that puts its largest
coefficient in ``[2**19, 2**20)``, whatever the unit. A power of two is exact.
The tolerances then sit near 1e-12 of the largest coefficient, while the float
rounding inside the LP (1e-16 of the coefficients, times the terms summed) stays
well below them. O(1) coefficients would be too coarse: costs of 1e13 that differ
by 1e5 (a test) differ by 5e-9 of the largest coefficient. The memory row is
scaled the same way, so that its feasibility tolerance is 1e-12 of the cap
rather than a byte count.

Bounds are mapped back by :func:`true_bound`, less the backend's pruning
tolerance, so they stay valid lower bounds at the Problem's own scale.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pase.solvers.ilp.formulation import Formulation, group_max

# The largest scaled objective coefficient and memory entry lie in [2**(E-1), 2**E).
OBJECTIVE_EXPONENT = 20
MEMORY_EXPONENT = 20
# The conservative memory row is lowered by this many scaled units: 100 times the
# 1e-6 MIP feasibility tolerance of HiGHS (CBC's is 1e-7), so no solution of it can
# overflow the true cap; it cuts off only totals within ~2e-10 of the largest entry.
MEMORY_MARGIN = 1e-4
# Largest exact float integer: integral memory summing below it adds up exactly.
EXACT_INTEGERS = 2.0 ** 53


@dataclass(frozen=True)
class FloatModel:
    """What a float backend is given: ``min cost @ z  s.t.  A z = rhs, memory @ x <= memory_rhs``."""

    cost: np.ndarray           # per column: Formulation.cost * 2**exponent
    exponent: int              # the objective's power-of-two scale
    rounding: float            # most any choice's true objective moved in the scaling (true units)
    memory: np.ndarray | None  # per x column, scaled; None without a memory row
    memory_rhs: float | None


def scale_exponent(top: float, target: int) -> int:
    """``k`` with ``top * 2**k`` in ``[2**(target-1), 2**target)`` (0 when ``top`` is 0)."""
    if not (top > 0 and math.isfinite(top)):
        return 0
    return target - math.frexp(top)[1]


def float_model(form: Formulation, conservative: bool) -> FloatModel:
    """The scaled model; ``conservative`` gives the memory row that only true fits satisfy."""
    top = float(form.cost.max(initial=0.0))
    k = scale_exponent(top, OBJECTIVE_EXPONENT)
    cost = np.ldexp(form.cost, k)
    # Exact unless an entry underflows (more than 2**1000 below the largest): then
    # bound the damage per vertex and edge, as CP-SAT's rounding does.
    moved = np.abs(np.ldexp(cost, -k) - form.cost)
    rounding = math.fsum(group_max(moved, form.group, form.num_groups)) if moved.any() else 0.0
    memory, rhs = (None, None) if form.memory is None else memory_row(form, conservative)
    return FloatModel(cost, k, rounding, memory, rhs)


def memory_row(form: Formulation, conservative: bool) -> tuple[np.ndarray, float]:
    """Scaled memory coefficients and right-hand side.

    Integral memory (bytes) summing below 2**53 is exact, so its row asks for
    ``floor(cap) + 0.5`` bytes: every total that fits has half a byte of room and
    every total that does not overflows by half a byte, far beyond the solver's
    tolerance. Other memory gets the float-summation error of ``Problem.fits`` as
    room. The conservative row is :data:`MEMORY_MARGIN` lower still.
    """
    mem, cap = form.memory, float(form.memory_cap)
    total = max(float(np.abs(mem).sum()), abs(cap))
    k = scale_exponent(max(float(np.abs(mem).max(initial=0.0)), abs(cap)), MEMORY_EXPONENT)
    if total < EXACT_INTEGERS and bool(np.all(mem == np.round(mem))):
        limit, room = math.floor(cap) + 0.5, 0.0
    else:
        limit, room = cap, (form.num_vertices + 2) * np.finfo(float).eps * total
    if conservative:
        return np.ldexp(mem, k), math.ldexp(limit - room, k) - MEMORY_MARGIN
    return np.ldexp(mem, k), math.ldexp(limit + room, k)


def true_bound(model: FloatModel, scaled_bound: float, tolerance: float) -> float | None:
    """A backend's bound on the scaled objective, as a bound on ``Formulation.cost @ z``.

    ``tolerance`` (scaled units) is how much better than its incumbent a solution
    may be and still be pruned by the backend; it and the scaling's rounding are
    subtracted. None for a bound that is not finite.
    """
    if not math.isfinite(scaled_bound):
        return None
    return math.ldexp(scaled_bound - tolerance, -model.exponent) - model.rounding

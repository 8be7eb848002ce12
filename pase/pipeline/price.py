"""A stage as the pipeline search charges it: its Problem's charge, plus what that hid.

(A plan's one price is :mod:`pase.pipeline.reprice`'s, by the layout path's rule; the
search charges the once-a-step terms ``1 / m`` per micro-batch inside each stage, as
below: docs/pipelines.md, "One price".)

The search prices each stage with its cost model's Problem (:mod:`pase.pipeline.stages`):
per micro-batch, with the once-a-step terms (gradient syncs, the optimizer step) charged
``1 / m``. Under the calibrated model that Problem charges each gradient sync at its
overlap tax, as if the backward pass hid it, and ZeRO-3's gathers at the tax, as if the
neighbouring layers' compute hid them. A stage's own price adds what does not hide,
by the rules of the per-op plan's price (:mod:`pase.cost_models.calibrated_plan`,
reached only through the model's methods), on the stage's ops:

- its syncs ``S`` against the window ``W`` of its last micro-batch's backward pass (the
  ops outside the embedding, times the share the model's ``sync_slack`` uses, ``1 - 1/L``
  for a graph of ``L > 1`` layers) and ZeRO 1-2's gather of the updated weights ``R``
  against the forward pass: ``max(tax S, S - (1 - tax) W)`` and the same for ``R``,
  once a step, so ``1 / m`` of the excess over ``tax (S + R)`` per micro-batch;
- ZeRO-3: per micro-batch, each layer's gathers and reduce-scatter beyond what its own
  compute hides (the stage's first layer's forward gather waits in full).

Both additions are ``>= 0``, and the first is at least ``x`` times the stage's summed
sync slack for any ``x`` in [0, 1], so the search's optimum, with or without the
slack lifted in, is a lower bound on every plan's own price (the step grows with each
stage time).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from pase.pipeline.stages import StageOracle, StageResult, stage_cost_model


@dataclass(frozen=True)
class StagePrice:
    """Seconds per micro-batch: as charged by the search's Problem, and the stage's own."""

    charged: float
    seconds: float
    slack: float = 0.0  # the stage's summed sync slack, once a step (0 under alpha-beta)

    def lifted(self, x: float, microbatches: int) -> float:
        """Seconds per micro-batch the search lifted by ``x`` charges (a bound for x in [0, 1])."""
        return self.charged + x * self.slack / microbatches

    @property
    def exposed(self) -> float:
        return self.seconds - self.charged


def stage_price(oracle: StageOracle, ranges: Sequence[tuple[int, int]], devices: int,
                microbatches: int, result: StageResult) -> StagePrice:
    """The price of ``result`` (solved for the op ``ranges`` on ``devices`` devices)."""
    lay = oracle.layered(devices, microbatches)
    index = [i for first, end in ranges for i in range(first, end)]
    choice = dict(zip(index, result.choice))
    p = lay.problem
    charged = float(sum(p.vertex_costs[i][c] for i, c in choice.items()))
    for (u, v), mat in zip(p.edges, p.edge_costs):
        if any(a <= u < b and a <= v < b for a, b in ranges):
            charged += float(mat[choice[u], choice[v]])
    model = stage_cost_model(oracle.cost_options, microbatches, oracle.cost_model)
    if not hasattr(model, "collective_roles"):  # alpha-beta charges every sync in full
        return StagePrice(charged, charged)
    slack = oracle.slack(devices, microbatches)
    total = 0.0 if slack is None else float(sum(slack[i][c] for i, c in choice.items()))
    return StagePrice(charged, charged + _unhidden(lay, model, choice, microbatches), total)


def _unhidden(lay: Any, model: Any, choice: dict[int, int], microbatches: int) -> float:
    """Seconds per micro-batch the Problem did not charge (module docstring)."""
    bound = model.bind(lay.graph, lay.problem.devices)
    hw, tax = bound.hw, bound.hw.overlap
    layers = {bound.context(op).unit for op in lay.graph.ops} - {"pre", "post"}
    share = 1 - 1 / len(layers) if len(layers) > 1 else 1.0  # as the model's sync_slack
    sync = refresh = window = forward = 0.0
    by_unit: dict[str, np.ndarray] = {}
    maps = lay.problem.variants
    for i, cand in choice.items():
        op = lay.graph.ops[i]
        zero, recompute = (0, False) if maps is None else maps[i].variant(cand)
        configs = np.asarray(lay.problem.candidates[i].configs[cand:cand + 1])
        work = _apply(bound.work(op, configs), zero, recompute)
        f, b = float(work.forward_seconds[0]), float(work.backward_seconds[0])
        again = f if recompute else 0.0
        unit = bound.context(op).unit
        if unit != "pre":
            window += b + again
            forward += f
        roles = {k: float(v[0]) for k, v in bound.collective_roles(work).items()}
        sync += roles["sync"]
        refresh += roles["refresh"]
        by_unit.setdefault(unit, np.zeros(5))
        by_unit[unit] += (f, b + again, roles["gather_forward"], roles["gather_backward"],
                          roles["scatter"])
    once = float(hw.overlapped(sync, window * share) + hw.overlapped(refresh, forward * share))
    excess = max(0.0, once - tax * (sync + refresh))
    return excess / microbatches + _fsdp_unhidden(by_unit, hw)


def _apply(work: Any, zero: int, recompute: bool) -> Any:
    from pase.work.variants import apply_variant

    return apply_variant(work, int(zero), bool(recompute))


def _fsdp_unhidden(by_unit: dict[str, np.ndarray], hw: Any) -> float:
    """ZeRO-3's gathers and reduce-scatters per micro-batch beyond the tax charged: the
    first layer's forward gather in full, every other one past its layer's compute."""
    exposed = charged = 0.0
    first = True
    for f, b, gf, gb, rs in by_unit.values():
        if gf + gb + rs == 0.0:
            continue
        exposed += gf if first else float(hw.overlapped(gf, f))
        exposed += float(hw.overlapped(gb + rs, b))
        charged += hw.overlap * (gf + gb + rs)
        first = False
    return max(0.0, exposed - charged)

"""A stage as the pipeline search charges it: its Problem's charge, and its own price.

The search prices each stage with its cost model's Problem (:mod:`pase.pipeline.stages`).
Under the calibrated model that is two numbers: per micro-batch (kernels, collectives,
ZeRO-3's gathers at the overlap tax, as if the neighbouring layers' compute hid them, its
own re-layouts, and the sends it receives) and its tail once a step (each gradient sync at
the tax, as if the backward pass hid it, and the optimizer step). A stage's own price is
the one the plan's one price gives it (the registered model's ``pipeline_stage``,
:func:`pase.cost_models.calibrated_pipeline.stage_terms`, and the same sends): the plan's
step is :func:`pase.pipeline.schedules.plan_step` over the own prices, the one price.

What the own price adds to the charge is ``>= 0`` in both numbers (the per-op plan's
correction: :mod:`pase.cost_models.calibrated_plan`), the tail's at least ``x`` times the
stage's summed sync slack for any ``x`` in [0, 1], so the search's least charge, with or
without the slack lifted in, is a lower bound on every plan's one price (the step grows
with each stage's time and tail). Under alpha-beta, with no tail, the charge is the price.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pase.pipeline.stage_model import stage_cost_model
from pase.pipeline.stages import StageOracle, StageResult


@dataclass(frozen=True)
class StagePrice:
    """A stage's seconds per micro-batch and tail (once a step): as charged by the search's
    Problem, and its own (the one price's)."""

    charged: float
    seconds: float
    tail_charged: float = 0.0
    tail: float = 0.0
    slack: float = 0.0  # the stage's summed sync slack, once a step (0 under alpha-beta)

    def lifted(self, x: float) -> float:
        """The tail the search lifted by ``x`` charges (a bound for x in [0, 1])."""
        return self.tail_charged + x * self.slack

    @property
    def exposed(self) -> float:
        return self.seconds - self.charged + self.tail - self.tail_charged


def stage_price(oracle: StageOracle, ranges: Sequence[tuple[int, int]], devices: int,
                microbatches: int, result: StageResult) -> StagePrice:
    """The price of ``result`` (solved for the op ``ranges`` on ``devices`` devices)."""
    ranges = tuple(tuple(r) for r in ranges)
    lay = oracle.layered(devices, microbatches)
    index = [i for first, end in ranges for i in range(first, end)]
    choice = dict(zip(index, result.choice))
    t, tail = lay.time_and_tail(index, result.choice, ranges)
    sends = oracle.sends(ranges, devices, microbatches)
    t += sends
    model = stage_cost_model(oracle.cost_options, microbatches, oracle.cost_model)
    if not hasattr(model, "pipeline_stage"):  # alpha-beta charges every sync in full
        return StagePrice(t, t)
    slack = oracle.slack(devices, microbatches)
    total = 0.0 if slack is None else float(sum(slack[i][c] for i, c in choice.items()))
    p = lay.problem
    configs, variants = {}, {}
    for i, cand in choice.items():
        name, vm = lay.graph.ops[i].name, (None if p.variants is None else p.variants[i])
        configs[name] = dict(lay.space.config(i, cand if vm is None else int(vm.config[cand])))
        if vm is not None and any(vm.variant(cand)):
            zero, recompute = vm.variant(cand)
            variants[name] = {"zero": int(zero), "recompute": bool(recompute)}
    work, own = model.pipeline_stage(lay.graph, ranges, devices, configs, variants,
                                     microbatches, oracle.cost_options)
    return StagePrice(t, work + sends, tail, own, total)

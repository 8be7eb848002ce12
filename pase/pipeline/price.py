"""A stage as the pipeline search charges it: its Problem's charge, and its own price.

The search prices each stage with its cost model's Problem (:mod:`pase.pipeline.stages`):
per micro-batch, with the once-a-step terms (gradient syncs, the optimizer step) charged
``1 / m`` per micro-batch. Under the calibrated model that Problem charges each gradient
sync at its overlap tax, as if the backward pass hid it, and ZeRO-3's gathers at the tax,
as if the neighbouring layers' compute hid them. A stage's own price is the one the plan's
one price gives it (the registered model's ``pipeline_stage``,
:func:`pase.cost_models.calibrated_pipeline.stage_terms`: seconds per micro-batch by the
per-op plan's rules and the once-a-step tail, its exposed syncs and optimizer step), with
the tail charged ``1 / m`` per micro-batch as the search charges it (a plan's one price
adds the largest tail once instead: :mod:`pase.pipeline.reprice`).

What the own price adds to the charge is ``>= 0`` (the per-op plan's correction:
:mod:`pase.cost_models.calibrated_plan`), and at least ``x`` times the stage's summed sync
slack over ``m`` for any ``x`` in [0, 1], so the search's optimum, with or without the
slack lifted in, is a lower bound on every plan's own price (the step grows with each
stage time).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

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
    if not hasattr(model, "pipeline_stage"):  # alpha-beta charges every sync in full
        return StagePrice(charged, charged)
    slack = oracle.slack(devices, microbatches)
    total = 0.0 if slack is None else float(sum(slack[i][c] for i, c in choice.items()))
    configs, variants = {}, {}
    for i, cand in choice.items():
        name, vm = lay.graph.ops[i].name, (None if p.variants is None else p.variants[i])
        configs[name] = dict(lay.space.config(i, cand if vm is None else int(vm.config[cand])))
        if vm is not None and any(vm.variant(cand)):
            zero, recompute = vm.variant(cand)
            variants[name] = {"zero": int(zero), "recompute": bool(recompute)}
    work, tail = model.pipeline_stage(lay.graph, ranges, devices, configs, variants,
                                      microbatches, oracle.cost_options)
    return StagePrice(charged, work + tail / microbatches, total)


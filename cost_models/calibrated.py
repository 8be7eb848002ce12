"""The calibrated cost model, registered: the performance model's rules for every config
of every op (:mod:`pase.cost_models.calibrated_rules`), the price of one plan
(:mod:`pase.cost_models.calibrated_plan`) and the certified search
(:mod:`pase.cost_models.calibrated_search`). The default cost model whenever a cluster
is given; docs/cost-model.md, "The calibrated model", explains it.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from pase.cost_models.calibrated_plan import price_plan, sync_slack
from pase.cost_models.calibrated_rules import CalibratedRules
from pase.cost_models.calibrated_search import certified
from pase.ir import Graph
from pase.problem import Problem, Solution
from pase.registry import COST_MODELS


@COST_MODELS.register("calibrated", "seconds and bytes by the performance model of pase evaluate "
                      "--layout (roofline kernels, fused attention, NCCL bus bandwidth, overlap, "
                      "mixed-precision states): the default with a cluster")
class CalibratedCostModel(CalibratedRules):
    __doc__ = CalibratedRules.__doc__

    def price_plan(self, graph: Graph, problem: Problem, choice) -> dict[str, Any]:
        """The plan's price (:func:`pase.cost_models.calibrated_plan.price_plan`)."""
        return price_plan(graph, self, problem, choice)

    def price_pipeline(self, plan: Any, graph: Graph | None = None) -> dict[str, Any]:
        """A pipeline plan's one price (:func:`pase.cost_models.calibrated_pipeline.
        price_pipeline`), for :mod:`pase.pipeline`, which reaches cost models by the registry;
        ``graph``: the model at the plan's micro-batch, when the caller has it (a model
        given as a config file or a Graph is not rebuilt by name)."""
        from pase.cost_models.calibrated_pipeline import price_pipeline

        return price_pipeline(plan, graph=graph)

    def pipeline_stage(self, graph: Graph, ranges, devices: int, configs: dict, variants: dict,
                       microbatches: int, costs: dict) -> tuple[float, float]:
        """A pipeline stage's seconds per micro-batch (sends aside) and once-a-step tail
        (:func:`pase.cost_models.calibrated_pipeline.stage_terms`)."""
        from pase.cost_models.calibrated_pipeline import stage_terms

        work, tail, _, _ = stage_terms(graph, ranges, devices, configs, variants, microbatches,
                                       costs)
        return work, sum(tail)

    def stage_prices(self, graph: Graph, ranges, devices: int, configs: dict,
                     variants: dict) -> dict[str, dict]:
        """A pipeline stage's ops' carried prices (:func:`pase.cost_models.
        calibrated_pipeline.stage_op_prices`), which the pipeline simulator replays."""
        from pase.cost_models.calibrated_pipeline import stage_op_prices

        return stage_op_prices(self, graph, ranges, devices, configs, variants)

    def sync_slack(self, graph: Graph, problem: Problem) -> list[np.ndarray]:
        """Each candidate's sync slack (:func:`pase.cost_models.calibrated_plan.sync_slack`)."""
        return sync_slack(graph, self, problem)

    def search(self, graph: Graph, problem: Problem,
               run: Callable[[Problem], Solution]) -> tuple[Solution, dict[str, Any] | None]:
        """A certified search: ``run(problem)`` solves, up to two more bounding Problems
        tighten the bound (:func:`pase.cost_models.calibrated_search.certified`)."""
        return certified(graph, self, problem, run)


__all__ = ["CalibratedCostModel"]

"""A written pipeline plan read back into the search's terms.

A plan file records each stage's ops, devices, configs and variants. The search's own
stage Problems (:class:`~pase.pipeline.stages.StageOracle`, rebuilt from the plan's model,
batch and cost options) turn them back into candidate choices, from which
:mod:`pase.pipeline.reprice` charges the plan again; :func:`stage_prices` gives each
stage's ops their carried prices (:mod:`pase.prices`), which the pipeline simulator
replays (:mod:`pase.sim.pipeline`), from the plan's own configs and variants.
"""
from __future__ import annotations

import dataclasses

from pase.cluster import get_cluster
from pase.errors import StrategyError
from pase.ir import Graph
from pase.pipeline.layered import Layered
from pase.pipeline.plan import PipelinePlan, PipelineStage
from pase.pipeline.solve import _loader, with_defaults
from pase.pipeline.stage_model import stage_cost_model
from pase.pipeline.stage_result import _indices
from pase.pipeline.stages import StageOracle
from pase.registry import MODELS


def plan_oracle(plan: PipelinePlan) -> StageOracle:
    """The stage Problems the plan's search priced it with (powers-of-two splits)."""
    options = dict(plan.model_options)
    costs = dict(plan.cost_options)
    full, load = _loader(plan.model, plan.batch if plan.model in MODELS else None, options)
    if full != plan.batch:
        raise StrategyError(f"the plan's batch {plan.batch} is not the model's {full}")
    priced = with_defaults(costs, plan.cost_model,
                           get_cluster(costs.get("cluster", "dgx-a100"), plan.devices))
    oracle = StageOracle(load, full, priced, plan.memory_cap_bytes, {"powers_of_two": True},
                         cost_model=plan.cost_model, devices=plan.devices)
    graph = oracle.graph(plan.microbatches)
    if graph.name != plan.model:
        raise StrategyError(f"the plan is for graph {plan.model!r}, not {graph.name!r}")
    return oracle


def stage_choice(lay: Layered, stage: PipelineStage) -> tuple[int, ...]:
    """The stage's candidate of each of its ops (in its ranges' order) on ``lay``; an op
    the plan names no config for runs unsplit, as the simulator runs it."""
    index = _indices(stage.ranges)
    unsplit = {lay.graph.ops[j].name: {} for j in index}
    stage = dataclasses.replace(stage, configs={**unsplit, **stage.configs})
    return tuple(_candidate(lay, j, stage) for j in index)


def stage_prices(plan: PipelinePlan, graph: Graph) -> list[dict[str, dict]] | None:
    """Per stage, its ops' carried prices at one micro-batch on the stage's devices (its
    kernels, collectives, optimizer step and the re-layouts between its ops; the
    optimizer's fixed kernels on its first op), by the calibrated model's stage rules on
    the plan's own configs and variants (a plan the search started from, the layout
    family's, may hold a variant its Problem prunes); None for a plan of a model with no
    per-op seconds (alpha-beta). ``graph``: the plan's model at its micro-batch size."""
    if plan.cost_model != "calibrated":
        return None
    costs = dict(plan.cost_options)
    priced = with_defaults(costs, plan.cost_model,
                           get_cluster(costs.get("cluster", "dgx-a100"), plan.devices))
    model = stage_cost_model(priced, plan.microbatches, plan.cost_model, apart=True)
    return [model.stage_prices(graph, st.ranges, st.devices, st.configs, st.variants)
            for st in plan.stages]


def _candidate(lay: Layered, j: int, stage: PipelineStage) -> int:
    op = lay.graph.ops[j]
    k = lay.space.index_of(op.name, stage.configs[op.name])
    maps = getattr(lay.problem, "variants", None)
    if maps is None:
        if stage.variants.get(op.name):
            raise StrategyError(f"op {op.name!r}: the plan records a variant the cost model "
                                f"options ({stage.variants[op.name]}) do not search")
        return k
    vm = maps[j]
    want = stage.variants.get(op.name, {"zero": 0, "recompute": False})
    for c in range(len(vm.config)):
        if int(vm.config[c]) == k and vm.variant(c) == (int(want["zero"]), bool(want["recompute"])):
            return c
    raise StrategyError(f"op {op.name!r}: variant {want} is not among its candidates under the "
                        f"plan's cost options")

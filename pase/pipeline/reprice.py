"""A pipeline plan priced again from its file (``pase evaluate --strategy plan.json``).

One price for every pipeline plan, a pipeline layout's (``pase evaluate --layout``) or the
pipeline search's: under the calibrated model the registered model's ``price_pipeline``
(:mod:`pase.cost_models.calibrated_pipeline`: each stage's time per micro-batch and
its once-a-step tail by the layout path's rules, the step by
:func:`pase.pipeline.schedules.plan_step`). The pipeline search prices a
plan by the same rule (:mod:`pase.pipeline.price`: each stage's own time with its sends and
its own tail, the step by ``plan_step``); a plan it wrote also gets that price again,
rebuilt from what the plan records by the search's code, as ``search_step_seconds`` (its
``step_time``) and ``search_memory_bytes`` (its count of a stage's memory: states, kept
activations, full recomputation's working set, ZeRO-3's gathered weights, a kept tensor
moved to the stage that reads it).
Under alpha-beta, which has no once-a-step tail of its own, the charge is the price.
"""
from __future__ import annotations

from typing import Any

from pase import api
from pase.cluster import get_cluster
from pase.pipeline.cuts import crossing_elements
from pase.pipeline.plan import PipelinePlan
from pase.pipeline.price import stage_price
from pase.pipeline.recorded import plan_oracle, stage_choice
from pase.pipeline.schedules import plan_step
from pase.pipeline.search import LinkPricer
from pase.pipeline.stages import StageResult, stage_memory


def reprice(plan: PipelinePlan, search: bool = True) -> dict[str, Any]:
    """The plan's one price (module docstring), from scratch; ``search`` False: without
    the search's own charge again (its stage Problems rebuilt: the costly part)."""
    model = api.make_cost_model(plan.cost_model, **dict(plan.cost_options))
    if not hasattr(model, "price_pipeline"):
        return charged(plan)
    price = model.price_pipeline(plan)
    # the search's own plan: what it charged, again (a layout's plan, even one the search
    # answered with (pase.pipeline.seed), was never charged by the search)
    if search and plan.status != "layout" and plan.search.get("answer") != "start":
        again = charged(plan)
        price["search_step_seconds"] = again["step_seconds"]
        price["search_memory_bytes"] = again["memory_bytes"]
    return price


def charged(plan: PipelinePlan) -> dict[str, Any]:
    """What the pipeline search charges the plan: its stage seconds, links and memory."""
    costs = dict(plan.cost_options)
    cluster = costs.get("cluster", "dgx-a100")
    oracle = plan_oracle(plan)
    m = plan.microbatches
    seconds, tails, memory, passed = [], [], [], []
    for st in plan.stages:
        lay = oracle.layered(st.devices, m)
        choice = stage_choice(lay, st)
        price = stage_price(oracle, st.ranges, st.devices, m, StageResult(0.0, 0.0, (), True, choice))
        seconds.append(price.seconds)
        tails.append(price.tail)
        memory.append((lay, st, choice))
    s = len(plan.stages)
    for i, st in enumerate(plan.stages):  # chunk c holds what chunk c - 1 passes on
        passed.append(sum(_chunk_out(memory[(c - 1) % s], (c - 1) // s)
                          for c in range(i, s * len(st.ranges), s) if c))
    memory = [stage_memory(lay, st.ranges, choice, st.in_flight, incoming)[0]
              for (lay, st, choice), incoming in zip(memory, passed)]
    element = float(api.make_cost_model(plan.cost_model, **costs).bytes_per_element)
    links = LinkPricer(get_cluster(cluster, plan.devices),
                       lambda cut, mb: crossing_elements(oracle.graph(mb), cut) * element)
    folded = oracle.tails
    xs = [] if folded else _links(plan, links)
    step = plan_step(plan.schedule, m, seconds, xs, tails)
    cap = plan.memory_cap_bytes
    return {"kind": "pipeline", "model": plan.model, "devices": plan.devices,
            "schedule": plan.schedule, "microbatches": m, "step_seconds": step,
            "stage_seconds": seconds, "stage_tail_seconds": tails, "links": xs,
            "memory_bytes": max(memory), "stage_memory_bytes": memory,
            "fits_memory": cap is None or max(memory) <= cap, "recorded_step": plan.step_time,
            "search_step_seconds": step, "search_memory_bytes": max(memory)}


def _chunk_out(stage, chunk: int) -> float:
    """Bytes per micro-batch chunk ``chunk`` of ``stage`` (its Layered, plan stage and
    choice) passes on to the next chunk."""
    lay, st, choice = stage
    first, end = st.ranges[chunk]
    offset = sum(b - a for a, b in st.ranges[:chunk])
    return stage_memory(lay, ((first, end),), choice[offset:offset + end - first], 0.0)[1]


def _links(plan: PipelinePlan, links: LinkPricer) -> list[float]:
    """Per cut, in op order, the transfer between the stages on either side."""
    chunks = [(plan.stages[i], r) for i, r in plan.chunks]
    out = []
    for (src, _), (dst, (first, _)) in zip(chunks, chunks[1:]):
        out.append(links.between(first, plan.microbatches, src.device_range[0], src.devices,
                                 dst.device_range[0], dst.devices))
    return out

"""A pipeline layout (``pase evaluate --layout ... --output``, the whole-plan search's start)
written as a pipeline plan, the format ``pase solve --pipeline`` writes."""
from __future__ import annotations

from pase.errors import OptionError
from pase.ir import Graph
from pase.perf.layout import Layout
from pase.perf.pipeline import in_flight, placement
from pase.perf.plan import layout_configs, layout_variants, plan_cost_options
from pase.pipeline.plan import PipelinePlan, PipelineStage
from pase.pipeline.schedules import PLAIN, PLAN_ONLY
from pase.space import PADDED_ROLES

# The schedules a pipeline plan runs (a DualPipe plan's stage i is device group i's
# first-direction stage; it runs stage pp - 1 - i of the other direction too)
WRITTEN = (*PLAIN, "interleaved", *PLAN_ONLY)


def layout_pipeline(graph: Graph, lay: Layout, model: str,
                    model_options: dict | None = None, cost_options: dict | None = None):
    """A pipeline layout (pp > 1) as a pipeline plan (:class:`pase.pipeline.PipelinePlan`,
    the format ``pase solve --pipeline`` writes): ``pp`` stages of ``tp x cp x dp`` devices
    each, stage ``s`` on ranks ``s d .. (s + 1) d - 1`` (Megatron-LM's rank order puts the
    pipeline outermost), each holding the ops :func:`pase.perf.pipeline.placement` gives
    it with the splits of :func:`layout_configs` on its own mesh; ``graph`` is built at
    ``micro_batch x dp`` (one micro-batch of every data-parallel rank), the plan's batch
    is the global batch in ``lay.microbatches`` micro-batches. The stage times and memory
    are left 0 until the plan is priced (:func:`pase.cost_models.calibrated_pipeline.
    price_pipeline`). Under ``interleaved:V`` a stage holds ``V`` chunks (chunk ``c`` on
    stage ``c mod pp``), written as its ``chunks``."""
    if lay.schedule not in WRITTEN:
        raise OptionError(f"schedule {lay.schedule}: a pipeline plan holds "
                          f"{', '.join(WRITTEN)} schedules; this layout has no plan form yet")
    stages, _, chunk_of = placement(graph, lay)
    cost_options = {k: v for k, v in (cost_options or plan_cost_options(lay)).items()
                    if k != "microbatches"}  # the plan's own count
    configs = layout_configs(graph, lay, padded_roles=PADDED_ROLES)  # calibrated's plan
    variants = layout_variants(graph, lay)
    names = [op.name for op in graph.ops]
    d = lay.devices // lay.pp
    out = []
    for s in range(lay.pp):
        ranges = []
        for c in range(s, lay.pp * lay.virtual, lay.pp):
            idx = [i for i, ch in enumerate(chunk_of) if ch == c]
            if not idx or idx != list(range(idx[0], idx[-1] + 1)):
                raise OptionError(f"chunk {c} of the layout is not one range of ops")
            ranges.append((idx[0], idx[-1] + 1))
        ops = [names[i] for first, end in ranges for i in range(first, end)]
        out.append(PipelineStage(PipelineStage.names(names, ranges), ranges[0],
                                 (s * d, (s + 1) * d), int(in_flight(lay, s)), 0.0, 0.0,
                                 {op: configs[op] for op in ops if configs[op]},
                                 {op: variants[op] for op in ops if op in variants},
                                 ranges if lay.virtual > 1 else []))
    schedule = lay.schedule if lay.virtual == 1 else f"{lay.schedule}:{lay.virtual}"
    return PipelinePlan(model, lay.devices, lay.global_batch, lay.microbatches, schedule, out,
                        [0.0] * (lay.pp * lay.virtual - 1), 0.0, "layout", dict(model_options or {}),
                        dict(cost_options or {}), None, {}, "calibrated")

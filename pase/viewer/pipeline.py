"""The page of a pipeline plan: its stages by micro-batch, and each stage's ops.

Each stage is priced as the plan's stages are: its ops (a subgraph whose inputs
from the previous stage are graph inputs) at the micro-batch size on the stage's
own devices, under the plan's own cost model (``PipelinePlan.cost_model``: the
calibrated one unless the plan was solved with alpha-beta) and options, each stage
carrying its prices (:mod:`pase.prices`) as a solved Strategy does. So the plan
table's costs and memory are **per micro-batch** (the parameter-gradient syncs and
the optimizer step whole, where the search charges each micro-batch ``1/m`` of
them), each row carries its stage (``s``), and a stage's devices are its ranks in the whole cluster (tiles carry
the offset ``o``). The Time tab is :func:`pase.sim.pipeline.simulate_pipeline`'s
timeline: one row per stage, ``F3``/``B3`` for micro-batch 3.
"""
from __future__ import annotations

from typing import Any

from pase.pipeline import PipelinePlan
from pase.strategy import Strategy
from pase.viewer import build, comms, devices, plan, summary, timeline
from pase.viewer.build import VERSION
from pase.viewer.layout import pipeline_line
from pase.viewer.planned import Planned, planned_from


def stage_planned(plan_: PipelinePlan, cluster: Any = None) -> list[list[Planned]]:
    """Each stage's chunks (its one op range, or an interleaved stage's ``V``) re-priced on
    their subgraphs: each its own :class:`Planned`."""
    from pase import api
    from pase.registry import MODELS
    from pase.sim.pipeline import chunk_settings, stage_graph

    if plan_.model in MODELS:
        graph = api.load_graph(plan_.model, batch=plan_.microbatch_size, **plan_.model_options)
    else:
        graph = api.load_graph(plan_.model)
    options = dict(plan_.cost_options)
    cluster = options.pop("cluster", "dgx-a100") if cluster is None else cluster
    options.pop("cluster", None)
    out = []
    for st in plan_.stages:
        chunks = []
        for first, end in st.ranges:
            sub = stage_graph(graph, first, end)
            configs, variants = chunk_settings(st, sub)
            built = api.build_problem(sub, st.devices, plan_.cost_model, cluster=cluster,
                                      cost_options=options, variants=variants or None)
            choice = api.choice_of(built, configs)
            strategy = Strategy.from_choice(built.graph, built.space, built.problem, choice,
                                            priced_by=built.cost_model,
                                            cost_model=built.cost_model.name,
                                            meta=api.memory_report(built.problem, choice))
            chunks.append(planned_from(built, strategy))
        out.append(chunks)
    return out


def pipeline_model(plan_: PipelinePlan, *, cluster: Any = None, simulate: bool = True,
                   command: str | None = None) -> dict[str, Any]:
    chunks = stage_planned(plan_, cluster)
    rows: list[dict[str, Any]] = []
    placed: dict[str, Any] = {"tiles": [], "op_tile": [], "edges": [], "per_node": None}
    # every chunk in op order (an interleaved stage's come apart), so a row's index is its op's
    order = sorted((first, i, p) for i, st in enumerate(plan_.stages)
                   for (first, _), p in zip(st.ranges, chunks[i]))
    for first, i, p in order:
        d = devices.placements(p)
        names = [op.name for op in p.graph.ops]
        parts = comms.from_prices(names, p.strategy.op_prices, d["edges"]) or [{}] * len(names)
        for r, part in zip(build.op_rows(p), parts):
            r.update(part, s=i)
            rows.append(r)
        base = len(placed["tiles"])
        placed["tiles"] += [dict(t, o=plan_.stages[i].device_range[0]) for t in d["tiles"]]
        placed["op_tile"] += [None if t is None else t + base for t in d["op_tile"]]
        placed["edges"] += [[[e[0] + first] + e[1:] for e in edges] for edges in d["edges"]]
        placed["per_node"] = d["per_node"]
    stages = [c[0] for c in chunks]  # the layout line reads one chunk a stage
    events = sim = None
    if simulate:
        from pase.sim.pipeline import simulate_pipeline

        sim = simulate_pipeline(plan_, cluster)
        events = timeline.pack(sim.timeline, sim.step_time,
                               [f"stage{i}" for i in range(len(plan_.stages))])
    producers = [[e[0] for e in edges] for edges in placed["edges"]]
    every = [p for c in chunks for p in c]
    return {"version": VERSION, "kind": "pipeline", "summary": _summary(plan_, every, sim),
            "roles": list(plan.ROLE_GROUPS), "ops": rows, "folds": build.folds(rows, producers),
            "devices": placed, "timeline": events, "compare": None,
            "layout": pipeline_line(stages),
            "made": build.made(command), "attributed": "prices" if rows and "cm" in rows[0] else None,
            "pipeline": {"microbatches": plan_.microbatches, "schedule": plan_.schedule,
                         "bubble": plan_.bubble,
                         "stages": [{"ops": list(st.ops), "op_range": list(st.op_range),
                                     "device_range": list(st.device_range),
                                     "in_flight": st.in_flight,
                                     "seconds_per_microbatch": st.seconds_per_microbatch,
                                     "memory_bytes": st.memory_bytes} for st in plan_.stages]}}


def _summary(plan_: PipelinePlan, stages: list[Planned], sim: Any = None) -> dict[str, Any]:
    """The page's header; ``sim``: the plan's simulation (the Time tab's), None if skipped."""
    cluster = stages[0].cluster
    memory = max(st.memory_bytes for st in plan_.stages)
    cap = plan_.memory_cap_bytes
    return {"model": plan_.model, "devices": plan_.devices,
            "ops": sum(len(p.graph.ops) for p in stages),
            "cluster": cluster.name if cluster is not None else None,
            "per_node": cluster.devices_per_node if cluster is not None else None,
            "cost_model": stages[0].strategy.cost_model, "unit": "s",
            # a layout's plan (`evaluate --layout`) was written, not searched
            "solver": "layout" if plan_.status == "layout" else "pipeline search",
            "method": f"{len(plan_.stages)} stage{'s' * (len(plan_.stages) != 1)}",
            "status": plan_.status, "gap": plan_.gap,
            "total": plan_.step_time, "compute": None, "communication": None,
            "memory": memory, "memory_cap": cap, "fits": None if cap is None else memory <= cap,
            "step": plan_.step_time, "mfu": None,
            "simulated_step": None if sim is None else sim.step_time,
            "simulated_memory": None if sim is None else max(sim.peak_memory),
            "breakdown": None, "dims": summary.dim_key(*(p.graph for p in stages))}

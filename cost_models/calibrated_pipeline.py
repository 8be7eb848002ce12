"""A pipeline plan priced by the calibrated model, as ``pase evaluate --layout`` prices a
pipeline layout.

A pipeline plan (:class:`pase.pipeline.PipelinePlan`: stages of contiguous ops, or under
``interleaved:V`` of ``V`` chunks each, on contiguous device ranges, each with its ops'
splits and variants on its own mesh, ``m`` micro-batches, a schedule) is priced stage by
stage (:func:`stage_terms`, which the pipeline search's stage prices use too): each stage's Problem is the one the
pipeline search prices a stage with (the calibrated model at one micro-batch on the
stage's ``d`` devices, :func:`pase.pipeline.stage_model.stage_cost_model`), and its terms are
:func:`pase.cost_models.calibrated_plan.tally`'s over the stage's ops. Per micro-batch a
stage takes its kernels, critical collectives, ZeRO-3's gathers (exposed as the layout
path has them), the re-layouts between its own ops and, each way, the sends of the
tensors each chunk receives from another (each rank sends its ``1 / d`` share,
Megatron-LM's scatter-gather);
the step is :func:`pase.pipeline.schedules.plan_step`'s one rule: the schedule over the
stage times (under ZB-H1 and DualPipe each split into forward, backward and its weight
gradients: the forward's kernels and critical collectives and half of the rest, each with
the sends), then the largest stage tail (once a step: its exposed gradient sync and
optimizer step). This is the one price of every pipeline plan, a layout's or the
pipeline search's (``pase evaluate --strategy``; :mod:`pase.pipeline` reaches it
through the registered model's ``price_pipeline``). Memory is the peak stage's states,
its kept activations times the micro-batches in flight (:func:`pase.perf.pipeline.in_flight`), the working set of full
recomputation and ZeRO-3's gathered weights; under DualPipe a device group also holds the
states and gathered weights of the other stage it runs (:func:`pase.pipeline.schedules.mirror`).
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import numpy as np

from pase.cluster import get_cluster
from pase.cost_models.calibrated_plan import (
    VERSION,
    _model_flop,
    _sequence,
    exposed_exchange,
    tally,
    tied_syncs,
)
from pase.costing.keys import build_memo
from pase.errors import OptionError
from pase.ir import Graph
from pase.perf.layout import Layout
from pase.perf.pipeline import in_flight
from pase.perf.schedule import Work
from pase.pipeline.layered import kept_output_bytes
from pase.pipeline.schedules import PLAN_ONLY, mirror, plan_step
from pase.pipeline.sends import received
from pase.pipeline.solve import with_defaults
from pase.prices import bound_prices


def price_pipeline(plan, cluster: Any = None, graph: Graph | None = None) -> dict[str, Any]:
    """The price of pipeline plan ``plan`` (module docstring): the keys of
    :func:`pase.cost_models.calibrated_plan.price_plan` plus ``stage_seconds``,
    ``stage_memory_bytes`` and ``stage_weight_seconds`` (of each stage's backward, the
    weight gradients' kernels, which ZB-H1 puts off). ``cluster`` defaults to the plan's
    cost option; ``graph`` to the plan's model at its micro-batch size."""
    from pase import api

    costs = dict(plan.cost_options)
    cluster = costs.pop("cluster", None) if cluster is None else cluster
    costs.pop("cluster", None)
    if cluster is None:
        raise OptionError("a pipeline plan is priced on a cluster: give --cluster")
    # the defaults the pipeline search priced with where the plan records none
    costs = with_defaults(costs, "calibrated", get_cluster(cluster, plan.devices))
    m = plan.microbatches
    if graph is None:
        graph = api.load_graph(plan.model, batch=plan.microbatch_size, **plan.model_options)
    whole = get_cluster(cluster, plan.devices)
    name, _, virtual = plan.schedule.partition(":")
    lay = Layout(pp=len(plan.stages), micro_batch=1, global_batch=m, schedule=name,
                 virtual=int(virtual or 1))
    times, once, sends_by_stage, tallies, priced = [], [], [], [], []
    passes = []  # per stage, its time as forward, backward and weight-gradient seconds
    into: dict[int, float] = {}  # a chunk's first op -> the seconds sent into it, one way
    bound = None
    # a homogeneous cluster's stages of one size price equal ops and edges alike: one memo
    # (pase.costing.keys) serves them all, as one build serves its layers
    with nullcontext() if whole.groups else build_memo():
        for st in plan.stages:
            work, tail, t, (bound, problem, c) = stage_terms(
                graph, st.ranges, st.devices, st.configs, st.variants, m, {**costs, "cluster": cluster})
            sends = []
            for first, end in st.ranges:
                chunk = received(graph, first, end, st.devices, whole, bound.bytes_per_element,
                                 bound.hw)
                into[first] = sum(chunk)
                sends += chunk
            times.append(work + 2 * sum(sends))
            passes.append(Work(t["pass_forward"] + sum(sends),
                               work - t["pass_forward"] + sum(sends), t["weight"]))
            sends_by_stage.append(sends)
            once.append(tail)
            tallies.append(t)
            priced.append((bound, problem, c))
    activations = [t["activations"] for t in tallies]
    _kept_across(graph, plan, priced, activations)
    held = [t["states"] + t["gathered"] for t in tallies]  # DualPipe: a group runs two stages
    other = [mirror(plan.schedule, len(held), s) for s in range(len(held))]
    memory = [held[s] + (0.0 if other[s] is None else held[other[s]]) + in_flight(lay, s) * a
              + t["working"] for s, (t, a) in enumerate(zip(tallies, activations))]
    last = max(once, key=sum)
    step = plan_step(plan.schedule, m, passes if name in PLAN_ONLY else times, [],
                     [sum(o) for o in once])
    slow = max(range(len(times)), key=lambda i: times[i])
    model_flop, hardware_flop = _model_flop(graph, bound, m)
    peak_flops = bound.pricer.top_flops * plan.devices
    tokens = plan.batch * _sequence(graph)
    device = bound.cluster.device.memory_bytes
    cap = device if plan.memory_cap_bytes is None else plan.memory_cap_bytes
    peak = max(memory)
    return {"version": VERSION, "kind": "pipeline", "model": plan.model,
            "schedule": plan.schedule, "step_seconds": step, "tokens_per_second": tokens / step,
            "mfu": model_flop / (step * peak_flops), "hfu": hardware_flop / (step * peak_flops),
            "memory_bytes": peak, "fits_memory": bool(peak <= cap), "device_memory_bytes": device,
            "memory_cap_bytes": plan.memory_cap_bytes,
            "breakdown": _breakdown(step, m * times[slow], tallies[slow], m, last),
            "stage_seconds": times, "stage_tail_seconds": [sum(o) for o in once],
            "stage_weight_seconds": [w.weight for w in passes],
            "stage_memory_bytes": memory, "recorded_step": plan.step_time,
            "send_seconds": [max(x, default=0.0) for x in sends_by_stage],
            # per boundary in model order, one way: the plan's links
            "link_seconds": [into[first] for first in sorted(into)[1:]],
            "microbatches": m, "cluster": whole.name, "devices": plan.devices}


def _breakdown(step: float, work: float, terms: dict, m: int,
               tail: tuple[float, float]) -> dict[str, float]:
    """The step in ``pase solve --explain``'s categories: the slowest stage's ``m``
    micro-batches (``work``) as its kernels run once (``compute``), run again
    (``recomputation``) and the rest of its time (``communication``: collectives,
    re-layouts, sends), the once-a-step tail (exposed gradient sync, as communication, and
    ``optimizer``), and the schedule's remainder, the ``bubble``. A schedule whose step
    is under ``work`` plus the tail (DualPipe runs two stages' work on one device) has no
    bubble: its stage work is scaled to what remains."""
    again = m * terms["rebuilt"]
    kernels = m * terms["compute"] - again
    rest = step - sum(tail)
    scale = min(1.0, rest / work) if work > 0 else 1.0
    return {"compute": scale * kernels, "recomputation": scale * again,
            "communication": scale * (work - kernels - again) + tail[0],
            "bubble": rest - work if rest - work > 1e-12 * step else 0.0,
            "optimizer": tail[1]}


def stage_terms(graph: Graph, ranges, devices: int, configs: dict, variants: dict,
                microbatches: int, costs: dict) -> tuple[float, tuple[float, float], dict, tuple]:
    """One stage of a plan (its op ``ranges`` on ``devices`` devices, each op's split and
    variant) by the per-op plan's rules: seconds per micro-batch without its sends (kernels,
    critical collectives, ZeRO-3's gathers past what compute hides, the re-layouts
    between its own ops, the expert exchanges past what compute hides), its once-a-step
    tail ``(exposed gradient sync, optimizer)``, :func:`tally`'s terms (and
    ``pass_forward``, the forward pass's share of the seconds) and ``(bound model,
    Problem, choice)``. The pipeline search charges its stages with it too
    (:func:`pase.pipeline.price.stage_price`)."""
    from pase.pipeline.stage_model import stage_cost_model

    m = microbatches
    model = stage_cost_model({**costs, "microbatches": m}, m, "calibrated")
    model.once_share = 0.0  # the edges per micro-batch; a tied matrix's sync is the tail's
    ops = [i for first, end in ranges for i in range(first, end)]
    model, problem, c = one_plan_problem(graph, devices, model, configs, variants, ops)
    bound = model.bind(graph, devices)
    within = lambda u, v: any(a <= u < b and a <= v < b for a, b in ranges)  # noqa: E731
    t = tally(graph, bound, problem, c, ops, tied_syncs(graph, bound, problem, c, within))
    inside = sum(float(mat[c[u], c[v]]) for (u, v), mat in
                 zip(problem.edges, problem.edge_costs) if within(u, v)) / m
    tax = bound.hw.overlap
    work = t["compute"] + t["critical"] + tax * t["gathers"] + t["fsdp_exposed"] + inside \
        + exposed_exchange(graph, bound, problem, c, t, set(ops))
    # a zero-bubble schedule's forward pass: its kernels and critical collectives, and half
    # of the rest (re-layouts, ZeRO-3's gathers, expert exchanges go both ways)
    t["pass_forward"] = t["forward"] + (work - t["compute"] - t["critical"]) / 2
    return work, (t["exposed_sync"], t["optimizer"]), t, (bound, problem, c)


def stage_op_prices(model, graph: Graph, ranges, devices: int, configs: dict,
                    variants: dict) -> dict[str, dict]:
    """The carried prices (:func:`pase.prices.bound_prices`) of a stage's ops (its op
    ``ranges`` on ``devices`` devices at the plan's configs and variants) by ``model``, the
    search's stage model (:func:`pase.pipeline.stage_model.stage_cost_model`, one
    micro-batch), on the plan's own configs as :func:`stage_terms` prices them: a replay
    runs the stage's once-a-step terms once, and its optimizer's fixed kernels on its first
    op (each stage runs them)."""
    ops = [i for first, end in ranges for i in range(first, end)]
    model, problem, c = one_plan_problem(graph, devices, model, configs, variants, ops)
    bound = model.bind(graph, devices)
    bound.once_share = 1.0
    bound.launch_op = graph.ops[ops[0]].name
    return bound_prices(graph, problem, c, bound, ops)


def one_plan_problem(graph: Graph, devices: int, model, configs: dict, variants: dict,
                     among: list[int] | None = None):
    """``(model, Problem, choice)``: the plan's configs (checked against the whole space, as
    :func:`pase.api.choice_of` checks them) priced on a space holding only them, each op
    at its variant; with ``among`` (a stage's ops) only the edges between those. A GPT-3
    stage on 512 devices costs a second instead of a minute: a Problem of the whole space
    prices every candidate of every op and edge."""
    from pase.space import ConfigSpace

    space = ConfigSpace(graph, devices, padded_roles=model.padded_roles)
    choice = space.choice_of(configs)
    # each op at its variant, an op the plan does not name at ZeRO 0 without recomputation
    # (the variant a whole-space Problem puts at the config's own index): one candidate each
    model = model.with_variants(variants or {})
    return model, model.problem(graph, space.restricted(choice), among=among), \
        np.zeros(len(graph.ops), dtype=np.int64)


def _kept_across(graph: Graph, plan, priced: list, activations: list[float]) -> None:
    """A tensor kept for the backward pass lives where its reader runs: the calibrated
    model charges it to its producer, so a kept output read only by later stages moves
    (once to each reading stage) from the producer's stage to theirs, as the layout path
    counts a stage's memory."""
    stage_of = {}
    for s, st in enumerate(plan.stages):
        for first, end in st.ranges:
            for i in range(first, end):
                stage_of[graph.ops[i].name] = s
    readers: dict[tuple, set[int]] = {}
    for op in graph.ops:
        for port in op.inputs:
            if port.source is not None:
                readers.setdefault((port.source[0], int(port.source[1])), set()).add(
                    stage_of[op.name])
    for (name, idx), stages in readers.items():
        s = stage_of[name]
        if s in stages:
            continue
        bound, problem, c = priced[s]
        i = graph.index(name)
        nbytes = kept_output_bytes(bound, problem, i, graph.ops[i], int(c[i]), (idx,))
        activations[s] -= nbytes
        for later in stages:
            activations[later] += nbytes

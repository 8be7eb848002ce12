"""One plan priced by the calibrated model: step time, memory, MFU and where the time goes.

A plan is a config (and a variant: ZeRO stage, recomputation) per op. Its price
is the calibrated Problem's sum at that choice, plus the two terms that are not a
sum over ops (:mod:`pase.cost_models.calibrated`):

- **the exposed gradient sync**: the Problem charges each parameter's sync at the
  overlap tax, as if the backward pass hid it. All syncs together take ``S``
  seconds and the last micro-batch's backward pass leaves a window ``W`` (its
  compute times ``1 - 1/u`` over ``u`` units, the embedding, the layers and the head:
  the first unit's gradients leave when nothing follows; the earlier micro-batches'
  gradients are accumulated, not synced); the step pays ``max(0, S - W)`` plus the
  tax on the rest, as ``pase evaluate --layout`` does. The difference is
  ``>= 0``, so the Problem's optimum is a lower bound on every plan's price and
  ``correction / step`` bounds how far the searched plan can be from the best;
- **transient memory**: under full recomputation, the activations of the layer
  being rebuilt (the largest); under ZeRO-3, the largest layer's gathered
  parameters, twice (this one and the prefetched next) and its full gradient.

:func:`price_plan` returns the same JSON keys as ``pase evaluate --layout``.
"""
from __future__ import annotations

from typing import Any, Callable, Hashable, NamedTuple

import numpy as np

from pase.cost_models import calibrated_hetero as hetero
from pase.cost_models.calibrated_rules import (
    CalibratedRules,
    PricedWork,
    parameter_elements,
    recomputes,
)
from pase.costing import connection_ports, tied_connections
from pase.ir import Graph, Op
from pase.perf.comms import collective_seconds
from pase.perf.layout import Layout
from pase.perf.ops import price_ops
from pase.perf.pipeline import placement, recomputed_units
from pase.perf.step import _flop, _sequence
from pase.problem import Problem
from pase.work.mapping import group_topology
from pase.work.variants import apply_variant

VERSION = 1


def price_plan(graph: Graph, model: CalibratedRules, problem: Problem,
               choice: tuple[int, ...]) -> dict[str, Any]:
    """The price of ``choice`` (candidate indices of ``problem``, built by ``model`` for
    ``graph``): ``step_seconds``, ``memory_bytes``, ``fits_memory``, ``mfu``, ``hfu``,
    ``breakdown``, ``memory`` and the Problem's own sum (``search_seconds``)."""
    c = problem.check_choice(choice)
    bound = model.bind(graph, problem.devices)
    m = bound.microbatches
    tax = bound.hw.overlap
    tied = tied_syncs(graph, bound, problem, c)  # charged on the tied edges at the tax
    t = tally(graph, bound, problem, c, range(len(graph.ops)), tied)
    edges = sum(float(mat[c[u], c[v]]) for (u, v), mat in zip(problem.edges, problem.edge_costs))
    search = problem.evaluate(choice)
    exposed_sync = t["exposed_sync"]
    fsdp_exposed = m * t["fsdp_exposed"] + m * exposed_exchange(graph, bound, problem, c, t)
    correction = exposed_sync - tax * t["sync"] + fsdp_exposed
    step = search + correction
    mem = problem.memory_of(choice) if problem.memory is not None else 0.0
    working, gathered = t["working"], t["gathered"]
    memory = mem + working + gathered
    model_flop, hardware_flop = _model_flop(graph, bound, m)
    peak = hetero.peak_flops(bound, problem.devices)  # each rank at its own type's peak
    tokens = _samples(graph, m) * _sequence(graph)
    cap = bound.memory_reference  # the device's; a mixed cluster's smallest-memory type's
    return {"version": VERSION, "step_seconds": step, "search_seconds": search,
            "tokens_per_second": tokens / step, "mfu": model_flop / (step * peak),
            "hfu": hardware_flop / (step * peak), "memory_bytes": memory,
            "fits_memory": bool(memory <= cap), "device_memory_bytes": cap,
            "breakdown": {"compute": m * t["compute"], "communication": m * t["critical"]
                          + edges - tax * bound.once_share * tied
                          + m * tax * t["gathers"] + exposed_sync + fsdp_exposed,
                          "bubble": 0.0, "optimizer": t["optimizer"]},
            "memory": {"total": memory, "states_and_activations": mem,
                       "recompute_working_set": working, "zero3_gathered": gathered},
            "recompute_seconds": m * t["rebuilt"],  # the part of compute run again
            "exposed_sync_seconds": exposed_sync, "sync_correction_seconds": correction,
            "microbatches": m, "cluster": bound.cluster.name, "devices": problem.devices}


def tally(graph: Graph, bound: CalibratedRules, problem: Problem, c: np.ndarray,
          indices, extra_sync: float = 0.0) -> dict[str, float]:
    """The terms of ops ``indices`` (a plan's, or one pipeline stage's) at choice ``c``:
    per micro-batch ``compute`` (kernels, recomputation included; ``rebuilt`` the part run
    again), ``critical`` collectives (``forward``: the forward pass's kernels and critical
    collectives; ``weight``: the weight gradients' kernels, of the backward's), ZeRO-3's
    ``gathers`` (alone) and ``fsdp_exposed`` (their exposure beyond the tax); once a step
    ``sync`` (refresh included), ``exposed_sync`` and ``optimizer``; bytes: ``states``,
    kept ``activations`` (one micro-batch's), the ``working`` set of full recomputation
    and ZeRO-3's ``gathered`` weights.
    ``extra_sync``: more syncs (seconds alone) the window must hide (the tied matrices',
    :func:`tied_syncs`, which the Problem charges on edges).

    As the layout path prices each stage: its syncs' bucket pays its hops once (the
    Problem charges each op its parameters' share of them, so ``sync`` is what it charged,
    and the exposure takes them by this stage's parameters instead), and
    its optimizer step its fixed kernels once (the Problem's on the graph's first op). A
    variant that runs nothing again (an embedding's lookup has no FLOP to recompute)
    costs nothing more, as the Problem has it."""
    compute = critical = sync = gathers = optimizer = states = activations = rebuilt = 0.0
    forward = weight = 0.0  # of compute and critical, the forward pass's; of compute, dW
    window = forward_window = refresh = 0.0  # refresh: ZeRO 1-2's gather of updated weights
    bucket = np.zeros(2)  # the ops' own bucket hops, times their parameters: sync, refresh
    synced = 0.0  # the parameters of these ops
    first = False  # the Problem's carrier of the optimizer's fixed kernels is here
    acts_by_unit: dict[str, float] = {}
    params_by_unit: dict[str, float] = {}
    by_unit: dict[str, np.ndarray] = {}  # forward, backward, gathers each way, reduce-scatter
    hops_by_unit: dict[str, np.ndarray] = {}  # ZeRO-3: each unit's bucket pays its hops once
    maps = problem.variants
    seen: dict = {}  # an op of another layer in the same config and variant: the same terms
    for i in indices:
        op = graph.ops[i]
        cand = int(c[i])
        variant = (0, False) if maps is None else maps[i].variant(cand)
        configs = np.asarray(problem.candidates[i].configs[cand:cand + 1])
        key = terms_key(bound, op, configs, variant)
        if key not in seen:
            seen[key] = _op_terms(bound, op, configs, *variant)
        o = seen[key]
        ctx = bound.context(op)
        compute += o.f + o.b + o.again
        rebuilt += o.again
        forward += o.f + o.parts["critical_forward"]
        weight += o.w
        window += o.b + o.again  # the last micro-batch's backward hides the syncs
        forward_window += o.f  # the next step's first forward hides the refresh
        parts = o.parts
        critical += parts["critical"]
        sync += parts["sync"]
        refresh += parts["refresh"]
        bucket += o.elements * np.array((parts["sync_hops"], parts["refresh_hops"]))
        synced += o.elements
        first = first or op.name == bound.launch_op
        gathers += parts["gathers"]
        optimizer += o.optimizer
        states += o.states
        activations += o.activations
        fsdp = by_unit.setdefault(ctx.unit, np.zeros(5))
        fsdp += (o.f, o.b + o.again, parts["gather_forward"], parts["gather_backward"],
                 parts["scatter"])
        hops = hops_by_unit.setdefault(ctx.unit, np.zeros(3))
        hops[:] = np.maximum(hops, o.hops)
        params_by_unit[ctx.unit] = params_by_unit.get(ctx.unit, 0.0) + o.gathered_bytes
        if ctx.unit not in ("pre", "post"):
            acts_by_unit[ctx.unit] = acts_by_unit.get(ctx.unit, 0.0) + o.activation_bytes
    sync += extra_sync
    if not first:
        optimizer += bound.optimizer_fixed()
    # this stage's bucket hops for the Problem's share of them
    more = bucket * (1.0 / max(1.0, synced) - 1.0 / max(1.0, bound.synced_elements))
    share = window_share(len(by_unit))
    exposed_sync = bound.hw.overlapped(sync + more[0], window * share) + \
        bound.hw.overlapped(refresh + more[1], forward_window * share)
    for unit, hops in hops_by_unit.items():
        by_unit[unit][2:] += hops
    return {"by_unit": {u: (float(v[0]), float(v[1])) for u, v in by_unit.items()},
            "compute": compute, "rebuilt": rebuilt, "critical": critical, "gathers": gathers,
            "forward": forward, "weight": weight,
            "fsdp_exposed": _fsdp_correction(by_unit, bound.hw, gathers),
            "sync": sync + refresh,
            "exposed_sync": float(exposed_sync), "optimizer": optimizer, "states": states,
            "activations": activations,
            "working": max(acts_by_unit.values(), default=0.0)
            if bound.recompute_mode == "full" else 0.0,
            "gathered": max(params_by_unit.values(), default=0.0) * 3.0}  # 2 copies + gradient


def terms_key(bound: CalibratedRules, op: Op, configs: np.ndarray,
              variant: tuple[int, bool]) -> Hashable:
    """Equal for two ops only where their :func:`_op_terms` are: the cost model's own
    :meth:`~pase.costing.CostModel.vertex_key` (equal ops share their cost vectors by it)
    and the variant; a model without keys (None) shares nothing."""
    key = bound.vertex_key(op, configs)
    return (object() if key is None else key, variant)


class _OpTerms(NamedTuple):
    """One op's terms in one config and variant (:func:`tally` sums them)."""
    f: float
    b: float
    again: float  # the forward run again under recomputation
    w: float  # of b, the weight gradients' kernels
    parts: dict[str, float]  # :func:`_collectives`
    elements: float  # parameter elements
    optimizer: float
    states: float
    activations: float  # kept for the backward pass
    hops: np.ndarray  # :func:`_bucket_hops`
    gathered_bytes: float  # ZeRO-3's parameter bytes gathered
    activation_bytes: float  # all of the op's activations (full recomputation's working set)


def _op_terms(bound: CalibratedRules, op: Op, configs: np.ndarray, zero: int,
              recompute: bool) -> _OpTerms:
    base = bound.work(op, configs)
    work = apply_variant(base, zero, recompute)
    assert isinstance(work, PricedWork)
    f, b = float(work.forward_seconds[0]), float(work.backward_seconds[0])
    return _OpTerms(f, b, f if bool(recomputes(work)[0]) else 0.0,
                    float(work.weight_seconds[0]), _collectives(bound, work),
                    parameter_elements(op), float(bound.optimizer_seconds(work)[0]),
                    float(work.state_bytes[0]), float(bound.kept_activation_bytes(work)[0]),
                    _bucket_hops(bound, work),
                    float(base.parameter_bytes[0]) * (1.0 if zero == 3 else 0.0),
                    float(base.activation_bytes[0]))


def tied_syncs(graph: Graph, bound: CalibratedRules, problem: Problem, c: np.ndarray,
               within: Callable[[int, int], bool] | None = None) -> float:
    """Seconds alone (once a step) of the tied matrices' extra gradient syncs at choice
    ``c`` (:meth:`CalibratedRules.tied_sync`): the Problem charges them on the tied edges
    at the tax; the plan counts them with the other syncs. ``within(u, v)``: only the
    pairs whose two ops it accepts (a pipeline stage's)."""
    total = 0.0
    for conn in tied_connections(graph):
        u, v = conn[0], conn[2]
        if within is not None and not within(u, v):
            continue
        owner, owner_port, user, user_port = connection_ports(graph, conn)
        src = np.asarray(problem.candidates[u].configs[int(c[u]):int(c[u]) + 1])
        dst = np.asarray(problem.candidates[v].configs[int(c[v]):int(c[v]) + 1])
        got = bound.tied_sync(owner, owner_port, src, user, user_port, dst)
        total += 0.0 if got is None else float(got[0, 0])
    return total


def exposed_exchange(graph: Graph, bound: CalibratedRules, problem: Problem, c: np.ndarray,
                     t: dict, ops: range | None = None) -> float:
    """Under ep overlap, what a layer's expert all-to-alls add per micro-batch beyond the
    tax their edges were charged: each way, the part their layer's compute (another
    micro-batch's, as the layout path has it) cannot hide; ``ops``: only the exchanges
    between these ops (a pipeline stage's)."""
    if not bound.ep_overlap:
        return 0.0
    per_unit: dict[str, float] = {}
    for conn in graph.connections:
        u, v = graph.index(conn.src), graph.index(conn.dst)
        if ops is not None and (u not in ops or v not in ops):
            continue
        producer, consumer = graph.ops[u], graph.ops[v]
        src = np.asarray(problem.candidates[u].configs[int(c[u]):int(c[u]) + 1])
        dst = np.asarray(problem.candidates[v].configs[int(c[v]):int(c[v]) + 1])
        got = bound._exchange(producer, producer.outputs[conn.src_output], src, consumer,
                              consumer.inputs[conn.dst_input], dst, hidden=False)
        if got is not None and got[0][0, 0]:
            unit = bound.context(consumer).unit
            per_unit[unit] = per_unit.get(unit, 0.0) + float(got[1][0, 0]) / 2  # one way
    out = 0.0
    for unit, a2a in per_unit.items():
        forward, backward = t["by_unit"].get(unit, (0.0, 0.0))
        out += (1 - bound.hw.overlap) * (max(0.0, a2a - forward) + max(0.0, a2a - backward))
    return out


def window_share(units: int) -> float:
    """The share of a pass that hides the step's syncs, as the layout path has it: all but
    the first unit's (embedding, layers, head: the last sync leaves when nothing follows)."""
    return 1 - 1 / units if units > 1 else 1.0


def _fsdp_correction(by_unit: dict[str, np.ndarray], hw, gathers: float) -> float:
    """ZeRO-3's exposed gathers per micro-batch beyond the tax the Problem charged on
    ``gathers`` (their seconds alone, without the bucket hops), as the layout path has
    them: the first unit's forward gather waits in full; each later unit's is prefetched
    behind the forward compute of the unit before it, and each unit's backward gather and
    reduce-scatter run behind its own backward compute, but for what does not fit and the
    tax (``by_unit``: each unit's hops included)."""
    rows = list(by_unit.values())
    if not any(gf + gb + rs for _, _, gf, gb, rs in rows):
        return 0.0
    exposed = 0.0
    for i, (_, b, gf, gb, rs) in enumerate(rows):
        exposed += gf if i == 0 else hw.overlapped(gf, rows[i - 1][0])
        exposed += hw.overlapped(gb + rs, b)
    return max(0.0, exposed - hw.overlap * gathers)


def _bucket_hops(model: CalibratedRules, work: PricedWork) -> np.ndarray:
    """ZeRO-3's hop latency of the op's parameter gathers (forward, backward) and gradient
    reduce-scatter: the Problem prices each parameter's bytes alone (they travel in a
    bucket); a unit's bucket pays the hops once, as the layout path's one collective
    per unit does."""
    out = np.zeros(3)
    if not any(c.weight is not None and c.kind == "all-gather" and c.phase == "forward"
               for c in work.collectives):
        return out
    slot = {"forward": 0, "backward": 1, "gradient": 2}
    for c in work.collectives:
        if c.weight is None or c.phase not in slot:
            continue
        dims = list(c.dims)
        q = np.prod(work.configs[:, dims], axis=1) if dims else np.ones(len(work.configs), np.int64)
        nodes, _ = group_topology(work.op, work.configs, dims, model.cluster, model.p)
        with_hops = collective_seconds(c.kind, np.broadcast_to(c.nbytes, q.shape), q, nodes,
                                       model.cluster, model.hw, latency=True)
        alone = collective_seconds(c.kind, np.broadcast_to(c.nbytes, q.shape), q, nodes,
                                   model.cluster, model.hw, latency=False)
        out[slot[c.phase]] = max(out[slot[c.phase]], float((with_hops - alone)[0]))
    return out


def _collectives(model: CalibratedRules, work: PricedWork) -> dict[str, float]:
    """One config's collective seconds by role (:meth:`CalibratedRules.collective_roles`),
    each alone, and ``gathers``: ZeRO-3's three together."""
    out = {role: float(t[0]) for role, t in model.collective_roles(work).items()}
    out["gathers"] = out["gather_forward"] + out["gather_backward"] + out["scatter"]
    return out


def _model_flop(graph: Graph, model: CalibratedRules, m: int) -> tuple[float, float]:
    """Model FLOP of a step (MFU's count) and the hardware's (with recomputation)."""
    lay = Layout(micro_batch=1, global_batch=m, recompute=model.recompute_mode
                 if model.recompute_mode in ("selective", "full") else "none",
                 attention=model.attention)
    ops = price_ops(graph, lay, model.pricer)
    stages, units, _ = placement(graph, lay)
    return _flop(graph, lay, ops, units, recomputed_units(lay, units, stages))


def _samples(graph: Graph, m: int) -> float:
    """Sequences in one step: the batch the graph is built at, times the micro-batches."""
    for op in graph.ops:
        for d in op.dims:
            if d.role == "batch":
                return float(d.size * m)
    return float(m)


__all__ = ["exposed_exchange", "price_plan", "tally", "tied_syncs"]


def sync_slack(graph: Graph, model: CalibratedRules, problem: Problem) -> list[np.ndarray]:
    """Per candidate of each vertex, ``(1 - tax) (s - w)``: its gradient syncs ``s`` (alone,
    once a step) less its share ``w`` of the backward window that hides them.

    The exposed sync of a plan is ``max(tax S, S - (1 - tax) W)`` for all syncs ``S`` and
    the window ``W`` (and the same for ZeRO 1-2's gather of the updated weights against
    the forward pass); the Problem charges ``tax S``. For any ``x`` in [0, 1], the
    Problem's costs plus ``x`` times these terms are a sum over ops that is still at
    most every plan's price, so its optimum is a lower bound too (a convex combination
    of the two sides of the max). :func:`pase.cost_models.calibrated_search.certified`
    uses them to tighten the bound and steer the search away from exposed syncs.
    """
    bound = model.bind(graph, problem.devices)
    tax = bound.hw.overlap
    share = window_share(len({bound.context(op).unit for op in graph.ops}))
    out: list[np.ndarray] = []
    cache: dict[tuple, np.ndarray] = {}
    for i, op in enumerate(graph.ops):
        configs = np.asarray(problem.candidates[i].configs)
        maps = problem.variants
        variants = [(0, False)] * len(configs) if maps is None else \
            [maps[i].variant(k) for k in range(len(configs))]
        key = (bound.vertex_key(op, configs), tuple(variants))
        if key not in cache:
            slack = np.zeros(len(configs))
            for variant in sorted(set(variants)):
                rows = np.flatnonzero([v == variant for v in variants])
                work = apply_variant(bound.work(op, configs[rows]), *variant)
                assert isinstance(work, PricedWork)
                again = np.where(recomputes(work), work.forward_seconds, 0.0)
                window = (work.backward_seconds + again) * share  # the last micro-batch's
                roles = bound.collective_roles(work)
                sync, refresh = roles["sync"], roles["refresh"]
                forward = work.forward_seconds * share
                slack[rows] = (1 - tax) * (sync - window + refresh - forward)
            cache[key] = slack
        out.append(cache[key])
    return out

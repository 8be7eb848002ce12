"""Each op's own prices at a plan's choice, as a Strategy carries them (``op_prices``).

A Strategy carries what the cost model that priced it said about each op, so the
simulator and the viewer draw and replay a plan without building its Problem again:

- ``memory``: the op's bytes per device at its config (where the model has memory);
- from a cost model that prices kernels and collectives in seconds (the calibrated
  model: it has ``bind``, ``work`` with ``forward_seconds`` and ``collective``):
  ``forward`` and ``backward`` (kernel seconds of one micro-batch on one device, the
  backward with its recomputation), ``optimizer`` (the optimizer step's seconds, once a
  step), and ``collectives``: per collective of the op's work (its variant applied, in
  the work's order) ``[phase, kind, label, port, weight, seconds]``: a sync or a ZeRO
  gather alone on its placed group, one on the critical path at what the model charges
  for it there (with ``tp_overlap`` its share of what does not hide behind the op's
  GEMMs, plus the tax; an all-reduce moved onto an edge at that edge's charge for it;
  a collective the model leaves out, such as a tied matrix's second sync, is not
  listed: it does not run), and ``edges``: per costed connection into the
  op (a tied matrix's from its owner included) ``[producer, output, input, seconds]``,
  the model's own price of that edge at the two configs (its re-layout forward and its
  gradient's back, every micro-batch; a port index ``-1 - j`` names weight ``j``). Over
  the connections of one op pair they add up to the Strategy's ``edge_costs`` entry,
  but for an all-reduce the model moves onto the edge, carried with its op instead.

The rules are the cost model's own (the ones :func:`price_plan` sums); nothing here
re-derives a price.
"""
from __future__ import annotations

import copy
from typing import Any, Sequence

import numpy as np

from pase.costing import connection_ports
from pase.ir import Graph
from pase.problem import Problem
from pase.work.variants import apply_variant

# The per-op keys that make a plan replayable in seconds (pase.sim reads them).
TIMED = ("forward", "backward", "optimizer", "collectives")


def op_prices(graph: Graph, problem: Problem, choice: Any, model: Any = None) -> dict[str, dict]:
    """``{op: {key: value}}`` at ``choice`` (candidate indices of ``problem``, which ``model``
    built for ``graph``); ``{}`` when the model says nothing of any op."""
    if model is None or not timed(model):
        out = _memory(graph, problem, [int(k) for k in choice], range(len(graph.ops)))
        return out if any(out.values()) else {}
    return bound_prices(graph, problem, choice, model.bind(graph, problem.devices))


def bound_prices(graph: Graph, problem: Problem, choice: Any, bound: Any,
                 ops: Sequence[int] | None = None) -> dict[str, dict]:
    """:func:`op_prices` of the ops ``ops`` (indices; default all) by a timed model already
    bound to ``graph`` (a pipeline stage's ops: :func:`pase.cost_models.calibrated_pipeline.
    stage_op_prices`); the edges are those between two of them."""
    c = [int(k) for k in choice]
    index = range(len(graph.ops)) if ops is None else sorted(set(ops))
    out = _memory(graph, problem, c, index)
    maps = problem.variants
    seen: dict[tuple, dict[str, Any]] = {}  # layers alike are priced once (the model's key)
    for v in index:
        op = graph.ops[v]
        zero, recompute = (0, False) if maps is None else maps[v].variant(c[v])
        configs = np.asarray(problem.candidates[v].configs[c[v]:c[v] + 1])
        key = (bound.vertex_key(op, configs), zero, recompute)
        if key not in seen:
            seen[key] = _timed(bound, op, configs, zero, recompute)
        out[op.name].update(seen[key])
        out[op.name]["edges"] = []
    _edge_prices(graph, problem, c, bound, out)
    return out


def _memory(graph: Graph, problem: Problem, c: list[int], index: Any) -> dict[str, dict]:
    """``{op: {"memory": bytes}}`` of the ops ``index`` (``{}`` each without memory)."""
    out: dict[str, dict[str, Any]] = {graph.ops[v].name: {} for v in index}
    if problem.memory is not None:
        for v in index:
            out[graph.ops[v].name]["memory"] = float(problem.memory[v][c[v]])
    return out


def _edge_prices(graph: Graph, problem: Problem, c: list[int], bound: Any,
                 out: dict[str, dict]) -> None:
    """Each costed connection's seconds at the chosen configs, on its consumer's ``edges``
    (the bound model's own :meth:`edge_costs`; edges alike, by their key, once).

    An all-reduce the model moves onto an edge (a reduce-scatter where the neighbour only
    slices the result) stays with its op's ``collectives``, where the simulator runs it, at
    what the edge charges for it over its re-layout; the edge carries its re-layout alone
    (the model with nothing moved)."""
    alone = copy.copy(bound)
    alone.moved = {}
    attribute = getattr(bound, "moved", None) and not bound.cluster.groups
    seen: dict[Any, float] = {}

    def seconds(model: Any, pu, port_u, su, pv, port_v, sv) -> float:
        # the model's key holds what it moves onto the edge: one memo serves both models
        key = model.edge_key(pu, port_u, su, pv, port_v, sv)
        if key is None or key not in seen:
            t = float(np.asarray(model.edge_costs(pu, port_u, su, pv, port_v, sv))[0, 0])
            if key is None:
                return t
            seen[key] = t
        return seen[key]

    for conn in alone.edges(graph):
        u, o, v, i = conn
        if graph.ops[u].name not in out or graph.ops[v].name not in out:
            continue  # an edge into or out of the ops asked for
        pu, port_u, pv, port_v = connection_ports(graph, conn)
        su = np.asarray(problem.candidates[u].configs[c[u]:c[u] + 1])
        sv = np.asarray(problem.candidates[v].configs[c[v]:c[v] + 1])
        relayout = seconds(alone, pu, port_u, su, pv, port_v, sv)
        out[pv.name]["edges"].append([pu.name, int(o), int(i), relayout])
        if not attribute:
            continue
        ends = [e is not None and bool(e.any()) for e in
                bound._moved_groups(pu, port_u, su, pv, port_v, sv)]
        if not any(ends):
            continue
        full = seconds(bound, pu, port_u, su, pv, port_v, sv)
        producer = full if not ends[1] else relayout
        if all(ends):  # both ends' all-reduces moved here: the producer's with it alone
            only = copy.copy(bound)
            only.moved = {pu.name: bound.moved.get(pu.name, frozenset())}
            producer = seconds(only, pu, port_u, su, pv, port_v, sv)
        if ends[0]:
            _charge(bound, pu, su, out[pu.name], "out", "forward", producer - relayout)
        if ends[1]:
            tag = next(f"in{k}" for k, q in enumerate(pv.inputs) if q is port_v)
            _charge(bound, pv, sv, out[pv.name], tag, "backward", full - producer)


def _charge(bound: Any, op: Any, configs: np.ndarray, prices: dict, port: str, phase: str,
            seconds: float) -> None:
    """Add ``seconds`` (an edge's charge for the op's moved all-reduces) to the op's carried
    collectives on ``port`` in ``phase``, shared by their seconds alone (the list copied:
    layers alike share one)."""
    if seconds <= 0:
        return
    work = bound.work(op, configs)
    alone = [float(bound.collective(op, work.configs, col)[0]) for col in work.collectives
             if col.port == port and col.phase == phase and col.weight is None]
    rows = [list(r) for r in prices["collectives"]]
    mine = [r for r in rows if r[3] == port and r[0] == phase and r[4] is None]
    if not mine:
        return
    total = sum(alone) if len(alone) == len(mine) else 0.0
    for k, r in enumerate(mine):
        r[5] += seconds * (alone[k] / total if total > 0 else float(k == 0))
    prices["collectives"] = rows


def _timed(bound: Any, op: Any, configs: np.ndarray, zero: int, recompute: bool) -> dict:
    """One op's seconds at one config and variant, by the bound model's own rules."""
    base = bound.work(op, configs)
    work = apply_variant(base, zero, recompute)
    f, b = float(work.forward_seconds[0]), float(work.backward_seconds[0])
    again = recompute and float(work.backward_flop[0]) > float(base.backward_flop[0])  # reruns
    charged = _charges(bound, work)
    weight = getattr(work, "weight_seconds", None)  # of the backward, the weight gradients'
    return {"forward": f, "backward": b + (f if again else 0.0),
            "weight": 0.0 if weight is None else float(weight[0]),
            "optimizer": float(bound.optimizer_seconds(work)[0]),
            "collectives": [[col.phase, col.kind, col.label, col.port, col.weight,
                             float((bound.collective(op, work.configs, col) if t is None else t)[0])]
                            for col, t in zip(work.collectives, charged)]}


def _charges(bound: Any, work: Any) -> list:
    """Per collective, what the model charges on the critical path (None: a sync or a
    gather, carried alone on its group); all None for a model that does not say, or on a
    mixed cluster (each prefix its own rules)."""
    if not hasattr(bound, "critical_charges") or bound.cluster.groups:
        return [None] * len(work.collectives)
    return bound.critical_charges(work)


def priced_at(model: Any) -> dict[str, Any]:
    """What a timed model's carried prices hold for the whole plan (a Strategy's ``meta``):
    ``bytes_per_element`` and ``link_gbps``, each link class's bandwidth as the model
    moves bytes over it (the bus bandwidth NCCL achieves)."""
    links = model.link_cluster
    return {"bytes_per_element": float(model.bytes_per_element),
            "link_gbps": {"intra": float(links.intra.bandwidth_gbps),
                          "inter": float(links.inter.bandwidth_gbps)}}


def timed(model: Any) -> bool:
    """Whether ``model`` prices each op's kernels and collectives in seconds."""
    return model is not None and all(hasattr(model, name) for name in (
        "bind", "collective", "optimizer_seconds", "price_plan", "link_cluster"))


def is_timed(prices: dict[str, dict]) -> bool:
    """Whether a Strategy's ``op_prices`` hold seconds for every op (a replayable plan)."""
    return bool(prices) and all(all(k in p for k in TIMED) for p in prices.values())

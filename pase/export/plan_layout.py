"""Which framework layout a per-op plan is, if any (``pase export --strategy PLAN
--engine megatron|torchtitan``).

A plan written by ``pase evaluate --layout`` records its layout; any other plan (a
solver's) is read op by op: the most common split of each role (batch: dp, the
tensor-parallel dims: tp, the attention's sequence: cp, the experts: ep) proposes a
layout, with and without sequence parallelism. The plan is that layout only if every
op's split is the layout's (:func:`pase.perf.plan.layout_configs`); otherwise
:class:`NotALayout` names the ops that split differently, since a framework runs one
layout on every op and only a per-op runtime (PyTorch DTensor) can run the plan.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Mapping

from pase.errors import OptionError
from pase.ir import Graph
from pase.perf.layout import Layout, experts_of, make_layout, tensor_split_dims
from pase.perf.plan import layout_configs, layout_variants

SHOWN = 4  # differing ops named in the message; the rest counted


class NotALayout(OptionError):
    """A per-op plan whose ops split differently from every framework layout."""


def recorded_layout(data: Any, devices: int) -> Layout | None:
    """The layout an ``evaluate --layout`` output records (its ``layout`` object), or None."""
    lay = data.get("layout") if isinstance(data, Mapping) else None
    if not isinstance(lay, Mapping) or "tp" not in lay:
        return None
    degrees = {k: lay[k] for k in ("tp", "pp", "dp", "cp", "ep") if k in lay}
    if "etp" in lay:
        degrees["etp"] = lay["etp"]
    options = {k: lay[k] for k in ("micro_batch", "global_batch", "schedule", "zero", "recompute",
                                   "sequence_parallel", "precision", "attention", "dropout")
               if k in lay}
    for key in ("tp_overlap", "ep_overlap"):
        if key in lay:
            options[key] = "on" if lay[key] else "off"
    return make_layout(degrees, devices=devices, **options)


def infer_layout(graph: Graph, configs: Mapping[str, Mapping[str, int]], devices: int,
                 microbatches: int, options: Mapping[str, Any]) -> Layout:
    """The layout a per-op plan on ``graph`` (built at the plan's batch) is, or NotALayout."""
    votes: dict[str, Counter] = {k: Counter() for k in ("tp", "dp", "cp", "ep", "etp")}
    for op in graph.ops:
        split = configs.get(op.name, {})
        expert = experts_of(op) is not None
        tensor = tensor_split_dims(op)
        for i in tensor:
            votes["etp" if expert else "tp"][split.get(op.dims[i].name, 1)] += 1
        for d in op.dims:
            factor = split.get(d.name, 1)
            if d.role == "batch" and not expert:
                votes["dp"][factor] += 1
            elif d.role == "sequence" and tensor and not expert and d is _first_seq(op):
                votes["cp"][factor] += 1
            elif d.role == "expert" and expert:
                votes["ep"][factor] += 1
    degrees = {k: c.most_common(1)[0][0] for k, c in votes.items() if c}
    degrees.setdefault("dp", 1)
    degrees["pp"] = 1
    rest = degrees.get("tp", 1) * degrees.get("cp", 1)
    if degrees["dp"] * rest != devices and devices % rest == 0:
        degrees["dp"] = devices // rest  # the nearest layout of the devices: name its ops
    batch = next((d.size for op in graph.ops for d in op.dims if d.role == "batch"), None)
    dp = degrees["dp"]
    if batch is None or batch % dp:
        raise NotALayout("the plan splits no batch the way a data-parallel layout does")
    options = {k: v for k, v in options.items() if k != "sequence_parallel"}  # tried both ways
    best: tuple[int, Layout, list[str]] | None = None
    for sp in (False, True):
        try:
            lay = make_layout(degrees, devices=devices, micro_batch=batch // dp,
                              global_batch=batch * microbatches,
                              sequence_parallel=sp and degrees.get("tp", 1) > 1, **options)
        except OptionError:
            continue
        diff = differing(graph, configs, lay)
        if best is None or len(diff) < best[0]:
            best = (len(diff), lay, diff)
    if best is None:
        raise NotALayout(f"the plan's most common splits ({_degrees(degrees)}) are no layout of "
                         f"{devices} devices")
    if best[2]:
        raise NotALayout(_message(best[1], best[2]))
    return best[1]


def _first_seq(op: Any) -> Any:
    return next((d for d in op.dims if d.role == "sequence"), None)


def differing(graph: Graph, configs: Mapping[str, Mapping[str, int]], lay: Layout) -> list[str]:
    """``op: plan {..} vs layout {..}`` for each op whose split is not the layout's (a
    vocabulary the split does not divide: split with padding, as Megatron-LM runs it, or
    left whole, as a model of exact tiles has it)."""
    from pase.space import PADDED_ROLES

    want = layout_configs(graph, lay)
    padded = layout_configs(graph, lay, padded_roles=PADDED_ROLES)
    out = []
    for op in graph.ops:
        got = {d: f for d, f in configs.get(op.name, {}).items() if f > 1}
        if got != want[op.name] and got != padded[op.name]:
            out.append(f"{op.name}: plan {_split(got)} vs layout {_split(want[op.name])}")
    return out


def differing_variants(graph: Graph, variants: Mapping[str, Any], lay: Layout) -> list[str]:
    """Ops whose ZeRO stage or recomputation is not the layout's."""
    want = layout_variants(graph, lay)
    out = []
    for op in graph.ops:
        v = variants.get(op.name)
        got = (getattr(v, "zero", 0), bool(getattr(v, "recompute", False)))
        w = want.get(op.name, {"zero": 0, "recompute": False})
        if got != (w["zero"], bool(w["recompute"])):
            out.append(f"{op.name}: plan zero {got[0]}, recompute {got[1]} vs layout zero "
                       f"{w['zero']}, recompute {bool(w['recompute'])}")
    return out


def _split(split: Mapping[str, int]) -> str:
    return "{" + ", ".join(f"{d}: {f}" for d, f in split.items()) + "}"


def _degrees(degrees: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in degrees.items())


def _message(lay: Layout, diff: list[str]) -> str:
    more = f" and {len(diff) - SHOWN} more" if len(diff) > SHOWN else ""
    return (f"the plan is not a layout: {len(diff)} op(s) split differently from the nearest, "
            f"tp={lay.tp},dp={lay.dp},cp={lay.cp},ep={lay.ep}"
            f"{' with sequence parallelism' if lay.sequence_parallel else ''}: "
            f"{'; '.join(diff[:SHOWN])}{more}")


def plan_layout(data: Any, devices: int, graph_of: Callable[[int | None], Graph],
                options: Mapping[str, Any]) -> Layout:
    """The layout of a plan file's JSON ``data``: its recorded one (checked against its
    per-op strategy, if it has one), else the one its ops split as. ``graph_of(batch)``
    builds the model (at that batch; None: the model's own)."""
    from pase.strategy import strategy_mapping, strategy_variants

    lay = recorded_layout(data, devices)
    if lay is not None and not isinstance(data.get("strategy"), Mapping):
        return lay  # a pipeline layout: no per-op plan to check
    configs = strategy_mapping(data)
    if lay is not None:
        graph = graph_of(lay.micro_batch * lay.dp)
        diff = differing(graph, configs, lay)
    else:
        microbatches = data.get("microbatches", 1) if isinstance(data, Mapping) else 1
        graph = graph_of(None)
        lay = infer_layout(graph, configs, devices, int(microbatches or 1), options)
        diff = []
    diff += differing_variants(graph, strategy_variants(data), lay)
    if diff:
        raise NotALayout(_message(lay, diff))
    return lay

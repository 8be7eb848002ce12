"""Strategies and tiles for exporters: validated configs, per-device tile shapes, parameters.

Shared by every exporter so they read strategies and shapes the same way.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from pase.errors import StrategyError
from pase.ir import Graph, Op, Port
from pase.strategy import Strategy, check_strategy_mapping, not_a_plan, op_config, strategy_variants
from pase.work.variants import Variant, check_op_variant


def strategy_configs(graph: Graph, strategy: Any, devices: int) -> dict[str, dict[str, int]]:
    """``{op: {dim: factor}}`` for every op of ``graph``, validated (one-line StrategyErrors).

    ``strategy`` is such a mapping (ops it does not name stay unsplit), a Strategy,
    or a parsed ``pase solve --format json`` object.
    """
    if isinstance(strategy, Strategy):
        if strategy.graph_name != graph.name:
            raise StrategyError(f"the strategy is for graph {strategy.graph_name!r}, not {graph.name!r}")
        strategy = strategy.configs
    elif isinstance(strategy, Mapping):
        if "version" in strategy and "version" not in graph:
            not_a_plan(strategy)  # a file pase wrote that holds no per-op plan
        if isinstance(strategy.get("strategy"), Mapping) and "strategy" not in graph:
            strategy = strategy["strategy"]
    if isinstance(strategy, Mapping):
        strategy = {op: {d: int(f) if isinstance(f, np.integer) else f for d, f in dims.items()}
                    if isinstance(dims, Mapping) else dims for op, dims in strategy.items()}
    given = check_strategy_mapping(strategy)
    for name in given:
        if name not in graph:
            known = ", ".join(op.name for op in graph.ops[:8])
            raise StrategyError(f"strategy names unknown op {name!r} (graph {graph.name!r} has "
                                f"{len(graph)} ops: {known}{', ...' if len(graph) > 8 else ''})")
    out = {}
    for op in graph.ops:
        cfg = op_config(op, given.get(op.name, {}), devices)
        out[op.name] = cfg
    return out


def strategy_variants_of(graph: Graph, strategy: Any) -> dict[str, Variant]:
    """``{op: Variant}`` recorded in a Strategy or a ``pase solve --format json`` object
    (none in a plain mapping), each op checked to be in ``graph``."""
    variants = strategy_variants(strategy)
    for name, v in variants.items():
        if name not in graph:
            raise StrategyError(f"strategy variants name unknown op {name!r} (graph {graph.name!r})")
        check_op_variant(graph.op(name), v, f"variant of op {name!r}")
    return variants


def zero3_spec(op: Op, j: int, cfg: Mapping[str, int], assigned: Mapping[str, tuple[str, ...]],
               axes: Sequence[tuple[str, int]]) -> tuple | None:
    """Weight ``j``'s stored layout under ZeRO stage 3: its layout for use with the mesh
    axes of its data-parallel group (its gradient all-reduce's group) added on its first
    axis they divide evenly; None for a group of one device or no such axis. The
    exported op pins the weight to its layout for use inside its scope, so XLA gathers
    it there, and its gradient leaves the step in the stored layout (reduce-scattered)."""
    from pase.work import op_work
    from pase.work.layout import port_spec
    from pase.work.variants import data_parallel_groups

    work = op_work(op, np.array([[cfg[d.name] for d in op.dims]], dtype=np.int64))
    dims = data_parallel_groups(work).get(j, ((), None))[0]
    group = tuple(a for d in dims for a in assigned.get(op.dim_names[d], ()))
    if not group:
        return None
    sizes = dict(axes)
    spec = list(port_spec(op, op.weights[j], assigned))
    for i, size in enumerate(op.weights[j].shape):
        mine = (spec[i] or ()) + group
        if size % math.prod(sizes[a] for a in mine) == 0:
            spec[i] = mine
            return tuple(spec)
    return None


def tile(op: Op, port: Port, cfg: Mapping[str, int]) -> tuple[int, ...]:
    """A device's tile of ``port`` (rounded up where an axis does not divide evenly)."""
    return tuple(-(-size // math.prod(cfg[n] for n in names))
                 for size, names in zip(port.shape, port.dims))


def fan_in(op: Op, port: Port) -> int:
    """Product of the weight's axes that are contracted away (no output has them)."""
    if op.kind == "Embedding":
        return 1
    out_dims = {n for p in op.outputs for axis in p.dims for n in axis}
    roles = {d.name: d.role for d in op.dims}
    return max(1, math.prod(size for size, names in zip(port.shape, port.dims)
                            if names and not set(names) & out_dims
                            and all(roles[n] != "layer" for n in names)))

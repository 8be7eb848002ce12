"""Strategies and tiles for exporters: validated configs, per-device tile shapes, parameters.

Shared by every exporter so they read strategies and shapes the same way.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from pase.errors import StrategyError
from pase.ir import Graph, Op, Port
from pase.strategy import Strategy, check_strategy_mapping, op_config, strategy_variants
from pase.work.variants import Variant


def strategy_configs(graph: Graph, strategy: Any, devices: int) -> dict[str, dict[str, int]]:
    """``{op: {dim: factor}}`` for every op of ``graph``, validated (one-line StrategyErrors).

    ``strategy`` is such a mapping (ops it does not name stay unsplit), a Strategy,
    or a parsed ``pase solve --format json`` object.
    """
    if isinstance(strategy, Strategy):
        if strategy.graph_name != graph.name:
            raise StrategyError(f"the strategy is for graph {strategy.graph_name!r}, not {graph.name!r}")
        strategy = strategy.configs
    elif isinstance(strategy, Mapping) and isinstance(strategy.get("strategy"), Mapping) \
            and "strategy" not in graph:
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
    for name in variants:
        if name not in graph:
            raise StrategyError(f"strategy variants name unknown op {name!r} (graph {graph.name!r})")
    return variants


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

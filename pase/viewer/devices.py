"""Which device holds which tile of each op's output, and what its incoming re-layouts move.

Both come from :mod:`pase.work`, the one placement the alpha-beta model, the
simulator and the JAX exporter share: :func:`pase.work.port_blocks` gives each
device's block index along each axis of the op's first output, and
:func:`pase.work.edge_bytes` the bytes the busiest device receives to re-lay a
producer's output as this op's input (forward, and its gradient backward).

Ops with the same placement share one entry of ``tiles`` (a repeated layer's
ops are a handful of entries however many layers there are):

- ``tiles``: per entry ``s`` the output's shape, ``f`` its split factor per axis,
  ``b`` per device its block index per axis (``null``: idle for the op);
- ``op_tile``: per op its entry (null for an op without outputs);
- ``edges``: per op its incoming tensors as ``[producer, cost, forward bytes,
  backward bytes]`` (the cost is the cost model's edge cost, null for an edge the
  cost model does not price);
- ``per_node``: devices per node (null without a cluster).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from pase.costing import op_signature
from pase.ir import Graph, Op
from pase.viewer.plan import short
from pase.viewer.planned import Planned
from pase.work import edge_bytes, port_blocks
from pase.work.tiles import port_factors


def config_vector(op: Op, config: dict[str, int]) -> tuple[int, ...]:
    return tuple(int(config.get(d.name, 1)) for d in op.dims)


def placements(planned: Planned) -> dict[str, Any]:
    graph, configs, p = planned.graph, planned.strategy.configs, planned.devices
    tiles: list[dict[str, Any]] = []
    seen: dict[tuple, int] = {}
    op_tile: list[int | None] = []
    for op in graph.ops:
        if not op.outputs:
            op_tile.append(None)
            continue
        cfg = config_vector(op, configs.get(op.name, {}))
        port = op.outputs[0]
        key = (tuple(d.role == "batch" for d in op.dims), cfg, port.shape,
               tuple(tuple(a) for a in op.port_axes(port)))
        if key not in seen:
            seen[key] = len(tiles)
            tiles.append(_tile(op, cfg, p))
        op_tile.append(seen[key])
    per_node = planned.cluster.devices_per_node if planned.cluster is not None else None
    return {"tiles": tiles, "op_tile": op_tile, "edges": _edges(planned), "per_node": per_node}


def _tile(op: Op, cfg: tuple[int, ...], devices: int) -> dict[str, Any]:
    port = op.outputs[0]
    blocks = port_blocks(op, port, cfg, devices)
    factors = port_factors(op, port, np.asarray([cfg], dtype=np.int64))[0]
    return {"s": [int(x) for x in port.shape], "f": [int(x) for x in factors],
            "b": [None if row[0] < 0 else [int(x) for x in row] if len(row) else []
                  for row in blocks.tolist()] if blocks.shape[1] else [[] for _ in range(devices)]}


def _edges(planned: Planned) -> list[list[list[Any]]]:
    """Per op its incoming tensors: ``[producer index, edge cost, fwd bytes, bwd bytes]``."""
    graph: Graph = planned.graph
    configs, p = planned.strategy.configs, planned.devices
    costs = {(u, v): c for v, pairs in enumerate(planned.incoming()) for u, c in pairs}
    memo: dict[tuple, tuple[float, float]] = {}
    out: list[list[list[Any]]] = [[] for _ in graph.ops]
    for conn in graph.connections:
        u, v = graph.index(conn.src), graph.index(conn.dst)
        src, dst = graph.ops[u], graph.ops[v]
        a, b = config_vector(src, configs.get(src.name, {})), config_vector(dst, configs.get(dst.name, {}))
        key = (op_signature(src), conn.src_output, a, op_signature(dst), conn.dst_input, b)
        if key not in memo:
            memo[key] = edge_bytes(src, src.outputs[conn.src_output], a, dst,
                                   dst.inputs[conn.dst_input], b, p, planned.bytes_per_element)
        fwd, bwd = memo[key]
        cost = costs.pop((u, v), None)  # a pair's edge cost once, on its first tensor
        out[v].append([u, short(cost), short(fwd), short(bwd)])
    return out

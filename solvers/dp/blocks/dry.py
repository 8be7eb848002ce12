"""Dry runs with repeated blocks: which chains the dp would fold, and the work left.

    predict_blocks(shape) -> (report: dict, reduced shape or None)

Reads only a Problem's shape (:class:`pase.costing.ProblemShape`): sizes, edges,
and the cost model's sharing keys (``vertex_shared_with``, ``shared_with``:
vertices or edges with equal keys get equal arrays). Detection runs as in
:mod:`pase.solvers.dp.blocks.find`, with those keys standing in for the arrays'
contents, so a dry run finds the chains whose equality the keys promise (the
solver, comparing contents, may find more). Each chain is reduced symbolically,
as :mod:`pase.solvers.dp.blocks.fold` reduces it, and the work is counted:

- ``transfer_entries``: table entries of one block's transfer tensor (its inner
  vertices eliminated, separators and shared vertices kept);
- ``power_products`` and ``power_work``: min-plus products of ``T^m`` by
  repeated squaring, ``K_G * K_S^3`` additions each;
- ``reduced``: left None here; :func:`pase.solvers.dp.core.dry_run` plans the
  reduced shape returned beside the report (the ordering ``solve`` picks) and
  fills it in.

Seconds are these counts over rates calibrated on this project's 2-core machine
(:data:`TRANSFER_ENTRIES_PER_SECOND` where the cost model's edges read only port split
factors, ``shape.port_classes``, else :data:`PLACEMENT_TRANSFER_ENTRIES_PER_SECOND`;
:data:`POWER_WORK_PER_SECOND`; and the dp's own rate for the reduced plan).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pase.solvers.dp.blocks.find import BlockChain, IdGraph, find_one
from pase.solvers.dp.ordering import inner_order
from pase.solvers.dp.plan import plan_for_order

__all__ = ["PLACEMENT_TRANSFER_ENTRIES_PER_SECOND", "POWER_WORK_PER_SECOND",
           "TRANSFER_ENTRIES_PER_SECOND", "predict_blocks"]

# Rates of the 2-core machine, fitted to CPU seconds of dp.solve (the machine was shared,
# so wall seconds were 1-4x these; CPU seconds are what an idle machine takes). Rows:
# gpt2 (12 layers) p = 64, 256, 1024; gpt2-xl p = 256, 1024; transformer p = 64, 256;
# gpt3-175b p = 1024, 4096: each predicted within 1.5x, all but gpt2-xl within 1.3x
# (benchmarks/results/scale.md).
# Table entries of a block's transfer tensor per second (min-plus steps, many on classes
# of configurations, which this count cannot see).
TRANSFER_ENTRIES_PER_SECOND = 1.6e9
# The same where edge matrices read the tiles' placement (alpha-beta): configurations
# fall in no classes, so every step is a plain min-plus over separators of 289-374
# states, after a class check that fails. Fitted on alpha-beta (h100-sxm) gpt2-xl at
# p = 1024 and gpt3-175b at p = 1024 and 4096 on two days, which needed 0.62-1.16e9
# (the machine's kernel speed differed by 1.2-1.4x between them): their geometric mean.
PLACEMENT_TRANSFER_ENTRIES_PER_SECOND = 8e8
# Scalar additions (with argmin) of min-plus matrix products per second: 9.3e8 measured
# on gpt2-xl's p = 1024 powers (374 states), 8e8 for margin.
POWER_WORK_PER_SECOND = 8e8
# Seconds of detection and bookkeeping per vertex of the Problem.
SECONDS_PER_VERTEX = 1e-3
MAX_CHAINS = 16


@dataclass
class _Shape:
    """A Problem's shape with content ids: what detection and planning read."""

    names: list[str]
    sizes: np.ndarray
    edges: list[tuple[int, int]]
    vid: list[Any]
    eid: list[Any]
    fresh: list[int] = field(default_factory=lambda: [0])

    @property
    def num_vertices(self) -> int:
        return len(self.names)

    def new_id(self) -> tuple[str, int]:
        self.fresh[0] += 1
        return ("fresh", self.fresh[0])


def predict_blocks(shape: Any) -> tuple[dict[str, Any], Any | None]:
    """The chains the dp would fold in ``shape`` and the folded work (module doc), and
    the shape left to plan (None when no chain was found).

    Without sharing keys (a shape built with no cost model) nothing is predicted.
    """
    if not getattr(shape, "vertex_shared_with", None):
        return {"predicted": False,
                "reason": "the shape has no cost model's sharing keys to find blocks by"}, None
    current = _Shape(list(shape.names), np.asarray(shape.sizes, dtype=np.int64),
                     list(shape.edges), list(shape.vertex_shared_with), list(shape.shared_with))
    original = list(range(shape.num_vertices))
    usable = shape.num_vertices
    chains: list[dict[str, Any]] = []
    transfer = power_work = products = removed = 0
    for _ in range(MAX_CHAINS):
        graph = IdGraph(current.vid, current.sizes, current.edges, current.eid)
        chain = find_one(graph, usable)
        if chain is None or not chain.contiguous(original):
            break
        entries = _transfer_entries(current, chain)
        count = chain.count
        steps = (count.bit_length() - 1) + (bin(count).count("1") - 1)
        separator_states = math.prod(int(current.sizes[v]) for v in chain.separator_vertices(1))
        work = steps * chain.states * separator_states ** 2
        transfer += entries
        power_work += work
        products += steps
        chains.append({"first_block": current.names[chain.start], "period": chain.period,
                       "count": count,
                       "separator": [current.names[v] for v in chain.separator_vertices(1)],
                       "shared": [current.names[v] for v in chain.shared],
                       "states": chain.states, "transfer_entries": entries,
                       "power_products": steps, "power_work": work})
        removed += len(chain.removed())
        current, kept = _reduce(current, chain)
        original = [original[v] for v in kept] + [-1] * (current.num_vertices - len(kept))
        usable = sum(1 for v in kept if v < usable)
    rate = TRANSFER_ENTRIES_PER_SECOND if getattr(shape, "port_classes", False) else \
        PLACEMENT_TRANSFER_ENTRIES_PER_SECOND
    seconds = (transfer / rate + power_work / POWER_WORK_PER_SECOND
               + SECONDS_PER_VERTEX * shape.num_vertices) if chains else 0.0
    return {"predicted": True, "chains": chains, "blocks_found": len(chains),
            "vertices_removed": removed,
            "transfer_entries": transfer, "transfer_entries_per_second": rate,
            "power_products": products, "power_work": power_work, "reduced": None,
            "fold_seconds": seconds}, current if chains else None


def _transfer_entries(shape: _Shape, chain: BlockChain) -> int:
    """Table entries the fold's transfer tensor of one block fills (its inside eliminated
    by :func:`pase.solvers.dp.ordering.inner_order`, as the fold does)."""
    u1 = list(chain.block(1))
    local, kept_vertices = chain.transfer_vertices()
    index = {v: k for k, v in enumerate(local)}
    inside = set(u1)
    incident: dict[int, list[int]] = {v: [] for v in u1}
    for u, w in shape.edges:
        if u in incident:
            incident[u].append(w)
        if w in incident:
            incident[w].append(u)
    edges = sorted({(min(index[v], index[w]), max(index[v], index[w]))
                    for v in u1 for w in incident[v]
                    if w in index and (w not in inside or w > v)})
    block = _Shape([shape.names[v] for v in local], shape.sizes[local], edges, [], [])
    kept = {index[v] for v in kept_vertices}
    inner = inner_order(block, kept)
    if not inner:
        return 0
    last = inner[-1]
    plan = plan_for_order(block, inner + sorted(kept), stop=lambda v, dep: v == last)
    return plan.table_entries


def _reduce(shape: _Shape, chain: BlockChain) -> tuple[_Shape, list[int]]:
    """The shape the fold of ``chain`` leaves (:func:`pase.solvers.dp.blocks.fold.apply`),
    and the kept vertices."""
    removed = chain.removed()
    kept = [v for v in range(shape.num_vertices) if v not in removed]
    new = {v: k for k, v in enumerate(kept)}
    drop = set(chain.pattern_edges)
    last_sep = set(chain.separator_vertices(chain.count))
    vid = [("zero", int(shape.sizes[v])) if v in last_sep else shape.vid[v] for v in kept]
    sizes = [int(shape.sizes[v]) for v in kept]
    names = [shape.names[v] for v in kept]
    merged: dict[tuple[int, int], Any] = {}

    def add(u: int, w: int, e: Any) -> None:
        key = (min(u, w), max(u, w))
        merged[key] = shape.new_id() if key in merged else e

    for (u, w), e in zip(shape.edges, shape.eid):
        if u in removed or w in removed or (u, w) in drop:
            continue
        add(new[u], new[w], e)
    ends = []
    for members in (list(chain.shared) + list(chain.separator_vertices(0)),
                    list(chain.separator_vertices(chain.count))):
        if len(members) == 1:
            ends.append(new[members[0]])
            continue
        x = len(vid)
        vid.append(shape.new_id())
        sizes.append(math.prod(int(shape.sizes[v]) for v in members))
        names.append("<blocks: " + ", ".join(shape.names[v] for v in members) + ">")
        for v in members:
            add(new[v], x, shape.new_id())
        ends.append(x)
    add(ends[0], ends[1], shape.new_id())
    edges = sorted(merged)
    out = _Shape(names, np.asarray(sizes, dtype=np.int64), edges, vid,
                 [merged[k] for k in edges], shape.fresh)
    return out, kept

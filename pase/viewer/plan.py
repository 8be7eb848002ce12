"""The plan table's rows: one per op in graph order, its split coloured by role, its costs.

A row is a compact JSON object (the page holds thousands):

- ``n`` name, ``k`` kind, ``d`` dims as ``[name, size, role, factor]`` with the
  role one of :data:`ROLE_GROUPS`' keys;
- ``c`` the layer cost (the cost model's vertex cost: compute and in-layer
  collectives), ``x`` the cost of its incoming re-layouts (edge costs), ``m`` its
  memory per device in bytes (null without a memory model), ``v`` its variant
  (ZeRO stage, recomputation) when not the default.

:func:`fold_key` is what two rows must share for :mod:`pase.viewer.blocks` to fold them.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Hashable, Sequence

from pase.ir import Graph, Op

if TYPE_CHECKING:  # pase.strategy draws itself in notebooks through this package
    from pase.strategy import Strategy

# The colour groups of the page (the legend's order) and the dim roles in each.
ROLE_GROUPS: dict[str, tuple[str, ...]] = {
    "batch": ("batch",),
    "heads": ("heads",),
    "hidden": ("channel", "parameter", "reduction"),
    "vocabulary": ("vocabulary",),
    "sequence": ("sequence",),
    "expert": ("expert",),
    "other": ("spatial", "window", "layer", "other"),
}
_GROUP_OF = {role: group for group, roles in ROLE_GROUPS.items() for role in roles}
# Significant digits kept of each cost: enough to tell costs apart, short in the page.
DIGITS = 6
_NUMBER = re.compile(r"\d+")


def role_group(role: str) -> str:
    return _GROUP_OF.get(role, "other")


def short(x: float | None) -> float | None:
    """``x`` to :data:`DIGITS` significant digits (None stays None)."""
    return None if x is None else float(f"{x:.{DIGITS}g}")


def op_row(op: Op, config: dict[str, int], cost: float, comm: float, memory: float | None,
           variant: str = "") -> dict[str, Any]:
    row: dict[str, Any] = {"n": op.name, "k": op.kind,
                           "d": [[d.name, d.size, role_group(d.role), int(config.get(d.name, 1))]
                                 for d in op.dims],
                           "c": short(cost), "x": short(comm), "m": short(memory)}
    if variant:
        row["v"] = variant
    return row


def rows(graph: Graph, strategy: "Strategy", memory: Sequence[float | None],
         comm: Sequence[float]) -> list[dict[str, Any]]:
    """One row per op of ``graph`` (``memory`` and ``comm`` per op, in graph order)."""
    out = []
    for i, op in enumerate(graph.ops):
        variant = strategy.variants.get(op.name)
        out.append(op_row(op, strategy.configs.get(op.name, {}), strategy.op_costs.get(op.name, 0.0),
                          comm[i], memory[i], str(variant) if variant is not None else ""))
    return out


def fold_key(row: dict[str, Any], producers: Sequence[int], index: int) -> Hashable:
    """Everything the row shows but the layer numbers in its name, and where its inputs come
    from relative to it."""
    dims = tuple(tuple(d) for d in row["d"])
    return (_NUMBER.sub("#", row["n"]), row["k"], dims, row["c"], row["x"], row["m"],
            row.get("v", ""), row.get("s"), tuple(index - p for p in producers))


def block_splits(rows: Sequence[dict[str, Any]]) -> str:
    """Every split a block's ops use: those all share, then each other one, ``b=4 · h=2 / f=2``
    (the page draws the same as chips)."""
    sets = [[f"{d[0]}={d[3]}" for d in r["d"] if d[3] > 1] for r in rows]
    common = [k for k in sets[0] if all(k in s for s in sets)] if sets else []
    extras: list[str] = []
    for s in sets:
        rest = " ".join(k for k in s if k not in common) or ("" if common else "replicated")
        if rest and rest not in extras:
            extras.append(rest)
    head = " ".join(common)
    if extras == ["replicated"] or not extras:
        return head or "replicated"
    return (head + " \u00b7 " if head else "") + " / ".join(extras)


def block_starts(names: Sequence[str]) -> list[bool]:
    """Whether each op's name begins a new block (its first dotted part changes)."""
    heads = [n.split(".")[0] for n in names]
    return [i == 0 or heads[i] != heads[i - 1] for i in range(len(heads))]

"""``Strategy._repr_html_``: the summary and the plan table, inline in Jupyter.

Static HTML and CSS, no script (notebooks strip or distrust scripts): repeated
blocks fold into one row whose ``<details>`` element opens on click. At most
:data:`MAX_ROWS` rows are drawn, so a large plan stays a small cell; the page of
:func:`pase.view` shows everything else (devices, timeline, comparison).
Kinds and dim roles come from the strategy's graph when its name loads as one
with the same ops; otherwise the splits are drawn without roles.
"""
from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from pase.errors import PaseError
from pase.registry import MODELS
from pase.viewer import blocks
from pase.viewer.plan import block_splits, block_starts, fold_key, role_group, short

if TYPE_CHECKING:  # pase.strategy imports this module (lazily) to draw itself
    from pase.strategy import Strategy

# Most table rows a notebook cell shows (a fold is one row).
MAX_ROWS = 300
COLOURS = {"batch": "#3b7dd8", "heads": "#d9822b", "hidden": "#2e9e6a", "vocabulary": "#9b59b6",
           "sequence": "#c0392b", "expert": "#b8a800", "other": "#7f8c8d"}
_CELL = "padding:1px 6px;text-align:left;white-space:nowrap"


def repr_html(strategy: "Strategy") -> str:
    graph = _graph(strategy)
    rows = _rows(strategy, graph)
    keys = [fold_key(r, [], i) for i, r in enumerate(rows)]
    segments = blocks.fold(keys, block_starts([r["n"] for r in rows]))
    body, shown = [], 0
    for start, period, count in segments:
        if shown >= MAX_ROWS:
            break
        shown += 1
        if count == 1:
            body.append(_tr(rows[start], strategy.unit))
            continue
        inner = "".join(_tr(r, strategy.unit) for r in rows[start:start + period])
        name = f"{rows[start]['n']} .. {rows[start + period * (count - 1)]['n']}"
        body.append(f"<tr><td colspan=4 style='{_CELL}'><details><summary><b>{html.escape(name)} "
                    f"x{count}</b> {html.escape(block_splits(rows[start:start + period]))} "
                    f"({period} op{'s' if period > 1 else ''} each, costs per block)"
                    f"</summary><table>{inner}</table></details></td></tr>")
    more = len(segments) - shown
    note = (f"<p>... {more} more rows: <code>pase.view(strategy, 'plan.html')</code> writes the "
            f"whole plan.</p>") if more > 0 else ""
    head = "".join(f"<th style='{_CELL}'>{h}</th>" for h in
                   ("op", "split", f"layer cost ({html.escape(strategy.unit)})", "share"))
    return (f"<div class='pase-plan'>{_summary(strategy)}<table><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>{note}</div>")


def _graph(strategy: "Strategy") -> Any:
    """The registered model of the strategy's name at its defaults, when it has the ops."""
    if strategy.graph_name not in MODELS:
        return None
    try:
        graph = MODELS.get(strategy.graph_name)()
    except (PaseError, TypeError, ValueError):
        return None
    return graph if all(name in graph for name in strategy.configs) else None


def _rows(strategy: "Strategy", graph: Any) -> list[dict[str, Any]]:
    total = strategy.total_cost or 1.0
    out = []
    for name, config in strategy.configs.items():
        op = graph.op(name) if graph is not None else None
        roles = {d.name: role_group(d.role) for d in op.dims} if op is not None else {}
        cost = strategy.op_costs.get(name, 0.0)
        out.append({"n": name, "k": op.kind if op is not None else "",
                    "d": [[d, 0, roles.get(d, "other" if roles else ""), f] for d, f in config.items()],
                    "c": short(cost), "x": None, "m": None, "share": cost / total})
    return out


def _tr(row: dict[str, Any], unit: str) -> str:
    chips = "".join(f"<span style='background:{COLOURS.get(role, '#7f8c8d')};color:#fff;"
                    f"padding:0 4px;border-radius:3px;margin-right:2px'>{html.escape(d)}={f}</span>"
                    for d, _, role, f in row["d"] if f > 1) or "<span style='color:#888'>replicated</span>"
    return (f"<tr><td style='{_CELL}'>{html.escape(row['n'])}</td><td style='{_CELL}'>{chips}</td>"
            f"<td style='{_CELL}'>{row['c']:.4g}</td><td style='{_CELL}'>{100 * row['share']:.1f}%</td></tr>")


def _summary(s: "Strategy") -> str:
    sol = s.solution
    parts = [f"<b>{html.escape(s.graph_name)}</b> on {s.devices} devices",
             f"cost model {html.escape(s.cost_model or '-')}"]
    if sol is not None:
        gap = f", gap {100 * sol.gap:.2f}%" if sol.gap else ""
        parts.append(f"solver {html.escape(str(sol.solver))}: {html.escape(str(sol.status))}{gap}")
    parts.append(f"total {s.total_cost:.6g} {html.escape(s.unit)}")
    mem, cap = s.meta.get("memory_bytes"), s.meta.get("memory_cap_bytes")
    if mem is not None:
        parts.append(f"memory {mem / 2**30:.3g} GiB per device"
                     + (f" (cap {cap / 2**30:.3g} GiB)" if cap else ""))
    return "<p>" + "; ".join(parts) + "</p>"

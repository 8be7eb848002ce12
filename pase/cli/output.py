"""Printing for the ``pase`` command: tables, listings, strict JSON, strategy summaries."""
from __future__ import annotations

import sys
from typing import Any, Sequence

from pase.files import write_text_atomic
from pase.schema import DIM_LETTERS
from pase.strategy import Strategy, json_text
from pase.text import table

# Columns the command's tables and listings fit in.
WIDTH = 100


def print_json(data: Any) -> None:
    """Strict JSON (no Infinity or NaN: a ValueError if one slips through)."""
    print(json_text(data))


def emit(data: dict[str, Any], text: str, output: str | None, fmt: str) -> None:
    """A command's result: ``data`` as JSON to the ``--output`` file when given, then on
    stdout as JSON (``--format json``) or as ``text``."""
    json_data = json_text(data)
    if output:  # checked before the work, but a disk can still fill up: the old file stays
        write_text_atomic(output, json_data + "\n", what="--output")
    print(json_data if fmt == "json" else text)
    if output:
        wrote(output)


def wrote(path: Any, data_on_stdout: bool = True) -> None:
    """``wrote FILE`` for every file a command writes: on stderr when stdout carries the
    command's table or JSON (scripts parse it), else on stdout."""
    print(f"wrote {path}", file=sys.stderr if data_on_stdout else sys.stdout, flush=True)


def listing(rows: list[dict[str, Any]], fmt: str, columns: Sequence[str]) -> None:
    """``rows`` as JSON objects (every key) or as a table of ``columns``."""
    if fmt == "json":
        print_json(rows)
    else:
        print(table([tuple("" if r.get(c) is None else r[c] for c in columns) for r in rows],
                    columns, width=WIDTH))


def gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.3f} GiB"


def _percent(gap: float) -> str:
    """A gap in percent with enough digits to be non-zero (a 1e-9 gap is not 0.00%)."""
    return f"{100 * gap:.2f}%" if gap >= 1e-4 else f"{100 * gap:.2g}%"


def describe(strategy: Strategy) -> str:
    """The table form of ``pase solve`` and ``pase evaluate``."""
    sol = strategy.solution
    head = f"{strategy.graph_name} on {strategy.devices} devices"
    if sol is not None:
        method = sol.stats.get("method")
        head += f", solver {sol.solver}{f' ({method})' if method else ''}: {sol.status}"
        if sol.gap:
            head += f" (gap {_percent(sol.gap)})"
        head += f", solved in {sol.wall_time:.3f} s"
    lines = [head]
    meta = strategy.meta
    if sol is not None and sol.choice is None:
        lines.append(_no_strategy(meta))
    else:
        lines.append(_cost_line(strategy))
    if meta.get("memory_bytes") is not None:
        lines.append(_memory_line(meta))
    if strategy.configs:
        lines += ["", strategy.table()]
        legend = dim_legend(strategy)
        if legend:
            lines.append(legend)
    return "\n".join(lines)


def _cost_line(strategy: Strategy) -> str:
    """The answer's cost: the plan's own price where the cost model prices plans
    (calibrated), which the status and the gap are about, with the Problem's sum (the
    table's total, a lower bound) beside it when the price adds to it."""
    total, unit = strategy.total_cost, strategy.unit
    step = strategy.meta.get("step_seconds")
    if step is None or abs(step - total) <= 1e-12 * abs(step):
        return f"total cost: {total:.6g} {unit} (cost model {strategy.cost_model})"
    return (f"total cost: {step:.6g} {unit} (cost model {strategy.cost_model}): the ops and "
            f"edges below, {total:.6g} {unit}, and {step - total:.4g} {unit} of communication "
            f"the backward pass does not hide")


def dim_legend(strategy: Strategy) -> str:
    """``dims: b batch, n output features (docs/glossary.md)``: the split dims' letters in a
    strategy's table, read from :data:`pase.schema.DIM_LETTERS`; "" when none is known."""
    used = sorted({d for op in strategy.configs for d in strategy.split(op)} & set(DIM_LETTERS))
    if not used:
        return ""
    return f"dims: {', '.join(f'{d} {DIM_LETTERS[d]}' for d in used)} (docs/glossary.md)"


def _no_strategy(meta: dict[str, Any]) -> str:
    if meta.get("memory_cap_bytes") is not None:
        return (f"no strategy found within the memory cap of {gib(meta['memory_cap_bytes'])} "
                f"per device; the least memory any strategy needs is "
                f"{gib(meta['min_memory_bytes'])}")
    return "no strategy found"


def _memory_line(meta: dict[str, Any]) -> str:
    cap = meta.get("memory_cap_bytes")
    line = f"memory per device: {gib(meta['memory_bytes'])}"
    if cap is None:
        return line + " (no cap)"
    verdict = "within" if meta.get("fits_memory_cap") else "OVER"
    return line + f" ({verdict} the cap of {gib(cap)})"

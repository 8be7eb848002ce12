"""Where a step's time goes, two plans side by side (``pase solve --explain``).

Each price says where its step goes in its own words: a layout's
(:func:`pase.perf.step.evaluate_layout`) and a per-op plan's
(:func:`pase.cost_models.calibrated_plan.price_plan`) ``breakdown`` has
``compute``, ``communication`` (exposed), ``bubble`` and ``optimizer``, with
``recompute_seconds`` beside it (the part of ``compute`` that runs forwards
again); a pipeline plan (:mod:`pase.pipeline.plan`) prices each stage's
micro-batch as one number. :func:`side` maps one price onto the same categories,
:func:`explanation` lines two up, :func:`render` prints the table.

The categories of a side add up to its step, checked: a breakdown that does not
is an internal error, never a table that silently disagrees with the step.
"""
from __future__ import annotations

import textwrap
from typing import Any, Mapping

from pase.errors import InternalError
from pase.text import table

VERSION = 1
CATEGORIES = ("compute", "communication", "bubble", "recomputation", "optimizer", "other")
LABELS = {"communication": "exposed communication"}
# Relative slack of the check that the categories add up to the step (rounding only).
TOLERANCE = 1e-6
WIDTH = 100  # columns the notes wrap at, as the command's tables
# A breakdown's keys, mapped onto the categories; any other key goes to "other".
_KEYS = {"compute": "compute", "communication": "communication", "bubble": "bubble",
         "optimizer": "optimizer"}


def side(price: Mapping[str, Any], label: str) -> dict[str, Any]:
    """One plan's step in the categories, from a layout's or a per-op plan's price
    (``step_seconds``, ``breakdown``, optional ``recompute_seconds``, ``memory_bytes``)
    or a pipeline plan's JSON (``kind: pipeline``)."""
    if price.get("kind") == "pipeline":
        return _pipeline_side(price, label)
    step = float(price["step_seconds"])
    cats = dict.fromkeys(CATEGORIES, 0.0)
    for key, value in price["breakdown"].items():
        cats[_KEYS.get(key, "other")] += float(value)
    again = float(price.get("recompute_seconds") or 0.0)  # part of compute, moved out
    cats["compute"] -= again
    cats["recomputation"] += again
    out = _checked(label, step, cats, price.get("memory_bytes"), None)
    if isinstance(price.get("layout"), Mapping):
        out["layout"] = layout_text(price["layout"])
    return out


def layout_text(lay: Mapping[str, Any]) -> str:
    """``tp=2 dp=4 mb=1 1f1b zero=1 recompute=none``: a layout in one line."""
    parts = [f"{k}={lay[k]}" for k in ("tp", "pp", "dp", "cp", "ep") if lay.get(k, 1) > 1]
    return " ".join(parts or ["dp=1"]) + (
        f" mb={lay['micro_batch']} {lay['schedule']} zero={lay['zero']} "
        f"recompute={lay['recompute']}" + (" sp" if lay.get("sequence_parallel") else ""))


def _pipeline_side(plan: Mapping[str, Any], label: str) -> dict[str, Any]:
    """A pipeline plan's step: the categories its one price gave (``breakdown``, the
    calibrated model's plans), else (an alpha-beta plan) ``sum_i t_i + 2 sum_b x_b + (m - 1) P``
    (:mod:`pase.pipeline.search`) as: the slowest stage's work ``m T`` (its compute with
    its own communication and optimizer: the pipeline price does not split them, so it
    counts as ``other``), the bubble ``sum_i t_i - T`` (the other stages' fill and
    drain), and the rest, the links' exposed transfers."""
    step = float(plan["step_seconds"])
    if plan.get("breakdown"):  # the one price's own categories (the calibrated model's)
        cats = dict.fromkeys(CATEGORIES, 0.0)
        cats.update({k: float(v) for k, v in plan["breakdown"].items()})
        return _checked(label, step, cats, plan.get("memory_bytes"), None)
    m = int(plan["microbatches"])
    times = [float(st["seconds_per_microbatch"]) for st in plan["stages"]]
    slowest = max(times, default=0.0)
    cats = dict.fromkeys(CATEGORIES, 0.0)
    cats["other"] = m * slowest
    cats["bubble"] = sum(times) - slowest
    cats["communication"] = step - cats["other"] - cats["bubble"]
    note = ("a pipeline plan prices each stage's micro-batch as one number: the slowest "
            "stage's work (compute, its communication and optimizer) is under other")
    return _checked(label, step, cats, plan.get("memory_bytes"), note)


def _checked(label: str, step: float, cats: dict[str, float], memory: Any,
             note: str | None) -> dict[str, Any]:
    total = sum(cats.values())
    if abs(total - step) > TOLERANCE * max(abs(step), 1e-12) or \
            any(v < -TOLERANCE * max(step, 1e-12) for v in cats.values()):
        raise InternalError(f"explain: {label}'s categories sum to {total:.6g} s (each: "
                            f"{', '.join(f'{k} {v:.4g}' for k, v in cats.items())}), its step "
                            f"is {step:.6g} s")
    out = {"label": label, "step_seconds": step, "seconds": cats,
           "memory_bytes": None if memory is None else float(memory)}
    if note:
        out["note"] = note
    return out


def explanation(plan: dict[str, Any] | None, against: dict[str, Any] | None,
                note: str | None = None) -> dict[str, Any]:
    """The JSON block: ``plan`` and ``against`` (two :func:`side` results; ``against``,
    or both, null when there is nothing to compare, ``note`` then says why) and
    ``difference`` (plan less against, per category and for the step)."""
    diff = None
    if plan is not None and against is not None:
        diff = {k: plan["seconds"][k] - against["seconds"][k] for k in CATEGORIES}
        diff["step_seconds"] = plan["step_seconds"] - against["step_seconds"]
    return {"version": VERSION, "categories": list(CATEGORIES), "plan": plan,
            "against": against, "difference": diff, "note": note}


def render(data: Mapping[str, Any]) -> str:
    """The plain-text table of :func:`explanation`: seconds and share of the step per
    category for each side, their difference, then the step and memory per device."""
    sides = [s for s in (data["plan"], data["against"]) if s is not None]
    if not sides:
        return f"note: {data['note']}"
    header = ["time"]
    for s in sides:
        header += [s["label"] + " s", "share"]
    if len(sides) == 2:
        header.append("difference s")
    rows = []
    for k in CATEGORIES:
        if all(s["seconds"][k] == 0.0 for s in sides):
            continue  # nothing on either side: the table stays short
        row = [LABELS.get(k, k)]
        for s in sides:
            row += [f"{s['seconds'][k]:.4g}", _share(s["seconds"][k], s["step_seconds"])]
        if len(sides) == 2:
            row.append(_difference(data["difference"][k], sides))
        rows.append(row)
    step = ["step"]
    memory = ["memory per device, GiB"]
    for s in sides:
        step += [f"{s['step_seconds']:.4g}", "100.0%"]
        mem = s["memory_bytes"]
        memory += ["" if mem is None else f"{mem / 2**30:.2f}", ""]
    if len(sides) == 2:
        step.append(_difference(data["difference"]["step_seconds"], sides))
        a, b = (s["memory_bytes"] for s in sides)
        memory.append("" if a is None or b is None else f"{(a - b) / 2**30:+.2f}")
    rows += [step, memory]
    lines = [table(rows, header, right=range(1, len(header)))]
    lines += [f"{s['label']}: {s['layout']}" for s in sides if s.get("layout")]
    notes = [s["note"] for s in sides if s.get("note")] + ([data["note"]] if data.get("note") else [])
    lines += [textwrap.fill(f"note: {n}", WIDTH, subsequent_indent="  ") for n in notes]
    return "\n".join(lines)


def _difference(value: float, sides) -> str:
    """A difference, ``+0`` where it is rounding (under 1e-9 of the larger step)."""
    if abs(value) < 1e-9 * max(s["step_seconds"] for s in sides):
        return "+0"
    return f"{value:+.4g}"


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.1%}" if whole > 0 else ""

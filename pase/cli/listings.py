"""``pase models``, ``pase solvers``, ``pase cost-models``, ``pase clusters``.

A third-party plug-in that failed to load is listed with status ``broken``
and its error; the others are listed as usual.
"""
from __future__ import annotations

import argparse
import inspect
from typing import Any

from pase.cli.output import listing, print_json
from pase.registry import COST_MODELS, MODELS, SOLVERS, Registry
from pase.text import table


def cmd_models(args: argparse.Namespace) -> None:
    rows = _plain_rows(MODELS)
    for row in rows:
        row["options"] = _model_options(row["name"]) if row["status"] == "ok" else {}
    if args.format == "json":
        print_json(rows)
        return
    for row in rows:
        row["options"] = " ".join(f"{k}={v}" for k, v in row["options"].items())
    listing(rows, args.format, ("name", "status", "description", "options"))


def _model_options(name: str) -> dict[str, Any]:
    """A model's options and their defaults: declared ones, else its keyword defaults."""
    entry = MODELS.entry(name)
    if "options" in entry.info:
        return dict(entry.info["options"])
    params = inspect.signature(entry.obj).parameters.values()
    return {p.name: p.default for p in params
            if p.default is not inspect.Parameter.empty and p.kind is not p.VAR_KEYWORD}


def cmd_cost_models(args: argparse.Namespace) -> None:
    listing(_plain_rows(COST_MODELS), args.format, ("name", "status", "description"))


def cmd_solvers(args: argparse.Namespace) -> None:
    rows = [_solver_row(e) for e in SOLVERS.entries()]
    rows += [{**_broken_row(b), "kind": None, "scope": None, "memory_cap": None, "available": False}
             for b in SOLVERS.broken()]
    if args.format == "json":
        print_json(rows)
        return
    shown = [{**r, "memory_cap": {True: "yes", False: "no", None: ""}[r["memory_cap"]]} for r in rows]
    listing(shown, "table", ("name", "kind", "scope", "memory_cap", "status", "description"))


def _solver_row(e: Any) -> dict[str, Any]:
    available = e.info.get("available")
    try:
        ok = bool(available()) if available else True
        note = "" if ok else f'needs pip install "pase[{e.info.get("extra", "all")}]"'
    except Exception as exc:  # a plug-in's own check failing is its error, not a crash
        ok, note = False, f"its availability check failed: {type(exc).__name__}: {exc}"
    kind = e.info.get("kind") or ("exact" if e.info.get("exact", False) else "heuristic")
    return {"name": e.name, "kind": kind, "scope": e.info.get("scope", "general"),
            "memory_cap": bool(e.info.get("memory_cap", True)), "available": ok,
            "status": "ok" if ok else "unavailable", "error": note or None,
            "description": e.description + (f" ({note})" if note else "")}


def _plain_rows(registry: Registry) -> list[dict[str, Any]]:
    rows = [{"name": e.name, "status": "ok", "error": None, "description": e.description}
            for e in registry.entries()]
    return rows + [_broken_row(b) for b in registry.broken()]


def _broken_row(b: Any) -> dict[str, Any]:
    return {"name": b.name, "status": "broken", "error": b.error,
            "description": f"plug-in {b.target} failed to load: {b.error}"}


def cmd_clusters(args: argparse.Namespace) -> None:
    from pase.cluster import PRESETS

    if args.format == "json":
        print_json([c.to_dict() for c in PRESETS.values()])
        return
    rows = []
    for c in PRESETS.values():
        # a heterogeneous preset: one row per group, fastest first, the name on the first
        for name, g in ([(c.name, c)] if not c.groups else
                        [(c.name if i == 0 else "", g) for i, g in enumerate(c.groups)]):
            rows.append((name, f"{g.nodes}x{g.devices_per_node}" if c.groups else str(g.devices_per_node),
                         g.device.name, f"{g.device.peak_tflops:g} {g.device.precision}",
                         f"{g.device.memory_gib:g}", f"{g.intra.bandwidth_gbps:g}",
                         f"{g.inter.bandwidth_gbps:g}"))
    print(table(rows, ("name", "per node", "device", "TFLOP/s", "GiB", "intra GB/s", "inter GB/s")))
    print("Add xN for N nodes (dgx-a100x2); a preset without xN grows to the device count.")
    print("Join parts with + for a mixed cluster (dgx-a100x2+dgx1-v100x2: groups fastest first; "
          "a group's row shows nodes x devices per node).")

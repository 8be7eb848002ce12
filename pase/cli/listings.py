"""``pase models``, ``pase solvers``, ``pase cost-models``, ``pase clusters``.

A third-party plug-in that failed to load is listed with status ``broken``
and its error; the others are listed as usual. ``--options`` lists each
plug-in's options and their defaults instead (what ``--model-option``,
``--option`` and ``--cost-option`` accept). Tables fit :data:`WIDTH` columns.
"""
from __future__ import annotations

import argparse
import inspect
import textwrap
from typing import Any, Callable

from pase.cli.output import WIDTH, listing, print_json
from pase.registry import COST_MODELS, MODELS, SOLVERS, Registry
from pase.text import table

# How KEY=VALUE option values are read, said once under every --options listing.
VALUES = ("Each value is read as the option's type: integer, number, true/false, text, none; "
          "byte sizes such as 1GiB for *_budget and *_bytes.")


def cmd_models(args: argparse.Namespace) -> None:
    rows = _plain_rows(MODELS)
    for row in rows:
        row["options"] = _model_options(row["name"]) if row["status"] == "ok" else {}
    if args.options:
        return _options(rows, args.format, "--model-option")
    if args.format == "json":
        print_json(rows)
        return
    listing(rows, args.format, ("name", "status", "description"))


def _model_options(name: str) -> dict[str, Any]:
    """A model's options and their defaults: declared ones, else its keyword defaults."""
    entry = MODELS.entry(name)
    if "options" in entry.info:
        return dict(entry.info["options"])
    params = inspect.signature(entry.obj).parameters.values()
    return {p.name: p.default for p in params
            if p.default is not inspect.Parameter.empty and p.kind is not p.VAR_KEYWORD}


def cmd_cost_models(args: argparse.Namespace) -> None:
    if args.options:
        return _options(_with_defaults(COST_MODELS), args.format, "--cost-option")
    listing(_plain_rows(COST_MODELS), args.format, ("name", "status", "description"))


def cmd_solvers(args: argparse.Namespace) -> None:
    if args.options:
        return _options(_with_defaults(SOLVERS), args.format, "--option")
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


def _with_defaults(registry: Registry) -> list[dict[str, Any]]:
    """The registry's rows, each with ``options``: its keyword parameters' defaults (the
    arguments the API sets itself left out)."""
    rows = _plain_rows(registry)
    for row in rows:
        row["options"] = _defaults(registry.get(row["name"])) if row["status"] == "ok" else {}
    return rows


def _defaults(obj: Callable[..., Any]) -> dict[str, Any]:
    try:
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        return {}
    return {p.name: p.default for p in params
            if p.name not in ("self", "problem", "time_limit", "seed")
            and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is not p.empty}


def _options(rows: list[dict[str, Any]], fmt: str, flag: str) -> None:
    """Each plug-in's options and defaults: JSON objects, or one wrapped paragraph each."""
    if fmt == "json":
        print_json([{"name": r["name"], "options": {k: _plain(v) for k, v in r["options"].items()}}
                    for r in rows])
        return
    for r in rows:
        text = ", ".join(f"{k}={v!r}" for k, v in r["options"].items()) or "(none)"
        print(textwrap.fill(f"{r['name']}: {text}", WIDTH, subsequent_indent="    ",
                            break_on_hyphens=False))
    print(textwrap.fill(f"Set one with {flag} KEY=VALUE (repeatable). {VALUES}", WIDTH))


def _plain(value: Any) -> Any:
    """A default as JSON can hold it (anything else as its repr)."""
    ok = value is None or isinstance(value, (bool, int, str)) or \
        (isinstance(value, float) and value == value and abs(value) != float("inf"))
    return value if ok else repr(value)


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
    print(table(rows, ("name", "per node", "device", "TFLOP/s", "GiB", "intra GB/s", "inter GB/s"),
                width=WIDTH))
    print("Add xN for N nodes (dgx-a100x2); a preset without xN grows to the device count.")
    print(textwrap.fill("Join parts with + for a mixed cluster (dgx-a100x2+dgx1-v100x2: groups "
                        "fastest first; a group's row shows nodes x devices per node).", WIDTH,
                        break_on_hyphens=False))

"""``pase solve ... --explain``: where the plan's step goes, against the best layout's.

The solve runs as it would without the flag and hands its result here, then
:mod:`pase.perf.explain` lines its price up with a layout's: for a per-op or pipeline
plan, the best layout of the ``--layouts`` family for the same model, devices, cluster,
global batch and precision; for ``--layouts``, the best layout against the second best.
The table follows the solve's own output; with ``--format json`` the comparison is the
result's ``explain`` key.
"""
from __future__ import annotations

import argparse
from typing import Any

from pase import api
from pase.cli import layouts
from pase.cli.args import key_values
from pase.errors import OptionError, TooLargeError
from pase.perf.explain import explanation, render, side


def explained(args: argparse.Namespace, data: dict[str, Any], text: str
              ) -> tuple[dict[str, Any], str]:
    """A solve's result (its data and text) with the comparison added."""
    data = dict(data, explain=explain(args, data))
    return data, text.rstrip("\n") + "\n\nwhere the step goes:\n" + render(data["explain"])


def check(args: argparse.Namespace) -> None:
    """The one-line refusals, before anything runs: what --explain needs, and what it does
    not go with."""
    if args.dry_run:
        raise OptionError("--explain does not apply to --dry-run (nothing is solved or priced)")
    if args.cluster is None:
        raise OptionError("--explain needs --cluster (its seconds are the calibrated model's): "
                          "pase solve MODEL -p N --cluster C [--global-batch B | --layouts "
                          "--global-batch B] --explain")
    if args.cost_model not in (None, "calibrated"):
        raise OptionError(f"--explain compares seconds priced by the calibrated model; "
                          f"--cost-model {args.cost_model} does not apply (drop it)")


def explain(args: argparse.Namespace, data: dict[str, Any]) -> dict[str, Any]:
    """The ``explain`` block for a solve's result ``data``."""
    if "ranked" in data:  # --layouts: the best against the second best
        ranked = data["ranked"]
        if not ranked:
            return explanation(None, None, "no layout of the family fits in memory")
        best = side(ranked[0], "best layout")
        if len(ranked) < 2:
            return explanation(best, None, "the family has one fitting layout: nothing to "
                                           "compare it with")
        return explanation(best, side(ranked[1], "second"))
    if "step_seconds" not in data or (data.get("kind") != "pipeline" and "breakdown" not in data):
        return explanation(None, None, "the solve found no plan: nothing to explain")
    plan = side(data, "plan")
    best, note = _best_layout(args, data)
    return explanation(plan, None if best is None else side(best, "best layout"), note)


def _best_layout(args: argparse.Namespace, data: dict[str, Any]
                 ) -> tuple[dict[str, Any] | None, str | None]:
    """The best layout's price (``evaluate --layout``'s keys) at the plan's model, devices,
    cluster, global batch and precision, or None and the one line that says why not."""
    options = key_values(args.model_option, "--model-option")
    batch = data.get("batch") if data.get("kind") == "pipeline" else args.batch
    if batch is None:
        batch = options.get("batch")
    options.pop("batch", None)  # the layout search sets each micro-batch itself
    if batch is None:
        batch = api.load_graph(args.model, **options).attrs.get("batch")
    if batch is None:
        return None, "the model has no batch to search layouts at: no layout to compare"
    cost_options = key_values(args.cost_option, "--cost-option")
    extra = {k: cost_options[k] for k in ("precision", "attention") if k in cost_options}
    try:
        result = api.search_layouts(args.model, data.get("devices", args.devices),
                                    cluster=args.cluster, global_batch=int(batch),
                                    model_options=options, progress=layouts.progress, **extra)
    except TooLargeError as exc:
        return None, f"the layout family is too large to search ({exc}); the plan alone"
    except OptionError as exc:
        return None, f"no layout family to compare with ({exc}); the plan alone"
    if not result.ranked:
        return None, (f"no layout of the family ({result.family:,} layouts) fits in memory; "
                      f"the plan alone")
    best = dict(result.ranked[0].to_dict())
    return best, None

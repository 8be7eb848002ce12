"""``pase evaluate --layout``: price a Megatron-LM/FSDP layout with the performance model."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from pase import api
from pase.cli import checks
from pase.cli.args import key_values
from pase.cli.output import emit
from pase.cluster import get_cluster
from pase.errors import OptionError
from pase.options import parse_bytes
from pase.perf import Estimate
from pase.text import table

# evaluate's flags that price a strategy file, not a layout
_STRATEGY_ONLY = ("cost_model", "cost_option", "tflops", "bandwidth", "build_budget", "cutoff",
                  "mesh", "batch")
_LAYOUT_ONLY = ("micro_batch", "global_batch", "sequence_parallel", "dropout")


def check_strategy_flags(args: argparse.Namespace) -> None:
    """With --strategy, the layout's flags are refused (they would be ignored)."""
    given = [f for f in _LAYOUT_ONLY if getattr(args, f, None)]
    given += [f for f, default in (("schedule", "1f1b"), ("precision", "bf16"), ("attention", "fused"))
              if getattr(args, f, default) != default]
    if args.recompute is not None and args.recompute.startswith(("selective", "full")):
        given.append("recompute " + args.recompute)
    if given:
        raise OptionError(f"--{given[0].replace('_', '-')} applies only with --layout; "
                          f"with --strategy the cost model's options set the like "
                          f"(--cost-option KEY=VALUE; `pase cost-models --options`)")


def cmd_evaluate_layout(args: argparse.Namespace) -> None:
    given = [f for f in _STRATEGY_ONLY if getattr(args, f, None)]
    if args.powers_of_two:
        given.append("powers_of_two")
    if given:
        raise OptionError(f"--{given[0].replace('_', '-')} does not apply with --layout "
                          f"(the performance model prices the layout itself)")
    for flag in ("cluster", "micro_batch", "global_batch"):
        if getattr(args, flag) is None:
            raise OptionError(f"--layout needs --{flag.replace('_', '-')}")
    if args.zero == "auto":
        raise OptionError("--layout prices one layout: --zero is 0, 1, 2 or 3 (auto searches, "
                          "with --strategy's cost model)")
    estimate = api.evaluate_layout(
        args.model, args.devices, args.layout, cluster=args.cluster, micro_batch=args.micro_batch,
        global_batch=args.global_batch, model_options=key_values(args.model_option, "--model-option"),
        schedule=args.schedule, zero=args.zero or 0, recompute=args.recompute or "none",
        sequence_parallel=args.sequence_parallel, precision=args.precision,
        attention=args.attention, dropout=args.dropout, tp_overlap=args.tp_overlap,
        ep_overlap=args.ep_overlap)
    data = estimate.to_dict()
    data["model"] = args.model
    data["devices"] = args.devices
    data.update(layout_plan(args, estimate))
    if args.memory_cap is not None and str(args.memory_cap).lower() != "none":
        data["memory_cap_bytes"] = parse_bytes(args.memory_cap)
        data["fits_memory"] = estimate.memory_bytes <= data["memory_cap_bytes"]
    emit(data, describe(data), args.output, args.format)


def layout_plan(args: argparse.Namespace, estimate: Estimate) -> dict:
    """The layout as a per-op plan: ``strategy`` (each op's split), ``variants`` (ZeRO
    stage, recomputation) and ``plan`` (the batch, cost model and options it is priced
    at); a pipeline layout (pp > 1) as ``pipeline``, a pipeline plan (the format of
    `pase solve --pipeline`). `pase evaluate --strategy` of this output prices the same
    plan with the calibrated cost model (an interleaved pipeline as stages of chunks). One
    :func:`pase.perf.plan.layout_configs` cannot write op by op (experts folded under
    context parallelism, unfolded experts under sequence parallelism) is no plan yet:
    ``plan`` is null."""
    from pase.errors import NoPlanFormError
    from pase.errors import OptionError as Refused
    from pase.perf.plan import layout_configs, layout_variants, plan_cost_options
    from pase.pipeline.layout_plan import layout_pipeline
    from pase.pipeline.solve import memory_cap_of

    lay = estimate.layout
    options = key_values(args.model_option, "--model-option")
    graph = api.load_graph(args.model, batch=lay.micro_batch * lay.dp, **options)
    costs = plan_cost_options(lay)
    if lay.pp > 1:
        try:
            plan = layout_pipeline(graph, lay, args.model, options,
                                   {"cluster": args.cluster, **costs})
        except Refused:
            return {"plan": None}
        # the plan's own figures: its one price, what `evaluate --strategy` of it gives
        plan.memory_cap_bytes = memory_cap_of(args.memory_cap,
                                              get_cluster(args.cluster, args.devices))
        price = api.make_cost_model("calibrated").price_pipeline(plan, graph=graph)
        return {"pipeline": plan.take_price(price).to_dict(), "plan": None}
    from pase.space import PADDED_ROLES  # the calibrated model's plan: a vocabulary pads

    try:
        strategy = layout_configs(graph, lay, padded_roles=PADDED_ROLES)
    except NoPlanFormError:  # no per-op form
        return {"plan": None}
    return {"strategy": strategy,
            "variants": layout_variants(graph, lay),
            "plan": {"version": 1, "layout": args.layout, "batch": lay.micro_batch * lay.dp,
                     "cost_model": "calibrated", "cost_options": costs, "model_options": options}}


def pipeline_of(data: object) -> dict | None:
    """The pipeline plan in a plan file: a `pase solve --pipeline` plan itself, or the
    ``pipeline`` a `pase evaluate --layout` output of a pipeline layout holds; None for a
    per-op plan."""
    if not isinstance(data, dict):
        return None
    if data.get("kind") == "pipeline":
        return data
    inner = data.get("pipeline")
    return inner if isinstance(inner, dict) and inner.get("kind") == "pipeline" else None


def describe(d: dict) -> str:
    """The table form: the step, its breakdown, and memory per device."""
    lay = d["layout"]
    shown = ("tp", "pp", "dp", "cp", "ep") + (("etp",) if lay["ep"] > 1 else ())
    degrees = " ".join(f"{k}={lay[k]}" for k in shown if lay[k] > 1 or k in ("tp", "pp", "dp", "etp"))
    head = (f"{d['model']} on {d['devices']} devices ({d['cluster']}), {degrees}: {lay['microbatches']} "
            f"micro-batch{'es' if lay['microbatches'] > 1 else ''} of {lay['micro_batch']}, "
            f"{lay['schedule']}, ZeRO-{lay['zero']}, recompute {_recompute_text(lay)}"
            f"{', sequence parallel' if lay['sequence_parallel'] else ''}, {lay['precision']}, "
            f"{lay['attention']} attention")
    step = d["step_seconds"]
    summary = (f"step {step:.4g} s, {d['tokens_per_second']:,.0f} tokens/s, MFU {d['mfu']:.1%}, "
               f"HFU {d['hfu']:.1%}")
    times = table([(k.replace("_", " "), f"{v:.4g}", f"{v / step:.1%}") for k, v in d["breakdown"].items()],
                  ("time", "seconds", "share"), right=(1, 2))
    cap = d.get("memory_cap_bytes", d["device_memory_bytes"])
    mem = d["memory"]
    rows = [(k.replace("_", " "), f"{mem[k] / 2**30:.2f}") for k in ("states", "activations",
                                                                       "recompute_working_set")]
    rows.append(("peak per device", f"{d['memory_bytes'] / 2**30:.2f}"))
    fits = "fits" if d["fits_memory"] else "DOES NOT FIT"
    memory = table(rows, ("memory (stage %d)" % d["peak_memory_stage"], "GiB"), right=(1,))
    return "\n".join([head, summary, "", times, "", memory,
                      f"{fits} in {cap / 2**30:.1f} GiB per device"])


def search_layouts_result(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """``pase solve --layouts``: the best layout of the family under the performance model,
    as the result's data and its text.

    ``--time-limit`` bounds the search's wall time: past it, the best layout priced so
    far is printed, marked not exhaustive (as a solver's best answer at its limit)."""
    checks.refuse(args, ("pipeline", "dry_run", "solver", "option", "cost_model", "cost_option",
                         "tflops", "bandwidth", "build_budget", "cutoff", "mesh", "batch",
                         "powers_of_two", "microbatches", "schedule", "zero", "recompute",
                         "seed"), "does not apply with --layouts")
    for flag in ("cluster", "global_batch"):
        if getattr(args, flag) is None:
            raise OptionError(f"--layouts needs --{flag.replace('_', '-')}")
    checks.output_file(args.output, "--output")
    options = key_values(args.model_option, "--model-option")
    if "batch" in options:
        raise OptionError("--layouts searches the micro-batch: give --global-batch, not a batch "
                          "model option")
    result = api.search_layouts(args.model, args.devices, cluster=args.cluster,
                                global_batch=args.global_batch, model_options=options,
                                time_limit=args.time_limit, progress=progress,
                                **({} if args.precision is None else
                                   {"precision": args.precision}))
    ranked = [dict(e.to_dict(), model=args.model, devices=args.devices) for e in result.ranked]
    data = {"version": 1, "model": args.model, "devices": args.devices, "cluster": args.cluster,
            "global_batch": args.global_batch, "family": result.family,
            "exhaustive": result.exhaustive, "priced": result.priced, "pruned": result.pruned,
            "fitting": result.fitting,
            "search_seconds": result.seconds, "best": ranked[0] if ranked else None,
            "ranked": ranked}
    stopped = "" if result.exhaustive else (
        f"; the time limit of {args.time_limit:g} s stopped the search, so the ranking is of "
        f"the layouts priced, not of the whole family")
    if not ranked:
        found = "fits in memory" if result.exhaustive else "that fits in memory was found"
        return data, (f"no layout of {args.model} on {args.devices} devices {found} "
                      f"({result.priced} priced of a family of {result.family:,}){stopped}")
    rows = [(i + 1, _layout_text(r["layout"]), f"{r['step_seconds']:.4g}", f"{r['mfu']:.1%}",
             f"{r['memory_bytes'] / 2**30:.1f}") for i, r in enumerate(ranked)]
    head = (f"{args.model} on {args.devices} devices ({ranked[0]['cluster']}), global batch "
            f"{args.global_batch}: {result.priced} layouts priced of a family of "
            f"{result.family:,} ({result.pruned:,} ruled out by their bounds) in "
            f"{result.seconds:.1f} CPU s, {result.fitting} fit{stopped}")
    return data, "\n".join([head, "", table(rows, ("rank", "layout", "step s", "MFU", "GiB"),
                                           right=(0, 2, 3, 4)), "", describe(ranked[0])])


def _layout_text(lay: dict) -> str:
    parts = [f"{k}={lay[k]}" for k in ("tp", "pp", "dp", "cp", "ep") if lay[k] > 1] or ["dp=1"]
    return (" ".join(parts) + f" mb={lay['micro_batch']} {lay['schedule']} zero={lay['zero']} "
            f"recompute={_recompute_text(lay)}" + (" sp" if lay["sequence_parallel"] else ""))


def _recompute_text(lay: dict) -> str:
    """``full:N`` where full recomputation rebuilds the first N layers of each stage, as
    ``--recompute`` takes it back."""
    n = lay.get("recompute_layers") or 0
    return f"{lay['recompute']}:{n}" if lay["recompute"] == "full" and n else lay["recompute"]


def progress(line: str) -> None:
    print(f"pase: {line}", file=sys.stderr, flush=True)


__all__ = ["Estimate", "check_strategy_flags", "cmd_evaluate_layout", "search_layouts_result",
           "describe"]

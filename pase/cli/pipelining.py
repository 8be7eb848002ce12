"""``pase solve MODEL -p N --pipeline``: the command behind the flag (parsed by ``pase solve``)."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from pase.cli import checks, recorded
from pase.cli.args import cost_kwargs, key_values
from pase.cli.output import emit
from pase.deadline import Deadline
from pase.errors import OptionError

# ``--option KEY=VALUE`` keys the pipeline search takes (see solve_pipeline).
PIPELINE_OPTIONS = ("cuts", "every", "stage_sizes", "uniform", "max_stages")
# Flags of ``pase solve`` that do not apply to a pipeline search.
_NOT_FOR_PIPELINE = {"mesh": "each stage's sub-mesh is searched; --mesh does not apply",
                     "seed": "the pipeline search is deterministic",
                     "build_budget": "each stage's Problem is built with the default budget"}


def solve_pipeline_result(args: argparse.Namespace,
                          deadline: Deadline | None = None) -> tuple[dict[str, Any], str]:
    """``pase solve --pipeline`` (or ``--global-batch``): the plan's data and its text.

    ``deadline``: the command's ``--time-limit``, started when the command started."""
    from pase.pipeline.solve import solve_pipeline

    for dest, reason in _NOT_FOR_PIPELINE.items():
        checks.refuse(args, (dest,), f"does not apply to --pipeline: {reason}")
    if args.solver not in (None, "auto", "dp"):
        raise OptionError(f"--pipeline solves each stage with auto (the exact dp, which fits "
                          f"every stage); --solver {args.solver} does not apply")
    if args.cost_model not in (None, "calibrated", "alpha-beta"):
        raise OptionError(f"--pipeline prices steps in seconds with the calibrated (default) or "
                          f"alpha-beta model; cost model {args.cost_model!r} has no seconds or "
                          f"memory for a pipeline step")
    checks.output_file(args.output, "--output")
    costs = cost_kwargs(args, default="calibrated")
    options = dict(costs["cost_options"])
    cluster = options.pop("cluster", "dgx-a100")
    if args.global_batch is not None and costs["cost_model"] == "calibrated":
        # the whole-plan search holds what the layout family holds: each op's ZeRO stage
        # and recomputation are searched unless given
        options.setdefault("zero", "auto")
        options.setdefault("recompute", "auto")
    search = _search_options(key_values(args.option, "--option"))
    plan = solve_pipeline(
        args.model, args.devices, batch=args.batch, microbatches=args.microbatches,
        # the whole-plan search (--global-batch) searches 1F1B and the interleavings
        schedule=args.schedule or ("auto" if args.global_batch is not None else "1f1b"),
        cluster=cluster, cost_options=options,
        memory_cap=args.memory_cap, cutoff=args.cutoff,
        powers_of_two=True,  # stage spaces: power-of-two split factors (docs/pipelines.md)
        model_options=key_values(args.model_option, "--model-option"),
        # on stderr whatever the format, as --layouts reports: a long search is never silent
        progress=lambda m: print(m, file=sys.stderr, flush=True),
        cost_model=costs["cost_model"],
        deadline=deadline if deadline is not None else Deadline(args.time_limit), **search)
    text = plan.describe()
    if plan.search.get("stopped"):
        cut = plan.search.get("stopped_search", 1)
        text += (f"\nthe time limit of {args.time_limit:g} s stopped the search: the best plan "
                 f"found so far; " + ("the first search was cut, so the gap is unknown"
                                      if cut == 1 else f"bounding search {cut} was cut, so "
                                      f"the bound is that of the searches before it"))
    return plan.to_dict(), text


def evaluate_pipeline_command(args: argparse.Namespace, data: dict) -> None:
    """``pase evaluate MODEL -p N --strategy plan.json`` of a pipeline plan, a pipeline
    layout's (the ``pipeline`` that ``evaluate --layout`` writes) or the pipeline search's:
    its one price (:func:`pase.pipeline.reprice.reprice`); the plan records its own
    options."""
    from pase.pipeline.plan import PipelinePlan
    from pase.pipeline.reprice import reprice

    plan = PipelinePlan.from_dict(data)
    recorded.check_plan_target(args, plan, args.strategy)
    recorded.check_plan_options(args, plan, args.strategy)
    for dest in ("batch", "cost_model", "cost_option", "memory_cap", "zero",
                 "recompute", "mesh", "cutoff", "tflops", "bandwidth"):
        checks.refuse(args, (dest,), "does not apply to a pipeline plan, which records "
                                     "what it was priced with")
    price = {**reprice(plan), "strategy_source": f"pipeline plan {args.strategy}",
             "stages": len(plan.stages)}
    search = price.get("search_step_seconds")
    text = (f"{plan.model} on {plan.devices} devices, {plan.one_line()}: step "
            f"{price['step_seconds'] * 1e3:.4g} ms"
            f"{'' if search is None else f' (the search charged {search * 1e3:.4g} ms)'}, "
            f"{price['memory_bytes'] / 2**30:.4g} GiB per device"
            f"{'' if price['fits_memory'] else ' (over the cap)'}")
    emit(price, text, args.output, args.format)


def _search_options(options: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in options.items():
        if key not in PIPELINE_OPTIONS:
            raise OptionError(f"--option {key} does not apply to --pipeline; allowed: "
                              f"{', '.join(PIPELINE_OPTIONS)}")
        if key == "cuts":
            out[key] = value
        elif key == "stage_sizes":
            out[key] = value if value == "powers" else _ints(value, "stage_sizes")
        elif key == "uniform":
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise OptionError(f"--option uniform expects true or false, got {value!r}")
            out[key] = value.lower() in ("true", "1", "yes")
        else:
            out[key] = _ints(value, key)[0]
    return out


def _ints(text: str, key: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise OptionError(f"--option {key} expects integers (comma-separated for a list), "
                          f"got {text!r}") from None
    if not values or min(values) < 1:
        raise OptionError(f"--option {key} expects integers >= 1, got {text!r}")
    return values

"""The model options and batch a per-op plan file records: written by ``pase solve``, and
checked by ``pase evaluate --strategy`` against its flags.

A strategy's splits were chosen for one graph; priced on another (other layers, another
batch) it gives a wrong answer without a word, so the file's settings apply where the
command gives none, and different ones are refused."""
from __future__ import annotations

from typing import Any

from pase import api
from pase.cli.args import key_values
from pase.errors import OptionError, StrategyError
from pase.options import coerce_options
from pase.plan_record import default_of, parameters
from pase.registry import MODELS
from pase.strategy import names_every_op, recorded_build, strategy_mapping

# How many of the ops a strategy leaves unnamed a message lists.
OPS_SHOWN = 5


def apply_recorded(path: str, data: Any, model: str, space: dict[str, Any],
                   devices: int | None = None, given_as: str = "--strategy") -> None:
    """Set ``space``'s batch and model options from what ``data`` records where the command
    gives none; refuse a command whose ones differ (one line naming the option), and
    first a plan of another registered model (its options would be the wrong complaint)
    or, given ``devices``, of another device count (its splits were chosen for that mesh:
    simulate fell back to its own rules while evaluate priced it). ``given_as``: the flag
    that named the file."""
    planned = data.get("model") if isinstance(data, dict) else None
    if planned in MODELS and model in MODELS and planned != model:
        raise StrategyError(f"{given_as} {path} is a plan for model {planned!r}, not {model!r}")
    on = data.get("devices") if isinstance(data, dict) else None
    if devices is not None and isinstance(on, int) and not isinstance(on, bool) and on != devices:
        raise OptionError(f"-p {devices}: {given_as} {path} was planned for {on} devices; give "
                          f"-p {on}, or move it with `pase replan {model} --from {path} "
                          f"-p {devices}`")
    options, batch = recorded_build(data, f"{given_as} {path}")
    given = dict(space["model_options"])
    flag = "--batch " if space["batch"] is not None else "--model-option batch="
    given_batch = space["batch"] if space["batch"] is not None else given.pop("batch", None)
    given.pop("batch", None)
    if batch is not None:
        if given_batch is None:
            space["batch"] = batch
        elif _batch(model, given_batch) != batch:
            raise OptionError(f"{flag}{given_batch}: {given_as} {path} records batch {batch}, "
                              f"the batch it was planned at; drop the flag to price it there")
    if options is None:
        return
    if not given:
        space["model_options"] = {**space["model_options"], **options}
        return
    recorded, now = _resolved(model, options), _resolved(model, given)
    for key in sorted(set(recorded) | set(now)):
        if recorded[key] != now[key]:
            was = f"the default {key}" if key not in options else f"{key}={options[key]}"
            gives = f"the default {key}={now[key]}" if key not in given else f"{key}={given[key]}"
            raise _other_option(key, f"{given_as} {path}", was, gives)


def _other_option(key: str, file: str, was: str, gives: str) -> OptionError:
    """The refusal of a ``--model-option`` that differs from what a plan file records."""
    return OptionError(f"--model-option {key}: {file} records {was}, the command gives "
                       f"{gives}; drop --model-option to price it at the file's model options")


def apply_plan_costs(data: Any, args: Any, costs: dict) -> bool:
    """A plan written by ``evaluate --layout`` (its ``plan`` block) or by a solve or evaluate
    (its ``cost_model`` and ``cost_options``) records what it was priced at; the cost model
    and each option apply to ``costs`` (:func:`pase.cli.args.cost_kwargs`) where the command
    line does not set them (the batch and model options: :func:`apply_recorded`), and so
    does a memory cap it was planned under (one other than its device's memory). Whether
    the file records its pricing."""
    plan = data.get("plan") if isinstance(data, dict) else None
    if not isinstance(plan, dict):
        recorded_options = isinstance(data, dict) and isinstance(data.get("cost_options"), dict)
        plan = data if recorded_options else None
    if not isinstance(plan, dict):
        return False
    if args.cost_model is None and plan.get("cost_model") and getattr(args, "cluster", None):
        costs["cost_model"] = plan["cost_model"]
    if costs["cost_model"] == plan.get("cost_model"):
        costs["cost_options"] = {**dict(plan.get("cost_options") or {}), **costs["cost_options"]}
    cap, device = data.get("memory_cap_bytes"), data.get("device_memory_bytes")
    if costs.get("memory_cap") is None and isinstance(cap, (int, float)) and \
            not isinstance(cap, bool) and cap > 0 and cap != device:
        costs["memory_cap"] = float(cap)  # a cap it was solved under, below the device's
    return True


def plan_graph(path: str, data: Any, model: str, space: dict[str, Any],
               given_as: str = "--strategy") -> tuple[Any, list[str]]:
    """The graph ``space`` builds and the ops of it ``data`` does not name; a solve's plan
    names every op, so one that leaves any is another model's and is refused."""
    options = dict(space["model_options"])
    if space["batch"] is not None:
        options["batch"] = space["batch"]
    graph = api.load_graph(model, **options)
    mapping = strategy_mapping(data)
    missing = [op.name for op in graph.ops if op.name not in mapping]
    # an op the graph lacks gets its own, sharper refusal where the splits are read
    names = {op.name for op in graph.ops}
    foreign = any(name not in names for name in mapping)
    if missing and names_every_op(data) and not foreign:
        more = ", ..." if len(missing) > OPS_SHOWN else ""
        raise StrategyError(f"{given_as} {path} does not name {len(missing)} of the "
                            f"{len(graph.ops)} ops of {graph.name!r} ({', '.join(missing[:OPS_SHOWN])}"
                            f"{more}): it was solved for another model or other model options; "
                            f"give those (--model-option)")
    return graph, missing


def check_plan_target(args: Any, plan: Any, path: str) -> None:
    """A pipeline plan is for one model, device count and cluster (its stages' splits were
    chosen on their meshes, their prices made on that cluster): a command that gives
    another is refused, in one wording for every command reading a plan (evaluate,
    simulate, view) and the per-op plans' words where they share a case."""
    model = args.model
    if plan.model != model and api.load_graph(model).name != plan.model:
        raise StrategyError(f"--strategy {path} is a plan for model {plan.model!r}, not {model!r}")
    if args.devices != plan.devices:
        raise OptionError(f"-p {args.devices}: --strategy {path} was planned for {plan.devices} "
                          f"devices; give -p {plan.devices}")
    priced_on, given = plan.cost_options.get("cluster"), getattr(args, "cluster", None)
    if priced_on is not None and given is not None and str(given) != str(priced_on):
        raise OptionError(f"--cluster {given}: --strategy {path} was priced on {priced_on}; "
                          f"give --cluster {priced_on}, or solve it again there")


def check_plan_options(args: Any, plan: Any, path: str) -> None:
    """A pipeline plan's model options are its own: a ``--model-option`` that gives the same
    value is allowed (as for a per-op plan), another refused in :func:`apply_recorded`'s
    words."""
    given = key_values(getattr(args, "model_option", None), "--model-option")
    if not given:
        return
    recorded, now = _resolved(plan.model, dict(plan.model_options)), \
        _resolved(plan.model, given)
    for key in sorted(given):
        if key == "batch" or recorded.get(key) != now.get(key):
            was = f"{key}={plan.model_options[key]}" if key in plan.model_options else \
                f"the default {key}" if key != "batch" else f"batch {plan.batch}"
            raise _other_option(key, f"--strategy {path}", was, f"{key}={given[key]}")


def _resolved(model: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` coerced to the model's types, with its defaults for those not given."""
    builder = api.model_function(model)
    out = _coerced(model, options)
    keys = set(out) | {n for n, p in parameters(builder).items()
                       if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    return {k: out[k] if k in out else default_of(builder, k) for k in keys if k != "batch"}


def _batch(model: str, value: Any) -> Any:
    """A given batch (an integer, or a --model-option's text) as an integer where it is one."""
    try:
        value = _coerced(model, {"batch": value})["batch"]
    except OptionError:  # a bad value: the model's build says why
        pass
    try:
        return int(value)
    except (TypeError, ValueError):
        return value


def _coerced(model: str, options: dict[str, Any]) -> dict[str, Any]:
    builder = api.model_function(model)
    return dict(options) if builder is None else coerce_options(builder, options,
                                                                f"model {model!r}")

"""``pase view``: a strategy as one self-contained HTML page (:mod:`pase.view`)."""
from __future__ import annotations

import argparse
import sys
from types import SimpleNamespace
from typing import Any

from pase import api
from pase.cli import checks, recorded
from pase.cli.args import cost_kwargs, positive_int, seconds, seed, solver_options, space_kwargs
from pase.cli.output import wrote
from pase.errors import OptionError

HELP = ("write a strategy as one self-contained HTML page: summary, the plan with its splits "
        "and costs, devices per tile, the simulated timeline, a comparison")
# Flags that steer a solver, which --strategy and --layout replace.
_SOLVER_FLAGS = ("option", "seed", "time_limit")
_TERMS = ("tp", "dp", "cp", "ep")  # what a page's layout line names (pase.viewer.layout)
# Flags a pipeline plan fixes itself.
_PLAN_FIXES = ("batch", "mesh", "cutoff", "powers_of_two", "cost_model",
               "cost_option", "memory_cap", "zero", "recompute", "tflops", "bandwidth",
               "build_budget", "solver", "layout", "micro_batch")


def add_arguments(s: argparse.ArgumentParser) -> None:
    """The flags of ``pase view`` after the model's and the cost model's (parser.py)."""
    what = s.add_mutually_exclusive_group(required=True)
    what.add_argument("--strategy", metavar="FILE",
                      help="a strategy file ({op: {dim: factor}}, a `pase solve` JSON output, or "
                           "a `pase solve --pipeline` plan)")
    what.add_argument("--solver", help="solve first with this solver (`pase solvers`; e.g. auto)")
    what.add_argument("--layout", metavar="tp=T,dp=D[,cp=C][,ep=E]",
                      help="a Megatron-LM/FSDP layout as a strategy: tp, cp and ep split each op "
                           "as `pase evaluate --layout` does, dp its batch (pp=1; needs "
                           "--micro-batch)")
    s.add_argument("--micro-batch", type=positive_int, metavar="M",
                   help="with --layout: sequences per micro-batch (the batch is M x dp)")
    s.add_argument("--compare", metavar="FILE2", help="a second strategy of the same model, "
                                                      "shown side by side")
    s.add_argument("--option", action="append", metavar="KEY=VALUE", help="a --solver option")
    s.add_argument("--seed", type=seed, help="seed for a randomised --solver")
    s.add_argument("--time-limit", type=seconds, help="seconds --solver may use")
    s.add_argument("--no-timeline", action="store_true",
                   help="skip the simulation (the Time tab stays empty)")
    s.add_argument("-o", "--output", metavar="FILE.html", default="plan.html",
                   help="the page to write (default: plan.html; - for stdout)")


def cmd_view(args: argparse.Namespace) -> None:
    from pase.viewer.write import write_html

    checks.output_file(args.output, "-o", stdout=True)
    if args.strategy is not None or args.layout is not None:
        checks.refuse(args, _SOLVER_FLAGS, "steers --solver, which --strategy and --layout "
                                           "replace; drop one of them")
    if args.layout is None:
        checks.refuse(args, ("micro_batch",), "applies only with --layout")
    if args.strategy is not None:
        from pase.cli.simulating import pipeline_plan_of

        plan = pipeline_plan_of(args)  # a pipeline plan, or a pipeline layout's
        if plan is not None:
            return _pipeline(args, write_html, plan)
    from pase.viewer.build import page_model

    first = _planned(args)
    other = None if args.compare is None else _from_file(args, args.compare, "--compare")
    data = page_model(first, other, simulate=not args.no_timeline,
                      labels=(_label(args), args.compare or "B"), command=_command(args))
    _write(write_html, data, args.output)


def _write(write_html: Any, data: Any, output: str) -> None:
    """The page to ``-o`` (``-``: stdout), written whole or not at all."""
    from pase.viewer.write import page_title

    if write_html(data, output, page_title(data), stdout=True) is not None:
        wrote(output, data_on_stdout=False)


def _command(args: argparse.Namespace) -> str:
    """The command line that made the page, as the page shows it."""
    import shlex

    argv = getattr(args, "argv", None)
    if argv is None:
        argv = sys.argv[1:]
    return shlex.join(["pase", *argv])


def _label(args: argparse.Namespace) -> str:
    return args.strategy or (f"layout {args.layout}" if args.layout else f"solver {args.solver}")


def _planned(args: argparse.Namespace) -> Any:
    if args.strategy is not None:
        return _from_file(args, args.strategy, "--strategy")
    if args.layout is not None:
        return _from_layout(args)
    return _solved(args)


def _build(args: argparse.Namespace, variants: Any = None, batch: int | None = None,
           cutoff: int | None = None, space: dict | None = None,
           costs: dict | None = None) -> Any:
    kwargs = space_kwargs(args) if space is None else dict(space)
    if batch is not None:
        kwargs["batch"] = batch
    if cutoff is not None and kwargs.get("cutoff") is None:
        kwargs["cutoff"] = cutoff
    costs = cost_kwargs(args) if costs is None else costs
    return api.build_problem(args.model, args.devices, **kwargs, **costs,
                             variants=variants or None)


def _from_file(args: argparse.Namespace, path: str, flag: str) -> Any:
    from pase.pipeline.plan import is_pipeline_file
    from pase.strategy import read_strategy_json, strategy_mapping, strategy_variants

    if flag == "--compare" and is_pipeline_file(path):
        raise OptionError(f"--compare {path} is a pipeline plan; only per-op strategies are compared")
    data = read_strategy_json(path)
    configs = strategy_mapping(data)
    space = space_kwargs(args)  # with the model options and batch the file was planned for
    recorded.apply_recorded(path, data, args.model, space, args.devices, flag)
    graph, _ = recorded.plan_graph(path, data, args.model, space, flag)
    planned = _as_priced(args, data, path, graph)
    if planned is None:
        costs = cost_kwargs(args)  # with the cost options the file was priced at (micro-batches)
        recorded.apply_plan_costs(data, args, costs)
        built = _build(args, strategy_variants(data), space=space, costs=costs)
        planned = _priced(built, configs)
    layout = data.get("layout") if isinstance(data, dict) else None
    if isinstance(layout, dict) and all(isinstance(layout.get(k), int) for k in _TERMS):
        # an `evaluate --layout` file names its layout: the page says that one (the match
        # from the splits took a MoE layout for another, selective recomputation for none)
        planned.layout = SimpleNamespace(**{k: layout[k] for k in _TERMS},
                                         sequence_parallel=bool(layout.get("sequence_parallel")),
                                         zero=int(layout.get("zero") or 0))
    return planned


def _as_priced(args: argparse.Namespace, data: Any, path: str, graph: Any) -> Any:
    """The file's strategy drawn with the prices it carries (no Problem built), when it
    carries them and the command asks for the same pricing: its device count, its cost
    model on its cluster, no cost option or cap of its own; else None (priced again)."""
    from pase.strategy import Strategy
    from pase.viewer.planned import carries, planned_of
    from pase.viewer.write import check_graph

    if not (isinstance(data, dict) and "op_costs" in data):
        return None
    strategy = Strategy.from_dict(data, f"strategy file {path}")
    costs = cost_kwargs(args)
    options = {k: v for k, v in costs["cost_options"].items() if k != "cluster"}
    if not carries(strategy) or strategy.devices != args.devices or options \
            or costs["cost_model"] != strategy.cost_model or args.memory_cap is not None:
        return None
    if args.cluster is not None:
        from pase.cluster import get_cluster

        if get_cluster(args.cluster, args.devices).name != strategy.meta.get("cluster"):
            return None
    check_graph(graph, strategy.configs)
    return planned_of(strategy, graph)


def _priced(built: Any, configs: dict) -> Any:
    from pase.strategy import Strategy
    from pase.viewer.planned import planned_from
    from pase.viewer.write import check_graph

    check_graph(built.graph, configs)
    choice = api.choice_of(built, configs)
    meta = api.priced_report(built, choice)  # the plan's own price (calibrated)
    strategy = Strategy.from_choice(built.graph, built.space, built.problem, choice,
                                    priced_by=built.cost_model, cost_model=built.cost_model.name,
                                    build_seconds=built.seconds, meta=meta)
    return planned_from(built, strategy)


def _solved(args: argparse.Namespace) -> Any:
    from pase.registry import SOLVERS
    from pase.viewer.planned import planned_from

    options = solver_options(args.option)
    SOLVERS.entry(args.solver)  # an unknown name fails before the build
    built = _build(args)
    strategy = api.solve_built(built, args.solver, time_limit=args.time_limit, seed=args.seed,
                               **options)
    solution = strategy.solution
    if solution is None or solution.choice is None:
        status = solution.status if solution is not None else "no answer"
        raise OptionError(f"solver {args.solver!r} found no strategy ({status}); nothing "
                          f"to view (a memory cap too small? --memory-cap none lifts it)")
    return planned_from(built, strategy)


def _from_layout(args: argparse.Namespace) -> Any:
    from pase.perf.layout import check_graph, make_layout
    from pase.perf.plan import layout_configs

    if args.micro_batch is None:
        raise OptionError("--layout needs --micro-batch (the batch is micro-batch x dp)")
    checks.refuse(args, ("batch",), "is set by --layout: the batch is --micro-batch x dp")
    lay = make_layout(args.layout, devices=args.devices, micro_batch=args.micro_batch,
                      global_batch=args.micro_batch * _dp(args.layout))
    if lay.pp > 1:
        raise OptionError(f"--layout pp={lay.pp}: a view shows one strategy on all devices; "
                          f"view a pipeline plan (`pase solve --pipeline --output plan.json`) "
                          f"with --strategy instead")
    # evaluate's checks (ep without experts, cp without a sequence...), before the build
    graph = api.load_graph(args.model, batch=lay.micro_batch * lay.dp,
                           **space_kwargs(args)["model_options"])
    check_graph(graph, lay)
    # the layout's tiles are candidates: without --cutoff, its smallest tile is the cutoff
    # when that is below the default (tp=2 on a batch of 4 leaves tiles of 2)
    built = _build(args, batch=lay.micro_batch * lay.dp, cutoff=_least_tile(graph, lay))
    unsplit: list[str] = []  # Megatron-LM pads a vocabulary tp does not divide; only some
    configs = layout_configs(built.graph, lay, unsplit,  # cost models do (calibrated)
                             built.cost_model.padded_roles)
    planned = _priced(built, configs)
    planned.layout = lay
    if unsplit:
        planned.notes.append(f"layout {args.layout}: {len(unsplit)} dims left unsplit because "
                             f"their size is not a multiple of the split (Megatron-LM pads "
                             f"them): {', '.join(unsplit[:5])}{' ...' if len(unsplit) > 5 else ''}")
    return planned


def _least_tile(graph: Any, lay: Any) -> int | None:
    """The smallest per-device extent of a dim the layout splits (None: it splits none)."""
    from pase.perf.plan import layout_configs
    from pase.space import DEFAULT_CUTOFF

    tiles = [op.shape[op.dim_index(d)] // f for op in graph.ops
             for d, f in layout_configs(graph, lay).get(op.name, {}).items()]
    return min(min(tiles), DEFAULT_CUTOFF) if tiles else None


def _dp(layout: str) -> int:
    from pase.perf.layout import parse_degrees

    return parse_degrees(layout).get("dp", 1)


def _pipeline(args: argparse.Namespace, write_html: Any, plan: Any) -> None:
    from pase.viewer.pipeline import pipeline_model

    if args.compare is not None:
        raise OptionError("--compare compares two per-op strategies; a pipeline plan has one "
                          "strategy per stage, so it is not compared")
    recorded.check_plan_options(args, plan, args.strategy)
    checks.refuse(args, _PLAN_FIXES, "is fixed by the pipeline plan; drop it")
    data = pipeline_model(plan, cluster=args.cluster, simulate=not args.no_timeline,
                          command=_command(args))
    _write(write_html, data, args.output)

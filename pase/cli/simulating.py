"""``pase simulate`` (one training step on a cluster) and ``pase reproduce``."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from pase import api
from pase.cli import checks, recorded
from pase.cli.args import cost_kwargs, space_kwargs
from pase.cli.output import print_json, wrote
from pase.errors import OptionError
from pase.prices import is_timed
from pase.strategy import (
    OUTPUT_VERSION,
    Strategy,
    read_strategy_json,
    strategy_mapping,
    strategy_variants,
)

# Flags that only steer the solver, which a given --strategy replaces.
_SOLVER_FLAGS = ("solver", "seed", "cost_model", "cost_option", "memory_cap", "cutoff",
                 "powers_of_two")
# Cost-model options the simulator shares (same meaning in both).
_SHARED_OPTIONS = ("efficiency", "bytes_per_element", "optimizer", "split", "compute", "precision")  # split: HH, heterogeneous


def cmd_simulate(args: argparse.Namespace) -> None:
    from pase.sim import simulate

    _check_simulate(args)
    if args.strategy:
        plan = pipeline_plan_of(args)
        if plan is not None:
            return _simulate_pipeline(args, plan)
    if args.cluster is None:  # a pipeline plan records the cluster its stages were priced on
        raise OptionError("--cluster: give the cluster to simulate on (`pase clusters`); only "
                          "a pipeline plan's --strategy brings its own")
    graph_kwargs = space_kwargs(args)
    if args.strategy:
        data = read_strategy_json(args.strategy)
        # the graph the file was planned for (its model options and batch), as evaluate has it
        recorded.apply_recorded(args.strategy, data, args.model, graph_kwargs, args.devices)
        model, _ = recorded.plan_graph(args.strategy, data, args.model, graph_kwargs)
        configs: Any = strategy_mapping(data)
        source = f"strategy file {args.strategy}"
        sim_options: dict[str, Any] = {"variants": strategy_variants(data)}  # ZeRO/recompute
        if isinstance(data, dict) and is_timed(data.get("op_prices") or {}):
            # a plan that carries its own seconds (the calibrated model's) is replayed at them
            configs = Strategy.from_dict(data, f"strategy file {args.strategy}")
            sim_options = {}
        else:  # priced as evaluate prices it (at what a layout's file records it at), with
            # the calibrated model, the default with a cluster: a plain mapping replayed at
            # the simulator's own rules and 4-byte elements ran 44% under its price
            costs = cost_kwargs(args)
            recorded.apply_plan_costs(data, args, costs)
            if costs["cost_model"] == "calibrated":
                priced = api.evaluate(model, data, args.devices, **costs)
                if is_timed(priced.op_prices):
                    configs, sim_options = priced, {}
    else:
        configs, source, sim_options = _solve_for(args)
        model = api.load_graph(args.model, **_model_options(graph_kwargs))
    result = simulate(model, configs, args.cluster, args.devices,
                      timeline=bool(args.plot or args.timeline), **sim_options)
    if args.plot:
        from pase.sim.plot import plot_timeline

        plot_timeline(result, args.plot)
        wrote(args.plot)
    if args.format == "json":
        print_json({"version": OUTPUT_VERSION, "strategy_source": source,
                    **result.to_dict(timeline=args.timeline)})
        return
    print(f"{result.summary()}\nstrategy: {source}")


def pipeline_plan_of(args: argparse.Namespace) -> Any:
    """``--strategy`` as a pipeline plan, found as ``pase evaluate --strategy`` finds one: a
    ``pase solve --pipeline`` plan or the ``pipeline`` of a pipeline layout's ``pase evaluate
    --layout`` output (priced, as evaluate prices it); None for a per-op strategy. Refused
    unless for ``args.model`` on ``args.devices`` devices."""
    from pase.cli.layouts import pipeline_of
    from pase.pipeline.plan import PipelinePlan

    data = read_strategy_json(args.strategy)
    inner = pipeline_of(data)
    if inner is None:
        return None
    plan = PipelinePlan.from_dict(inner)
    # its stages replay the prices of its cluster: another would be drawn at them
    recorded.check_plan_target(args, plan, args.strategy)
    from pase.pipeline.reprice import reprice

    # its one price, as `pase evaluate` gives it: a layout's plan records none, and a
    # recorded one may have been edited
    return plan.take_price(reprice(plan, search=False))


def _simulate_pipeline(args: argparse.Namespace, plan: Any) -> None:
    """Run a pipeline plan micro-batch by micro-batch (:mod:`pase.sim.pipeline`)."""
    from pase.sim.pipeline import simulate_pipeline

    recorded.check_plan_options(args, plan, args.strategy)
    checks.refuse(args, ("batch", "mesh"), "comes from the pipeline plan; drop it")
    result = simulate_pipeline(plan, args.cluster, timeline=bool(args.plot or args.timeline))
    if args.plot:
        from pase.sim.plot import plot_pipeline

        plot_pipeline(result, args.plot)
        wrote(args.plot)
    if args.format == "json":
        print_json({"version": OUTPUT_VERSION, "strategy_source": f"pipeline plan {args.strategy}",
                    **result.to_dict(timeline=args.timeline)})
        return
    print(f"{result.summary()}\nstrategy: pipeline plan {args.strategy} (priced step "
          f"{plan.step_time * 1e3:.4g} ms)")


def _check_simulate(args: argparse.Namespace) -> None:
    if args.strategy:
        checks.refuse(args, _SOLVER_FLAGS, "steers the solver, which --strategy replaces; "
                                           "drop one of them")
    if args.timeline and args.format != "json":
        raise OptionError("--timeline adds the timeline to the JSON output; it needs --format json "
                          "(or draw it with --plot)")
    checks.plot_file(args.plot)


def _solve_for(args: argparse.Namespace) -> tuple[Any, str, dict[str, Any]]:
    """The --solver's strategy under --cost-model (calibrated on --cluster by default)."""
    from pase.sim.pipeline import simulator_options

    solver = "auto" if args.solver is None else args.solver  # "" is an unknown name, not auto
    costs = cost_kwargs(args, default="alpha-beta")
    built = api.build_problem(args.model, args.devices, **space_kwargs(args), **costs)
    strategy = api.solve_built(built, solver, seed=args.seed)
    solution = strategy.solution
    if solution is None or solution.choice is None:
        status = "no answer" if solution is None else solution.status
        raise OptionError(f"solver {solver!r} found no strategy ({status}) to simulate")
    # the simulator runs the kernels as the model priced them: the calibrated model's own
    # roofline, precision and element size; alpha-beta's options where they were given
    shared = simulator_options(built.cost_model, costs["cost_options"], _SHARED_OPTIONS)
    source = f"solver {solver} ({built.cost_model.name} cost model)"
    if is_timed(strategy.op_prices):  # the plan's own seconds (calibrated): replayed at them
        return strategy, source, {}
    shared["variants"] = strategy.variants  # each op's ZeRO stage and recomputation
    return strategy.configs, source, shared


def _model_options(graph_kwargs: dict[str, Any]) -> dict[str, Any]:
    options = dict(graph_kwargs["model_options"])
    if graph_kwargs["batch"] is not None:
        options["batch"] = graph_kwargs["batch"]
    return options


def cmd_reproduce(args: argparse.Namespace) -> None:
    from pase import papers

    paper = papers.entry(args.paper)  # unknown names fail at once, listing the known ones
    checks.output_folder(args.out or paper.default_out, "--out")
    written = papers.reproduce(args.paper, args.out, quick=args.quick,
                               progress=lambda m: print(m, file=sys.stderr, flush=True))
    for path in written.values():
        wrote(path, data_on_stdout=False)


"""``pase inspect``, ``pase solve`` (and its ``--dry-run``), ``pase evaluate``."""
from __future__ import annotations

import argparse

from pase import api
from pase.cli import checks, explaining, layouts, recorded
from pase.cli.args import cost_kwargs, key_values, solver_options, space_kwargs
from pase.cli.output import describe, emit, print_json
from pase.cli.pipelining import evaluate_pipeline_command, solve_pipeline_result
from pase.counts import counts
from pase.deadline import Deadline, active
from pase.errors import OptionError
from pase.plan_record import build_record, cost_record
from pase.registry import SOLVERS
from pase.strategy import OUTPUT_VERSION, Strategy, read_strategy_json
from pase.text import table

# Flags that only matter for costs and solving, which --dry-run does neither of.
_NOT_FOR_DRY_RUN = ("output", "time_limit", "seed", "build_budget")
# The one dp option a dry run uses.
_DRY_RUN_OPTIONS = ("memory_budget",)


def cmd_inspect(args: argparse.Namespace) -> None:
    graph, space = api.build_space(args.model, args.devices, **space_kwargs(args))
    sizes = space.sizes
    totals = counts(graph)
    ops = [{"name": op.name, "kind": op.kind,
            "dims": {d.name: d.size for d in op.dims},
            "roles": {d.name: d.role for d in op.dims},
            "pinned": sorted(op.pinned), "configs": n,
            "parameters": c.parameters, "forward_flops": c.forward_flops,
            "matmul_flops": c.matmul_flops}
           for op, n, c in zip(graph.ops, sizes, totals.ops)]
    data = {"version": OUTPUT_VERSION, "model": graph.name, "devices": space.devices,
            "cutoff": space.cutoff, "vertices": len(graph.ops), "edges": len(graph.vertex_pairs()),
            "total_configs": sum(sizes), "max_configs": max(sizes, default=0),
            "parameters": totals.parameters, "forward_flops": totals.forward_flops,
            "matmul_flops": totals.matmul_flops, "ops": ops}
    if args.format == "json":
        print_json(data)
        return
    print(f"{graph.name}: {data['vertices']} vertices, {data['edges']} edges, p={space.devices}, "
          f"cutoff={space.cutoff}, configs: {data['total_configs']} in all, "
          f"{data['max_configs']} at most")
    print(f"parameters: {totals.parameters:,} (a tied weight once); forward FLOP: "
          f"{totals.forward_flops:.4g}, of which matrix products {totals.matmul_flops:.4g} "
          f"(a multiply-add is two FLOP)")
    rows = [(o["name"], o["kind"], " ".join(f"{k}={v}" for k, v in o["dims"].items()),
             str(o["configs"]), f"{o['forward_flops']:.4g}", f"{o['matmul_flops']:.4g}")
            for o in ops]
    print(table(rows, ("op", "kind", "dims", "configs", "forward FLOP", "matmul FLOP"),
                right=(3, 4, 5)))


def cmd_solve(args: argparse.Namespace) -> None:
    if args.explain:
        explaining.check(args)
    deadline = Deadline(args.time_limit)  # the command's clock starts here
    if args.dry_run:
        return _dry_run(args)
    data, text = _solved(args, deadline)
    if args.explain:  # the comparison with the best layout (pase/cli/explaining.py)
        data, text = explaining.explained(args, data, text)
    emit(data, text, args.output, args.format)


def _solved(args: argparse.Namespace, deadline: Deadline) -> tuple[dict, str]:
    """The solve's result as data and text: a layout, a pipeline plan or a per-op plan."""
    if args.precision is not None and not args.layouts:  # the cost model's option
        if "precision" in key_values(args.cost_option, "--cost-option"):
            raise OptionError("--precision and --cost-option precision=... are both given; use "
                              "one")
        args.cost_option = [*(args.cost_option or []), f"precision={args.precision}"]
    if args.layouts:
        return layouts.search_layouts_result(args)
    if args.global_batch is not None:  # the whole plan: stages, micro-batches, per-op splits
        checks.refuse(args, ("batch",), "is the model's batch; with --global-batch the global "
                      "batch is searched as pipeline stages and micro-batches")
        args.batch = args.global_batch
        args.pipeline = True
    if args.pipeline:  # --time-limit counts from the command's start here too
        return solve_pipeline_result(args, deadline)
    checks.refuse(args, ("microbatches", "schedule"), "applies only with --pipeline")
    solver = "auto" if args.solver is None else args.solver  # "" is an unknown name, not auto
    checks.output_file(args.output, "--output")
    options = solver_options(args.option)
    SOLVERS.entry(solver)  # an unknown or broken solver fails before the build
    # --time-limit covers the whole command: the build, then the solver with what is left.
    space, costs = space_kwargs(args), cost_kwargs(args)
    with active(deadline):
        built = api.build_problem(args.model, args.devices, **space, **costs)
        strategy = api.solve_built(built, solver, time_limit=args.time_limit, seed=args.seed,
                                   **options)
    # the plan records the graph it was solved for, which `evaluate --strategy` rebuilds,
    # and the cost options it was priced at, which it prices at unless told otherwise
    strategy.meta.update(_record(args.model, space, costs))
    return strategy.to_dict(), describe(strategy)


def _dry_run(args: argparse.Namespace) -> None:
    if args.solver not in (None, "auto", "dp"):
        raise OptionError(f"--dry-run predicts the work of auto and the dp; it does not apply "
                          f"to --solver {args.solver}")
    checks.refuse(args, _NOT_FOR_DRY_RUN, "does not apply to --dry-run, which reads only the "
                                          "graph and its configuration counts")
    options = key_values(args.option, "--option")
    extra = sorted(set(options) - set(_DRY_RUN_OPTIONS))
    if extra:
        raise OptionError(f"--option {extra[0]} does not apply to --dry-run (it predicts every "
                          f"ordering); allowed: {', '.join(_DRY_RUN_OPTIONS)}")
    pricing = cost_kwargs(args)
    del pricing["build_budget"]
    data = api.dry_run(args.model, args.devices, memory_budget=options.get("memory_budget"),
                       **space_kwargs(args), **pricing)
    if args.format == "json":
        print_json(data)
        return
    print(f"{data['model']} on {data['devices']} devices: {data['vertices']} vertices, "
          f"{data['edges']} edges, priced by {data['cost_model']}; dp would use ordering "
          f"{data['auto_ordering']!r} "
          f"(memory budget {data['memory_budget']:.4g} B)")
    print(table([_dry_run_row(r) for r in data["orderings"]],
                ("ordering", "max |D|", "table entries", "peak MiB", "est. seconds", "fits budget")))
    blocks = data.get("blocks", {})
    for c in blocks.get("chains", []):
        print(f"blocks: {c['count']} x {c['period']} ops from {c['first_block']!r} (separator "
              f"{', '.join(c['separator'])}; {c['states']} states): transfer "
              f"{c['transfer_entries']:.3g} entries, {c['power_products']} min-plus products")
    if blocks.get("blocks_found"):
        r = blocks["reduced"]
        print(f"reduced dp: {r['vertices']} vertices, {r['table_entries']:.3g} table entries")
    if "estimated_seconds" in data:
        print(f"estimated seconds with the dp's defaults: {data['estimated_seconds']:.3g}")
    _print_auto(data["auto"])


def _print_auto(a: dict) -> None:
    if a["method"] == "dp":
        print(f"auto would run the dp: {a['why']} (estimated {a['estimated_seconds']:.3g} s)")
        if "note" in a:
            print(f"  {a['note']}")
        if "probe" in a:
            pr = a["probe"]
            print(f"  first a {pr['steps']}-step probe of the decomposition (estimated "
                  f"{pr['estimated_seconds']:.3g} s when its first step proves the optimum, "
                  f"then the dp does not run; {pr['estimated_seconds_at_most']:.3g} s for all "
                  f"its steps, before the dp)")
        return
    print(f"auto would run the decomposition: {a['why']}; it keeps {a['kept_edges']} edges "
          f"(relaxed dp {a['relaxed_table_entries']:.3g} table entries) and relaxes "
          f"{a['dropped_edges']}; {a['seconds_per_step']:.3g} s per dual step, estimated "
          f"{a['estimated_seconds']:.3g} s when the first step proves its answer, at most "
          f"{a['estimated_seconds_at_most']:.3g} s ({a['steps_at_most']} steps)")


def _dry_run_row(r: dict) -> tuple[str, ...]:
    # A plan that stopped at a step too wide to run shows lower bounds.
    at_least = "" if r.get("complete", True) else ">= "
    return (r["ordering"], str(r["max_dependent_set"]), f"{at_least}{r['table_entries']:.3g}",
            f"{at_least}{r['peak_table_bytes'] / 2**20:.4g}",
            f"{at_least}{r['estimated_seconds']:.3g}",
            "yes" if r["within_memory_budget"] else "NO")


def cmd_evaluate(args: argparse.Namespace) -> None:
    checks.output_file(args.output, "--output")
    if args.layout is not None:
        layouts.cmd_evaluate_layout(args)
        return
    if args.from_config is not None:
        from pase.cli.exporting import cmd_evaluate_from
        cmd_evaluate_from(args)
        return
    layouts.check_strategy_flags(args)
    data = read_strategy_json(args.strategy)  # mapping or solve output: its variants count too
    pipeline = layouts.pipeline_of(data)  # a pipeline layout's plan, or the search's
    if pipeline is not None:  # one price for both (pase.pipeline.reprice)
        return evaluate_pipeline_command(args, pipeline)
    costs = cost_kwargs(args)
    _check_plan(args.strategy, data, costs["cost_options"])
    space = space_kwargs(args)
    recorded.apply_recorded(args.strategy, data, args.model, space, args.devices)
    recorded.apply_plan_costs(data, args, costs)
    graph, missing = recorded.plan_graph(args.strategy, data, args.model, space)
    record = _record(args.model, space, costs)
    space.update(batch=None, model_options=None)  # the graph is built: price that one
    strategy = api.evaluate(graph, data, args.devices, **space, **costs)
    strategy.meta.update(record)
    if missing:  # a plain mapping may leave ops unsplit; the output says which
        strategy.meta["unnamed_ops"] = missing
    _emit(strategy, args)


def _record(model: str, space: dict, costs: dict) -> dict:
    """What a per-op plan records of its graph and its pricing (:mod:`pase.plan_record`)."""
    return {**build_record(api.model_function(model), space["batch"], space["model_options"]),
            **cost_record(costs["cost_options"])}


def _check_plan(path: str, data: object, cost_options: dict) -> None:
    """Refuse what evaluate would misread: --zero / --recompute beside a file that records
    variants, where the option would set only the ops the file does not name and silently
    miss the others."""
    from pase.strategy import strategy_variants

    given = [k for k in ("zero", "recompute") if k in cost_options]
    if given and strategy_variants(data):
        raise OptionError(f"--strategy {path} records each op's ZeRO stage and recomputation "
                          f"(its \"variants\"); {given[0]}={cost_options[given[0]]} would set "
                          f"only the ops it does not name: drop the option, or the file's "
                          f"\"variants\" to set every op")


def _emit(strategy: Strategy, args: argparse.Namespace) -> None:
    text = describe(strategy)
    missing = strategy.meta.get("unnamed_ops")
    if missing:
        more = ", ..." if len(missing) > recorded.OPS_SHOWN else ""
        text += (f"\n{len(missing)} ops the strategy does not name are unsplit: "
                 f"{', '.join(missing[:recorded.OPS_SHOWN])}{more}")
    emit(strategy.to_dict(), text, args.output, args.format)

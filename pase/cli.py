"""The ``pase`` command. Mirrors the Python API; ``--format json`` output is stable."""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Sequence

from pase import api
from pase.errors import OptionError, PaseError
from pase.registry import COST_MODELS, MODELS, SOLVERS
from pase.strategy import OUTPUT_VERSION, read_strategy_file


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        return args.run(args) or 0
    except PaseError as exc:
        print(f"pase: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pase: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `pase solve ... | head`: the reader left, not an error
        sys.stdout = open(os.devnull, "w")
        return 0


# -- commands ----------------------------------------------------------------------

def cmd_models(args: argparse.Namespace) -> None:
    _listing([(e.name, e.description) for e in MODELS.entries()], args.format, ("name", "description"))


def cmd_cost_models(args: argparse.Namespace) -> None:
    _listing([(e.name, e.description) for e in COST_MODELS.entries()], args.format,
             ("name", "description"))


def cmd_solvers(args: argparse.Namespace) -> None:
    rows = []
    for e in SOLVERS.entries():
        available = e.info.get("available")
        ok = available() if available else True
        note = "" if ok else f' (needs pip install "pase[{e.info.get("extra", "all")}]")'
        rows.append((e.name, "exact" if e.info.get("exact") else "heuristic",
                     "yes" if ok else "no", e.description + note))
    _listing(rows, args.format, ("name", "kind", "available", "description"))


def cmd_clusters(args: argparse.Namespace) -> None:
    from pase.cluster import PRESETS

    rows = [(c.name, str(c.devices_per_node), c.device.name, f"{c.device.peak_tflops:g} {c.device.precision}",
             f"{c.device.memory_gib:g}", f"{c.intra.bandwidth_gbps:g}", f"{c.inter.bandwidth_gbps:g}")
            for c in PRESETS.values()]
    if args.format == "json":
        print(json.dumps([c.to_dict() for c in PRESETS.values()], indent=1))
        return
    print(_table(rows, ("name", "per node", "device", "TFLOP/s", "GiB", "intra GB/s", "inter GB/s")))
    print("Add xN for N nodes (dgx-a100x2); a preset without xN grows to the device count.")


def cmd_simulate(args: argparse.Namespace) -> None:
    from pase.sim import simulate

    if args.strategy:
        configs: Any = read_strategy_file(args.strategy)
        source = f"strategy file {args.strategy}"
    else:
        built = _build(args, cost_model=args.cost_model or "alpha-beta")
        solution = api.run_solver(args.solver, built.problem, seed=args.seed)
        if solution.choice is None:
            raise OptionError(f"solver {args.solver!r} found no strategy ({solution.status}) to simulate")
        configs = api.to_strategy(built, solution).configs
        source = f"solver {args.solver} ({built.cost_model.name} cost model)"
    model = args.model
    if args.batch is not None:
        model = api.load_graph(args.model, batch=args.batch)
    result = simulate(model, configs, args.cluster, args.devices,
                      timeline=bool(args.plot or args.timeline))
    if args.plot:
        from pase.sim.plot import plot_timeline

        plot_timeline(result, args.plot)
    if args.format == "json":
        data = {"version": OUTPUT_VERSION, "strategy_source": source,
                **result.to_dict(timeline=args.timeline)}
        print(json.dumps(data, indent=1))
        return
    print(f"{result.summary()}\nstrategy: {source}")
    if args.plot:
        print(f"timeline written to {args.plot}")


def cmd_reproduce(args: argparse.Namespace) -> None:
    from pase import papers

    papers.entry(args.paper)  # unknown names fail at once, listing the known ones
    written = papers.reproduce(args.paper, args.out, quick=args.quick,
                               progress=lambda m: print(m, file=sys.stderr, flush=True))
    for label, path in written.items():
        print(f"{label}: {path}")


def cmd_inspect(args: argparse.Namespace) -> None:
    built = _build(args)
    g, space = built.graph, built.space
    ops = [{"name": op.name, "kind": op.kind,
            "dims": {d.name: d.size for d in op.dims},
            "roles": {d.name: d.role for d in op.dims},
            "pinned": sorted(op.pinned), "configs": n}
           for op, n in zip(g.ops, space.sizes)]
    data = {"version": OUTPUT_VERSION, "model": g.name, "devices": space.devices,
            "cutoff": space.cutoff, "vertices": len(g.ops), "edges": len(g.vertex_pairs()),
            "total_configs": sum(space.sizes), "max_configs": max(space.sizes), "ops": ops}
    if args.format == "json":
        print(json.dumps(data, indent=1))
        return
    print(f"{g.name}: {data['vertices']} vertices, {data['edges']} edges, p={space.devices}, "
          f"cutoff={space.cutoff}, configs: {data['total_configs']} in all, {data['max_configs']} at most")
    rows = [(o["name"], o["kind"], " ".join(f"{k}={v}" for k, v in o["dims"].items()), str(o["configs"]))
            for o in ops]
    print(_table(rows, ("op", "kind", "dims", "configs")))


def cmd_solve(args: argparse.Namespace) -> None:
    built = _build(args)
    if args.dry_run:
        return _dry_run(built, args)
    solution = api.run_solver(args.solver, built.problem, time_limit=args.time_limit,
                              seed=args.seed, **_solver_options(args.option))
    strategy = api.to_strategy(built, solution)
    _emit(strategy, args)


def cmd_compare(args: argparse.Namespace) -> None:
    from pase.comparison import compare_problem, plot_comparison

    built = _build(args)
    solvers = [s.strip() for s in args.solvers.split(",") if s.strip()]
    if not solvers:
        raise OptionError("--solvers needs at least one solver name")
    for name in solvers:
        SOLVERS.entry(name)  # unknown names fail before any work, listing the known ones
    progress = None if args.format == "json" else (lambda m: print(m, file=sys.stderr, flush=True))
    rows = compare_problem(built, solvers, time_limit=args.time_limit, seed=args.seed,
                           progress=progress)
    if args.plot:
        plot_comparison(rows, args.plot, f"{built.graph.name}, p={built.space.devices}, "
                                         f"{built.cost_model.name} cost model")
    if args.format == "json":
        print(json.dumps({"version": OUTPUT_VERSION, "model": built.graph.name,
                          "devices": built.space.devices, "cost_model": built.cost_model.name,
                          "cost_unit": built.problem.unit,
                          "rows": [r.to_dict() for r in rows]}, indent=1))
        return
    table = [(r.solver, r.status,
              "-" if r.total_cost is None else f"{r.total_cost:.6g}",
              "-" if r.ratio_to_best is None else f"{r.ratio_to_best:.4f}",
              "-" if r.gap is None else f"{100 * r.gap:.2f}%",
              "-" if r.solve_seconds is None else f"{r.solve_seconds:.3f}")
             for r in rows]
    print(f"{built.graph.name} on {built.space.devices} devices ({built.cost_model.name} cost model, "
          f"{built.problem.unit})")
    print(_table(table, ("solver", "status", "total cost", "ratio to best", "gap", "seconds")))
    for r in rows:
        if r.error:
            print(f"{r.solver}: {r.error}")


# Min-plus table entries the dp fills per second, measured on a 2-core machine
# (Transformer p=64: 1.5e9 entries in 0.8 s); dry runs use it for a rough time.
DP_ENTRIES_PER_SECOND = 1e9


def _dry_run(built: api.Built, args: argparse.Namespace) -> None:
    """Predict the dp's work and memory for every ordering, without solving."""
    from pase.solvers import dp
    from pase.solvers.ordering import ORDERINGS

    if args.solver != "dp":
        raise OptionError(f"--dry-run predicts the dp solver's work; it does not apply to "
                          f"solver {args.solver!r}")
    options = _solver_options(args.option)
    budget = float(options.get("memory_budget", dp.DEFAULT_MEMORY_BUDGET))
    auto = dp.plan(built.problem, "auto").ordering
    rows = []
    for name in ORDERINGS:
        plan = dp.plan(built.problem, name)
        step = plan.peak_step
        rows.append({**plan.summary(),
                     "estimated_seconds": plan.table_entries / DP_ENTRIES_PER_SECOND,
                     "within_memory_budget": plan.peak_bytes <= budget,
                     "peak_vertex": None if step is None else built.problem.names[step.vertex]})
    data = {"version": OUTPUT_VERSION, "model": built.graph.name, "devices": built.space.devices,
            "vertices": built.problem.num_vertices, "edges": len(built.problem.edges),
            "memory_budget": budget, "auto_ordering": auto, "orderings": rows}
    if args.format == "json":
        print(json.dumps(data, indent=1))
        return
    print(f"{built.graph.name} on {built.space.devices} devices: {data['vertices']} vertices, "
          f"{data['edges']} edges; dp would use ordering {auto!r} (memory budget {budget:.4g} B)")
    print(_table([(r["ordering"], str(r["max_dependent_set"]), f"{r['table_entries']:.3g}",
                   f"{r['peak_table_bytes'] / 2**20:.4g}", f"{r['estimated_seconds']:.3g}",
                   "yes" if r["within_memory_budget"] else "NO")
                  for r in rows],
                 ("ordering", "max |D|", "table entries", "peak MiB", "est. seconds", "fits budget")))


def cmd_evaluate(args: argparse.Namespace) -> None:
    built = _build(args)
    configs = read_strategy_file(args.strategy)
    choice = api.choice_of(built, configs)
    from pase.strategy import Strategy

    strategy = Strategy.from_choice(built.graph, built.space, built.problem, choice,
                                    cost_model=built.cost_model.name, build_seconds=built.seconds)
    _emit(strategy, args)


# -- helpers -----------------------------------------------------------------------

def _build(args: argparse.Namespace, cost_model: str | None = None,
           memory_cap: str | None = None) -> api.Built:
    cost_options = _key_values(getattr(args, "cost_option", None), "--cost-option")
    if getattr(args, "tflops", None) is not None:
        cost_options["tflops"] = args.tflops
    if getattr(args, "bandwidth", None) is not None:
        cost_options["bandwidth"] = args.bandwidth
    return api.build_problem(args.model, args.devices,
                             cost_model or getattr(args, "cost_model", None) or "paper",
                             batch=args.batch, cutoff=args.cutoff,
                             powers_of_two=args.powers_of_two,
                             cluster=getattr(args, "cluster", None),
                             memory_cap=memory_cap or getattr(args, "memory_cap", None),
                             cost_options=cost_options)


def _solver_options(pairs: Sequence[str]) -> dict[str, Any]:
    return _key_values(pairs, "--option")


def _key_values(pairs: Sequence[str] | None, flag: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise OptionError(f"{flag} expects KEY=VALUE, got {pair!r}")
        try:
            options[key.replace("-", "_")] = json.loads(value)
        except json.JSONDecodeError:
            options[key.replace("-", "_")] = value
    return options


def _emit(strategy: Any, args: argparse.Namespace) -> None:
    text = strategy.to_json() if args.format == "json" else _describe(strategy)
    if args.output:
        strategy.to_json(args.output)
    print(text)


def _describe(strategy: Any) -> str:
    sol = strategy.solution
    head = f"{strategy.graph_name} on {strategy.devices} devices"
    if sol is not None:
        head += f", solver {sol.solver}: {sol.status}"
        if sol.gap:
            head += f" (gap {100 * sol.gap:.2f}%)"
        head += f", solved in {sol.wall_time:.3f} s"
    lines = [head]
    meta = strategy.meta
    if sol is not None and sol.choice is None and meta.get("memory_cap_bytes") is not None:
        lines.append(f"no strategy found within the memory cap of {_gib(meta['memory_cap_bytes'])} "
                     f"per device; the least memory any strategy needs is "
                     f"{_gib(meta['min_memory_bytes'])}")
    else:
        lines.append(f"total cost: {strategy.total_cost:.6g} {strategy.unit} "
                     f"(cost model {strategy.cost_model})")
    if meta.get("memory_bytes") is not None:
        cap = meta.get("memory_cap_bytes")
        lines.append(f"memory per device: {_gib(meta['memory_bytes'])}"
                     + (f" (cap {_gib(cap)})" if cap is not None else " (no cap)"))
    if strategy.configs:
        lines += ["", strategy.table()]
    return "\n".join(lines)


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.3f} GiB"


def _listing(rows: list[tuple[str, ...]], fmt: str, header: tuple[str, ...]) -> None:
    if fmt == "json":
        print(json.dumps([dict(zip(header, r)) for r in rows], indent=1))
    else:
        print(_table(rows, header))


def _table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    rows = [header] + [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pase", description="Find parallelization strategies for DNN training.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def listing(name: str, run: Any, help_: str) -> None:
        s = sub.add_parser(name, help=help_)
        s.add_argument("--format", choices=("table", "json"), default="table")
        s.set_defaults(run=run)

    listing("models", cmd_models, "list the registered models")
    listing("solvers", cmd_solvers, "list the solvers and whether each is available")
    listing("cost-models", cmd_cost_models, "list the cost models")
    listing("clusters", cmd_clusters, "list the cluster presets")

    def model_command(name: str, run: Any, help_: str, costs: bool = True) -> argparse.ArgumentParser:
        s = sub.add_parser(name, help=help_)
        s.add_argument("model", help="a registered model name or a graph JSON file")
        s.add_argument("-p", "--devices", type=_positive_int, required=True, help="number of devices")
        s.add_argument("--batch", type=_positive_int, help="batch size (registered models)")
        s.add_argument("--cutoff", type=_positive_int, help="smallest per-device extent of a split dim")
        s.add_argument("--powers-of-two", action="store_true", help="only power-of-two split factors")
        s.add_argument("--format", choices=("table", "json"), default="table")
        if costs:
            s.add_argument("--cost-model", default="paper", help="cost model name (default: paper)")
            s.add_argument("--tflops", type=float, help="peak TFLOP/s per device (paper model)")
            s.add_argument("--bandwidth", type=float, help="link bandwidth in GB/s (paper model)")
            s.add_argument("--output", help="also write the JSON result to this file")
            s.add_argument("--cluster", help="cluster preset or JSON file (alpha-beta cost model); "
                                             "see `pase clusters`")
            s.add_argument("--memory-cap", help="per-device memory cap, e.g. 16GiB, or none "
                                                "(default: the cluster's device memory)")
            s.add_argument("--cost-option", action="append", metavar="KEY=VALUE",
                           help="a cost model option (repeatable), e.g. efficiency=0.4")
        s.set_defaults(run=run)
        return s

    model_command("inspect", cmd_inspect, "show a model's ops and configuration counts", costs=False)
    s = model_command("solve", cmd_solve, "find a strategy")
    s.add_argument("--solver", default="dp", help="solver name (default: dp; see `pase solvers`)")
    s.add_argument("--time-limit", type=float, help="seconds the solver may use")
    s.add_argument("--seed", type=int, help="seed for randomised solvers")
    s.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="a solver option (repeatable), e.g. --option ordering=min-fill")
    s.add_argument("--dry-run", action="store_true",
                   help="predict the dp's table sizes, memory and time per ordering; do not solve")
    s = model_command("compare", cmd_compare, "run several solvers on one problem")
    s.add_argument("--solvers", default="dp,ilp-cpsat,ilp-highs,greedy,mcmc,data-parallel,owt",
                   help="comma-separated solver names")
    s.add_argument("--time-limit", type=float, help="seconds each solver may use")
    s.add_argument("--seed", type=int, help="seed for randomised solvers")
    s.add_argument("--plot", metavar="FILE.png", help="bar chart of cost and solve time")
    s = sub.add_parser("simulate", help="simulate one training step of a strategy on a cluster")
    s.add_argument("model", help="a registered model name or a graph JSON file")
    s.add_argument("-p", "--devices", type=_positive_int, required=True, help="number of devices")
    s.add_argument("--cluster", required=True, help="cluster preset or JSON file (`pase clusters`)")
    s.add_argument("--strategy", help="JSON strategy file (else solve with --solver)")
    s.add_argument("--solver", default="dp", help="solver when no --strategy is given (default dp)")
    s.add_argument("--cost-model", help="cost model for --solver (default alpha-beta on --cluster)")
    s.add_argument("--cost-option", action="append", metavar="KEY=VALUE")
    s.add_argument("--memory-cap", help="memory cap for --solver (default: device memory)")
    s.add_argument("--batch", type=_positive_int)
    s.add_argument("--cutoff", type=_positive_int)
    s.add_argument("--powers-of-two", action="store_true")
    s.add_argument("--seed", type=int)
    s.add_argument("--format", choices=("table", "json"), default="table")
    s.add_argument("--timeline", action="store_true", help="include the timeline in the JSON")
    s.add_argument("--plot", metavar="FILE.png", help="draw a Gantt chart of devices and links")
    s.set_defaults(run=cmd_simulate)
    s = sub.add_parser("reproduce", help="regenerate a paper's tables and figures")
    s.add_argument("paper", help="reproduction name, e.g. pase-ipdps2021")
    s.add_argument("--quick", action="store_true", help="a reduced grid (minutes, for CI)")
    s.add_argument("--out", help="output folder (default: the paper's results folder)")
    s.set_defaults(run=cmd_reproduce)
    s = model_command("evaluate", cmd_evaluate, "cost of a given strategy")
    s.add_argument("--strategy", required=True,
                   help="JSON file mapping op name to {dim: factor} (or a `pase solve` JSON output)")
    return p


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

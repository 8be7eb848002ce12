"""``pase compare``: several solvers on one Problem."""
from __future__ import annotations

import argparse
import sys

from pase import api
from pase.cli import checks
from pase.cli.args import cost_kwargs, key_values, space_kwargs
from pase.cli.output import print_json, wrote
from pase.deadline import Deadline
from pase.errors import OptionError
from pase.registry import SOLVERS
from pase.strategy import OUTPUT_VERSION
from pase.text import table


def solver_names(text: str) -> list[str]:
    """``"dp, greedy"`` -> ``["dp", "greedy"]``; every name known, none twice."""
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise OptionError("--solvers needs at least one solver name")
    for name in names:
        if names.count(name) > 1:
            raise OptionError(f"--solvers names {name!r} twice")
        SOLVERS.entry(name)  # unknown names fail before any work, listing the known ones
    return names


def solver_options(pairs: list[str] | None, solvers: list[str]) -> dict[str, dict[str, str]]:
    """``["dp:ordering=min-fill"]`` -> ``{"dp": {"ordering": "min-fill"}}``, checked
    against the compared solvers and their options (values coerced by the API)."""
    from pase.comparison import check_solver_options

    grouped: dict[str, list[str]] = {}
    for pair in pairs or []:
        name, sep, rest = pair.partition(":")
        if not sep or not name.strip() or "=" not in rest:
            raise OptionError(f"--option expects SOLVER:KEY=VALUE (e.g. dp:ordering=min-fill), "
                              f"got {pair!r}")
        grouped.setdefault(name.strip(), []).append(rest)
    options = {name: key_values(rest, f"--option {name}:") for name, rest in grouped.items()}
    check_solver_options(solvers, options)
    return options


def cmd_compare(args: argparse.Namespace) -> None:
    from pase.comparison import compare_problem, plot_comparison

    deadline = Deadline(args.time_limit)  # the command's clock starts here
    checks.plot_file(args.plot)
    solvers = solver_names(args.solvers)
    options = solver_options(getattr(args, "option", None), solvers)
    # --time-limit is each solver's, and bounds the build too (it cannot run unbounded).
    built = api.build_problem(args.model, args.devices, **space_kwargs(args), **cost_kwargs(args),
                              deadline=deadline)
    progress = None if args.format == "json" else (lambda m: print(m, file=sys.stderr, flush=True))
    rows = compare_problem(built, solvers, time_limit=args.time_limit, seed=args.seed,
                           progress=progress, solver_options=options)
    if args.plot:
        plot_comparison(rows, args.plot, f"{built.graph.name}, p={built.space.devices}, "
                                         f"{built.cost_model.name} cost model")
        wrote(args.plot)
    if args.format == "json":
        print_json({"version": OUTPUT_VERSION, "model": built.graph.name,
                    "devices": built.space.devices, "cost_model": built.cost_model.name,
                    "cost_unit": built.problem.unit, "rows": [r.to_dict() for r in rows]})
        return
    cells = [(r.solver, r.status, _num(r.total_cost, ".6g"), _num(r.ratio_to_best, ".4f"),
              "-" if r.gap is None else f"{100 * r.gap:.2f}%", _num(r.solve_seconds, ".3f"))
             for r in rows]
    print(f"{built.graph.name} on {built.space.devices} devices ({built.cost_model.name} cost "
          f"model, {built.problem.unit})")
    print(table(cells, ("solver", "status", "total cost", "ratio to best", "gap", "seconds")))
    for r in rows:
        if r.error:
            print(f"{r.solver}: {r.error}")


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)

"""Three-line entry points: ``pase.solve``, ``pase.evaluate``, ``pase.build_problem``.

Example:
    >>> import pase
    >>> s = pase.solve("alexnet", devices=8)
    >>> s.total_cost
    97098296512.0
"""
from __future__ import annotations

import inspect
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from pase.cost_model import CostModel
from pase.errors import OptionError, PaseError, UnknownNameError
from pase.ir import Graph
from pase.problem import COST_RTOL, Problem, Solution
from pase.registry import COST_MODELS, MODELS, SOLVERS
from pase.space import ConfigSpace, check_devices
from pase.strategy import Strategy, check_strategy_mapping


def load_graph(model: str | Path | Graph, **model_options: Any) -> Graph:
    """A Graph from a registered model name, a graph JSON path, or a Graph."""
    if isinstance(model, Graph):
        if model_options:
            raise OptionError(f"model options {sorted(model_options)} apply only to registered models")
        return model
    name = str(model)
    if name in MODELS:
        builder = MODELS.get(name)
        _check_options(builder, model_options, f"model {name!r}")
        return builder(**model_options)
    if name.endswith(".json") or Path(name).is_file():
        if model_options:
            raise OptionError(f"model options {sorted(model_options)} apply only to registered models")
        return Graph.from_json(Path(name))
    raise UnknownNameError(f"unknown model {name!r} (not a registered name or a graph JSON file); "
                           f"known: {', '.join(MODELS.names())}")


def make_cost_model(cost_model: str | CostModel = "paper", **options: Any) -> CostModel:
    if isinstance(cost_model, CostModel):
        return cost_model
    cls = COST_MODELS.get(cost_model)
    _check_options(cls, options, f"cost model {cost_model!r}")
    return cls(**options)


@dataclass
class Built:
    """A graph with its configuration space, cost model and Problem."""

    graph: Graph
    space: ConfigSpace
    cost_model: CostModel
    problem: Problem
    seconds: float


def build_problem(model: str | Path | Graph, devices: int = 8, cost_model: str | CostModel = "paper",
                  *, batch: int | None = None, cutoff: int | None = None,
                  powers_of_two: bool = False, max_configs: int | None = None,
                  model_options: Mapping[str, Any] | None = None,
                  cost_options: Mapping[str, Any] | None = None) -> Built:
    """Graph -> ConfigSpace -> Problem, timed."""
    start = time.perf_counter()
    devices = check_devices(devices)
    options = dict(model_options or {})
    if batch is not None:
        options["batch"] = batch
    graph = load_graph(model, **options)
    space_kwargs: dict[str, Any] = {"cutoff": cutoff, "powers_of_two": powers_of_two}
    if max_configs is not None:
        space_kwargs["max_configs"] = max_configs
    space = ConfigSpace(graph, devices, **space_kwargs)
    model_obj = make_cost_model(cost_model, **dict(cost_options or {}))
    problem = model_obj.problem(graph, space)
    return Built(graph, space, model_obj, problem, time.perf_counter() - start)


def run_solver(solver: str, problem: Problem, *, time_limit: float | None = None,
               seed: int | None = None, **options: Any) -> Solution:
    """Run a registered solver on a Problem, timing it and checking its claim."""
    entry = SOLVERS.entry(solver)
    available = entry.info.get("available")
    if available is not None and not available():
        from pase.errors import SolverUnavailableError

        extra = entry.info.get("extra", "all")
        raise SolverUnavailableError(f"solver {solver!r} needs an optional backend: "
                                     f'pip install "pase[{extra}]"')
    if time_limit is not None and not time_limit > 0:
        raise OptionError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
    _check_options(entry.obj, options, f"solver {solver!r}", reserved=("time_limit", "seed"))
    start = time.perf_counter()
    solution = entry.obj(problem, time_limit=time_limit, seed=seed, **options)
    solution.wall_time = time.perf_counter() - start
    solution.solver = solver
    if solution.choice is not None:
        true_cost = problem.evaluate(solution.choice)
        if abs(true_cost - solution.cost) > COST_RTOL * max(1.0, abs(true_cost)):
            raise PaseError(f"solver {solver!r} reported cost {solution.cost!r} but its choice "
                            f"evaluates to {true_cost!r}: a bug in the solver")
    return solution


def solve(model: str | Path | Graph, devices: int = 8, solver: str = "dp",
          cost_model: str | CostModel = "paper", *, batch: int | None = None,
          cutoff: int | None = None, powers_of_two: bool = False,
          model_options: Mapping[str, Any] | None = None,
          cost_options: Mapping[str, Any] | None = None,
          time_limit: float | None = None, seed: int | None = None,
          **solver_options: Any) -> Strategy:
    """Find a strategy for ``model`` on ``devices`` devices with ``solver``.

    ``model`` is a registered name (``pase models``), a graph JSON path, or a
    Graph. Extra keyword arguments go to the solver.
    """
    built = build_problem(model, devices, cost_model, batch=batch, cutoff=cutoff,
                          powers_of_two=powers_of_two, model_options=model_options,
                          cost_options=cost_options)
    solution = run_solver(solver, built.problem, time_limit=time_limit, seed=seed, **solver_options)
    return to_strategy(built, solution)


def to_strategy(built: Built, solution: Solution) -> Strategy:
    if solution.choice is None:
        return Strategy(built.graph.name, built.space.devices, {}, float("inf"), built.problem.unit,
                        {}, [], built.cost_model.name, solution, built.seconds)
    return Strategy.from_choice(built.graph, built.space, built.problem, solution.choice,
                                cost_model=built.cost_model.name, solution=solution,
                                build_seconds=built.seconds)


def evaluate(model: str | Path | Graph, strategy: Mapping[str, Mapping[str, int]] | Strategy,
             devices: int = 8, cost_model: str | CostModel = "paper", *,
             batch: int | None = None, cutoff: int | None = None, powers_of_two: bool = False,
             model_options: Mapping[str, Any] | None = None,
             cost_options: Mapping[str, Any] | None = None) -> Strategy:
    """The cost of a given strategy. Ops it does not name stay unsplit."""
    built = build_problem(model, devices, cost_model, batch=batch, cutoff=cutoff,
                          powers_of_two=powers_of_two, model_options=model_options,
                          cost_options=cost_options)
    configs = strategy.configs if isinstance(strategy, Strategy) else check_strategy_mapping(strategy)
    choice = choice_of(built, configs)
    return Strategy.from_choice(built.graph, built.space, built.problem, choice,
                                cost_model=built.cost_model.name, build_seconds=built.seconds)


def choice_of(built: Built, configs: Mapping[str, Mapping[str, int]]) -> tuple[int, ...]:
    """Candidate indices for a ``{op: {dim: factor}}`` mapping (unnamed ops unsplit)."""
    for op in configs:
        built.space.index_of(op, configs[op])  # raises StrategyError on unknown ops/dims
    return tuple(built.space.index_of(op.name, configs.get(op.name, {})) for op in built.graph.ops)


def _check_options(func: Any, options: Mapping[str, Any], what: str,
                   reserved: tuple[str, ...] = ()) -> None:
    """Reject unknown keyword options with the list of allowed ones."""
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    allowed = [n for n, p in params.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
               and n not in ("problem", "self") + reserved]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise OptionError(f"{what} has no option {', '.join(map(repr, unknown))}; "
                          f"allowed: {', '.join(allowed) or '(none)'}")

"""Three-line entry points: ``pase.solve``, ``pase.evaluate``, ``pase.build_problem``.

Example:
    >>> import pase
    >>> s = pase.solve("alexnet", devices=8)
    >>> s.total_cost
    97098296512.0
"""
from __future__ import annotations

import inspect
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from pase.costing import CostModel
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
                  cluster: Any = None, memory_cap: float | str | None = None,
                  model_options: Mapping[str, Any] | None = None,
                  cost_options: Mapping[str, Any] | None = None) -> Built:
    """Graph -> ConfigSpace -> Problem, timed.

    ``cluster`` goes to cost models that take one (``alpha-beta``).
    ``memory_cap`` (bytes, or text such as ``"16GiB"``; ``"none"`` for no cap)
    bounds each device's memory; by default a cost model with memory vectors
    and a cluster caps at the cluster's device memory.
    """
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
    cost_kwargs = dict(cost_options or {})
    if cluster is not None:
        cost_kwargs["cluster"] = cluster
    model_obj = make_cost_model(cost_model, **cost_kwargs)
    problem = model_obj.problem(graph, space)
    problem = problem.with_memory_cap(_memory_cap(memory_cap, problem, model_obj))
    return Built(graph, space, model_obj, problem, time.perf_counter() - start)


_UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: float | str) -> float:
    """``16GiB``, ``40GB``, ``512 MiB`` or a plain number of bytes."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        match = re.fullmatch(r"\s*([0-9.eE+]+)\s*([A-Za-z]*)\s*", str(text))
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise OptionError(f"cannot read {text!r} as a memory size; use e.g. 16GiB, 40GB, "
                              f"512MiB or a number of bytes")
        try:
            value = float(match.group(1)) * _UNITS[unit]
        except ValueError:
            raise OptionError(f"cannot read {text!r} as a memory size") from None
    if not value > 0:
        raise OptionError(f"a memory size must be positive, got {text!r}")
    return value


def _memory_cap(cap: float | str | None, problem: Problem, model: CostModel) -> float | None:
    if isinstance(cap, str) and cap.strip().lower() == "none":
        return None
    if cap is None:
        cluster = getattr(model, "cluster", None)
        return cluster.device.memory_bytes if problem.memory is not None and cluster else None
    if problem.memory is None:
        raise OptionError(f"cost model {model.name!r} has no memory model, so a memory cap cannot "
                          f"apply; use a cost model with memory such as 'alpha-beta'")
    return parse_bytes(cap)


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
          cluster: Any = None, memory_cap: float | str | None = None,
          model_options: Mapping[str, Any] | None = None,
          cost_options: Mapping[str, Any] | None = None,
          time_limit: float | None = None, seed: int | None = None,
          **solver_options: Any) -> Strategy:
    """Find a strategy for ``model`` on ``devices`` devices with ``solver``.

    ``model`` is a registered name (``pase models``), a graph JSON path, or a
    Graph. Extra keyword arguments go to the solver.
    """
    built = build_problem(model, devices, cost_model, batch=batch, cutoff=cutoff,
                          powers_of_two=powers_of_two, cluster=cluster, memory_cap=memory_cap,
                          model_options=model_options, cost_options=cost_options)
    solution = run_solver(solver, built.problem, time_limit=time_limit, seed=seed, **solver_options)
    return to_strategy(built, solution)


def to_strategy(built: Built, solution: Solution) -> Strategy:
    meta = memory_report(built.problem, solution.choice)
    if solution.choice is None:
        return Strategy(built.graph.name, built.space.devices, {}, float("inf"), built.problem.unit,
                        {}, [], built.cost_model.name, solution, built.seconds, meta)
    return Strategy.from_choice(built.graph, built.space, built.problem, solution.choice,
                                cost_model=built.cost_model.name, solution=solution,
                                build_seconds=built.seconds, meta=meta)


def memory_report(problem: Problem, choice: Any) -> dict[str, Any]:
    """Memory facts for outputs: the cap, the strategy's need, the least any needs."""
    if problem.memory is None:
        return {}
    return {"memory_cap_bytes": problem.memory_cap,
            "memory_bytes": None if choice is None else problem.memory_of(choice),
            "min_memory_bytes": problem.min_memory()}


def evaluate(model: str | Path | Graph, strategy: Mapping[str, Mapping[str, int]] | Strategy,
             devices: int = 8, cost_model: str | CostModel = "paper", *,
             batch: int | None = None, cutoff: int | None = None, powers_of_two: bool = False,
             cluster: Any = None, model_options: Mapping[str, Any] | None = None,
             cost_options: Mapping[str, Any] | None = None) -> Strategy:
    """The cost of a given strategy. Ops it does not name stay unsplit."""
    built = build_problem(model, devices, cost_model, batch=batch, cutoff=cutoff,
                          powers_of_two=powers_of_two, cluster=cluster, memory_cap="none",
                          model_options=model_options, cost_options=cost_options)
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

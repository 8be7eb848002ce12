"""Three-line entry points: ``pase.solve``, ``pase.evaluate``, ``pase.build_problem``.

Example:
    >>> import pase
    >>> s = pase.solve("alexnet", devices=8)
    >>> s.total_cost
    97098296512.0

Options reach plug-ins validated: solver, cost-model and model options are
checked against the plug-in's signature and coerced to its annotated types
(:mod:`pase.options`), so ``iterations="abc"`` is a one-line OptionError
naming the option, never a TypeError deep inside a solver.
"""
from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from pase.claims import check_answer
from pase.costing import CostModel, problem_shape
from pase.deadline import Deadline, active, current, share
from pase.deadline import check as check_deadline
from pase.errors import (
    GraphError,
    OptionError,
    SolverUnavailableError,
    TimeLimitError,
    UnknownNameError,
    check_int,
)
from pase.files import regular_file
from pase.ir import Graph, read_graph_file
from pase.options import check_seed, check_time_limit, coerce_options, parse_bytes
from pase.plan_record import build_record, cost_record
from pase.problem import Problem, Solution, Status, check_problem
from pase.registry import COST_MODELS, MODELS, SOLVERS
from pase.sizes import check_model_size
from pase.space import ConfigSpace, check_devices
from pase.strategy import OUTPUT_VERSION, Strategy, strategy_mapping, strategy_variants

__all__ = ["Built", "build_problem", "build_space", "choice_of", "dry_run", "evaluate",
           "evaluate_layout", "load_graph", "make_cost_model", "memory_report", "parse_bytes",
           "default_cost_model", "priced_report", "run_solver", "search_layouts", "solve", "to_strategy"]

def load_graph(model: str | Path | Graph, **model_options: Any) -> Graph:
    """A Graph from a registered model name, a graph JSON path, or a Graph."""
    if isinstance(model, Graph):
        if model_options:
            raise OptionError(f"model options {sorted(model_options)} apply only to registered models")
        return model
    name = str(model)
    if _is_reference(name):
        from pase.frontends.reference import load_reference

        return load_reference(name, **model_options)
    if name in MODELS:
        builder = MODELS.get(name)
        options = coerce_options(builder, model_options, f"model {name!r}")
        check_model_size(name, builder, options)  # before building: layers=10**6 is refused
        return builder(**options)
    from pase.graphs import hf_config  # a Hugging Face config.json, or the folder holding one

    if hf_config.is_hf_config(name):
        return hf_config.load(name, **model_options)
    if name.endswith(".json") or Path(name).exists():
        if model_options:
            raise OptionError(f"model options {sorted(model_options)} apply only to registered models")
        return read_graph_file(regular_file(name, "graph file", GraphError))  # a FIFO never opened
    raise UnknownNameError(f"unknown model {name!r} (not a registered name or a graph JSON file); "
                           f"known: {', '.join(MODELS.names())}")


def model_files(name: str) -> tuple[str, ...]:
    """The files :func:`load_graph` reads for model ``name``, in its order: the Python file
    of ``FILE.py:FUNCTION``, none for a registered name, a Hugging Face folder's
    ``config.json``, else the path itself."""
    if _is_reference(name):
        return (name.rpartition(":")[0],)
    if name in MODELS:
        return ()
    if Path(name).is_dir():
        return (str(Path(name) / "config.json"),)
    return (name,)


def model_function(model: Any) -> Any:
    """The function that builds ``model`` from keyword options: a registered model's, or a
    Hugging Face config's (:mod:`pase.graphs.hf_config`); None for anything else."""
    if not isinstance(model, str):
        return None
    if model in MODELS:
        return MODELS.get(model)
    from pase.graphs import hf_config

    return hf_config.model_function(model) if hf_config.is_hf_config(model) else None


def _is_reference(name: str) -> bool:
    """``FILE.py:FUNCTION``: a Python file whose function returns a module and its inputs."""
    path, sep, function = name.rpartition(":")
    return bool(sep) and path.endswith(".py") and function.isidentifier()


def make_cost_model(cost_model: str | CostModel | None = None, **options: Any) -> CostModel:
    """A cost model by name with its options (no name: :func:`default_cost_model` of a
    cluster option, else the paper's), or ``cost_model`` itself when it is one."""
    if cost_model is None:
        cost_model = default_cost_model(options["cluster"]) if "cluster" in options else "paper"
    if isinstance(cost_model, CostModel):
        if options:
            raise OptionError(f"cost model options {sorted(options)} apply only to a cost model "
                              f"given by name, not to a CostModel instance")
        return cost_model
    cls = COST_MODELS.get(cost_model)
    return cls(**coerce_options(cls, options, f"cost model {cost_model!r}"))


def default_cost_model(cluster: Any) -> str:
    """The cost model a cluster gets when none is named: the calibrated model, on a mixed
    cluster too (priced per device type; a bad cluster name is refused here)."""
    from pase.cluster import get_cluster

    get_cluster(cluster)
    return "calibrated"


@dataclass
class Built:
    """A graph with its configuration space, cost model and Problem."""

    graph: Graph
    space: ConfigSpace
    cost_model: CostModel
    problem: Problem
    seconds: float


def build_space(model: str | Path | Graph, devices: int = 8, *, batch: int | None = None,
                cutoff: int | None = None, powers_of_two: bool = False,
                max_configs: int | None = None, mesh: str | Sequence[int] | None = None,
                model_options: Mapping[str, Any] | None = None,
                padded_roles: Sequence[str] = ()) -> tuple[Graph, ConfigSpace]:
    """The graph and its configuration space, without any costs (``pase inspect``).

    ``mesh`` (``"16x64"`` or ``(16, 64)``) asks for a mesh-shaped space instead of
    the paper's divisor products (see :class:`pase.space.ConfigSpace`); ``padded_roles``
    the dim roles split with padding (the calibrated model's)."""
    devices = check_devices(devices)
    options = dict(model_options or {})
    if batch is not None:
        if "batch" in options:
            raise OptionError("batch given twice: as an argument and as a model option")
        options["batch"] = batch
    graph = load_graph(model, **options)
    space_kwargs: dict[str, Any] = {"cutoff": cutoff, "powers_of_two": powers_of_two,
                                    "padded_roles": padded_roles}
    if max_configs is not None:
        space_kwargs["max_configs"] = max_configs
    if mesh is not None:
        space_kwargs["mesh"] = mesh
    return graph, ConfigSpace(graph, devices, **space_kwargs)


def build_problem(model: str | Path | Graph, devices: int = 8, cost_model: str | CostModel | None = None,
                  *, batch: int | None = None, cutoff: int | None = None,
                  powers_of_two: bool = False, max_configs: int | None = None,
                  mesh: str | Sequence[int] | None = None, cluster: Any = None,
                  memory_cap: float | str | None = None,
                  model_options: Mapping[str, Any] | None = None,
                  cost_options: Mapping[str, Any] | None = None,
                  build_budget: float | str | None = None,
                  variants: Mapping[str, Any] | None = None,
                  deadline: Deadline | None = None) -> Built:
    """Graph -> ConfigSpace -> Problem, timed.

    ``cost_model``: a registered name or a CostModel; by default the calibrated model
    when a ``cluster`` is given (alpha-beta for a mixed one), else the paper's. ``cluster`` goes to cost models that
    take one (``calibrated``, ``alpha-beta``).
    ``memory_cap`` (bytes, or text such as ``"16GiB"``; ``"none"`` for no cap)
    bounds each device's memory; by default a cost model with memory vectors
    and a cluster caps at the cluster's device memory. ``build_budget`` (bytes
    or text) bounds the Problem's cost arrays: a larger build is refused before
    any allocation (default :data:`pase.costing.DEFAULT_BUILD_BUDGET`).
    ``variants`` (``{op: {"zero": 3, "recompute": true}}``) fixes ops' ZeRO stage and
    recomputation, as a strategy file records them (alpha-beta).
    ``deadline`` (a :class:`pase.deadline.Deadline`, as :func:`solve` starts one for its
    ``time_limit``) stops the build with a TimeLimitError once it passes; the cost
    loops check it between ops and edges.
    """
    with active(deadline):
        return _build_problem(model, devices, cost_model, batch, cutoff, powers_of_two,
                              max_configs, mesh, cluster, memory_cap, model_options,
                              cost_options, build_budget, variants)


def _build_problem(model, devices, cost_model, batch, cutoff, powers_of_two, max_configs, mesh,
                   cluster, memory_cap, model_options, cost_options, build_budget,
                   variants) -> Built:
    start = time.perf_counter()
    model_obj = _pricing_model(cost_model, cluster, cost_options)
    graph, space = build_space(model, devices, batch=batch, cutoff=cutoff,
                               powers_of_two=powers_of_two, max_configs=max_configs,
                               mesh=mesh, model_options=model_options,
                               padded_roles=model_obj.padded_roles)
    check_deadline("building the graph and its configuration space")
    if variants is not None:
        model_obj = model_obj.with_variants(variants)
    if build_budget is None:
        problem = model_obj.problem(graph, space)
    else:
        problem = model_obj.problem(graph, space, memory_budget=parse_bytes(build_budget))
    problem = problem.with_memory_cap(_memory_cap(memory_cap, problem.memory is not None,
                                                 model_obj))
    return Built(graph, space, model_obj, problem, time.perf_counter() - start)


def _pricing_model(cost_model: str | CostModel | None, cluster: Any,
                   cost_options: Mapping[str, Any] | None) -> CostModel:
    """The cost model with its options, ``cluster`` among them when given. No name: the
    calibrated model when a cluster is given (in ``cluster`` or the options; alpha-beta for
    a mixed one), else the paper's."""
    kwargs = dict(cost_options or {})
    if cost_model is None and (cluster is not None or "cluster" in kwargs):
        cost_model = default_cost_model(cluster if cluster is not None else kwargs["cluster"])
    if cost_model is None:
        cost_model = "paper"
    if cluster is not None:
        if "cluster" in kwargs:
            raise OptionError("cluster given twice: as an argument and as a cost option")
        kwargs["cluster"] = cluster
    return make_cost_model(cost_model, **kwargs)


def _memory_cap(cap: float | str | None, has_memory: bool, model: CostModel) -> float | None:
    """The cap in bytes a Problem of ``model`` gets (None: none): ``cap`` as given, or by
    default a cluster's device memory when the model has memory vectors."""
    if isinstance(cap, str) and cap.strip().lower() == "none":
        return None
    if cap is None:
        cluster = getattr(model, "cluster", None)
        return cluster.device.memory_bytes if has_memory and cluster else None
    if not has_memory:
        raise OptionError(f"cost model {model.name!r} has no memory model, so a memory cap cannot "
                          f"apply; use a cost model with memory such as 'alpha-beta'")
    return parse_bytes(cap)


def run_solver(solver: str, problem: Problem, *, time_limit: float | None = None,
               seed: int | None = None, **options: Any) -> Solution:
    """Run a registered solver on a Problem, timing it and checking its answer.

    Before the run, ``seed`` must be None or an integer >= 0, ``time_limit``
    None or finite seconds > 0, and ``options`` are checked and coerced by the
    solver's annotations. After it, :func:`pase.claims.check_answer` checks
    the claim: a valid choice (or none, with status infeasible or time_limit),
    its re-evaluated cost, a lower bound not above the cost, an optimal
    status backed by a bound equal to the cost, and the memory cap. A broken
    claim raises :class:`pase.claims.ClaimError` (a bug in the solver).
    """
    entry = SOLVERS.entry(solver)
    check_problem(problem, f"run_solver({solver!r}, ...)")
    time_limit, seed = check_time_limit(time_limit), check_seed(seed)
    options = coerce_options(entry.obj, options, f"solver {solver!r}", reserved=("time_limit", "seed"))
    available = entry.info.get("available")
    if available is not None and not available():
        extra = entry.info.get("extra", "all")
        raise SolverUnavailableError(f"solver {solver!r} needs an optional backend: "
                                     f'pip install "pase[{extra}]"')
    limit = _solver_share(solver, time_limit)
    start = time.perf_counter()
    with active(Deadline(limit, start=start)):
        solution = entry.obj(problem, time_limit=limit, seed=seed, **options)
    elapsed = time.perf_counter() - start
    check_answer(problem, solution, solver)
    solution.wall_time = elapsed
    solution.solver = solver
    return solution


def _solver_share(solver: str, time_limit: float | None) -> float | None:
    """The solver's time limit: its own, cut to what a command's deadline has left (the
    build counts); a deadline already past is a TimeLimitError before the solver starts."""
    limit = share(time_limit)
    command = current()
    if limit is not None and limit <= 0 and command is not None and command.limit is not None:
        raise TimeLimitError(f"the time limit of {command.limit:g} s passed after "
                             f"{command.elapsed():.1f} s, before solver {solver!r} started "
                             f"(building the Problem took it all)")
    return limit


def solve(model: str | Path | Graph, devices: int = 8, solver: str = "auto",
          cost_model: str | CostModel | None = None, *, batch: int | None = None,
          cutoff: int | None = None, powers_of_two: bool = False,
          mesh: str | Sequence[int] | None = None, cluster: Any = None,
          memory_cap: float | str | None = None,
          model_options: Mapping[str, Any] | None = None,
          cost_options: Mapping[str, Any] | None = None,
          build_budget: float | str | None = None,
          time_limit: float | None = None, seed: int | None = None,
          **solver_options: Any) -> Strategy:
    """Find a strategy for ``model`` on ``devices`` devices with ``solver``.

    ``model`` is a registered name (``pase models``), a graph JSON path, or a
    Graph. Extra keyword arguments go to the solver, except a registered model's
    declared options (``info["options"]``: ``layers=2`` for ``gpt2``), which go to
    the model. ``time_limit`` (seconds of wall time) covers the whole call: building the
    Problem, then the solver, which gets what is left.
    """
    deadline = Deadline(check_time_limit(time_limit))  # the build counts against the limit
    SOLVERS.entry(solver)  # an unknown name fails before the build
    solver_options, model_options = _model_keywords(model, solver, solver_options, model_options)
    with active(deadline):
        built = build_problem(model, devices, cost_model, batch=batch, cutoff=cutoff,
                              powers_of_two=powers_of_two, mesh=mesh, cluster=cluster,
                              memory_cap=memory_cap, model_options=model_options,
                              cost_options=cost_options, build_budget=build_budget)
        strategy = solve_built(built, solver, time_limit=time_limit, seed=seed, **solver_options)
    return _recorded(strategy, model, batch, model_options, cost_model, cost_options)


def solve_built(built: Built, solver: str, *, time_limit: float | None = None,
                seed: int | None = None, **options: Any) -> Strategy:
    """Solve a built Problem with ``solver`` (:func:`run_solver`), as a certified search
    where the cost model has one (the calibrated model: up to three bounding solves, each
    cut to what the ambient deadline has left), and make its Strategy."""
    def run(problem: Problem) -> Solution:
        return run_solver(solver, problem, time_limit=time_limit, seed=seed, **options)

    if hasattr(built.cost_model, "search"):
        solution, price = built.cost_model.search(built.graph, built.problem, run)
        return to_strategy(built, solution, price)
    return to_strategy(built, run(built.problem))


def _model_keywords(model: Any, solver: str, options: dict[str, Any],
                    model_options: Mapping[str, Any] | None) -> tuple[dict, Mapping | None]:
    """Keywords that are the registered model's options and not the solver's go to the
    model: ``pase.solve("gpt2", 8, layers=2)``."""
    if not options or not isinstance(model, str):
        return options, model_options
    if model in MODELS:
        declared = MODELS.entry(model).info.get("options", {})
    else:  # a Hugging Face config's options (batch, seq...), or none
        declared = inspect.signature(model_function(model) or (lambda: None)).parameters
    solver_params = inspect.signature(SOLVERS.get(solver)).parameters
    moved = {k: v for k, v in options.items() if k in declared and k not in solver_params}
    if not moved:
        return options, model_options
    merged = dict(model_options or {})
    for key in moved:
        if key in merged:
            raise OptionError(f"model option {key} given twice: as a keyword and in model_options")
    merged.update(moved)
    return {k: v for k, v in options.items() if k not in moved}, merged


def to_strategy(built: Built, solution: Solution, price: Mapping[str, Any] | None = None
                ) -> Strategy:
    """The Strategy of ``solution``; ``price``: its plan's price, from a certified search
    (:meth:`pase.cost_models.calibrated.CalibratedCostModel.search`), whose status, bound and
    cost already follow it."""
    if price is None:
        meta = priced_report(built, solution.choice)
        if "step_seconds" in meta:
            solution = certified(solution, meta, built.problem.memory_cap)
    else:
        meta = memory_report(built.problem, solution.choice)
        meta.update(price)
        cap = built.problem.memory_cap
        if cap is not None:
            meta["fits_memory_cap"] = bool(meta["memory_bytes"] <= cap)
    if solution.choice is None:
        return Strategy(built.graph.name, built.space.devices, {}, float("inf"), built.problem.unit,
                        {}, [], built.cost_model.name, solution, built.seconds, meta)
    return Strategy.from_choice(built.graph, built.space, built.problem, solution.choice,
                                priced_by=built.cost_model,  # each op's own seconds, carried
                                cost_model=built.cost_model.name, solution=solution,
                                build_seconds=built.seconds, meta=meta)


def certified(solution: Solution, price: Mapping[str, Any], cap: float | None) -> Solution:
    """``solution`` with the status and gap its plan's price supports.

    The calibrated Problem charges the gradient sync at its overlap tax and leaves
    transient memory out (:mod:`pase.cost_models.calibrated_plan`), so its optimum is a
    lower bound on every plan's step. The plan's own step is the answer's cost; where it
    exceeds the bound, a proof of optimality becomes a gap, and a plan whose transient
    memory breaks the cap is only feasible.
    """
    step = float(price["step_seconds"])
    bound = solution.lower_bound
    status = solution.status
    over = cap is not None and float(price["memory_bytes"]) > cap
    if status is Status.OPTIMAL and (step > solution.cost * (1 + 1e-9) or over):
        status = Status.FEASIBLE
    stats = dict(solution.stats, search_cost=solution.cost)
    return replace(solution, cost=step, status=status, lower_bound=bound, stats=stats)


def priced_report(built: Built, choice: Any) -> dict[str, Any]:
    """:func:`memory_report`, and the plan's own price where the cost model prices plans
    (calibrated). That price adds transient memory to the Problem's, so the verdict on the
    cap is taken again on the priced memory: a plan over the cap is never said to fit."""
    meta = memory_report(built.problem, choice)
    if choice is None or not hasattr(built.cost_model, "price_plan"):
        return meta
    meta.update(built.cost_model.price_plan(built.graph, built.problem, choice))
    cap = built.problem.memory_cap
    if cap is not None and "memory_bytes" in meta:
        meta["fits_memory_cap"] = bool(meta["memory_bytes"] <= cap)
    return meta


def memory_report(problem: Problem, choice: Any) -> dict[str, Any]:
    """Memory facts for outputs: the cap, the strategy's need, whether it fits, the least any needs."""
    if problem.memory is None:
        return {}
    fits = None if choice is None or problem.memory_cap is None else bool(problem.fits(choice))
    return {"memory_cap_bytes": problem.memory_cap,
            "memory_bytes": None if choice is None else problem.memory_of(choice),
            "fits_memory_cap": fits,
            "min_memory_bytes": problem.min_memory()}


def evaluate(model: str | Path | Graph, strategy: Any, devices: int = 8,
             cost_model: str | CostModel | None = None, *,
             batch: int | None = None, cutoff: int | None = None, powers_of_two: bool = False,
             mesh: str | Sequence[int] | None = None, cluster: Any = None,
             memory_cap: float | str | None = None,
             model_options: Mapping[str, Any] | None = None,
             cost_options: Mapping[str, Any] | None = None,
             build_budget: float | str | None = None) -> Strategy:
    """The cost of a given strategy. Ops it does not name stay unsplit.

    ``strategy`` is a ``{op: {dim: factor}}`` mapping (numpy integers are
    fine), a Strategy, or a parsed ``pase solve --format json`` object. With a
    cost model that has memory vectors, the result's ``meta`` reports the
    memory per device, the cap (as for :func:`build_problem`) and
    ``fits_memory_cap``; a strategy over the cap is still evaluated.
    """
    configs = strategy_mapping(strategy)
    built = build_problem(model, devices, cost_model, batch=batch, cutoff=cutoff,
                          powers_of_two=powers_of_two, mesh=mesh, cluster=cluster,
                          memory_cap=memory_cap, model_options=model_options,
                          cost_options=cost_options, build_budget=build_budget,
                          variants=strategy_variants(strategy))
    choice = choice_of(built, configs)
    meta = priced_report(built, choice)
    strategy = Strategy.from_choice(built.graph, built.space, built.problem, choice,
                                    priced_by=built.cost_model, cost_model=built.cost_model.name,
                                    build_seconds=built.seconds, meta=meta)
    return _recorded(strategy, model, batch, model_options, cost_model, cost_options)


def _recorded(strategy: Strategy, model: Any, batch: int | None,
              model_options: Mapping[str, Any] | None, cost_model: Any,
              cost_options: Mapping[str, Any] | None) -> Strategy:
    """``strategy`` recording the model options, batch and cost options it was built and
    priced at (:mod:`pase.plan_record`), so that its file is priced again the same way;
    a Graph given as the model records nothing of how it was built, a CostModel object
    none of its options (they are the object's own)."""
    if isinstance(model, (str, Path)):
        strategy.meta.update(build_record(model_function(str(model)), batch, model_options))
    if cost_model is None or isinstance(cost_model, str):  # an object's options are its own
        strategy.meta.update(cost_record(cost_options))
    return strategy


def choice_of(built: Built, configs: Mapping[str, Mapping[str, int]]) -> tuple[int, ...]:
    """Candidate indices for a ``{op: {dim: factor}}`` mapping (unnamed ops unsplit)."""
    return built.space.choice_of(configs)


def dry_run(model: str | Path | Graph, devices: int = 8, *, memory_budget: float | str | None = None,
            batch: int | None = None, cutoff: int | None = None, powers_of_two: bool = False,
            mesh: str | Sequence[int] | None = None,
            model_options: Mapping[str, Any] | None = None,
            cost_model: str | CostModel | None = None, cluster: Any = None,
            cost_options: Mapping[str, Any] | None = None,
            memory_cap: float | str | None = None) -> dict[str, Any]:
    """The dp's predicted tables, memory and time per ordering, and what the default solver
    ``auto`` would do (``"auto"``: the method and its predicted seconds), without building
    any costs.

    Reads only the graph and its configuration counts
    (:func:`pase.costing.problem_shape`), so it answers in seconds on graphs
    whose Problem would not fit in memory. ``memory_budget`` (bytes or text
    such as ``"8GiB"``; default the dp's) is the dp's option of that name.
    ``cost_model``, ``cluster``, ``cost_options`` and ``memory_cap`` are
    :func:`build_problem`'s: the model that will price sets the rate of folded
    blocks (its ``edges_read_port_splits``), and a cap (given, or alpha-beta's
    default, the cluster's device memory) means ``auto`` runs no probe.
    Returns the JSON-able dict ``pase solve --dry-run --format json`` prints.
    """
    from pase.solvers import auto, dp

    budget = dp.DEFAULT_MEMORY_BUDGET if memory_budget is None else parse_bytes(memory_budget)
    pricing = _pricing_model(cost_model, cluster, cost_options)
    graph, space = build_space(model, devices, batch=batch, cutoff=cutoff,
                               powers_of_two=powers_of_two, mesh=mesh, model_options=model_options,
                               padded_roles=pricing.padded_roles)
    # The paper model's sharing keys are structural (an op's signature, a port's split
    # factors), so they find the repeated blocks without computing any cost.
    shape = problem_shape(graph, space, cost_model=make_cost_model("paper"))
    shape = replace(shape, port_classes=pricing.edges_read_port_splits)
    capped = _memory_cap(memory_cap, pricing.has_memory(), pricing) is not None
    report = auto.dry_run(shape, memory_budget=budget, capped=capped)
    return {"version": OUTPUT_VERSION, "model": graph.name, "devices": space.devices,
            "cost_model": pricing.name, **report}


# make_layout's keywords (the layout's options) and the search's
LAYOUT_OPTIONS = ("schedule", "zero", "recompute", "sequence_parallel", "precision", "attention",
                  "dropout", "tp_overlap", "ep_overlap")
SEARCH_OPTIONS = ("precision", "attention", "dropout", "max_micro_batch", "virtual", "context",
                  "schedules", "experts", "keep", "max_layouts", "progress")


def evaluate_layout(model: str | Path | Graph, devices: int, layout: str | Mapping[str, int], *,
                    cluster: Any, micro_batch: int, global_batch: int,
                    model_options: Mapping[str, Any] | None = None, **options: Any):
    """Price one training step of a named layout (``"tp=8,pp=2,dp=4"`` or
    ``{"tp": 8, "pp": 2, "dp": 4}``) with the performance model (:mod:`pase.perf`): an
    :class:`pase.perf.Estimate`.

    ``options`` are :func:`pase.perf.make_layout`'s: ``schedule``, ``zero``,
    ``recompute``, ``sequence_parallel``, ``precision``, ``attention``, ``dropout``.
    Arguments are checked as the CLI checks them (degrees, ``micro_batch`` and
    ``global_batch`` integers >= 1, the flags real booleans); a bad one is an OptionError.
    The graph is built at the micro-batch size (a ``batch`` model option is refused).
    """
    from pase.perf import evaluate_layout as price
    from pase.perf import make_layout

    devices = check_devices(devices)
    _known(options, LAYOUT_OPTIONS, "evaluate_layout")
    opts = _layout_model_options(model_options)
    lay = make_layout(layout, devices=devices, micro_batch=micro_batch, global_batch=global_batch,
                      **options)
    if isinstance(model, Graph):
        graph = load_graph(model, **opts)
    else:
        graph = load_graph(model, batch=lay.micro_batch, **opts)
    return price(graph, cluster, lay)


def search_layouts(model: str, devices: int, *, cluster: Any, global_batch: int,
                   model_options: Mapping[str, Any] | None = None,
                   time_limit: float | None = None, **options: Any):
    """The best Megatron-LM/FSDP layout of ``model`` on ``devices`` devices for a global
    batch, under the performance model (:func:`pase.perf.search.search_layouts`; its
    ``options``: ``precision``, ``attention``, ``dropout``, ``max_micro_batch``,
    ``virtual``, ``context``, ``schedules`` (a tuple of ``1f1b``, ``interleaved``, ``zb-h1``,
    ``dualpipe``), ``experts`` (search ep and etp), ``keep``, ``max_layouts``, ``progress``).

    ``model`` is a registered name or ``FILE.py:FUNCTION`` (the graph is rebuilt at each
    micro-batch size, so a Graph or a graph file is refused).
    A family with no layout is an OptionError saying why; one over ``max_layouts``
    (default :data:`pase.perf.search.MAX_LAYOUTS`) a TooLargeError, before any pricing.
    ``time_limit`` (wall seconds): past it the search returns the best layout priced so
    far with ``exhaustive`` False, as a solver with a partial answer does.
    """
    from pase.perf.search import search_layouts as search

    devices = check_devices(devices)
    global_batch = check_int("global_batch", global_batch, 1)
    _known(options, SEARCH_OPTIONS, "search_layouts")
    for name in ("max_micro_batch", "keep", "max_layouts"):
        if name in options:
            options[name] = check_int(name, options[name], 1)
    for name in ("dropout", "context", "experts"):
        if name in options and not isinstance(options[name], (bool, np.bool_)):
            raise OptionError(f"{name} must be True or False, got {options[name]!r}")
    if "virtual" in options:
        options["virtual"] = _virtual(options["virtual"])
    if "schedules" in options:
        options["schedules"] = _schedules(options["schedules"])
    if options.get("progress") is not None and not callable(options["progress"]):
        raise OptionError(f"progress must be a function of one line of text or None, got "
                          f"{options['progress']!r}")
    from pase.graphs.hf_config import is_hf_config

    if not isinstance(model, str) or not (model in MODELS or _is_reference(model)
                                          or is_hf_config(model)):
        raise OptionError(f"search_layouts rebuilds the model at each micro-batch size: give a "
                          f"registered model name (`pase models`), FILE.py:FUNCTION or a "
                          f"Hugging Face config.json, got "
                          f"{str(model)[:60]!r}")
    opts = _layout_model_options(model_options)
    with active(Deadline(check_time_limit(time_limit))):
        return search(lambda m: load_graph(model, batch=m, **opts), devices, cluster,
                      global_batch, **options)


def _known(options: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    extra = sorted(set(options) - set(allowed))
    if extra:
        raise OptionError(f"{where}: unknown option {extra[0]!r}; allowed: {', '.join(allowed)}")


def _layout_model_options(model_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The model's options; ``batch`` is refused (the layout sets it from the micro-batch)."""
    if model_options is not None and not isinstance(model_options, Mapping):
        raise OptionError(f"model_options must be a mapping such as {{'layers': 2}}, got "
                          f"{model_options!r}")
    opts = dict(model_options or {})
    if "batch" in opts:
        raise OptionError("a layout builds the model at the micro-batch size: give "
                          "micro_batch (--micro-batch), not a batch model option")
    return opts


def _schedules(schedules: Any) -> tuple[str, ...]:
    """The layout family's schedules: a non-empty tuple of the search's kinds."""
    from pase.perf.search import SCHEDULE_KINDS

    if isinstance(schedules, (str, bytes)) or not isinstance(schedules, (tuple, list)) or \
            not schedules or any(s not in SCHEDULE_KINDS for s in schedules):
        raise OptionError(f"schedules must be a non-empty tuple of {', '.join(SCHEDULE_KINDS)}, "
                          f"got {schedules!r}")
    return tuple(schedules)


def _virtual(virtual: Any) -> tuple[int, ...]:
    """The interleaved schedules' chunk counts: integers >= 2."""
    if isinstance(virtual, (str, bytes)) or not isinstance(virtual, (tuple, list)):
        raise OptionError(f"virtual must be a tuple of integers >= 2, got {virtual!r}")
    return tuple(check_int("virtual", v, 2) for v in virtual)

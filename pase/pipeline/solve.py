"""``solve_pipeline``: the best pipeline plan for a model on ``p`` devices."""
from __future__ import annotations

import inspect
import math
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from pase import api
from pase.cluster import get_cluster
from pase.deadline import Deadline
from pase.errors import OptionError, TimeLimitError
from pase.ir import Graph
from pase.options import check_time_limit, parse_bytes
from pase.pipeline.cuts import crossing_elements, cut_points
from pase.pipeline.plan import PipelinePlan, PipelineStage
from pase.pipeline.price import stage_price
from pase.pipeline.schedules import label, parse
from pase.pipeline.search import Found, LinkPricer, Space, in_flight, search
from pase.pipeline.seed import best_layout_plan, seed_answer
from pase.pipeline.stages import StageOracle
from pase.space import check_devices

TOLERANCE = 1e-9  # relative: a step within this of the bound is the bound


def solve_pipeline(model: str | Path | Graph, devices: int, *, batch: int | None = None,
                   microbatches: int | Sequence[int] | None = None,
                   schedule: str | Sequence[str] = "1f1b",
                   cluster: Any = "dgx-a100", cost_options: Mapping[str, Any] | None = None,
                   memory_cap: float | str | None = None, cutoff: int | None = None,
                   powers_of_two: bool = True, model_options: Mapping[str, Any] | None = None,
                   cuts: str = "blocks", every: int = 1,
                   stage_sizes: str | Sequence[int] = "powers", uniform: bool = False,
                   max_stages: int | None = None,
                   progress: Callable[[str], None] | None = None,
                   cost_model: str = "calibrated", time_limit: float | None = None,
                   deadline: Deadline | None = None,
                   start_from_layouts: bool | None = None) -> PipelinePlan:
    """Search stages, sub-mesh sizes and micro-batches with the per-layer dp in each stage.

    Args:
        model: a registered model name (its ``batch`` option is split into
            micro-batches), a graph JSON path or a Graph (one micro-batch only).
        devices: ``p``.
        batch: the global batch (default the model's).
        microbatches: ``m``, or the choices of ``m`` (default: the powers of two
            dividing the batch).
        schedule: ``1f1b`` (default), ``gpipe``, ``interleaved:V``, ``interleaved`` (V of
            2, 3, 4), ``auto`` (1F1B and those interleavings) or a list of them: the
            schedules searched (:mod:`pase.pipeline.schedules`).
        cost_model: what prices each stage: ``calibrated`` (default: the performance
            model's rules, :mod:`pase.cost_models.calibrated`) or ``alpha-beta``.
        cluster, cost_options: the cost model's (calibrated: ``precision``, ``zero``,
            ``recompute``, ``tp_overlap`` (default: :func:`tp_overlap_auto`, as the layout
            family has it)...; alpha-beta: ``efficiency``,
            ``bytes_per_element``, ``optimizer``, ``zero``, ``recompute`` ...).
        memory_cap: bytes per device (or text such as ``"80GiB"``, or ``"none"``);
            default the cluster's device memory.
        cutoff, powers_of_two: each stage's configuration space (default: split
            factors that are powers of two).
        cuts, every: where stages may begin (:func:`pase.pipeline.cuts.cut_points`).
        stage_sizes: the allowed device counts of a stage: ``"powers"`` (default:
            the powers of two dividing ``p``) or a list; the counts sum to ``p``.
        uniform: every stage gets the same count ``p / s`` (one of ``stage_sizes``).
        max_stages: most stages (default: the number of units).
        time_limit: wall seconds from the call (loading the model counts); ``deadline``
            instead: a :class:`~pase.deadline.Deadline` the caller started (``pase solve``
            starts one when the command starts). The search checks it between stage
            solves and a stage's dp between its steps (a cut solve is dropped); past it,
            the best plan found so far
            is returned, ``feasible``, its ``search["stopped"]`` ``"time limit"``, with the
            bound of the searches that finished (none if the first was cut); OptionError
            when none was found.

        start_from_layouts: price the layout family's best plans first and start the
            search from the cheapest (:mod:`pase.pipeline.seed`): the answer is never
            slower than it, and a time limit always has a plan to give. Default: on for
            the whole-plan search (a model name, the calibrated model, ``schedule="auto"``,
            every ``m``, ZeRO and recomputation ``auto``, the default space options).

    Returns the best plan found over that space (:mod:`pase.pipeline.search`) at its own
    price, with a lower bound (:func:`certified`), as a
    :class:`~pase.pipeline.plan.PipelinePlan`: ``optimal`` when its step meets the
    bound. Raises OptionError when no plan fits the memory cap.
    """
    start = time.perf_counter()
    if deadline is None:
        deadline = Deadline(check_time_limit(time_limit), start=start)
    elif time_limit is not None:
        raise OptionError("give time_limit or deadline, not both")
    devices = check_devices(devices)
    parse(schedule)  # an unknown schedule fails before anything is built
    options = dict(model_options or {})
    full_batch, load = _loader(model, batch, options)
    costs = dict(cost_options or {})
    if "cluster" in costs:
        raise OptionError("cluster given twice: as an argument and as a cost option")
    costs["cluster"] = cluster
    cl = get_cluster(cluster, devices)
    cap = memory_cap_of(memory_cap, cl)
    given = dict(costs)  # what the plan records; the defaults below follow from it
    costs = with_defaults(costs, cost_model, cl)
    space_options = {"cutoff": cutoff, "powers_of_two": powers_of_two}
    if cost_model not in ("calibrated", "alpha-beta"):
        raise OptionError(f"--pipeline prices stages with calibrated or alpha-beta; cost model "
                          f"{cost_model!r} has no seconds or memory for a pipeline step")
    oracle = StageOracle(load, full_batch, costs, cap, space_options, progress=progress,
                         cost_model=cost_model, devices=devices)
    oracle.deadline = deadline
    graph = oracle.graph(1)
    choices = _microbatches(microbatches, full_batch)
    element = float(api.make_cost_model(cost_model, **costs).bytes_per_element)
    links = LinkPricer(cl, lambda cut, m: crossing_elements(oracle.graph(m), cut) * element)
    units = cut_points(graph, cuts, every)
    sizes = _sizes(stage_sizes, devices)
    if not isinstance(uniform, bool):
        raise OptionError(f"uniform must be true or false, got {uniform!r}")
    space = Space(units, devices, sizes, choices, schedule, uniform, max_stages)
    if start_from_layouts is None:
        start_from_layouts = isinstance(model, str) and cost_model == "calibrated" and \
            schedule == "auto" and microbatches is None and \
            all(str(given.get(k)) == "auto" for k in ("zero", "recompute")) and \
            (cuts, every, stage_sizes, uniform, max_stages) == ("blocks", 1, "powers", False, None)
    seed = best_layout_plan(str(model), load, devices, full_batch, cluster, given, cap, options,
                            deadline, progress) if start_from_layouts else None
    try:
        found, bound, solves = certified(space, oracle, links, progress,
                                         math.inf if seed is None else seed.step)
    except TimeLimitError as exc:
        if seed is not None:
            return seed_answer(seed, None, {"stopped": "time limit", "stopped_search": 1,
                                            "stage_solves": oracle.solves,
                                            "seconds": time.perf_counter() - start})
        raise OptionError(f"{exc}, before any pipeline plan was found; give a larger "
                          f"--time-limit") from None
    if found is None and seed is not None:
        return seed_answer(seed, bound, {"seconds": time.perf_counter() - start,
                                         "stage_solves": oracle.solves})
    if found is None and oracle.solves == 0:  # not one stage to price: the space is empty
        raise OptionError(f"no pipeline plan in the declared space on {devices} devices: "
                          f"{_empty_space(space, len(units) - 1)}")
    if found is None:
        why = "" if any(name != "interleaved" for name, _ in space.schedules) else \
            f" ({INTERLEAVED_NEEDS})"
        raise OptionError(f"no pipeline plan fits the memory cap of "
                          f"{'none' if cap is None else f'{cap / 2**30:.4g} GiB'} per device on "
                          f"{devices} devices{why}; raise --memory-cap or add devices")
    stages, rank, names = [], 0, [op.name for op in graph.ops]
    s = len(found.groups)
    for i, ((ranges, d), result) in enumerate(zip(found.groups, found.results)):
        stages.append(PipelineStage(
            PipelineStage.names(names, ranges), ranges[0],
            (rank, rank + d),
            in_flight(found.schedule, found.microbatches, s, i),
            found.prices[i].seconds, result.memory,
            {op: dict(config) for op, config in result.configs},
            {op: {"zero": z, "recompute": r} for op, z, r in result.variants},
            list(ranges) if len(ranges) > 1 else []))
        rank += d
    exposed = [i for i, p in enumerate(found.prices) if p.exposed > 0]
    plain_costs = {k: (v if isinstance(v, (int, float, str, bool)) else str(v))
                   for k, v in given.items()}
    search_info = {"units": units, "cuts": cuts, "every": every,
                   "stage_sizes": list(sizes), "uniform": uniform,
                   "microbatch_choices": list(choices), "max_stages": space.stage_limit,
                   "schedules": [label(*pair) for pair in space.schedules],
                   **({"tp_overlap": costs["tp_overlap"]} if "tp_overlap" in costs else {}),
                   **found.stats, "bounding_searches": solves,
                   **({} if deadline.limit is None else {"time_limit": deadline.limit}),
                   "charged_step": _line(found)[0], "seconds": time.perf_counter() - start,
                   **({} if seed is None else {"start": seed.summary()}),
                   **({"exposed_sync_stages": exposed} if exposed else {})}
    # a cut search never claims optimal, even where its step meets the bound it kept
    proven = bound is not None and found.step <= bound * (1 + TOLERANCE) and not found.stopped
    for stage, price in zip(stages, found.prices):
        stage.tail_seconds = price.tail
    plan = PipelinePlan(graph.name, devices, full_batch, found.microbatches, found.schedule,
                        stages, found.links, found.step, "optimal" if proven else "feasible",
                        options, plain_costs, cap, search_info, cost_model,
                        None if bound is None else min(bound, found.step))
    if cost_model != "calibrated":
        return plan
    plan = at_one_price(plan, oracle.graph(found.microbatches))
    if seed is not None and seed.step < plan.step_time * (1 - 1e-12):
        info = {k: v for k, v in search_info.items()
                if k not in ("charged_step", "exposed_sync_stages")}
        return seed_answer(seed, bound, {**info, "searched_step_seconds": plan.step_time,
                                         **({"stopped": "time limit"} if found.stopped else {})})
    return plan


def at_one_price(plan: PipelinePlan, graph: Graph) -> PipelinePlan:
    """``plan`` checked against its one price (the calibrated model's ``price_pipeline``, what
    ``pase evaluate --strategy`` gives), which the search's own price of a plan restates:
    its step is the one price, each stage's memory the larger of the two counts; where the
    two steps part (a rule one of them has and the other not) the plan claims no proof
    (``feasible``; its bound, a bound of the search's price, is kept where below the
    step), and a plan over the memory cap at the one price says so (``fits_memory``
    false, no bound). ``graph``: the model at the plan's micro-batch."""
    model = api.make_cost_model(plan.cost_model, **dict(plan.cost_options))
    price = model.price_pipeline(plan, graph)
    one, charged = float(price["step_seconds"]), plan.step_time
    plan.search["search_step_seconds"] = charged
    plan.search["search_memory_bytes"] = plan.memory_bytes
    for stage, memory in zip(plan.stages, price["stage_memory_bytes"]):
        stage.memory_bytes = max(stage.memory_bytes, float(memory))
    plan.step_time = one
    plan.breakdown = dict(price["breakdown"])
    if not plan.fits_memory:
        plan.status, plan.lower_bound = "feasible", None
    elif abs(one - charged) > TOLERANCE * charged:
        plan.status = "feasible"
        if plan.lower_bound is not None and plan.lower_bound >= one * (1 - TOLERANCE):
            plan.lower_bound = None
    return plan


def certified(space: Space, oracle: StageOracle, links: LinkPricer,
              progress: Callable[[str], None] | None = None, incumbent: float = math.inf):
    """The search with a lower bound: ``(found, bound, searches)``; ``found`` is None when
    no plan fits or none is charged less than ``incumbent`` (a plan found elsewhere, whose
    price then caps the bound: :func:`pase.pipeline.search.search`).

    The search charges gradient syncs at the overlap tax, so its least charge bounds every
    plan's own price (:mod:`pase.pipeline.price`) from below. When the found plan's own
    price is above it, a second search with each candidate's sync slack lifted into its
    tail (``x = 1``, still a bound) tightens the bound and looks for a plan whose syncs
    hide; the answer is the plan with the lower own price. The bound is None when a
    stage's solver could not prove its optimum.

    Past the oracle's deadline: a cut first search gives its best plan and no bound (the
    plans it did not visit have none); a cut bounding search leaves the bound of the
    searches that finished, and its best plan competes. The answer is then ``stopped``,
    with ``stats["stopped"]``; with no plan at all the TimeLimitError propagates."""
    found, bound = search(space, oracle, links, progress, incumbent)
    if found is None:
        return None, bound, 1
    _price(found, oracle)
    if found.stopped:
        found.stats["stopped_search"] = 1
        if progress:
            progress("time limit: the first search was cut, so no lower bound holds for the "
                     "plans it did not visit (gap unknown)")
        return found, None, 1
    best, plans = found, [found]
    for x in (1.0, None):
        if bound is None or min(best.step, incumbent) <= bound * (1 + TOLERANCE) or \
                not oracle.slack_applies:
            break
        if x is None:  # where the two plans' prices, linear in x, cross (a cutting plane)
            (a0, d0), (a1, d1) = (_line(plans[0]), _line(plans[-1]))
            if d0 == d1:
                break
            x = min(1.0, max(0.0, (a1 - a0) / (d0 - d1)))
        if progress:
            progress(f"syncs outlast their window: a search lifted by x = {x:.3g} for a bound")
        searched = len(plans) + 1  # this search's number
        try:
            lifted, low = search(space, oracle.lifted(x), links, progress, incumbent,
                                 f"bounding search {searched}, charges lifted by x = {x:.3g}: ")
        except TimeLimitError:  # cut before it found a plan
            lifted, low, cut = None, None, True
        else:
            cut = lifted is not None and lifted.stopped
        if not cut:  # a cut search bounds only the plans it visited
            bound = None if low is None else max(bound, low)
        if lifted is not None:
            plans.append(lifted)
            _price(lifted, oracle)
            if lifted.step < best.step * (1 - 1e-12):
                lifted.stats = {**found.stats, **lifted.stats}
                best = lifted
        if cut:
            best.stopped = True
            best.stats.update(stopped="time limit", stopped_search=searched)
            if progress:
                progress(f"time limit: bounding search {searched} was cut; the bound of the "
                         f"{searched - 1} finished searches stands")
            break
        if lifted is None:
            break
    proven = all(p.optimal for p in plans)
    return best, bound if proven else None, len(plans)


def _line(found: Found) -> tuple[float, float]:
    """The plan's charged step at x = 0 and its growth to x = 1 (lifted by its slack)."""
    times = [p.charged for p in found.prices]
    at0 = found.step_of(times, [p.lifted(0.0) for p in found.prices])
    at1 = found.step_of(times, [p.lifted(1.0) for p in found.prices])
    return at0, at1 - at0


def _price(found: Found, oracle: StageOracle) -> None:
    """The found plan's own stage prices and step (``found.prices``, ``found.step``)."""
    m = found.microbatches
    found.prices = [stage_price(oracle, ranges, d, m, result)
                    for (ranges, d), result in zip(found.groups, found.results)]
    found.step = found.step_of([p.seconds for p in found.prices], [p.tail for p in found.prices])


INTERLEAVED_NEEDS = ("an interleaved plan needs s >= 2 stages of p / s devices, m a multiple of "
                     "s and s x V units to cut")


def _empty_space(space: Space, units: int) -> str:
    """Why the declared space holds no plan (the refusal's reason)."""
    if any(name != "interleaved" for name, _ in space.schedules):
        return (f"the model cuts into {units} unit{'s' * (units != 1)} and the stage sizes "
                f"and micro-batch counts allow no stage of them; allow more stage sizes or "
                f"micro-batch counts")
    return (f"{INTERLEAVED_NEEDS}, and the model cuts into {units} unit{'s' * (units != 1)} at "
            f"m = {', '.join(str(m) for m in space.microbatches)}; take fewer virtual stages, "
            f"a model with more layers or another m")


def with_defaults(costs: Mapping[str, Any], cost_model: str, cluster: Any) -> dict[str, Any]:
    """The cost options the stages are priced with: ``costs``, and under the calibrated
    model ``tp_overlap`` by :func:`tp_overlap_auto` where not given (a plan records only
    what was given, and :mod:`pase.pipeline.reprice` applies the same default)."""
    out = dict(costs)
    if cost_model == "calibrated" and "tp_overlap" not in out:
        out["tp_overlap"] = tp_overlap_auto(out, cluster)
    return out


def tp_overlap_auto(costs: Mapping[str, Any], cluster: Any) -> bool:
    """The layout family's ``--tp-overlap auto`` for the calibrated model: collectives hidden
    behind their op's GEMMs (Megatron-LM's --tp-comm-overlap) with fused attention in 16
    bits or fewer, as :func:`pase.perf.layout.make_layout` decides for tp > 1."""
    precision = costs.get("precision")
    if precision is None:  # the model's default: 16 bits where the device has them
        device = cluster.device
        low = device.bf16_tflops > 0 or "16" in device.precision
    else:
        low = str(precision) != "fp32"
    return low and str(costs.get("attention", "fused")) == "fused"


def _loader(model: Any, batch: int | None,
            options: dict[str, Any]) -> tuple[int, Callable[[int], Graph]]:
    """The global batch and ``load(micro_batch_size) -> Graph``."""
    if "batch" in options:
        if batch is not None:
            raise OptionError("batch given twice: as an argument and as a model option")
        batch = int(options.pop("batch"))
    builder = api.model_function(model)  # a registered model or a Hugging Face config
    if builder is not None:
        params = inspect.signature(builder).parameters
        if "batch" not in params:
            raise OptionError(f"model {model!r} has no batch option to split into micro-batches")
        full = int(params["batch"].default if batch is None else batch)
        return full, lambda size: api.load_graph(model, batch=size, **options)
    if batch is not None:
        raise OptionError("batch applies only to registered models; a graph file has its own")
    graph = api.load_graph(model, **options)
    return 1, lambda size: graph


def _microbatches(given: int | Sequence[int] | None, batch: int) -> tuple[int, ...]:
    if given is None:
        return tuple(m for m in (2 ** i for i in range(batch.bit_length())) if batch % m == 0)
    choices = (given,) if isinstance(given, int) else tuple(given)
    for m in choices:
        if isinstance(m, bool) or not isinstance(m, int) or m < 1 or batch % m:
            raise OptionError(f"microbatches {m!r} must be a positive divisor of the batch "
                              f"{batch} (a graph file: 1)")
    return tuple(sorted(set(choices)))


def _sizes(stage_sizes: str | Sequence[int], devices: int) -> tuple[int, ...]:
    if isinstance(stage_sizes, str):
        if stage_sizes != "powers":
            raise OptionError(f"unknown stage_sizes {stage_sizes!r}; allowed: powers, or a list "
                              f"of device counts")
        return tuple(d for d in (2 ** i for i in range(devices.bit_length())) if devices % d == 0)
    sizes = tuple(sorted({int(d) for d in stage_sizes}))
    if not sizes or sizes[0] < 1 or sizes[-1] > devices:
        raise OptionError(f"stage_sizes must be device counts in 1..{devices}, got {list(stage_sizes)}")
    return sizes


def memory_cap_of(memory_cap: float | str | None, cluster: Any) -> float | None:
    """A pipeline plan's cap in bytes: the device's memory when none is given, None for
    ``"none"``, else the bytes given (a number, or text such as ``"80GiB"``)."""
    if memory_cap is None:
        return float(cluster.device.memory_bytes)
    if isinstance(memory_cap, str) and memory_cap.strip().lower() == "none":
        return None
    return float(parse_bytes(memory_cap))

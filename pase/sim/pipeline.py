"""``simulate_pipeline``: one training step of a pipeline plan, micro-batch by micro-batch.

Two levels:

1. Each stage's ops (a subgraph: inputs from the previous stage become graph
   inputs) are simulated once, on a cluster of the stage's device count, at the
   micro-batch size, by the event simulator (:func:`pase.sim.simulate`). Its
   timeline gives the stage's forward time ``F`` (the last forward compute), its
   backward time ``B`` (to the last backward compute or in-layer collective)
   and the tail of its parameter-gradient syncs ``G`` (what remains of the
   step after that).
2. The schedule (1F1B, GPipe, ZB-H1 and DualPipe (whose stages put off their weight
   gradients, the seconds the plan's prices give them; a DualPipe device group runs its
   stage of one direction and the mirror stage of the other), or interleaved 1F1B,
   whose stage runs its ``V`` chunks,
   each simulated as above) runs as a discrete-event program (:func:`run_schedule`, the
   replay of :mod:`pase.perf.schedule`): each stage executes its forwards and backwards
   in the schedule's order; a forward of micro-batch ``j`` waits for stage
   ``i - 1``'s forward of ``j`` and its transfer, a backward for stage ``i + 1``'s
   backward of ``j`` and its transfer. Each direction of each boundary link
   carries one transfer at a time, first come first served, for the plan's
   per-micro-batch link seconds. A stage's gradient syncs start after its last
   backward. The step ends when every stage is done.

Memory per device of a stage: its ops' parameter and optimizer state plus, at
the peak, as many micro-batches' activations as the schedule holds at once
(forward started, backward not finished), counted from the run.

The first op of a stage gets its input from another stage, so in the stage's
subgraph it has no producer and computes no input gradient: the simulated
backward leaves out that one gradient product (the alpha-beta price includes it).

A calibrated plan's stages replay its own per-op prices (:func:`pase.pipeline.recorded.stage_prices`:
kernels, collectives, optimizer step and re-layouts at one micro-batch on the stage's
devices), as a per-op plan's simulation does; an alpha-beta plan's run at the simulator's
rules. Either way the simulator's options are the plan's cost model's own
(:func:`simulator_options`: the calibrated model's precision and element size, 2 bytes
below fp32).
The simulator keeps every op's whole output for the backward pass (attention's scores and
probabilities too, where the calibrated model prices one fused kernel that keeps neither),
so its peak memory may exceed the priced one: ``fits_memory`` and ``memory_note`` say when
it passes the device memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, NamedTuple, Sequence

from pase.cluster import get_cluster
from pase.errors import OptionError, StrategyError
from pase.ir import Graph
from pase.perf.ops import fused_attention
from pase.perf.schedule import Work, build, replay
from pase.pipeline.recorded import stage_prices
from pase.pipeline.schedules import mirror, unlabel
from pase.prices import priced_at, timed
from pase.sim.result import Event
from pase.strategy import Strategy
from pase.work import op_work

# What times a stage's tasks (PipelineSimResult.timing).
_PRICED = "the plan's own per-op prices (calibrated)"
_SIM_RULES = "the simulator's rules"
# Simulator options a cost model also has (same meaning in both).
_SHARED = ("efficiency", "bytes_per_element", "optimizer", "compute", "precision")


class StageTimes(NamedTuple):
    """One micro-batch of one stage: forward, backward, the gradient-sync tail and, of the
    backward, the weight gradients (seconds; ZB-H1 puts them off)."""

    forward: float
    backward: float
    gradient: float
    weight: float = 0.0


@dataclass
class PipelineSimResult:
    """A simulated pipeline step: ``step_time``, per-stage times and peak memory, the timeline
    (rows ``stage0``, ``stage1``...; labels ``F3``/``B3`` for micro-batch 3)."""

    model: str
    devices: int
    microbatches: int
    schedule: str
    step_time: float
    stages: list[StageTimes]
    peak_in_flight: list[int]
    peak_memory: list[float]
    timeline: list[Event] = field(repr=False, default_factory=list)
    memory_cap: float | None = None  # the plan's memory cap, else the device's memory
    priced_memory: float | None = None  # the plan's own peak per device (bytes)
    fused_attention: bool = False  # the plan is priced with fused attention kernels
    timing: str = ""  # what timed the stages' tasks (_PRICED or _SIM_RULES)

    @property
    def fits_memory(self) -> bool | None:
        """Whether the simulated peak stays within ``memory_cap`` (None: no cap known)."""
        return None if self.memory_cap is None else max(self.peak_memory) <= self.memory_cap

    @property
    def memory_note(self) -> str | None:
        """Why the simulated peak passes the cap the plan fits (None when it fits)."""
        if self.fits_memory is not False:
            return None
        priced = "" if self.priced_memory is None else \
            f"the plan is priced at {self.priced_memory / 2**30:.3g} GiB; "
        kept = ", attention scores and probabilities too, which the plan's fused attention " \
               "does not" if self.fused_attention else ""
        return (f"over the {self.memory_cap / 2**30:.3g} GiB memory cap ({priced}the simulator "
                f"keeps every op's whole output for the backward pass{kept})")

    @property
    def bubble(self) -> float:
        """Idle fraction of the stages' time: ``1 - sum_i (m (F_i + B_i) + G_i) / (s * step)``
        (a stage syncing its gradients is busy)."""
        busy = sum((t.forward + t.backward) * self.microbatches + t.gradient for t in self.stages)
        return 1.0 - busy / (len(self.stages) * self.step_time) if self.step_time > 0 else 0.0

    def summary(self) -> str:
        return (f"{self.model}: {len(self.stages)} stage{'s' * (len(self.stages) != 1)}, m = {self.microbatches} "
                f"({self.schedule}), step {self.step_time * 1e3:.4g} ms, bubble {self.bubble:.1%}, "
                f"peak memory max {max(self.peak_memory) / 2**30:.3g} GiB per device"
                + ("" if self.memory_note is None else f": {self.memory_note}"))

    def to_dict(self, timeline: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "pipeline", "model": self.model, "devices": self.devices,
            "microbatches": self.microbatches, "schedule": self.schedule,
            "step_time": self.step_time, "bubble": self.bubble,
            "peak_memory": max(self.peak_memory), "memory_cap_bytes": self.memory_cap,
            "fits_memory": self.fits_memory, "priced_memory_bytes": self.priced_memory,
            "memory_note": self.memory_note, "timing": self.timing,
            "stages": [{"forward": t.forward, "backward": t.backward, "gradient": t.gradient,
                        "peak_in_flight": k, "peak_memory": mem}
                       for t, k, mem in zip(self.stages, self.peak_in_flight, self.peak_memory)]}
        if timeline:
            out["timeline"] = [ev._asdict() for ev in self.timeline]
        return out


def stage_graph(graph: Graph, first: int, end: int) -> Graph:
    """Ops ``first .. end-1``; an input made outside the range becomes a graph input."""
    inside = {op.name for op in graph.ops[first:end]}
    ops = []
    for op in graph.ops[first:end]:
        inputs = tuple(p if p.source is None or p.source[0] in inside else replace(p, source=None)
                       for p in op.inputs)
        ops.append(replace(op, inputs=inputs))
    return Graph(f"{graph.name}[{first}:{end}]", ops, graph.attrs, check_ops=False)


def chunk_settings(stage: Any, graph: Graph) -> tuple[dict, dict]:
    """The stage's configs and variants of the ops of ``graph`` (one of its chunks)."""
    names = {op.name for op in graph.ops}
    return ({op: c for op, c in stage.configs.items() if op in names},
            {op: v for op, v in stage.variants.items() if op in names})


def program(schedule: str, stages: int, index: int, microbatches: int) -> list[tuple[str, int]]:
    """Stage ``index``'s order of ``("F", j)`` and ``("B", j)`` (:mod:`pase.perf.schedule`)."""
    pipe = build(schedule, stages, microbatches)
    return [(task.kind, task.micro) for step in pipe.programs[index] for task in step]


def run_schedule(times: Sequence[StageTimes], links: Sequence[float], microbatches: int,
                 schedule: str) -> tuple[float, list[Event], list[int]]:
    """The step time, the timeline and each stage's most micro-batches in flight
    (the event replay of :mod:`pase.perf.schedule`, then each stage's gradient tail).
    ``times``: per chunk (``interleaved:V``: chunk ``c`` on stage ``c mod s``; else one
    per stage); ``links``: per boundary between chunks."""
    name, virtual = unlabel(schedule)
    chunks = len(times)
    s = chunks // virtual
    if s * virtual != chunks or len(links) != chunks - 1:
        raise StrategyError(f"{schedule} over {chunks} chunks needs a multiple of {virtual} "
                            f"chunks and {chunks - 1} link times, got {len(links)}")
    pipe = build(name, s, microbatches, virtual)
    work, sends = [Work(t.forward, t.backward, t.weight) for t in times], [0.0, *links]
    if pipe.lines == 2:  # DualPipe: the second direction's chunk s + k runs stage k again
        work, sends = work * 2, sends * 2
    ran = replay(pipe, work, sends)
    events = [Event(f"stage{r.where}", r.start, r.end, f"{t.kind}{t.micro}",
                    "forward" if t.kind == "F" else "backward")
              for r in ran.steps for t in r.tasks]
    for r in ran.transfers:
        (t,), (a, b) = r.tasks, r.where
        events.append(Event(f"link{min(a, b)}.{'fwd' if b > a else 'bwd'}", r.start, r.end,
                            f"{t.kind}{t.micro}", "communication"))
    step = 0.0
    for i in range(s):  # a stage's chunks sync their gradients one after another
        tail = sum(times[c].gradient for c in range(i, chunks, s))
        end = ran.ends[i] + tail
        if tail > 0:
            events.append(Event(f"stage{i}", ran.ends[i], end, "grad sync", "gradient-sync"))
        step = max(step, end)
    return step, sorted(events, key=lambda e: (e.resource, e.start)), ran.peak


def stage_times(graph: Graph, configs: dict, cluster: Any, devices: int,
                options: dict[str, Any], variants: dict[str, Any] | None = None,
                prices: Mapping[str, dict] | None = None, priced_by: Any = None
                ) -> tuple[StageTimes, float, float]:
    """Simulate one micro-batch of a stage; also its state and activation bytes per device.
    ``prices``: its ops' carried prices (:mod:`pase.prices`) by the timed model ``priced_by``,
    replayed instead of the simulator's kernels."""
    from pase.sim import simulate
    from pase.sim.simulate import config_arrays
    from pase.work.variants import Variant, apply_variant

    chosen = {op: Variant(int(v["zero"]), bool(v["recompute"])) for op, v in (variants or {}).items()}
    plan: Any = configs
    if prices is not None:
        plan = Strategy(graph.name, devices, configs, 0.0, "seconds", {}, [],
                        cost_model="calibrated", meta=priced_at(priced_by),
                        op_prices={op.name: prices[op.name] for op in graph.ops})
    result = simulate(graph, plan, cluster, devices, timeline=True, variants=chosen or None,
                      **options)
    fwd = max((e.end for e in result.timeline if e.kind == "forward"), default=0.0)
    bwd = max((e.end for e in result.timeline if e.kind in ("backward", "communication")),
              default=fwd)
    bwd = max(bwd, fwd)
    state = activation = 0.0
    for op, cfg in zip(graph.ops, config_arrays(graph, configs, devices)):
        work = op_work(op, cfg[None, :], options.get("bytes_per_element", 4),
                       options.get("optimizer", "adam"))
        if op.name in chosen:
            work = apply_variant(work, *chosen[op.name])
        state += float(work.state_bytes[0])
        activation += float(work.activation_bytes[0])
    # the weight gradients as priced (a replay runs each op's backward as one task)
    weight = 0.0 if prices is None else sum(float(prices[op.name].get("weight", 0.0))
                                            for op in graph.ops)
    return StageTimes(fwd, bwd - fwd, max(0.0, result.step_time - bwd),
                      min(weight, bwd - fwd)), state, activation


def simulate_pipeline(plan: Any, cluster: Any = None, *, timeline: bool = True) -> PipelineSimResult:
    """Simulate a :class:`~pase.pipeline.PipelinePlan` (or its JSON dict) on ``cluster``
    (default: the plan's own cluster)."""
    from pase import api
    from pase.pipeline.plan import PipelinePlan

    if not isinstance(plan, PipelinePlan):
        plan = PipelinePlan.from_dict(plan)
    cluster = plan.cost_options.get("cluster", "dgx-a100") if cluster is None else cluster
    model = _plan_model(plan, cluster)
    options = simulator_options(model, plan.cost_options)
    if _registered(plan.model):
        graph = api.load_graph(plan.model, batch=plan.microbatch_size, **plan.model_options)
    else:
        graph = api.load_graph(plan.model)
    if graph.name != plan.model:
        raise StrategyError(f"the plan is for graph {plan.model!r}, not {graph.name!r}")
    s = len(plan.stages)
    times, states, acts = [], [0.0] * s, [0.0] * s
    seen: dict[tuple, tuple[StageTimes, float, float]] = {}
    prices = stage_prices(plan, graph) if timed(model) else None
    for i, (first, end) in plan.chunks:
        st = plan.stages[i]
        sub = stage_graph(graph, first, end)
        configs, variants = chunk_settings(st, sub)
        key = _stage_key(sub, st)
        if key not in seen:  # a chunk equal to an earlier one but for op names: simulated once
            seen[key] = stage_times(sub, configs, cluster, st.devices, options, variants,
                                    None if prices is None else prices[i], model)
        t, state, act = seen[key]
        times.append(t)
        states[i] += state
        acts[i] = max(acts[i], act)  # a held micro-batch: at most its largest chunk's
    step, events, held = run_schedule(times, plan.links, plan.microbatches, plan.schedule)
    other = [mirror(plan.schedule, s, i) for i in range(s)]  # DualPipe: both stages' states
    memory = [state + (0.0 if j is None else states[j]) + k * act
              for state, j, k, act in zip(states, other, held, acts)]
    times = [StageTimes(*(sum(getattr(times[c], f) for c in range(i, len(times), s))
                          for f in StageTimes._fields)) for i in range(s)]
    cap = plan.memory_cap_bytes
    if cap is None:
        cap = getattr(getattr(get_cluster(cluster, plan.devices), "device", None),
                      "memory_bytes", None)
    fused = getattr(model, "attention", None) == "fused" and bool(fused_attention(graph))
    return PipelineSimResult(plan.model, plan.devices, plan.microbatches, plan.schedule, step,
                             times, held, memory, events if timeline else [], memory_cap=cap,
                             priced_memory=plan.memory_bytes or None,  # 0: unpriced
                             fused_attention=fused,
                             timing=_SIM_RULES if prices is None else _PRICED)


def simulator_options(model: Any, given: Mapping[str, Any],
                      keys: Sequence[str] = _SHARED) -> dict[str, Any]:
    """The simulator's options (``keys``) as cost model ``model`` priced with them: a model
    that prices its own kernels (the calibrated one: roofline, its precision, its element
    size) gives them all, any other those its options ``given`` set (its defaults are the
    simulator's)."""
    own = hasattr(model, "price_plan")
    return {k: getattr(model, k) for k in keys
            if hasattr(model, k) and (k in given or (own and k != "split"))}


def _plan_model(plan: Any, cluster: Any) -> Any:
    """The plan's cost model, from its own options on ``cluster``; an option it cannot take
    (a precision the device lacks) refused naming the option."""
    from pase import api

    options = {k: v for k, v in plan.cost_options.items() if k != "cluster"}
    try:
        return api.make_cost_model(plan.cost_model, cluster=cluster, **options)
    except OptionError as exc:
        shown = ", ".join(f"{k}={v}" for k, v in options.items())
        raise OptionError(f"cannot simulate the plan's {plan.cost_model} cost options "
                          f"({shown}) on {getattr(cluster, 'name', cluster)}: {exc}") from None


def _stage_key(graph: Graph, stage: Any) -> tuple:
    """Everything a stage's simulation reads but the op names: each op's structure, where
    its inputs come from (relative positions), its split and its variant."""
    from pase.costing import op_signature

    index = {op.name: i for i, op in enumerate(graph.ops)}
    return (stage.devices,) + tuple(
        (op_signature(op), tuple(None if p.source is None else (i - index[p.source[0]], p.source[1])
                                 for p in op.inputs),
         tuple(sorted(stage.configs.get(op.name, {}).items())),
         tuple(sorted(stage.variants.get(op.name, {}).items())))
        for i, op in enumerate(graph.ops))


def _registered(name: str) -> bool:
    from pase.registry import MODELS

    return name in MODELS

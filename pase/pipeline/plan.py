"""A pipeline plan: stages, their device ranges and splits, the micro-batches, the schedule.

Its JSON (``pase solve --pipeline --format json``; ``pase simulate --strategy``
reads it back) is one object:

- ``version`` (1), ``kind`` (``"pipeline"``), ``model``, ``model_options``,
  ``devices``, ``batch``, ``microbatches`` (m), ``microbatch_size``
  (batch / m), ``schedule`` (``1f1b``, ``gpipe``, ``interleaved:V``, or ``zb-h1`` and
  ``dualpipe`` for a layout's plan: :mod:`pase.pipeline.schedules`), ``cost_model``
  (``calibrated`` or ``alpha-beta``), ``cost_options`` (what the stages were priced with:
  cluster, efficiency, ...);
- ``step_time`` (seconds, the plan's one price, ``pase evaluate --strategy``'s:
  :mod:`pase.pipeline.reprice`), ``bubble``
  (the idle fraction ``1 - sum_i (m t_i + o_i) / (s * step)`` of the step, ``o_i`` the
  stage's tail below), ``status``
  (``optimal`` over the declared space when the step meets the lower bound, else
  ``feasible``), ``lower_bound`` (seconds no plan of the space beats; null when a stage's
  solver proved none), ``gap`` (``(step - lower_bound) / step``), ``memory_cap_bytes``;
- ``stages``: per stage in order, ``ops`` (first and last op name; under
  interleaving those of each chunk in turn),
  ``op_range`` (``[first, end)`` indices in the graph's op order),
  ``device_range`` (``[start, end)`` ranks), ``devices``, ``in_flight``
  (micro-batches' activations held), ``seconds_per_microbatch`` (under the calibrated
  model with the sends it receives), ``tail_seconds`` (calibrated: once a step after its
  last backward, its exposed gradient sync and optimizer step; absent = 0),
  ``memory_bytes`` (per device), ``configs`` (``{op: {dim: factor}}``, on the
  stage's own ``devices``-device mesh), ``variants`` (``{op: {"zero": Z,
  "recompute": R}}`` for ops not at ZeRO 0 without recomputation; absent = none),
  and under ``interleaved:V`` ``chunks``: the group's ``V`` op ranges (chunk ``c`` of
  the model on group ``c mod s``; ``op_range`` is its first);
- ``links``: per boundary between stage (or chunk) ``i`` and ``i + 1``, seconds per
  micro-batch per direction (under the calibrated model the sends into the later one,
  already in its ``seconds_per_microbatch``);
- ``search``: the declared space and effort (``units``, ``stage_sizes``,
  ``microbatch_choices``, ``stage_solves``, ``seconds``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from pase.errors import OptionError, StrategyError
from pase.files import regular_file, write_text_atomic
from pase.pipeline.schedules import PLAN_ONLY, unlabel
from pase.strategy import OUTPUT_VERSION, finite_json, json_text
from pase.strictjson import loads as strict_loads
from pase.text import table


@dataclass
class PipelineStage:
    """One stage of a plan (see the module docstring for the fields)."""

    ops: tuple[str, ...]  # first and last op name of each of its op ranges in turn
    op_range: tuple[int, int]
    device_range: tuple[int, int]
    in_flight: float  # micro-batches held (a fraction of one under interleaving)
    seconds_per_microbatch: float
    memory_bytes: float
    configs: dict[str, dict[str, int]]
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)
    chunks: list[tuple[int, int]] = field(default_factory=list)  # interleaved: its op ranges
    tail_seconds: float = 0.0  # once a step, after its last backward (calibrated)

    @property
    def devices(self) -> int:
        return self.device_range[1] - self.device_range[0]

    @property
    def ranges(self) -> list[tuple[int, int]]:
        """The op ranges the stage runs: its chunks, or its one ``op_range``."""
        return list(self.chunks) or [self.op_range]

    @staticmethod
    def names(op_names: Sequence[str], ranges: Sequence[tuple[int, int]]) -> tuple[str, ...]:
        """``ops`` of a stage running ``ranges``: each range's first and last op name."""
        return tuple(op_names[i] for first, end in ranges for i in (first, end - 1))

    @property
    def label(self) -> str:
        """Its ops as ``first .. last``, one such span a chunk."""
        return ", ".join(f"{a} .. {b}" for a, b in zip(self.ops[::2], self.ops[1::2]))


@dataclass
class PipelinePlan:
    """A searched (or read back) pipeline plan."""

    model: str
    devices: int
    batch: int
    microbatches: int
    schedule: str
    stages: list[PipelineStage]
    links: list[float]
    step_time: float
    status: str = "optimal"
    model_options: dict[str, Any] = field(default_factory=dict)
    cost_options: dict[str, Any] = field(default_factory=dict)
    memory_cap_bytes: float | None = None
    search: dict[str, Any] = field(default_factory=dict)
    cost_model: str = "alpha-beta"  # what priced the stages: calibrated or alpha-beta
    lower_bound: float | None = None  # no plan of the declared space has a shorter step
    # the one price's step in --explain's categories (compute, recomputation,
    # communication, bubble, optimizer), where the calibrated model priced the plan
    breakdown: dict[str, float] | None = None

    def take_price(self, price: Mapping[str, Any]) -> "PipelinePlan":
        """This plan with the figures of its one price (the calibrated model's
        ``price_pipeline``): its step, each stage's seconds per micro-batch, tail and
        memory, its links and the breakdown; its status and bound are the caller's."""
        self.step_time = float(price["step_seconds"])
        for stage, seconds, tail, memory in zip(self.stages, price["stage_seconds"],
                                                price["stage_tail_seconds"],
                                                price["stage_memory_bytes"]):
            stage.seconds_per_microbatch, stage.tail_seconds = float(seconds), float(tail)
            stage.memory_bytes = float(memory)
        self.links = [float(x) for x in price["link_seconds"]]
        self.breakdown = dict(price["breakdown"])
        return self

    @property
    def chunks(self) -> list[tuple[int, tuple[int, int]]]:
        """``(stage index, op range)`` of each chunk in pipeline order: one a stage, or under
        ``interleaved:V`` chunk ``c`` of the model on stage ``c mod s``."""
        s = len(self.stages)
        return [(c % s, self.stages[c % s].ranges[c // s])
                for c in range(s * len(self.stages[0].ranges))]

    @property
    def gap(self) -> float | None:
        """``(step - lower_bound) / step``: how far the step can be from the best; 0 for an
        ``optimal`` plan, whose step meets its bound within rounding (the one price and the
        search's restate one sum in another order)."""
        if self.lower_bound is None:
            return None
        if self.status == "optimal":
            return 0.0
        return max(0.0, (self.step_time - self.lower_bound) / self.step_time) \
            if self.step_time > 0 else 0.0

    @property
    def memory_bytes(self) -> float:
        """The most memory any stage's device needs."""
        return max((st.memory_bytes for st in self.stages), default=0.0)

    @property
    def fits_memory(self) -> bool:
        return self.memory_cap_bytes is None or self.memory_bytes <= self.memory_cap_bytes

    @property
    def microbatch_size(self) -> int:
        return self.batch // self.microbatches

    @property
    def bubble(self) -> float:
        """Idle fraction of the priced step: ``1 - sum_i (m t_i + o_i) / (s * step)``, with
        ``o_i`` stage ``i``'s tail (its gradient sync and optimizer step are work, not idle)."""
        busy = sum(st.seconds_per_microbatch * self.microbatches + st.tail_seconds
                   for st in self.stages)
        return 1.0 - busy / (len(self.stages) * self.step_time) if self.step_time > 0 else 0.0

    def one_line(self) -> str:
        """``pp=4 x 64 devices, m=56 of 8, 1f1b, cuts before layers20 layers40 layers60``."""
        sizes = sorted({st.devices for st in self.stages})
        devices = (f"{sizes[0]} devices" if len(sizes) == 1
                   else "/".join(str(st.devices) for st in self.stages) + " devices")
        cuts = " ".join(st.ops[0].split(".")[0] for st in self.stages[1:])
        return (f"pp={len(self.stages)} x {devices}, m={self.microbatches} of "
                f"{self.microbatch_size}, {self.schedule}" + (f", cuts before {cuts}" if cuts else ""))

    def table(self) -> str:
        rows = []
        for i, st in enumerate(self.stages):
            rows.append((str(i), st.label,
                         f"{st.device_range[0]}-{st.device_range[1] - 1}", str(st.devices),
                         str(st.in_flight), f"{st.seconds_per_microbatch * 1e3:.4g}",
                         f"{st.memory_bytes / 2**30:.4g}"))
        return table(rows, ("stage", "ops", "devices", "count", "in flight", "ms/micro-batch",
                            "GiB/device"))

    def describe(self) -> str:
        s, m = len(self.stages), self.microbatches
        lines = [f"{self.model} on {self.devices} devices: {s} stage{'s' * (s != 1)}, "
                 f"m = {m} micro-batch{'es' * (m != 1)} of {self.microbatch_size} "
                 f"({self.schedule}), step {self.step_time * 1e3:.4g} ms, "
                 f"bubble {self.bubble:.1%} ({self.status}"
                 f"{' over the declared space' if self.status in ('optimal', 'feasible') else ''}"
                 f"{'' if self.status == 'optimal' or self.gap is None else f', gap {self.gap:.2%}'})",
                 self.table()]
        start = self.search.get("start")
        if self.search.get("answer") == "start" and start:
            lines.append(f"the layout family's best plan (tp{start['tp']} pp{start['pp']} "
                         f"dp{start['dp']} mb{start['micro_batch']} {start['schedule']} ZeRO "
                         f"{start['zero']} recompute {start['recompute']}): no searched plan "
                         f"is cheaper")
        if self.links:
            lines.append("links (ms per micro-batch per direction): "
                         + ", ".join(f"{x * 1e3:.3g}" for x in self.links))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return finite_json({
            "version": OUTPUT_VERSION, "kind": "pipeline", "model": self.model,
            "model_options": dict(self.model_options), "devices": self.devices,
            "batch": self.batch, "microbatches": self.microbatches,
            "microbatch_size": self.microbatch_size, "schedule": self.schedule,
            "cost_model": self.cost_model, "cost_options": dict(self.cost_options),
            "step_time": self.step_time, "bubble": self.bubble, "status": self.status,
            # the keys of a per-op plan's price, for scripts that read either
            "step_seconds": self.step_time, "memory_bytes": self.memory_bytes,
            "fits_memory": self.fits_memory, "lower_bound": self.lower_bound, "gap": self.gap,
            "memory_cap_bytes": self.memory_cap_bytes,
            "stages": [{"ops": list(st.ops), "op_range": list(st.op_range),
                        "device_range": list(st.device_range), "devices": st.devices,
                        "in_flight": st.in_flight,
                        "seconds_per_microbatch": st.seconds_per_microbatch,
                        "memory_bytes": st.memory_bytes, "configs": st.configs,
                        **({"variants": st.variants} if st.variants else {}),
                        **({"chunks": [list(c) for c in st.chunks]} if st.chunks else {}),
                        **({"tail_seconds": st.tail_seconds} if st.tail_seconds else {})}
                       for st in self.stages],
            **({"breakdown": dict(self.breakdown)} if self.breakdown else {}),
            "links": list(self.links), "search": dict(self.search)})

    def to_json(self, path: str | Path | None = None) -> str:
        text = json_text(self.to_dict())
        if path is not None:
            write_text_atomic(path, text + "\n", what="pipeline plan")
        return text

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PipelinePlan":
        if data.get("kind") != "pipeline":
            raise StrategyError("not a pipeline plan (no \"kind\": \"pipeline\")")
        try:
            stages = [PipelineStage(tuple(s["ops"]), tuple(int(x) for x in s["op_range"]),
                                    tuple(int(x) for x in s["device_range"]), _held(s["in_flight"]),
                                    float(s["seconds_per_microbatch"]), float(s["memory_bytes"]),
                                    {op: {d: int(f) for d, f in c.items()}
                                     for op, c in s["configs"].items()},
                                    {op: {"zero": int(v.get("zero", 0)),
                                          "recompute": bool(v.get("recompute", False))}
                                     for op, v in s.get("variants", {}).items()},
                                    [(int(a), int(b)) for a, b in s.get("chunks", [])],
                                    float(s.get("tail_seconds", 0.0)))
                      for s in data["stages"]]
            plan = cls(str(data["model"]), int(data["devices"]), int(data["batch"]),
                       int(data["microbatches"]), str(data["schedule"]), stages,
                       [float(x) for x in data.get("links", [])], float(data["step_time"]),
                       str(data.get("status", "optimal")), dict(data.get("model_options", {})),
                       dict(data.get("cost_options", {})), data.get("memory_cap_bytes"),
                       dict(data.get("search", {})), str(data.get("cost_model", "alpha-beta")),
                       None if data.get("lower_bound") is None else float(data["lower_bound"]),
                       {k: float(v) for k, v in data["breakdown"].items()}
                       if data.get("breakdown") else None)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StrategyError(f"malformed pipeline plan: {exc!r}") from None
        _check(plan)
        size = data.get("microbatch_size")  # written beside them: an edit of one shows
        if size is not None and size != plan.microbatch_size:
            raise StrategyError(f"the plan's microbatch_size {size!r} is not its batch "
                                f"{plan.batch} over its microbatches {plan.microbatches}; "
                                f"edit them together")
        return plan


def _check(plan: PipelinePlan) -> None:
    if not plan.stages:
        raise StrategyError("a pipeline plan needs at least one stage")
    if plan.microbatches < 1 or plan.batch % plan.microbatches:
        raise StrategyError(f"microbatches {plan.microbatches} must divide the batch {plan.batch}")
    try:
        name, virtual = unlabel(plan.schedule)
    except OptionError as exc:
        raise StrategyError(f"pipeline plan: {exc}") from None
    at, rank = plan.stages[0].op_range[0], 0
    s = len(plan.stages)
    if name in PLAN_ONLY and plan.cost_model != "calibrated":
        raise StrategyError(f"schedule {name} splits each stage's backward pass, which only the "
                            f"calibrated cost model prices; this {plan.cost_model} plan runs "
                            f"1f1b, gpipe or interleaved:V")
    if name == "zb-h1" and plan.microbatches < s:  # as a ZB-H1 layout needs
        raise StrategyError(f"schedule zb-h1 needs at least as many microbatches as stages "
                            f"({s}); the plan has {plan.microbatches}")
    m = plan.microbatches
    if name == "dualpipe" and (s % 2 or m % 2 or m < 2 * s):  # as a DualPipe layout needs
        raise StrategyError(f"schedule dualpipe needs an even number of stages and an even "
                            f"number of microbatches, at least twice the stages; the plan has "
                            f"{s} stages and {m} microbatches")
    for c in range(s * virtual):  # chunk c runs on stage c mod s
        st = plan.stages[c % s]
        ranges = st.ranges
        if len(ranges) != virtual or st.op_range != ranges[0]:
            raise StrategyError(f"stage {c % s}: {len(ranges)} op ranges under {plan.schedule} "
                                f"(op_range its first); it needs {virtual}")
        first, end = ranges[c // s]
        if first != at or end <= at:
            raise StrategyError(f"stage {c % s}: op range {[first, end]} does not follow {at}")
        at = end
    for i, st in enumerate(plan.stages):
        if st.device_range[0] != rank or st.device_range[1] <= rank:
            raise StrategyError(f"stage {i}: device_range {list(st.device_range)} does not "
                                f"follow rank {rank}")
        rank = st.device_range[1]
    if rank != plan.devices:
        raise StrategyError(f"the stages use {rank} devices, the plan says {plan.devices}")


def read_pipeline_plan(path: str | Path) -> PipelinePlan:
    """A plan written by ``pase solve --pipeline --format json`` (or ``--output``)."""
    regular_file(path, "pipeline plan", StrategyError)  # a FIFO would block the read
    try:
        data = strict_loads(Path(path).read_text())  # a key given twice: refused, not the last kept
    except (OSError, ValueError) as exc:
        raise StrategyError(f"cannot read pipeline plan {path}: {exc}") from None
    if not isinstance(data, dict):
        raise StrategyError(f"{path}: a pipeline plan is a JSON object")
    return PipelinePlan.from_dict(data)


def is_pipeline_file(path: str | Path) -> bool:
    """Whether ``path`` holds a pipeline plan (a JSON object with ``"kind": "pipeline"``)."""
    regular_file(path, "strategy file", StrategyError)  # a FIFO would block the read
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("kind") == "pipeline"


def _held(value: Any) -> float:
    """A stage's micro-batches in flight as written: whole as an int, else its fraction."""
    held = float(value)
    return int(held) if held.is_integer() else held

"""The old strategy a re-plan starts from: its configs, its device count, its model.

``--from`` is a ``pase solve --format json`` output (it records the model, the
device count, and the model options and batch it was planned for), a Strategy, or a
plain ``{op: {dim: factor}}`` mapping (then the old device count must be given). The old strategy must be valid on its own
setting (the old model on ``p_old`` devices): otherwise pase cannot know where
its tiles are, and the re-plan is refused.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from pase.errors import OptionError, StrategyError
from pase.files import regular_file
from pase.ir import Graph
from pase.strategy import (
    Strategy,
    op_config,
    read_strategy_file,
    read_strategy_variants,
    recorded_build,
    strategy_mapping,
    strategy_variants,
)


@dataclass(frozen=True)
class OldPlan:
    """The old strategy: ``{op: {dim: factor}}``, its device count, and its model's name if known."""

    configs: dict[str, dict[str, int]]
    devices: int
    model: str | None
    label: str  # how messages name it ("--from old.json")
    model_options: dict[str, Any] | None = None  # what it was planned for, where recorded
    batch: int | None = None


def load_old(old: Any, old_devices: int | None = None, label: str = "the old strategy") -> OldPlan:
    """An :class:`OldPlan` from a file path, a Strategy, a solve output or a mapping."""
    model, devices, data = None, None, old
    if isinstance(old, (str, Path)):
        try:
            configs = read_strategy_file(old)
        except StrategyError:
            _refuse_pipeline(old, label)
            raise
        data = json.loads(Path(old).read_bytes().decode("utf-8"))  # read_strategy_file checked it
        if isinstance(data, Mapping) and isinstance(data.get("strategy"), Mapping):
            model, devices = data.get("model"), data.get("devices")
    elif isinstance(old, Strategy):
        configs, model, devices = strategy_mapping(old), old.graph_name, old.devices
    else:
        configs = strategy_mapping(old)
        if isinstance(old, Mapping) and isinstance(old.get("strategy"), Mapping):
            model, devices = old.get("model"), old.get("devices")
    _refuse_zero(Path(old) if isinstance(old, (str, Path)) else old, label)
    if devices is not None and (isinstance(devices, bool) or not isinstance(devices, int) or devices < 1):
        raise StrategyError(f"{label} records devices={devices!r}; expected an integer >= 1")
    if old_devices is not None:
        if devices is not None and devices != old_devices:
            raise OptionError(f"{label} ran on {devices} devices, but the old device count is given "
                              f"as {old_devices}; give it once")
        devices = old_devices
    if devices is None:
        raise OptionError(f"{label} does not record its device count (a plain {{op: {{dim: factor}}}} "
                          f"mapping); give it (--from-devices P, old_devices= in Python)")
    options, batch = recorded_build(data, label) if isinstance(data, Mapping) else (None, None)
    return OldPlan(configs, int(devices), model if isinstance(model, str) else None, label,
                   options, batch)


def _refuse_zero(old: Any, label: str) -> None:
    """Optimizer state sharded by ZeRO is not laid out like the weights, as the rule assumes."""
    variants = read_strategy_variants(old) if isinstance(old, Path) else strategy_variants(old)
    sharded = sorted(op for op, v in variants.items() if v.zero > 0)
    if sharded:
        raise StrategyError(f"{label} shards optimizer state with ZeRO (op {sharded[0]!r}, stage "
                            f"{variants[sharded[0]].zero}); replan moves state laid out like the "
                            f"weights (ZeRO stage 0)")


def _refuse_pipeline(path: str | Path, label: str) -> None:
    """A ``pase solve --pipeline`` plan is refused by name, not as a malformed strategy."""
    regular_file(path, label, StrategyError)  # a FIFO would block the read
    try:
        data = json.loads(Path(path).read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return
    if isinstance(data, Mapping) and data.get("kind") == "pipeline":
        raise StrategyError(f"{label} is a pipeline plan (pase solve --pipeline); replan starts "
                            f"from a strategy of one stage (a pase solve output without --pipeline)")


def old_vectors(old: OldPlan, old_graph: Graph, new_graph: Graph) -> list[np.ndarray]:
    """Each op's old config as a factor vector (ops the strategy omits stay unsplit), checked:
    the same model (op names, dims and parameter shapes), the old strategy valid on ``p_old``."""
    if old.model is not None and old.model != new_graph.name:
        raise StrategyError(f"{old.label} is for model {old.model!r}, not {new_graph.name!r}")
    for name in old.configs:
        if name not in new_graph:
            raise StrategyError(f"{old.label} names op {name!r}, which model {new_graph.name!r} does "
                                f"not have: a strategy for another model?")
    if [op.name for op in old_graph.ops] != [op.name for op in new_graph.ops]:
        raise StrategyError(f"the old and the new model {new_graph.name!r} have different ops; "
                            f"re-planning moves the parameters of one model")
    out = []
    for old_op, new_op in zip(old_graph.ops, new_graph.ops):
        if old_op.dim_names != new_op.dim_names:
            raise StrategyError(f"op {new_op.name!r} has dims {', '.join(old_op.dim_names)} in the old "
                                f"model and {', '.join(new_op.dim_names)} in the new one")
        for w_old, w_new in zip(old_op.weights, new_op.weights):
            if new_op.is_parameter(w_new) and w_old.shape != w_new.shape:
                raise StrategyError(f"op {new_op.name!r}: a parameter has shape {w_old.shape} in the "
                                    f"old model and {w_new.shape} in the new one; re-planning moves "
                                    f"parameters of the same shape only")
        try:
            cfg = op_config(old_op, old.configs.get(old_op.name, {}), old.devices)
        except StrategyError as exc:  # where its tiles are is then unknown
            raise StrategyError(f"{old.label} is not valid on its own {old.devices} devices: "
                                f"{exc}") from None
        out.append(np.array([cfg[n] for n in old_op.dim_names], dtype=np.int64))
    return out

"""What the launch exports (Megatron-LM flags, a torchtitan job) share: the model's
registered sizes, the read-back result, and a layout spelled as ``evaluate --layout``'s
options, so a config read from a framework is priced by the same path as ``--layout``."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from pase.errors import OptionError
from pase.perf.layout import Layout


@dataclass
class Launch:
    """A framework's config read back: the layout and the model options it sets (sizes
    that differ from the registered model's), plus notes on what pase reads loosely."""

    layout: Layout
    model_options: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def model_sizes(model: str, model_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The registered model's options (its sizes) with ``model_options`` applied; a model
    that is not a registered preset is an OptionError."""
    from pase.registry import MODELS

    if not isinstance(model, str) or model not in MODELS:
        raise OptionError(f"a launch export writes a registered model's sizes; {model!r} is not "
                          f"one (`pase models`)")
    from pase.options import coerce_options

    sizes = dict(MODELS.entry(model).info.get("options") or {})
    sizes.update(coerce_options(MODELS.get(model), dict(model_options or {}), f"model {model!r}"))
    return sizes


def degrees_text(lay: Layout) -> str:
    """``tp=..,pp=..,dp=..,cp=..,ep=..,etp=..``: every degree, so nothing is left to a default."""
    return (f"tp={lay.tp},pp={lay.pp},dp={lay.dp},cp={lay.cp},ep={lay.ep},"
            f"etp={lay.expert_tp}")


def layout_options(lay: Layout) -> dict[str, Any]:
    """:func:`pase.perf.make_layout`'s keyword options that rebuild ``lay`` exactly
    (the overlaps as on/off, never auto)."""
    schedule = f"interleaved:{lay.virtual}" if lay.schedule == "interleaved" else lay.schedule
    return {"micro_batch": lay.micro_batch, "global_batch": lay.global_batch,
            "schedule": schedule, "zero": lay.zero, "recompute": lay.recompute,
            "sequence_parallel": lay.sequence_parallel, "precision": lay.precision,
            "attention": lay.attention, "dropout": lay.dropout,
            "tp_overlap": "on" if lay.tp_overlap else "off",
            "ep_overlap": "on" if lay.ep_overlap else "off"}


def describe(lay: Layout) -> str:
    """One line that says the whole layout (a launch file's header)."""
    schedule = f"interleaved:{lay.virtual}" if lay.schedule == "interleaved" else lay.schedule
    return (f"{degrees_text(lay)}; micro-batch {lay.micro_batch}, global batch "
            f"{lay.global_batch}, {schedule}, ZeRO-{lay.zero}, recompute {lay.recompute}"
            f"{', sequence parallel' if lay.sequence_parallel else ''}, {lay.precision}, "
            f"{lay.attention} attention{', dropout' if lay.dropout else ''}, tp overlap "
            f"{'on' if lay.tp_overlap else 'off'}, ep overlap {'on' if lay.ep_overlap else 'off'}")


def changed_sizes(model: str, read: Mapping[str, Any]) -> dict[str, Any]:
    """The sizes in ``read`` that differ from the registered model's: the model options a
    config read back sets."""
    sizes = model_sizes(model)
    return {k: v for k, v in read.items() if sizes.get(k) != v}


def check_plain(lay: Layout, engine: str) -> None:
    """What no launch export writes: recomputation of only some layers."""
    if lay.recompute_layers:
        raise OptionError(f"--engine {engine}: full recomputation of {lay.recompute_layers} layers "
                          f"per stage is not written; pase writes recomputation of every layer")

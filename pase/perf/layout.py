"""A named training layout (Megatron-LM / FSDP conventions) and what it splits in each op.

``tp=T,pp=P,dp=D[,cp=C][,ep=E]`` with ``T * P * D * C = p``:

- ``tp`` splits each op's heads (the first heads-role dim: the key/value groups
  of grouped-query attention), its hidden MLP size (``parameter`` role) or its
  vocabulary, over consecutive ranks inside a node (Megatron's tensor parallelism);
- ``pp`` cuts the numbered blocks into ``P`` equal stages (the embedding joins
  the first, the head and loss the last);
- ``dp`` replicates everything over the outermost ranks (ZeRO shards the states);
- ``cp`` splits the sequence (the first sequence-role dim: queries; keys and
  values travel around a ring, as ring attention does);
- ``ep`` splits the experts over ranks of the data-parallel group (``E`` divides ``D * C``).

With sequence parallelism, the ops outside the tensor-parallel region (norms,
residual adds) also split their sequence over ``tp``. Rank order is Megatron-Core's
default, ``tp-cp-ep-dp-pp`` from innermost to outermost (:func:`pase.perf.comms.
group_collectives`): a tensor-parallel group is consecutive ranks and each pipeline
stage one contiguous range of ranks.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from pase.cluster import PRECISIONS
from pase.errors import OptionError, check_int
from pase.ir import Graph, Op

AXES = ("tp", "pp", "dp", "cp", "ep", "etp")
SCHEDULES = ("1f1b", "gpipe", "interleaved:V", "zb-h1", "dualpipe")
RECOMPUTE = ("none", "selective", "full")
ZERO = (0, 1, 2, 3)
ATTENTION = ("fused", "unfused")


@dataclass(frozen=True)
class Layout:
    """How a step runs: parallel degrees, batch, schedule and memory options."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    micro_batch: int = 1
    global_batch: int = 1
    schedule: str = "1f1b"
    virtual: int = 1
    zero: int = 0
    recompute: str = "none"
    sequence_parallel: bool = False
    precision: str = "bf16"
    attention: str = "fused"
    dropout: bool = False
    tp_overlap: bool = False
    etp: int = 0  # expert tensor parallelism (0: tp)
    recompute_layers: int = 0  # full recomputation of this many layers per stage (0: all)
    ep_overlap: bool = False  # expert all-to-alls hidden behind another micro-batch's compute

    @property
    def expert_tp(self) -> int:
        """How many ways an expert's MLP is split (Megatron-Core's expert tensor parallelism)."""
        return self.etp or self.tp

    @property
    def expert_data(self) -> int:
        """Ranks holding the same experts (the expert-data-parallel group):
        ``tp x dp x cp / (ep x etp)``, MoE parallel folding."""
        return self.tp * self.dp * self.cp // (self.ep * self.expert_tp)

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def microbatches(self) -> int:
        """Micro-batches per step on each data-parallel rank (pipeline or accumulation)."""
        return self.global_batch // (self.micro_batch * self.dp)


def parse_degrees(layout: str | Mapping[str, int]) -> dict[str, int]:
    """``"tp=8,pp=2,dp=4"`` or ``{"tp": 8, "pp": 2, "dp": 4}`` as a dict of positive ints;
    unknown keys, repeated keys and values that are not integers >= 1 are OptionErrors,
    the same ones for both spellings (a mapping's values are checked by ``check_int``)."""
    if isinstance(layout, str):
        pairs = [part.strip().partition("=") for part in layout.split(",")]
        items = [(key, value) for key, _, value in pairs]
    elif isinstance(layout, Mapping):
        items = list(layout.items())
    else:
        raise OptionError(f"layout must be text such as 'tp=8,pp=2,dp=4' or a mapping such as "
                          f"{{'tp': 8, 'pp': 2, 'dp': 4}}, got {_shown(layout)}")
    if not items:
        raise OptionError(f"--layout: no degree given; allowed keys: {', '.join(AXES)} "
                          f"(e.g. tp=8,pp=2,dp=4)")
    out: dict[str, int] = {}
    for key, value in items:
        if key not in AXES:
            raise OptionError(f"--layout: unknown key {_shown(key)} in {_shown(layout)}; allowed: "
                              f"{', '.join(AXES)} (e.g. tp=8,pp=2,dp=4)")
        if key in out:
            raise OptionError(f"--layout: {key} is given twice in {_shown(layout)}")
        out[key] = _degree(key, value, isinstance(layout, str))
    return out


def _degree(key: str, value: object, text: bool) -> int:
    """One degree: digits in text; in a mapping, an integer >= 1 (``check_int``: 8.0 is 8,
    but 2.5, "8", True and None are refused)."""
    if text and re.fullmatch(r"[1-9]\d*", str(value).strip()):
        return int(value)
    if not text and not isinstance(value, str):
        try:
            return check_int(key, value, 1)
        except OptionError:
            pass
    raise OptionError(f"--layout: {key} must be a positive integer, got {_shown(value)}")


def _shown(value: object) -> str:
    """``repr(value)`` cut to 40 characters, so a message stays one line."""
    text = repr(value).replace("\n", " ")
    return text if len(text) <= 40 else text[:37] + "..."


def parse_schedule(text: str) -> tuple[str, int]:
    """``1f1b``, ``gpipe``, ``interleaved:V``, ``zb-h1`` or ``dualpipe`` as (name, virtual
    stages per device)."""
    given, text = text, str(text).strip().lower()
    if text in ("1f1b", "gpipe", "zb-h1", "dualpipe"):
        return text, 1
    match = re.fullmatch(r"interleaved:(\d+)", text)
    if match and int(match.group(1)) >= 2:
        return "interleaved", int(match.group(1))
    if match:  # one chunk a device is 1F1B; the pipeline search refuses it alike
        raise OptionError(f"schedule {given!r}: interleaved:V needs V >= 2 virtual stages a "
                          f"device (V = 1 is 1f1b); allowed: {', '.join(SCHEDULES)}")
    raise OptionError(f"unknown schedule {given!r}; allowed: {', '.join(SCHEDULES)} "
                      f"(V an integer >= 2)")


def _recompute_layers(recompute: str) -> tuple[str, int]:
    """``none``, ``selective``, ``full``, ``full:N`` (the first N layers of each stage,
    Megatron-LM's ``--recompute-num-layers`` with the block method) or ``auto``, as
    ``(mode, N)`` (N 0: every layer)."""
    text = str(recompute)
    if text in RECOMPUTE + ("auto",):
        return text, 0
    head, _, count = text.partition(":")
    if head == "full" and count.isdigit() and int(count) >= 1:
        return "full", int(count)
    raise OptionError(f"unknown recompute {recompute!r}; allowed: {', '.join(RECOMPUTE)}, "
                      f"full:N (the first N layers of each stage), auto")


def make_layout(degrees: str | Mapping[str, int], *, devices: int, micro_batch: int,
                global_batch: int, schedule: str = "1f1b", zero: int | str = 0, recompute: str = "none",
                sequence_parallel: bool = False, precision: str = "bf16", attention: str = "fused",
                dropout: bool = False, tp_overlap: bool | str = "auto",
                ep_overlap: bool | str = "auto") -> Layout:
    """A checked :class:`Layout` (everything that needs no graph): ``degrees`` as text or a
    mapping (:func:`parse_degrees`), batches integers >= 1, the flags real booleans."""
    d = parse_degrees(degrees)
    micro_batch = check_int("micro_batch", micro_batch, 1)
    global_batch = check_int("global_batch", global_batch, 1)
    for flag, value in (("sequence_parallel", sequence_parallel), ("dropout", dropout)):
        if not isinstance(value, (bool, np.bool_)):
            raise OptionError(f"{flag} must be True or False, got {_shown(value)}")
    name, virtual = parse_schedule(schedule)
    if str(zero) not in ("0", "1", "2", "3"):
        raise OptionError(f"unknown zero {zero!r}; allowed: 0, 1, 2, 3")
    recompute = "full" if recompute == "all" else recompute
    recompute, layers = _recompute_layers(recompute)
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise OptionError(f"unknown precision {_shown(precision)}; allowed: {', '.join(PRECISIONS)}")
    if attention not in ATTENTION:
        raise OptionError(f"unknown attention {attention!r}; allowed: {', '.join(ATTENTION)}")
    m = global_batch // (micro_batch * d.get("dp", 1))  # micro-batches per data-parallel rank
    lay = Layout(d.get("tp", 1), d.get("pp", 1), d.get("dp", 1), d.get("cp", 1), d.get("ep", 1),
                 int(micro_batch), int(global_batch), name, virtual, int(zero), recompute,
                 bool(sequence_parallel), precision, attention, bool(dropout),
                 tp_overlap=_tp_overlap(tp_overlap, bool(sequence_parallel), attention, precision),
                 etp=_expert_tp(d),
                 ep_overlap=_switch("ep_overlap", ep_overlap, d.get("ep", 1) > 1 and m > 1),
                 recompute_layers=layers)
    if lay.devices != devices:
        raise OptionError(f"--layout: tp x pp x dp x cp = {lay.tp} x {lay.pp} x {lay.dp} x {lay.cp} "
                          f"= {lay.devices}, but -p is {devices}")
    if lay.tp % lay.expert_tp or (lay.tp * lay.dp * lay.cp) % (lay.ep * lay.expert_tp):
        raise OptionError(f"--layout: etp ({lay.expert_tp}) must divide tp ({lay.tp}) and ep x etp "
                          f"({lay.ep} x {lay.expert_tp}) must divide tp x dp x cp "
                          f"({lay.tp * lay.dp * lay.cp}): experts are split over the ranks that "
                          f"share their tokens")
    if global_batch % (micro_batch * lay.dp):
        raise OptionError(f"the global batch ({global_batch}) must be a multiple of micro-batch x dp "
                          f"({micro_batch} x {lay.dp} = {micro_batch * lay.dp})")
    if lay.schedule == "interleaved":
        if lay.pp == 1:
            raise OptionError("schedule interleaved:V needs pp > 1")
        if m % lay.pp:
            raise OptionError(f"schedule interleaved:{virtual} needs the micro-batches per step "
                              f"({m}) to be a multiple of pp ({lay.pp}), as Megatron-LM does")
    if lay.schedule == "zb-h1" and m < lay.pp:
        raise OptionError(f"schedule zb-h1 needs at least pp ({lay.pp}) micro-batches per step "
                          f"(got {m}): its closed form holds from there")
    if lay.schedule == "dualpipe" and (lay.pp % 2 or m < 2 * lay.pp or m % 2):
        raise OptionError(f"schedule dualpipe needs an even pp (got {lay.pp}) and an even number "
                          f"of micro-batches per step, at least 2 x pp (got {m}), as DeepSeek-V3's "
                          f"DualPipe does")
    if sequence_parallel and lay.tp == 1:
        raise OptionError("--sequence-parallel needs tp > 1 (it splits the sequence over the tp group)")
    return lay


def _expert_tp(d: dict[str, int]) -> int:
    """etp as given; else tp when ep divides dp x cp (experts split like the dense MLP),
    else 1 (Megatron-Core's MoE parallel folding: ep spans the tensor-parallel ranks)."""
    if "etp" in d:
        return d["etp"]
    tp, dp, cp, ep = d.get("tp", 1), d.get("dp", 1), d.get("cp", 1), d.get("ep", 1)
    return tp if (dp * cp) % ep == 0 else 1


def _tp_overlap(value: bool | str, sequence_parallel: bool, attention: str, precision: str) -> bool:
    """auto overlaps tensor-parallel collectives where current recipes do (Megatron-LM's
    --tp-comm-overlap needs sequence parallelism; the fused-attention, 16-bit-or-lower
    stacks of 2023 on run it)."""
    return _switch("tp_overlap", value,
                   sequence_parallel and attention == "fused" and precision != "fp32")


def _switch(name: str, value: bool | str, auto: bool) -> bool:
    """``on``/``off``/``auto`` (or a bool) as a bool, ``auto`` standing for ``auto``."""
    if value == "auto":
        return auto
    if isinstance(value, (bool, np.bool_)) or value in ("on", "off"):
        return value in (True, "on")
    raise OptionError(f"unknown {name} {_shown(value)}; allowed: auto, on, off (or True/False)")


# -- what the layout splits in each op -----------------------------------------------

def _first(op: Op, role: str) -> int | None:
    return next((i for i, d in enumerate(op.dims) if d.role == role), None)


def tensor_split_dims(op: Op) -> list[int]:
    """The dims ``tp`` splits in ``op``: its first heads-role dim, its ``parameter``-role
    dims (the MLP's hidden size) and its vocabulary dims."""
    out = [i for i, d in enumerate(op.dims) if d.role in ("parameter", "vocabulary")]
    heads = _first(op, "heads")
    if heads is not None and not any(op.dims[i].role == "parameter" for i in out):
        out.append(heads)
    return sorted(out)


def op_splits(op: Op, lay: Layout) -> tuple[int, ...]:
    """Per dim of ``op``, how many ways the layout splits it (ceil tiles: a vocabulary
    not divisible by tp is padded, as Megatron-LM pads it)."""
    split = [1] * len(op.dims)
    tp_dims = tensor_split_dims(op) if lay.tp > 1 else []
    folded = lay.expert_tp != lay.tp and experts_of(op) is not None
    for i in tp_dims:
        split[i] *= lay.expert_tp if folded else lay.tp
    seq = _first(op, "sequence")
    if seq is not None:
        if lay.cp > 1:
            split[seq] *= lay.cp
        if lay.sequence_parallel and not tp_dims and op.kind not in ("Einsum", "Embedding"):
            # each tp rank holds its own tokens; folded, these are the ones it routes, so
            # the fold's split below is already in this one (no tp x tp / etp share)
            split[seq] *= lay.tp
        elif folded and op.kind != "MoECombine":
            # each expert-tensor-parallel group runs its own share of the tokens; a
            # combine brings every token back to each rank, which holds them all
            split[seq] *= lay.tp // lay.expert_tp
    expert = _first(op, "expert")
    if expert is not None and lay.ep > 1:
        split[expert] *= lay.ep
    return tuple(split)


def experts_of(op: Op) -> str | None:
    """The expert dim of an op that runs the experts themselves (its data inputs carry
    the experts: their MLPs, the exchanges), None otherwise (a router holds every expert)."""
    expert = next((d.name for d in op.dims if d.role == "expert"), None)
    if expert is None or not any(expert in (n for axis in port.dims for n in axis)
                                 for port in op.inputs if not op.is_parameter(port)):
        return None
    return expert


def check_graph(graph: Graph, lay: Layout) -> None:
    """OptionErrors for a layout the graph cannot run: tp not dividing the heads, the
    key/value heads or the MLP size, cp not dividing the sequence or on a model with none,
    ep not dividing the experts or on a model with none."""
    for op in graph.ops:
        split = lay.expert_tp if experts_of(op) is not None else lay.tp
        for i in tensor_split_dims(op) if split > 1 else []:
            d = op.dims[i]
            if d.role != "vocabulary" and d.size % split:
                what = {"heads": "heads (key/value heads under grouped-query attention)",
                        "parameter": "the MLP hidden size"}[d.role]
                axis = "etp" if split != lay.tp else "tp"
                raise OptionError(f"--layout: {axis} ({split}) must divide {what}: op {op.name!r} dim "
                                  f"{d.name!r} has size {d.size}")
        seq = _first(op, "sequence")
        if seq is not None and op.dims[seq].size % (lay.cp * (lay.tp if lay.sequence_parallel else 1)):
            by = lay.cp * (lay.tp if lay.sequence_parallel else 1)
            raise OptionError(f"--layout: the sequence ({op.dims[seq].size}, op {op.name!r}) must be a "
                              f"multiple of {'cp x tp' if lay.sequence_parallel else 'cp'} ({by})")
        expert = _first(op, "expert")
        if expert is not None and op.dims[expert].size % lay.ep:
            raise OptionError(f"--layout: ep ({lay.ep}) must divide the experts ({op.dims[expert].size}, "
                              f"op {op.name!r})")
    if lay.ep > 1 and not any(_first(op, "expert") is not None for op in graph.ops):
        raise OptionError(f"--layout: ep={lay.ep} but model {graph.name!r} has no experts")
    if lay.cp > 1 and not any(_first(op, "sequence") is not None for op in graph.ops):
        raise OptionError(f"--layout: cp={lay.cp} but model {graph.name!r} has no sequence dim "
                          f"(context parallelism splits the sequence)")


def tile(op: Op, splits: tuple[int, ...]) -> dict[str, float]:
    """Per-device extent of each dim name (:func:`padded_extent`)."""
    return {d.name: float(padded_extent(d.size, s)) for d, s in zip(op.dims, splits)}


def padded_extent(size, split):
    """Per-device extent of a dim of ``size`` split ``split`` ways: ``ceil(size / split)``,
    the last rank's tile padded, as Megatron-LM pads a vocabulary tp does not divide (its
    padded size is ``split`` times this). Integers or numpy arrays (elementwise)."""
    return -(-size // split)

"""Where each op runs in a pipeline, and the layout's schedule in the closed forms.

Ops are grouped into numbered blocks by name (``h3.mlp.fc1`` is in block ``h3``,
as the model builders name layers). The blocks are cut into ``pp * V`` chunks as
equal as can be (:func:`chunk_sizes`); chunk ``c`` runs on stage ``c mod pp``
(Megatron-LM's interleaving; ``V = 1`` is the plain pipeline). Ops before the first
block (embeddings) join the first chunk, ops after the last (the head, the loss)
the last one.

The schedules' step times and in-flight micro-batches are
:mod:`pase.perf.schedule`'s closed forms; :func:`pipeline_seconds` and
:func:`in_flight` read them for a layout, where one stage (``pp = 1``) is gradient
accumulation: one micro-batch held at a time whatever the schedule.
"""
from __future__ import annotations

import re

from pase.errors import OptionError
from pase.ir import Graph
from pase.perf import schedule
from pase.perf.layout import Layout

_BLOCK = re.compile(r"(\D+?)(\d+)$")


def blocks(graph: Graph) -> list[str | None]:
    """Per op, its block's name (``"h3"``), or None outside numbered blocks."""
    out = []
    for op in graph.ops:
        head = op.name.split(".")[0]
        out.append(head if _BLOCK.match(head) and "." in op.name else None)
    return out


def placement(graph: Graph, lay: Layout) -> tuple[list[int], list[str], list[int]]:
    """Per op: its stage, its FSDP unit (the block, or ``"pre"``/``"post"``) and its chunk."""
    names = blocks(graph)
    order = list(dict.fromkeys(n for n in names if n is not None))
    chunks = lay.pp * lay.virtual
    if chunks > 1 and len(order) < chunks:
        raise OptionError(f"--layout: pp x V = {lay.pp} x {lay.virtual} = {chunks} chunks, but model "
                          f"{graph.name!r} has only {len(order)} numbered layers to cut")
    chunk_of = dict(zip(order, chunk_sizes(len(order), chunks, expand=True)))
    stages, units, chunk_list, seen = [], [], [], False
    for name in names:
        if name is None:
            chunk = chunks - 1 if seen else 0
            units.append("post" if seen else "pre")
        else:
            seen = True
            chunk = chunk_of[name]
            units.append(name)
        stages.append(chunk % lay.pp)
        chunk_list.append(chunk)
    return stages, units, chunk_list


def crossing_bytes(graph: Graph, chunks: list[int], lay: Layout, element_bytes: float) -> dict[int, float]:
    """Per chunk, the bytes per rank it receives from earlier chunks each micro-batch:
    every tensor made in another chunk, ``1 / (tp cp)`` of it per rank (Megatron-LM's
    scatter-gather of the pipeline sends)."""
    where = {op.name: c for op, c in zip(graph.ops, chunks)}
    out: dict[int, float] = {}
    for op, c in zip(graph.ops, chunks):
        for port in op.inputs:
            if port.source is not None and where[port.source[0]] != c:
                elems = 1.0
                for size in port.shape:
                    elems *= size
                out[c] = out.get(c, 0.0) + elems / (lay.tp * lay.cp) * element_bytes
    return out


def check_recompute_layers(graph: Graph, lay: Layout) -> None:
    """An OptionError for full recomputation of more layers than a stage holds."""
    if not lay.recompute_layers:
        return
    layers = len({b for b in blocks(graph) if b is not None})
    most = -(-layers // lay.pp)
    if lay.recompute_layers > most:
        raise OptionError(f"--recompute full:{lay.recompute_layers}: a stage holds at most "
                          f"{most} layers ({layers} over pp {lay.pp}); give full:N with N <= "
                          f"{most}, or full for every layer")


def recomputed_units(lay: Layout, units: list[str], stages: list[int]) -> set[str]:
    """The layers full recomputation rebuilds: every layer, or the first
    ``recompute_layers`` of each stage (Megatron-LM's block method)."""
    if lay.recompute != "full":
        return set()
    out: set[str] = set()
    for stage in range(lay.pp):
        layers = list(dict.fromkeys(u for u, s in zip(units, stages)
                                    if s == stage and u not in ("pre", "post")))
        out.update(layers[:lay.recompute_layers] if lay.recompute_layers else layers)
    return out


def chunk_sizes(layers: int, chunks: int, expand: bool = False) -> list[int]:
    """Layers per chunk, as equal as can be; when they do not divide, the first and last
    chunks (which also hold the embedding and the head) get the fewer layers, as
    Llama 3's 126 layers on 16 stages do. ``expand``: the chunk of each layer instead."""
    base, extra = divmod(layers, chunks)
    middle_first = sorted(range(chunks), key=lambda c: (-min(c, chunks - 1 - c), c))
    sizes = [base + (1 if c in set(middle_first[:extra]) else 0) for c in range(chunks)]
    if not expand:
        return sizes
    return [c for c, n in enumerate(sizes) for _ in range(n)]


def in_flight(lay: Layout, stage: int) -> float:
    """Micro-batches whose activations stage ``stage`` holds at its peak."""
    if lay.pp == 1:
        return 1.0
    return float(schedule.in_flight(lay.schedule, lay.pp, lay.microbatches, stage, lay.virtual))


def pipeline_seconds(lay: Layout, stage_times: list) -> float:
    """One step's pipeline seconds from each stage's per-micro-batch time: a number, or
    for ZB-H1 and DualPipe a :class:`pase.perf.schedule.Work` (forward, backward, its
    weight-gradient part)."""
    return schedule.step_seconds(lay.schedule, stage_times, lay.microbatches, virtual=lay.virtual)

"""The sends into a pipeline stage, as the layout path counts them: the one rule the search
and the plan's one price (:mod:`pase.cost_models.calibrated_pipeline`) share.

Each input of a chunk's op that reads a tensor made outside the chunk is one send per
micro-batch and direction: each rank of the receiving ``d``-device sub-mesh gets its
``1 / d`` share of the tensor (Megatron-LM's scatter-gather) from the rank ``d`` ranks
before it (:func:`pase.perf.pipeline.crossing_bytes` counts the same inputs). A stage's
time per micro-batch carries its sends both ways, so a plan has no separate links.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from pase.ir import Graph
from pase.perf.comms import collective_seconds, group_nodes


def received(graph: Graph, first: int, end: int, devices: int, whole: Any, bytes_per_element: float,
             hw: Any) -> list[float]:
    """Seconds of each send into ops ``first .. end-1`` (one chunk) from another, one way per
    micro-batch, on cluster ``whole`` (the plan's) at achieved constants ``hw``."""
    nodes = group_nodes(whole, [(2, devices)])
    out = []
    for op in graph.ops[first:end]:
        for port in op.inputs:
            if port.source is None or first <= graph.index(port.source[0]) < end:
                continue  # made in this chunk: no send
            nbytes = float(np.prod(port.shape)) / devices * bytes_per_element
            out.append(float(collective_seconds("send", nbytes, 2, nodes, whole, hw)))
    return out


def stage_sends(graph: Graph, ranges, devices: int, whole: Any, bytes_per_element: float,
                hw: Any) -> float:
    """Seconds per micro-batch of a stage's (its chunks') sends, both ways."""
    return 2 * sum(x for first, end in ranges
                   for x in received(graph, first, end, devices, whole, bytes_per_element, hw))

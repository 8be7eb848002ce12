"""Assignment 2: the PaSE paper's re-distribution cost of one edge, by hand.

Fill in the four functions; the statement is ``teaching/edge_cost/README.md``.
Grade with ``pytest teaching/edge_cost`` from the repository root.
"""
from __future__ import annotations

from typing import Sequence

from pase.ir import Op, Port


def flop_per_word(tflops: float, bandwidth_gbps: float) -> float:
    """Part 1: FLOP a device computes while one 8-byte word crosses a link."""
    raise NotImplementedError(
        "Part 1: FLOP per second (tflops * 1e12) over words per second "
        "(bandwidth_gbps * 1e9 / 8)")


def tensor_split(op: Op, port: Port, config: Sequence[int]) -> tuple[int, ...]:
    """Part 2: per axis of ``port``, how many ways ``config`` (one factor per op dim) splits it."""
    raise NotImplementedError(
        "Part 2: for each axis a, multiply config[op.dim_index(name)] over the names in "
        "port.dims[a] (1 for none)")


def words_moved(shape: Sequence[int], src_split: Sequence[int],
                dst_split: Sequence[int]) -> float:
    """Part 3: words each device receives (forward and backward) to go from one split to another."""
    raise NotImplementedError(
        "Part 3: need = product of the destination tile; overlap = product of the "
        "element-wise smaller tile, or 0 when prod(dst_split) > prod(src_split); "
        "return 2 * max(need - overlap, 0)")


def edge_cost(producer: Op, output: Port, src_config: Sequence[int],
              consumer: Op, input: Port, dst_config: Sequence[int], *,
              tflops: float = 10.0, bandwidth: float = 16.0) -> float:
    """Part 4: the re-distribution cost in FLOP of one edge for one pair of configs."""
    raise NotImplementedError(
        "Part 4: flop_per_word(...) * words_moved(output.shape, the producer's split of "
        "output, the consumer's split of input)")

"""Assignment 2, a reference solution: the paper's edge cost, one pair of configs at a time."""
from __future__ import annotations

import math
from typing import Sequence

from pase.ir import Op, Port

BYTES_PER_WORD = 8


def flop_per_word(tflops: float, bandwidth_gbps: float) -> float:
    """Part 1: FLOP a device computes while one 8-byte word crosses a link."""
    flop_per_second = tflops * 1e12
    words_per_second = bandwidth_gbps * 1e9 / BYTES_PER_WORD
    return flop_per_second / words_per_second


def tensor_split(op: Op, port: Port, config: Sequence[int]) -> tuple[int, ...]:
    """Part 2: per axis of ``port``, how many ways ``config`` (one factor per op dim) splits it."""
    return tuple(math.prod(int(config[op.dim_index(name)]) for name in names)
                 for names in port.dims)


def words_moved(shape: Sequence[int], src_split: Sequence[int],
                dst_split: Sequence[int]) -> float:
    """Part 3: words each device receives (forward and backward) to go from one split to another."""
    src_tile = [s / f for s, f in zip(shape, src_split)]
    dst_tile = [s / f for s, f in zip(shape, dst_split)]
    need = math.prod(dst_tile)
    if math.prod(dst_split) > math.prod(src_split):
        holds = 0.0  # the consumer is spread over more devices: no credit
    else:
        holds = math.prod(min(a, b) for a, b in zip(src_tile, dst_tile))
    return 2.0 * max(need - holds, 0.0)


def edge_cost(producer: Op, output: Port, src_config: Sequence[int],
              consumer: Op, input: Port, dst_config: Sequence[int], *,
              tflops: float = 10.0, bandwidth: float = 16.0) -> float:
    """Part 4: the re-distribution cost in FLOP of one edge for one pair of configs."""
    words = words_moved(output.shape, tensor_split(producer, output, src_config),
                        tensor_split(consumer, input, dst_config))
    return flop_per_word(tflops, bandwidth) * words

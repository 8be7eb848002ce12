"""Memory rules, kept once: a parameter's training state, ZeRO's sharding of it, kept tensors.

Every model that counts bytes uses these: :func:`pase.work.ops.op_work` (what each op
holds), the ZeRO variants (:mod:`pase.work.variants`), and a pipeline stage's peak in
the performance model (:mod:`pase.perf.memory`). They sit here, below ``pase.perf``,
because ``pase.perf`` reads ``pase.work``'s per-op work, not the other way round.

A parameter keeps its weight and its gradient at the element size of the weights, and
the optimizer's state in fp32: Adam's two moments, momentum's one, plain SGD none.
Weights in a 16-bit (or smaller) format add an fp32 master copy the optimizer updates
(mixed precision). So Adam costs 4 + 4 + 8 = 16 bytes per parameter in fp32 and
2 + 2 + 12 = 16 in mixed precision (ZeRO, Rajbhandari et al., SC 2020, section 3.1).
ZeRO shards these over the data-parallel group: stage 1 the optimizer state, stage 2
the gradients too, stage 3 the weights too.
"""
from __future__ import annotations

import numpy as np

from pase.errors import OptionError

# fp32 values the optimizer keeps per parameter beside the weight and its gradient.
OPTIMIZER_MOMENTS = {"sgd": 0, "momentum": 1, "adam": 2}
# Copies of the parameters at one element size when everything is fp32 (weights,
# gradients, moments): the optimizer's factor the simulator and the replanner read.
OPTIMIZER_STATE = {name: 2 + m for name, m in OPTIMIZER_MOMENTS.items()}
FP32_BYTES = 4.0
ZERO_STAGES = (0, 1, 2, 3)


def state_split(element_bytes: float, optimizer: str = "adam") -> tuple[float, float, float]:
    """Bytes per parameter: (weight, gradient, optimizer state incl. an fp32 master copy)."""
    if optimizer not in OPTIMIZER_MOMENTS:
        raise OptionError(f"unknown optimizer {optimizer!r}; allowed: {', '.join(OPTIMIZER_MOMENTS)}")
    e = float(element_bytes)
    master = FP32_BYTES if e < FP32_BYTES else 0.0
    return e, e, FP32_BYTES * OPTIMIZER_MOMENTS[optimizer] + master


def sharded_states(params, stage: int, shards, weight: float, gradient: float, optimizer: float):
    """Bytes of ``params`` parameters' state per device under ZeRO ``stage`` over ``shards``
    data-parallel ranks (numbers or arrays), at the per-parameter bytes of
    :func:`state_split`."""
    if stage == 0:
        return params * (weight + gradient + optimizer)
    if stage == 1:
        return params * (weight + gradient + optimizer / shards)
    if stage == 2:
        return params * (weight + (gradient + optimizer) / shards)
    if stage == 3:
        return params * (weight + gradient + optimizer) / shards
    raise OptionError(f"unknown ZeRO stage {stage!r}; allowed: {', '.join(map(str, ZERO_STAGES))}")


def activation_element_bytes(precision: str) -> float:
    """Bytes of one kept activation element: fp32 keeps 4, every lower precision keeps
    16-bit activations (an fp8 GEMM's inputs are cast for it and kept in bf16)."""
    return FP32_BYTES if precision == "fp32" else 2.0


def kept_bytes(tiles, configs: int, element_bytes: float) -> np.ndarray:
    """Bytes of kept tensors: per config (``configs`` of them), the elements of each
    ``(configs, rank)`` tile array summed, at ``element_bytes``."""
    return sum((np.prod(t, axis=1) for t in tiles), start=np.zeros(configs)) * element_bytes

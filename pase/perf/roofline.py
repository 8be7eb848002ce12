"""The performance model's compute rules for every config of an op at once.

The alpha-beta cost model (``--cost-option compute=roofline``) and the simulator
price compute with the same kernels as ``pase evaluate --layout``
(:mod:`pase.perf.kernels`): a roofline per GEMM at the efficiency its per-device
shape reaches, memory-bound ops at achieved HBM bandwidth, a fixed cost per
kernel. :func:`achieved_rate` turns them into an achieved FLOP rate per config
(the op's :mod:`pase.work` FLOP over its roofline seconds), so that the cost
model's variants (recomputation adds the forward's FLOP to the backward, ZeRO
none) keep working by dividing their FLOP by that rate.

Attention is priced unfused here (the scores and the context as batched GEMMs,
the softmax memory-bound): the solvers price each op on its own.
"""
from __future__ import annotations

import numpy as np

from pase.cluster import Device
from pase.ir import Op
from pase.perf.hardware import achieved
from pase.perf.kernels import (
    MEMORY_BOUND,
    VIEWS,
    OpTime,
    Pricer,
    einsum_time,
    make_pricer,
    memory_bound_time,
)
from pase.work.ops import op_work


def pricer(device: Device, precision: str = "bf16") -> Pricer:
    """The kernel pricer of one device type at ``precision``."""
    return make_pricer(device, achieved(device), precision)


def config_seconds(op: Op, configs: np.ndarray, pr: Pricer) -> np.ndarray:
    """Forward plus backward seconds of ``op`` on one device, per config row."""
    cfg = np.asarray(configs, dtype=np.float64)
    splits = {d.name: cfg[:, i] for i, d in enumerate(op.dims)}
    tile = {d.name: np.ceil(d.size / cfg[:, i]) for i, d in enumerate(op.dims)}
    t = OpTime(op.name)
    if op.kind == "Einsum":
        einsum_time(op, tile, splits, pr, t, collectives=False)
    elif op.kind in VIEWS:
        return np.zeros(len(cfg))
    elif op.kind in MEMORY_BOUND:
        memory_bound_time(op, tile, splits, pr, t, False, collectives=False)
    else:  # convolutions, LSTMs...: pase.work's FLOP at large-GEMM efficiency
        work = op_work(op, np.asarray(configs, dtype=np.int64), pr.element_bytes)
        rate = pr.peak_flops * pr.hw.gemm
        return work.flop / rate + 3 * pr.hw.launch_s
    return np.broadcast_to(np.asarray(t.forward_s + t.backward_s, dtype=np.float64), (len(cfg),)).copy()


def achieved_rate(op: Op, configs: np.ndarray, flop: np.ndarray, pr: Pricer) -> np.ndarray:
    """FLOP/s per config: ``flop`` (the op's pase.work FLOP, forward plus backward) over
    its roofline seconds; infinite where the op does no work (a view)."""
    seconds = config_seconds(op, configs, pr)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(seconds > 0, np.asarray(flop, dtype=np.float64) / seconds, np.inf)
    return np.where(rate > 0, rate, np.inf)

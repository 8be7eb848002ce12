"""The rate memory traffic runs at: how seconds-based models price ``pase.work``'s bytes.

:func:`pase.work.op_work` counts an Embedding as a gather, not a product: no FLOP, but
bytes read and written (``forward_traffic``, ``backward_traffic``). The alpha-beta
model and the simulator divide those bytes by the rate here, as they divide FLOP by a
FLOP rate, so both price a lookup at memory speed by one rule:

- flat compute: the device's HBM bandwidth at the fraction that the performance
  model's memory-bound kernels reach (:mod:`pase.perf.hardware`; 1,000 GB/s where a
  custom device gives no HBM figure; ``efficiency`` is a fraction of the FLOP peak and
  does not apply to memory);
- ``compute=roofline``: the op's own bytes over its kernels' seconds
  (:func:`pase.perf.roofline.achieved_rate`), as the FLOP rate is the op's FLOP over
  them, so a variant's extra bytes (the forward's, recomputed) run at that rate.
"""
from __future__ import annotations

import numpy as np

from pase.cluster import Device
from pase.ir import Op
from pase.perf.hardware import achieved
from pase.perf.kernels import Pricer
from pase.perf.roofline import achieved_rate

__all__ = ["hbm_rate", "traffic_rate"]


def hbm_rate(device: Device) -> float:
    """Bytes/s a memory-bound kernel reaches on ``device`` (the performance model's rule)."""
    return float(Pricer(device, achieved(device), 0.0, 0.0).hbm)


def traffic_rate(op: Op, configs: np.ndarray, flop: np.ndarray, traffic: np.ndarray,
                 device: Device, roofline: Pricer | None = None) -> np.ndarray:
    """Bytes/s per config for ``op``'s memory traffic.

    ``flop`` and ``traffic`` are the op's default-variant FLOP and bytes per config
    (forward plus backward), read under ``roofline`` only: there the rate is the bytes
    over the kernels' seconds, and infinite for an op those seconds already price by
    its FLOP (or that moves no bytes)."""
    n = len(configs)
    if roofline is None:
        return np.full(n, hbm_rate(device))
    traffic = np.asarray(traffic, dtype=np.float64)
    if not np.any(traffic > 0):
        return np.full(n, np.inf)
    rate = achieved_rate(op, configs, traffic, roofline)
    return np.where(np.asarray(flop, dtype=np.float64) > 0, np.inf, rate)

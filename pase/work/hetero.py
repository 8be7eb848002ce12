"""Heterogeneous clusters: where an op runs, and its share of the batch per device.

Shared by the alpha-beta model and the simulator (docs/heterogeneous.md).

Placement
---------
A cluster's groups are ordered fastest first (:func:`pase.cluster.compose`), so
its rank prefixes ``n_1 < n_2 < ... < p`` (:meth:`pase.cluster.Cluster.prefixes`)
are the fastest group, the two fastest, ... An op split ``P`` ways runs on the
smallest prefix with at least ``P`` devices (:func:`placement`), placed there by
:mod:`pase.work.layout` exactly as on a homogeneous cluster of that many devices
(replicas on the prefix; off its mesh, ranks ``0 .. P-1``); the devices after it
hold nothing of the op. So an op whose split fits in the fastest type stays
there, and a wider one uses the slower devices too: the search chooses the
placement by choosing ``P``. On a homogeneous cluster every op's prefix is ``p``.

Shares
------
With ``even`` splitting every device gets the same tile; an op's compute time is
its slowest device's. With ``balanced`` splitting the slices of the batch dims
get shares proportional to speed: slice ``i`` (the devices with one coordinate on
the op's batch dims, replicas included) runs at ``s_i``, its slowest device's
speed, and gets ``w_i = s_i / sum_j s_j`` of the batch. A device of slice ``i``
then does ``b w_i`` times its even work (``b`` slices), so every slice takes
``F b / sum_j s_j`` for the even per-device FLOP ``F``. Its activations,
activation collectives and received re-layout bytes scale by ``b w_i`` too.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from pase.cluster import Cluster
from pase.ir import Op
from pase.work.layout import active_devices, device_coords

SPLITS = ("even", "balanced")


def placement(configs: np.ndarray, prefixes: tuple[int, ...], devices: int) -> np.ndarray:
    """Per config, the rank count of the prefix it runs on: the smallest of
    ``prefixes + (devices,)`` with at least ``prod(config)`` devices."""
    P = np.prod(np.asarray(configs, dtype=np.int64), axis=1)
    bounds = np.asarray(tuple(prefixes) + (int(devices),), dtype=np.int64)
    return bounds[np.searchsorted(bounds, P, side="left")]


@dataclass(frozen=True)
class Shares:
    """One config's devices and batch shares on a heterogeneous cluster.

    ``share[d]``: device ``d``'s multiple of the even tile (0 when idle; 1 with even
    splitting); ``speed``: the FLOP/s the per-device even FLOP is divided by to get
    the op's compute time (the slowest device's, or ``sum_j s_j / b`` balanced).
    """

    placed: int
    active: np.ndarray
    share: np.ndarray
    speed: float


def shares(op: Op, config, cluster: Cluster, devices: int, split: str = "even") -> Shares:
    """:class:`Shares` of ``op`` at ``config`` (a factor vector) on ``devices`` ranks."""
    roles = tuple(d.role for d in op.dims)
    return _shares(roles, tuple(int(f) for f in config), cluster, int(devices), split)


@functools.lru_cache(maxsize=1 << 16)
def _shares(roles: tuple[str, ...], config: tuple[int, ...], cluster: Cluster, devices: int,
            split: str) -> Shares:
    placed = int(placement(np.asarray([config]), cluster.prefixes(devices), devices)[0])
    op = _RoleOp(roles)
    active = active_devices(op, config, placed)
    speeds = cluster.speeds(devices)
    share = np.zeros(devices)
    batch = [d for d, r in enumerate(roles) if r == "batch"]
    slowest = float(speeds[active].min())
    if split != "balanced" or not batch or len(set(speeds[active].tolist())) == 1:
        share[active] = 1.0
        return Shares(placed, active, share, slowest)
    coords = device_coords(op, config, placed)[active][:, batch]
    keys, slice_of = np.unique(coords, axis=0, return_inverse=True)
    slice_of = slice_of.reshape(-1)
    s = np.full(len(keys), np.inf)
    np.minimum.at(s, slice_of, speeds[active])
    b = len(keys)
    share[active] = b * s[slice_of] / s.sum()
    return Shares(placed, active, share, float(s.sum() / b))


class _RoleOp:
    """The part of an Op that placement reads (dim roles), so shares memoise on it."""

    def __init__(self, roles: tuple[str, ...]):
        self.dims = tuple(_Dim(r) for r in roles)


@dataclass(frozen=True)
class _Dim:
    role: str


@dataclass(frozen=True)
class ConfigTerms:
    """Per config of one op (arrays of length K): where it runs and how its tiles scale."""

    placed: np.ndarray        # rank count of its prefix
    speed: np.ndarray         # TFLOP/s dividing the even per-device FLOP
    activation: np.ndarray    # worst device's multiple of the even activation tile
    by_type: np.ndarray       # (K, groups): that multiple on each device type, 0 where absent


def config_terms(op: Op, configs: np.ndarray, cluster: Cluster, devices: int,
                 split: str = "even") -> ConfigTerms:
    """:func:`shares` over an op's configs, with per-device-type activation multiples."""
    configs = np.asarray(configs, dtype=np.int64)
    groups = cluster.group_of(np.arange(int(devices)))
    ngroups = max(len(cluster.groups), 1)
    placed = np.zeros(len(configs), dtype=np.int64)
    speed = np.zeros(len(configs))
    by_type = np.zeros((len(configs), ngroups))
    for k, row in enumerate(configs.tolist()):
        got = shares(op, row, cluster, devices, split)
        placed[k], speed[k] = got.placed, got.speed
        np.maximum.at(by_type[k], groups[got.active], got.share[got.active])
    return ConfigTerms(placed, speed, by_type.max(axis=1), by_type)

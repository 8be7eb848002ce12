"""Where every tile lives: the one placement of pase.

The alpha-beta model, the simulator (``pase.sim``) and the JAX exporter
(``pase.export``) all place tiles with this module, so they agree on every
strategy; :mod:`pase.work.relayout` prices moving a tensor between two of its
placements.

The global mesh
---------------
``p`` devices form one mesh with one axis per prime factor of ``p``, in
ascending order, the first slowest-varying across device ids (``p = 8``: axes
``x0 x1 x2`` of size 2; ``p = 12``: sizes 2, 2, 3; device ``d``'s coordinate on
axis ``i`` is ``d // stride_i % size_i``). An op split by config ``c`` takes,
for its batch- and sequence-role dims, the *first* mesh axes whose sizes are the
prime factors of their split, and for its other dims the *last* such axes among
the rest (:func:`assign_axes`); walking its dims in :func:`mesh_order` (batch-role
dims first, then sequence-role dims, then the others in op order), each dim takes
the next of its group's axes (ascending) until their sizes multiply to its factor.
So batch splits nest (b=2 on ``x0``, b=4 on ``x0 x1``), a sequence split sits
just inside the batch's, and an op split on fewer than ``p`` devices keeps its
batch rows and sequence blocks on the devices its neighbours keep theirs, and is
replicated over the last axes, where model splits sit: Megatron-LM's ranks, tensor
groups innermost (inside a node), then context parallelism, then data parallelism.
A norm that splits only batch and sequence thus puts them where the projections
beside it, which split heads as well, put theirs. A tensor axis
split by several dims (a Ravel's flat axis) lists their mesh axes in the port's
order, and its block index is the mixed-radix number of the device's
coordinates on them, the first slowest (a ``PartitionSpec`` entry).

Replicas, not idle devices
--------------------------
The devices outside an op's ``P`` (those differing only in mesh axes the op does
not use) hold *replicas*: they hold the same tiles and compute the same thing,
as a JAX program on the whole mesh does. So every device holds a tile of every
tensor and needs a tile of every input; a replicated tensor (after an
all-reduce, or an op on fewer devices) is everywhere it is needed, and a consumer
that wants a smaller tile only slices it (no bytes).

An op whose ``P`` does not divide ``p`` (a factor 3 at ``p = 8``: the space
allows any product up to ``p``) cannot be placed on the mesh; it runs on ranks
``0 .. P-1`` in row-major order of its dims in :func:`mesh_order` (the last
fastest) and the other devices are idle for it (hold nothing, need nothing).
The JAX exporter refuses such configs.
"""
from __future__ import annotations

import functools
import math
from typing import Mapping, Sequence

import numpy as np

from pase.errors import OptionError
from pase.ir import Op, Port

# -- the mesh ----------------------------------------------------------------------

def prime_factors(n: int) -> list[int]:
    """Prime factors of ``n`` in ascending order, with repeats (``12 -> [2, 2, 3]``)."""
    out, d = [], 2
    while d * d <= n:
        while n % d == 0:
            out.append(d)
            n //= d
        d += 1
    if n > 1:
        out.append(n)
    return out


def mesh_axes(devices: int) -> tuple[tuple[str, int], ...]:
    """The mesh of ``devices`` devices: ``((name, size), ...)``, one prime axis each
    (one axis of size 1 for a single device)."""
    return tuple((f"x{i}", q) for i, q in enumerate(prime_factors(devices) or [1]))


@functools.lru_cache(maxsize=None)
def axis_sizes(devices: int) -> tuple[int, ...]:
    """The mesh axes' sizes for ``devices`` (one axis per prime factor)."""
    return tuple(q for _, q in mesh_axes(int(devices)))


# Roles whose splits take the first mesh axes, slowest first: data, then context
# parallelism (Megatron-LM ranks tp innermost, then cp, then dp), so an op that splits
# only its batch and sequence keeps them on the axes the projections beside it use.
FRONT = ("batch", "sequence")


def mesh_order(op: Op) -> tuple[int, ...]:
    """Op dim indices from slowest- to fastest-varying across devices: batch dims, then
    sequence dims, then the others in op order."""
    rank = {role: i for i, role in enumerate(FRONT)}
    return tuple(sorted(range(len(op.dims)), key=lambda i: rank.get(op.dims[i].role, len(FRONT))))


@functools.lru_cache(maxsize=1 << 16)
def _assign(sizes: tuple[int, ...], factors: tuple[int, ...],
            batch: int = 0) -> tuple[tuple[int, ...], ...] | None:
    """Mesh-axis indices per factor (factors in mesh order, the first ``batch`` of
    them batch or sequence dims), or None when their product does not divide the mesh's
    device count. Those take the first mesh axes, the others the last ones."""
    if math.prod(sizes) % math.prod(factors):
        return None
    free = list(range(len(sizes)))
    out: list[tuple[int, ...]] = [()] * len(factors)
    for group, from_front in ((range(batch), True), (range(batch, len(factors)), False)):
        need = prime_factors(math.prod(factors[j] for j in group))
        chosen = []
        for i in (list(free) if from_front else list(reversed(free))):
            if sizes[i] in need:
                need.remove(sizes[i])
                chosen.append(i)
                free.remove(i)
        chosen.sort()
        for j in group:
            want = prime_factors(factors[j])
            mine = []
            for i in list(chosen):
                if sizes[i] in want:
                    want.remove(sizes[i])
                    mine.append(i)
                    chosen.remove(i)
            out[j] = tuple(mine)
    return tuple(out)


def batch_count(op: Op) -> int:
    """How many of :func:`mesh_order`'s first dims take the first mesh axes (batch and
    sequence dims)."""
    return sum(1 for d in op.dims if d.role in FRONT)


def assign_axes(op: Op, config: Mapping[str, int],
                axes: Sequence[tuple[str, int]]) -> dict[str, tuple[str, ...]]:
    """Mesh axes for each split dim of ``op`` (``{dim: (axis, ...)}``, slowest first).

    Batch and sequence dims take the first mesh axes whose sizes are the prime factors
    of their split, the other dims the last such axes among the rest; walking its dims
    in :func:`mesh_order` (batch, then sequence dims first), each dim takes the next of
    its group's axes until their sizes multiply to its factor. Raises OptionError when ``P`` does not divide the mesh's device count.
    """
    sizes = tuple(int(size) for _, size in axes)
    factors = {d.name: int(config.get(d.name, 1)) for d in op.dims}
    order = mesh_order(op)
    got = _assign(sizes, tuple(factors[op.dims[d].name] for d in order), batch_count(op))
    if got is None:
        devices = math.prod(factors.values())
        raise OptionError(f"op {op.name!r} ({op.kind}) is split {devices} ways "
                          f"({ {d: f for d, f in factors.items() if f > 1} }), which does not divide "
                          f"p={math.prod(sizes)}: a JAX mesh of {math.prod(sizes)} devices cannot place it "
                          f"(solve with --powers-of-two or --mesh for a strategy it can)")
    return {op.dims[d].name: tuple(axes[i][0] for i in mine) for d, mine in zip(order, got) if mine}


def port_spec(op: Op, port: Port, assigned: Mapping[str, tuple[str, ...]]) -> tuple:
    """A PartitionSpec's entries for ``port``: per axis its mesh axes, or None.

    An axis split by several dims (a Ravel's flat axis) lists their axes in the
    port's order, the first dim's slowest, as :func:`port_blocks` numbers blocks.
    """
    spec = []
    for names in port.dims:
        entry = tuple(a for n in names for a in assigned.get(n, ()))
        spec.append(entry if entry else None)
    return tuple(spec)


def dim_axes(op: Op, config: Sequence[int], devices: int) -> tuple[tuple[int, ...], ...] | None:
    """Mesh-axis indices of each op dim (op order) on ``devices`` devices, or None
    when the op's device count does not divide ``devices`` (off the mesh)."""
    order = mesh_order(op)
    got = _assign(axis_sizes(devices), tuple(int(config[d]) for d in order), batch_count(op))
    if got is None:
        return None
    out: list[tuple[int, ...]] = [()] * len(op.dims)
    for d, mine in zip(order, got):
        out[d] = mine
    return tuple(out)


_OWNED: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}


def owned_axes(op: Op, configs: np.ndarray, devices: int) -> tuple[np.ndarray, np.ndarray]:
    """Memoised :func:`_owned_axes` (a Problem build asks for one op's configs often)."""
    configs = np.asarray(configs, dtype=np.int64)
    key = (op.dim_names, tuple(d.role for d in op.dims), int(devices), configs.shape, configs.tobytes())
    got = _OWNED.get(key)
    if got is None:
        if len(_OWNED) > 256:
            _OWNED.clear()
        got = _OWNED[key] = _owned_axes(op, configs, devices)
        for array in got:
            array.flags.writeable = False
    return got


def _owned_axes(op: Op, configs: np.ndarray, devices: int) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised :func:`dim_axes`: ``(owns, off)`` with ``owns[k, d, i]`` true when
    dim ``d`` of config ``k`` takes mesh axis ``i``, and ``off[k]`` true when config
    ``k`` is off the mesh (its ``owns`` row is all false).

    Per prime ``q`` of ``p``: the batch and sequence dims take the first axes of size
    ``q`` and the others the last ones, in :func:`mesh_order`, ``e_q(f)`` each, ascending.
    """
    configs = np.asarray(configs, dtype=np.int64)
    sizes = axis_sizes(devices)
    K, n = configs.shape
    over = np.flatnonzero(np.prod(configs, axis=1) > int(devices))
    if len(over):
        raise OptionError(f"op {op.name!r} config {dict(zip(op.dim_names, configs[over[0]].tolist()))} "
                          f"uses {int(np.prod(configs[over[0]]))} devices, more than p={devices}")
    owns = np.zeros((K, n, len(sizes)), dtype=bool)
    total = np.prod(configs, axis=1)
    off = (int(devices) % total) != 0
    order = list(mesh_order(op))
    for q in sorted(set(sizes) - {1}):
        where = [i for i, s in enumerate(sizes) if s == q]
        exp = np.zeros((K, n), dtype=np.int64)
        rest = configs.copy()
        while True:
            hit = (rest % q == 0) & (rest > 1)
            if not hit.any():
                break
            exp += hit
            rest = np.where(hit, rest // q, rest)
        ordered = exp[:, order]
        nb = batch_count(op)  # batch, sequence dims from the first axes of size q, the rest last
        before = np.cumsum(ordered, axis=1) - ordered
        rest_total = ordered[:, nb:].sum(axis=1, keepdims=True)
        lo = np.where(np.arange(n)[None, :] < nb, before,
                      len(where) - rest_total + before - ordered[:, :nb].sum(axis=1, keepdims=True))
        hi = lo + ordered
        t = np.arange(len(where))
        inside = (lo[:, :, None] <= t[None, None, :]) & (t[None, None, :] < hi[:, :, None])
        owns[:, np.asarray(order, dtype=np.int64)[:, None], np.asarray(where)[None, :]] = inside
    owns[off] = False
    return owns, off


def mesh_coords(devices: int) -> np.ndarray:
    """``(p, axes)``: each device's coordinate on each mesh axis."""
    sizes = axis_sizes(devices)
    ids = np.arange(devices, dtype=np.int64)
    strides = np.cumprod((1,) + sizes[::-1])[:-1][::-1]
    return (ids[:, None] // np.asarray(strides)[None, :]) % np.asarray(sizes)[None, :]


def _rank_coords(op: Op, config: Sequence[int]) -> np.ndarray:
    """``(P, ndims)``: coordinates of ranks ``0 .. P-1``, row-major in mesh order."""
    config = [int(f) for f in config]
    strides = np.zeros(len(op.dims), dtype=np.int64)
    step = 1
    for d in reversed(mesh_order(op)):
        strides[d] = step
        step *= config[d]
    ranks = np.arange(math.prod(config), dtype=np.int64)
    return (ranks[:, None] // strides[None, :]) % np.asarray(config, dtype=np.int64)[None, :]


def device_coords(op: Op, config: Sequence[int], devices: int | None = None) -> np.ndarray:
    """``(p, ndims)``: each device's coordinate along each op dim; ``-1`` rows are
    devices idle for this op (only off the mesh). ``devices`` defaults to ``prod(config)``."""
    config = [int(f) for f in config]
    p = math.prod(config) if devices is None else int(devices)
    axes = dim_axes(op, config, p)
    if axes is None:
        out = np.full((p, len(op.dims)), -1, dtype=np.int64)
        ranks = _rank_coords(op, config)
        out[:len(ranks)] = ranks
        return out
    mesh, sizes = mesh_coords(p), axis_sizes(p)
    out = np.zeros((p, len(op.dims)), dtype=np.int64)
    for d, mine in enumerate(axes):
        for i in mine:
            out[:, d] = out[:, d] * sizes[i] + mesh[:, i]
    return out


def active_devices(op: Op, config: Sequence[int], devices: int) -> np.ndarray:
    """The devices that hold (and compute) ``op``: all of them on the mesh, else ranks ``0 .. P-1``."""
    if dim_axes(op, config, devices) is None:
        return np.arange(math.prod(int(f) for f in config), dtype=np.int64)
    return np.arange(int(devices), dtype=np.int64)


def replica_index(op: Op, config: Sequence[int], devices: int) -> np.ndarray:
    """``(p,)``: which replica of the op's tiles each device holds (0 off the mesh)."""
    axes = dim_axes(op, config, devices)
    out = np.zeros(int(devices), dtype=np.int64)
    if axes is None:
        return out
    used = {i for mine in axes for i in mine}
    mesh, sizes = mesh_coords(devices), axis_sizes(devices)
    for i, size in enumerate(sizes):
        if i not in used:
            out = out * size + mesh[:, i]
    return out


def group_members(op: Op, config: Sequence[int], dims: Sequence[int],
                  devices: int | None = None) -> list[np.ndarray]:
    """The groups over ``dims``: devices holding the op whose coordinates (and
    replica) differ only in ``dims``. Groups come in order of their smallest
    device; members ascending. ``devices`` defaults to ``prod(config)``."""
    p = math.prod(int(f) for f in config) if devices is None else int(devices)
    coords = device_coords(op, config, p)
    replica = replica_index(op, config, p)
    others = [d for d in range(len(op.dims)) if d not in set(dims)]
    groups: dict[tuple[int, ...], list[int]] = {}
    for dev in active_devices(op, config, p).tolist():
        key = tuple(coords[dev, others].tolist()) + (int(replica[dev]),)
        groups.setdefault(key, []).append(dev)
    return [np.asarray(g, dtype=np.int64) for g in groups.values()]


def port_blocks(op: Op, port: Port, config: Sequence[int], devices: int | None = None) -> np.ndarray:
    """``(p, rank)``: the block index of each device's tile along each tensor axis
    (``-1`` rows: devices idle for the op).

    An axis split by several dims (a Ravel's flat axis) numbers its blocks in
    row-major order of those dims, the first listed slowest.
    """
    coords = device_coords(op, config, devices)
    out = np.zeros((coords.shape[0], len(port.shape)), dtype=np.int64)
    for a, axis_dims in enumerate(op.port_axes(port)):
        for d in axis_dims:
            out[:, a] = out[:, a] * int(config[d]) + coords[:, d]
    if coords.shape[1]:
        out[coords[:, 0] < 0] = -1
    return out

"""Which devices of a JAX mesh hold which tile: pase's device mapping as mesh axes.

The exported program runs on one device mesh over all ``p`` devices whose axes are
the prime factors of ``p`` in ascending order (``p = 8``: axes ``x0 x1 x2`` of size
2; ``p = 12``: sizes 2, 2, 3), the first axis slowest-varying across device ids.
:func:`assign_axes` gives each split dim of an op the mesh axes whose sizes
multiply to its factor, following pase's device mapping (``pase.work``): an op's
devices form a mesh over its split dims, batch-role dims outermost, then the
other dims in op order, the last fastest. An op split ``P < p`` ways takes the
*last* mesh axes, so the devices whose remaining coordinates are 0 are exactly
pase's ranks ``0 .. P-1`` holding the same tiles; the devices outside hold
replicas (JAX computes them redundantly where pase leaves them idle).

When ``p`` is a prime power (2, 4, 8, 16...) every tile sits on exactly the rank
pase puts it on. For other ``p`` the axes are still a valid mesh of the same tile
shapes but may order ranks differently. An op whose device count does not divide
``p`` cannot be placed on such a mesh and is refused.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

from pase.errors import OptionError
from pase.ir import Op, Port
from pase.work.mapping import mesh_order


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


def assign_axes(op: Op, config: Mapping[str, int],
                axes: Sequence[tuple[str, int]]) -> dict[str, tuple[str, ...]]:
    """Mesh axes for each split dim of ``op`` (``{dim: (axis, ...)}``, slowest first).

    The op takes the last mesh axes whose sizes are the prime factors of its device
    count ``P = prod(config)``; walking its dims in pase's mesh order (batch dims
    first), each dim takes the next of those axes until their sizes multiply to its
    factor. Raises OptionError when ``P`` does not divide the mesh's device count.
    """
    p = math.prod(size for _, size in axes)
    factors = {d.name: int(config.get(d.name, 1)) for d in op.dims}
    devices = math.prod(factors.values())
    if p % devices:
        raise OptionError(f"op {op.name!r} ({op.kind}) is split {devices} ways "
                          f"({ {d: f for d, f in factors.items() if f > 1} }), which does not divide "
                          f"p={p}: a JAX mesh of {p} devices cannot place it")
    need = prime_factors(devices)
    chosen: list[int] = []
    for i in reversed(range(len(axes))):
        if axes[i][1] in need:
            need.remove(axes[i][1])
            chosen.append(i)
    chosen.sort()
    out: dict[str, tuple[str, ...]] = {}
    for d in mesh_order(op):
        name = op.dims[d].name
        want = prime_factors(factors[name])
        mine = []
        for i in list(chosen):
            if axes[i][1] in want:
                want.remove(axes[i][1])
                mine.append(i)
                chosen.remove(i)
        if mine:
            out[name] = tuple(axes[i][0] for i in mine)
    return out


def port_spec(op: Op, port: Port, assigned: Mapping[str, tuple[str, ...]]) -> tuple:
    """A PartitionSpec's entries for ``port``: per axis its mesh axes, or None.

    An axis split by several dims (a Ravel's flat axis) lists their axes in the
    port's order, the first dim's slowest, as ``pase.work.port_blocks`` numbers blocks.
    """
    spec = []
    for names in port.dims:
        entry = tuple(a for n in names for a in assigned.get(n, ()))
        spec.append(entry if entry else None)
    return tuple(spec)

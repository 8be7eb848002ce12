"""Configuration spaces: which split factors each op may use on ``p`` devices.

For a dim of size ``d`` the candidate factors are the divisors ``e`` of ``d`` with
``d / e >= cutoff`` (just 1 when there are none); pinned dims only take 1. A space
built with ``padded_roles`` (the calibrated model's: :data:`PADDED_ROLES`) also splits
a dim of those roles by the divisors ``e`` of ``p`` that do not divide it (with
``d // e >= cutoff``): each device then holds ``ceil(d / e)``, the last one padded, as
Megatron-LM pads a vocabulary its tensor-parallel degree does not divide. Divisors of
``p`` hold every layout (its tp divides the devices) and keep the space small: every
``e`` up to ``p`` would give GPT-2's head 10,392 configs at p = 1,024 instead of 446. The paper's
and the alpha-beta model's spaces have no padded roles. An
op's configurations are all combinations whose product is at most ``p``, in
lexicographic order of the factors (this order breaks ties in every solver).
Contiguous ops (reshapes) keep only configs that split leading dims fully, then
at most one dim partially, and leave the rest whole.

Mesh-shaped spaces (``mesh="16x64"`` or ``(16, 64)``, as GSPMD and Alpa use
them): the ``p`` devices form a mesh whose axis sizes multiply to ``p``. Each
mesh axis is assigned to at most one dim of an op, and a dim's factor is the
product of the axes assigned to it; an axis assigned to no dim replicates the
op over it (a replicated sharding spec). So every config spans the whole mesh:
split over the axes it assigns, replicated over the rest, never confined to a
subset of the devices; its factors' product divides ``p``. The divisor rules
still apply (a factor must divide its dim and leave at least ``cutoff``; pinned
dims take 1; powers of two and the contiguous rule when asked), so the mesh
space is a subset of the divisor space: its optimum is never cheaper, and is
found with far fewer candidates at large ``p``. Configs stay ``{dim: factor}``:
two assignments giving the same factors (``2x2`` mesh, dim split 2 on either
axis) are one config, since every cost model reads factors only and the device
placement is derived from them.
"""
from __future__ import annotations

import copy
import itertools
import math
from typing import Mapping, Sequence

import numpy as np

from pase.errors import GraphError, OptionError, StrategyError, TooLargeError
from pase.ir import Graph, Op

DEFAULT_CUTOFF = 4
# Dim roles Megatron-LM pads to a multiple of the split (its vocabulary-parallel embedding,
# head and loss): the calibrated model prices such splits, so its space holds them.
PADDED_ROLES: tuple[str, ...] = ("vocabulary",)
DEFAULT_MAX_CONFIGS = 100_000
# Device budgets are int64 during enumeration; no config can use more devices than this.
_INT64_SAFE = 2**62


def check_devices(devices: object) -> int:
    if isinstance(devices, bool) or not isinstance(devices, (int, np.integer)) or devices < 1:
        raise OptionError(f"device count must be an integer >= 1, got {devices!r}")
    return int(devices)


def candidate_factors(size: int, devices: int, cutoff: int, powers_of_two: bool = False,
                      padded: bool = False) -> list[int]:
    """Split factors allowed for one dim, ascending (always includes 1).

    Takes ``O(min(devices, sqrt(size)))`` steps, so huge dims or device counts
    cost little. ``padded``: the divisors of ``devices`` too, dividing ``size`` or not (a
    padded dim, module docstring).
    """
    root = math.isqrt(size)
    if devices <= root:
        divisors = [e for e in range(1, devices + 1) if size % e == 0]
    else:
        small = [e for e in range(1, root + 1) if size % e == 0]
        divisors = sorted(set(small) | {size // e for e in small})
    if padded:
        divisors = sorted(set(divisors) | set(_divisors(devices)))
    found = [e for e in divisors if e <= devices and size // e >= cutoff
             and (not powers_of_two or e & (e - 1) == 0)]
    return found or [1]


def _divisors(n: int) -> list[int]:
    """The divisors of ``n`` (``O(sqrt(n))`` steps)."""
    small = [e for e in range(1, math.isqrt(n) + 1) if n % e == 0]
    return sorted(set(small) | {n // e for e in small})


def _choices(op: Op, devices: int, cutoff: int, powers_of_two: bool,
             padded_roles: Sequence[str] = ()) -> list[list[int]]:
    return [[1] if d.name in op.pinned else
            candidate_factors(d.size, devices, cutoff, powers_of_two, d.role in padded_roles)
            for d in op.dims]


def _start_budget(choices: list[list[int]], devices: int) -> int:
    """The device budget, clamped to what the largest config can use (so it fits int64)."""
    return min(devices, math.prod(c[-1] for c in choices), _INT64_SAFE)


def count_configs(op: Op, devices: int, cutoff: int = DEFAULT_CUTOFF,
                  powers_of_two: bool = False, padded_roles: Sequence[str] = ()) -> int:
    """How many configs :func:`enumerate_configs` returns, without listing them.

    Counts per remaining device budget (``p // product so far``), which takes
    few distinct values, so this is fast even when the count is astronomical.
    """
    choices = _choices(op, devices, cutoff, powers_of_two, padded_roles)
    # state: (budget left, a dim was split partially) -> number of prefixes
    states: dict[tuple[int, bool], int] = {(_start_budget(choices, devices), False): 1}
    for i, dim_choices in enumerate(choices):
        size = op.dims[i].size
        nxt: dict[tuple[int, bool], int] = {}
        for (budget, closed), n in states.items():
            for f in dim_choices:
                if f > budget:
                    break  # factors are ascending
                if op.contiguous and closed and f != 1:
                    break  # contiguous: nothing split after a partial split
                key = (budget // f, closed or f != size)
                nxt[key] = nxt.get(key, 0) + n
        states = nxt
    return sum(states.values())


def enumerate_configs(op: Op, devices: int, cutoff: int = DEFAULT_CUTOFF,
                      powers_of_two: bool = False, padded_roles: Sequence[str] = ()) -> np.ndarray:
    """All configs of ``op`` as an ``(K, len(op.dims))`` int64 array, in lexicographic order.

    Built dim by dim with numpy: each prefix is extended by every factor that
    still fits its device budget. Call :func:`count_configs` first to refuse
    huge spaces before anything is allocated.
    """
    choices = _choices(op, devices, cutoff, powers_of_two, padded_roles)
    rows = np.zeros((1, 0), dtype=np.int64)
    budget = np.array([_start_budget(choices, devices)], dtype=np.int64)
    closed = np.zeros(1, dtype=bool)  # contiguous ops: a dim was split partially
    for i, dim_choices in enumerate(choices):
        f = np.asarray(dim_choices, dtype=np.int64)
        ok = f[None, :] <= budget[:, None]
        if op.contiguous:
            ok &= ~closed[:, None] | (f[None, :] == 1)
        r, j = np.nonzero(ok)  # row-major: each prefix, then its factors ascending
        rows = np.concatenate([rows[r], f[j, None]], axis=1)
        budget = budget[r] // f[j]
        closed = closed[r] | (f[j] != op.dims[i].size)
    return rows


def parse_mesh(mesh: object, devices: int) -> tuple[int, ...]:
    """Mesh axis sizes from ``"16x64"`` or ``(16, 64)``; their product must be ``devices``.

    Examples:
        >>> parse_mesh("4x2", 8), parse_mesh((2, 2, 2), 8)
        ((4, 2), (2, 2, 2))
    """
    if isinstance(mesh, str):
        parts = mesh.strip().lower().split("x")
        if not all(p.strip().isdigit() for p in parts):
            raise OptionError(f"mesh must be axis sizes joined by 'x' (e.g. '16x64'), got {mesh!r}")
        axes = tuple(int(p) for p in parts)
    elif isinstance(mesh, Sequence) and mesh and all(
            isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in mesh):
        axes = tuple(int(a) for a in mesh)
    else:
        raise OptionError(f"mesh must be text such as '16x64' or a sequence of axis sizes, "
                          f"got {mesh!r}")
    if any(a < 1 for a in axes):
        raise OptionError(f"mesh axis sizes must be integers >= 1, got {mesh!r}")
    if math.prod(axes) != devices:
        raise OptionError(f"mesh {'x'.join(map(str, axes))} has {math.prod(axes)} devices, but "
                          f"p={devices}; the axis sizes must multiply to p")
    return axes


def enumerate_mesh_configs(op: Op, mesh: tuple[int, ...], cutoff: int = DEFAULT_CUTOFF,
                           powers_of_two: bool = False,
                           padded_roles: Sequence[str] = ()) -> np.ndarray:
    """The configs of ``op`` on a device mesh, as :func:`enumerate_configs` returns them.

    Each mesh axis goes to at most one dim; a dim's factor is the product of
    its axes and must be one :func:`candidate_factors` allows. Axes of equal
    size are interchangeable, so the axes left are tracked as a multiset.
    """
    devices = math.prod(mesh)
    sizes = sorted(set(mesh))
    allowed = [set(c) for c in _choices(op, devices, cutoff, powers_of_two, padded_roles)]
    # the axes left, as a count per distinct size
    start = tuple(mesh.count(s) for s in sizes)
    subsets: dict[tuple[int, ...], list[tuple[int, tuple[int, ...]]]] = {}

    def takes(left: tuple[int, ...]) -> list[tuple[int, tuple[int, ...]]]:
        """(factor, axes left after) for every sub-multiset of ``left``."""
        if left not in subsets:
            out = []
            for used in itertools.product(*(range(n + 1) for n in left)):
                factor = math.prod(s ** k for s, k in zip(sizes, used))
                out.append((factor, tuple(n - k for n, k in zip(left, used))))
            subsets[left] = out
        return subsets[left]

    states: set[tuple[tuple[int, ...], tuple[int, ...]]] = {((), start)}
    for i in range(len(op.dims)):
        nxt = set()
        for prefix, left in states:
            for factor, rest in takes(left):
                if factor in allowed[i]:
                    nxt.add((prefix + (factor,), rest))
        states = nxt
    rows = sorted({prefix for prefix, _ in states})
    if op.contiguous:
        rows = [r for r in rows if _contiguous(r, op.shape)]
    return np.array(rows, dtype=np.int64).reshape(len(rows), len(op.dims))


def _contiguous(row: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Leading dims split fully, then at most one partially, then whole."""
    closed = False
    for f, size in zip(row, shape):
        if closed and f != 1:
            return False
        closed = closed or f != size
    return True


class ConfigSpace:
    """The candidate configs of every op of a graph on ``devices`` devices.

    Args:
        graph: the graph.
        devices: number of devices ``p`` (>= 1).
        cutoff: smallest per-device extent of a split dim; default the graph's
            ``attrs["cutoff"]`` or 4.
        powers_of_two: only allow power-of-two factors.
        max_configs: refuse an op with more configs than this.
        mesh: axis sizes of a device mesh (``"16x64"`` or ``(16, 64)``, product
            ``devices``): a mesh-shaped space (module docstring) instead of the
            divisor products up to ``devices``. None: the paper's space.
        padded_roles: dim roles split by factors that need not divide the dim (module
            docstring; the calibrated model's :data:`PADDED_ROLES`). Default none.
    """

    def __init__(self, graph: Graph, devices: int, cutoff: int | None = None,
                 powers_of_two: bool = False, max_configs: int = DEFAULT_MAX_CONFIGS,
                 mesh: str | Sequence[int] | None = None,
                 padded_roles: Sequence[str] = ()):
        self.graph = graph
        self.devices = check_devices(devices)
        cutoff = graph.attrs.get("cutoff", DEFAULT_CUTOFF) if cutoff is None else cutoff
        if not isinstance(cutoff, (int, np.integer)) or cutoff < 1:
            raise OptionError(f"cutoff must be an integer >= 1, got {cutoff!r}")
        self.cutoff = int(cutoff)
        self.powers_of_two = powers_of_two
        if isinstance(max_configs, bool) or not isinstance(max_configs, (int, np.integer)) \
                or max_configs < 1:
            raise OptionError(f"max_configs must be an integer >= 1, got {max_configs!r}")
        self.mesh = None if mesh is None else parse_mesh(mesh, self.devices)
        if isinstance(padded_roles, str) or not all(isinstance(r, str) for r in padded_roles):
            raise OptionError(f"padded_roles must be a sequence of dim roles, got {padded_roles!r}")
        self.padded_roles = tuple(padded_roles)
        self.configs: list[np.ndarray] = []
        # Configs depend on an op only through its dim sizes, pinned dims and
        # contiguity: ops alike there share one read-only array, enumerated once.
        enumerated: dict[tuple, np.ndarray] = {}
        for op in graph.ops:
            key = (tuple((d.size, d.name in op.pinned, d.role in self.padded_roles)
                         for d in op.dims), op.contiguous)
            if key in enumerated:
                self.configs.append(enumerated[key])
                continue
            if self.mesh is not None:
                configs = enumerate_mesh_configs(op, self.mesh, self.cutoff, powers_of_two,
                                                 self.padded_roles)
                count = len(configs)
            else:
                count = count_configs(op, self.devices, self.cutoff, powers_of_two,
                                      self.padded_roles)
            if count > max_configs:
                raise TooLargeError(
                    f"op {op.name!r} ({op.kind}, dims {dict(zip(op.dim_names, op.shape))}) has "
                    f"{count} configs on {self.devices} devices, over max_configs={max_configs}; "
                    f"use fewer devices, powers_of_two=True, a larger cutoff, or raise max_configs")
            if self.mesh is None:
                configs = enumerate_configs(op, self.devices, self.cutoff, powers_of_two,
                                            self.padded_roles)
            configs.flags.writeable = False
            self.configs.append(enumerated.setdefault(key, configs))
        self._lookup: list[dict[tuple[int, ...], int]] | None = None

    def choice_of(self, configs: Mapping[str, Mapping[str, int]]) -> tuple[int, ...]:
        """Candidate indices for a ``{op: {dim: factor}}`` mapping (unnamed ops unsplit);
        a StrategyError names an unknown op, dim or config."""
        for op in configs:
            self.index_of(op, configs[op])
        return tuple(self.index_of(op.name, configs.get(op.name, {})) for op in self.graph.ops)

    def restricted(self, choice: Sequence[int]) -> "ConfigSpace":
        """This space with op ``i``'s one candidate ``choice[i]``: a Problem built on it
        prices one plan at what a Problem of the whole space charges that plan (a price
        reads each op's and edge's own configs, never the other candidates), without the
        cost of every other candidate. Ops of one shared array and choice share a row."""
        out = copy.copy(self)
        rows: dict[tuple[int, int], np.ndarray] = {}
        out.configs = []
        for c, k in zip(self.configs, choice):
            if (id(c), int(k)) not in rows:
                row = c[int(k):int(k) + 1]
                row.flags.writeable = False
                rows[id(c), int(k)] = row
            out.configs.append(rows[id(c), int(k)])
        out._lookup = None
        return out

    @property
    def sizes(self) -> list[int]:
        return [len(c) for c in self.configs]

    def config(self, op_index: int, choice: int) -> dict[str, int]:
        """The config ``choice`` of op ``op_index`` as ``{dim name: factor}``."""
        op = self.graph.ops[op_index]
        return {n: int(f) for n, f in zip(op.dim_names, self.configs[op_index][choice])}

    def index_of(self, op_name: str, factors: Mapping[str, int]) -> int:
        """The candidate index of a ``{dim: factor}`` config (unlisted dims = 1).

        Raises StrategyError naming the op and dim when the config is not allowed.
        """
        try:
            i = self.graph.index(op_name)
        except GraphError:
            raise StrategyError(f"strategy names unknown op {op_name!r}") from None
        op = self.graph.ops[i]
        for dim in factors:
            if dim not in op.dim_names:
                raise StrategyError(f"strategy for op {op_name!r} names unknown dim {dim!r}; "
                                    f"dims: {', '.join(op.dim_names)}")
        key = tuple(int(factors.get(n, 1)) for n in op.dim_names)
        if self._lookup is None:  # one table per shared configs array
            tables: dict[int, dict[tuple[int, ...], int]] = {}
            for c in self.configs:
                if id(c) not in tables:
                    tables[id(c)] = {tuple(int(x) for x in row): j for j, row in enumerate(c)}
            self._lookup = [tables[id(c)] for c in self.configs]
        if key in self._lookup[i]:
            return self._lookup[i][key]
        product = math.prod(key)
        if product > self.devices:
            raise StrategyError(f"strategy splits op {op_name!r} {product} ways "
                                f"({dict(zip(op.dim_names, key))}), more than p={self.devices}")
        for d, f in zip(op.dims, key):
            n, size = d.name, d.size
            if f < 1 or (size % f != 0 and d.role not in self.padded_roles) or \
                    (n in op.pinned and f != 1):
                why = "is pinned" if n in op.pinned else f"has size {size}, which {f} does not divide"
                if d.role in PADDED_ROLES and n not in op.pinned:
                    why += " (a split that pads it is the calibrated model's: give --cluster)"
                raise StrategyError(f"strategy splits dim {n!r} of op {op_name!r} {f} ways, "
                                    f"but that dim {why}")
        raise StrategyError(f"config {dict(zip(op.dim_names, key))} of op {op_name!r} is not a "
                            f"candidate (cutoff={self.cutoff}, powers_of_two={self.powers_of_two}"
                            f"{', contiguous reshape rule' if op.contiguous else ''}"
                            f"{'' if self.mesh is None else ', mesh ' + 'x'.join(map(str, self.mesh))})")

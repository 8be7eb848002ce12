"""Configuration spaces: which split factors each op may use on ``p`` devices.

For a dim of size ``d`` the candidate factors are the divisors ``e`` of ``d`` with
``d / e >= cutoff`` (just 1 when there are none); pinned dims only take 1. An
op's configurations are all combinations whose product is at most ``p``, in
lexicographic order of the factors (this order breaks ties in every solver).
Contiguous ops (reshapes) keep only configs that split leading dims fully, then
at most one dim partially, and leave the rest whole.
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from pase.errors import GraphError, OptionError, StrategyError, TooLargeError
from pase.ir import Graph, Op

DEFAULT_CUTOFF = 4
DEFAULT_MAX_CONFIGS = 100_000
# Device budgets are int64 during enumeration; no config can use more devices than this.
_INT64_SAFE = 2**62


def check_devices(devices: object) -> int:
    if isinstance(devices, bool) or not isinstance(devices, (int, np.integer)) or devices < 1:
        raise OptionError(f"device count must be an integer >= 1, got {devices!r}")
    return int(devices)


def candidate_factors(size: int, devices: int, cutoff: int, powers_of_two: bool = False) -> list[int]:
    """Split factors allowed for one dim, ascending (always includes 1).

    Takes ``O(min(devices, sqrt(size)))`` steps, so huge dims or device counts
    cost little.
    """
    root = math.isqrt(size)
    if devices <= root:
        divisors = [e for e in range(1, devices + 1) if size % e == 0]
    else:
        small = [e for e in range(1, root + 1) if size % e == 0]
        divisors = sorted(set(small) | {size // e for e in small})
    found = [e for e in divisors if e <= devices and size // e >= cutoff
             and (not powers_of_two or e & (e - 1) == 0)]
    return found or [1]


def _choices(op: Op, devices: int, cutoff: int, powers_of_two: bool) -> list[list[int]]:
    return [[1] if d.name in op.pinned else candidate_factors(d.size, devices, cutoff, powers_of_two)
            for d in op.dims]


def _start_budget(choices: list[list[int]], devices: int) -> int:
    """The device budget, clamped to what the largest config can use (so it fits int64)."""
    return min(devices, math.prod(c[-1] for c in choices), _INT64_SAFE)


def count_configs(op: Op, devices: int, cutoff: int = DEFAULT_CUTOFF,
                  powers_of_two: bool = False) -> int:
    """How many configs :func:`enumerate_configs` returns, without listing them.

    Counts per remaining device budget (``p // product so far``), which takes
    few distinct values, so this is fast even when the count is astronomical.
    """
    choices = _choices(op, devices, cutoff, powers_of_two)
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
                      powers_of_two: bool = False) -> np.ndarray:
    """All configs of ``op`` as an ``(K, len(op.dims))`` int64 array, in lexicographic order.

    Built dim by dim with numpy: each prefix is extended by every factor that
    still fits its device budget. Call :func:`count_configs` first to refuse
    huge spaces before anything is allocated.
    """
    choices = _choices(op, devices, cutoff, powers_of_two)
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


class ConfigSpace:
    """The candidate configs of every op of a graph on ``devices`` devices.

    Args:
        graph: the graph.
        devices: number of devices ``p`` (>= 1).
        cutoff: smallest per-device extent of a split dim; default the graph's
            ``attrs["cutoff"]`` or 4.
        powers_of_two: only allow power-of-two factors.
        max_configs: refuse an op with more configs than this.
    """

    def __init__(self, graph: Graph, devices: int, cutoff: int | None = None,
                 powers_of_two: bool = False, max_configs: int = DEFAULT_MAX_CONFIGS):
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
        self.configs: list[np.ndarray] = []
        # Configs depend on an op only through its dim sizes, pinned dims and
        # contiguity: ops alike there share one read-only array, enumerated once.
        enumerated: dict[tuple, np.ndarray] = {}
        for op in graph.ops:
            key = (tuple((d.size, d.name in op.pinned) for d in op.dims), op.contiguous)
            if key in enumerated:
                self.configs.append(enumerated[key])
                continue
            count = count_configs(op, self.devices, self.cutoff, powers_of_two)
            if count > max_configs:
                raise TooLargeError(
                    f"op {op.name!r} ({op.kind}, dims {dict(zip(op.dim_names, op.shape))}) has "
                    f"{count} configs on {self.devices} devices, over max_configs={max_configs}; "
                    f"use fewer devices, powers_of_two=True, a larger cutoff, or raise max_configs")
            configs = enumerate_configs(op, self.devices, self.cutoff, powers_of_two)
            configs.flags.writeable = False
            self.configs.append(enumerated.setdefault(key, configs))
        self._lookup: list[dict[tuple[int, ...], int]] | None = None

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
        if self._lookup is None:
            self._lookup = [{tuple(int(x) for x in row): j for j, row in enumerate(c)}
                            for c in self.configs]
        if key in self._lookup[i]:
            return self._lookup[i][key]
        product = math.prod(key)
        if product > self.devices:
            raise StrategyError(f"strategy splits op {op_name!r} {product} ways "
                                f"({dict(zip(op.dim_names, key))}), more than p={self.devices}")
        for n, size, f in zip(op.dim_names, op.shape, key):
            if f < 1 or size % f != 0 or (n in op.pinned and f != 1):
                why = "is pinned" if n in op.pinned else f"has size {size}"
                raise StrategyError(f"strategy splits dim {n!r} of op {op_name!r} {f} ways, "
                                    f"but that dim {why}")
        raise StrategyError(f"config {dict(zip(op.dim_names, key))} of op {op_name!r} is not a "
                            f"candidate (cutoff={self.cutoff}, powers_of_two={self.powers_of_two}"
                            f"{', contiguous reshape rule' if op.contiguous else ''})")

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


def check_devices(devices: object) -> int:
    if isinstance(devices, bool) or not isinstance(devices, (int, np.integer)) or devices < 1:
        raise OptionError(f"device count must be an integer >= 1, got {devices!r}")
    return int(devices)


def candidate_factors(size: int, devices: int, cutoff: int, powers_of_two: bool = False) -> list[int]:
    """Split factors allowed for one dim (always includes 1)."""
    found = [e for e in range(1, min(size, devices) + 1)
             if size % e == 0 and size // e >= cutoff
             and (not powers_of_two or e & (e - 1) == 0)]
    return found or [1]


def enumerate_configs(op: Op, devices: int, cutoff: int = DEFAULT_CUTOFF,
                      powers_of_two: bool = False) -> np.ndarray:
    """All configs of ``op`` as an ``(K, len(op.dims))`` int64 array."""
    choices = [[1] if d.name in op.pinned else candidate_factors(d.size, devices, cutoff, powers_of_two)
               for d in op.dims]
    rows: list[tuple[int, ...]] = []

    def extend(prefix: tuple[int, ...], budget: int) -> None:
        i = len(prefix)
        if i == len(choices):
            rows.append(prefix)
            return
        for f in choices[i]:
            if f > budget:
                break  # factors are ascending
            extend(prefix + (f,), budget // f)

    extend((), devices)
    configs = np.array(rows, dtype=np.int64).reshape(len(rows), len(op.dims))
    if op.contiguous:
        configs = configs[[_is_contiguous(c, op.shape) for c in configs]]
    return configs


def _is_contiguous(config: np.ndarray, shape: tuple[int, ...]) -> bool:
    partial = next((i for i, (f, s) in enumerate(zip(config, shape)) if f != s), len(shape))
    return bool(np.all(config[partial + 1:] == 1))


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
        self.configs: list[np.ndarray] = []
        for op in graph.ops:
            configs = enumerate_configs(op, self.devices, self.cutoff, powers_of_two)
            if len(configs) > max_configs:
                raise TooLargeError(
                    f"op {op.name!r} ({op.kind}, dims {dict(zip(op.dim_names, op.shape))}) has "
                    f"{len(configs)} configs on {self.devices} devices, over max_configs={max_configs}; "
                    f"use powers_of_two=True, a larger cutoff, or raise max_configs")
            self.configs.append(configs)
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

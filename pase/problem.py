"""The contract between cost models and solvers.

A :class:`Problem` is a pairwise min-sum problem: choose one candidate per vertex
to minimise the sum of vertex costs plus, for each edge, the entry of its cost
matrix at the two choices. Optionally each candidate has a memory footprint and
a cap bounds the total per device. Solvers see only this: plain numpy arrays
indexed by vertex number, never a graph or a cost model.

A :class:`Solution` is a solver's answer: a choice per vertex, its cost, a
:class:`Status`, a lower bound where the solver has one, wall time and stats.
"""
from __future__ import annotations

import enum
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from pase.array_memo import kept
from pase.errors import ProblemError

# Relative tolerance when a solver's reported cost is compared with a re-evaluation;
# sums of ~1e13-sized floats in different orders differ in the last few bits.
COST_RTOL = 1e-9
# The largest finite float64: no strategy's total cost or memory may pass it.
FLOAT_MAX = float(np.finfo(np.float64).max)


@dataclass(frozen=True)
class Candidates:
    """What a vertex's candidates are, for solvers that reason about dims (baselines).

    ``configs[i]`` holds the split factor of each dim for candidate ``i``;
    ``roles`` are the IR roles (batch, parameter, heads...). Exact solvers ignore it.
    """

    kind: str
    dims: tuple[str, ...]
    roles: tuple[str, ...]
    configs: np.ndarray


@dataclass(frozen=True, eq=False)  # eq would compare numpy arrays ambiguously
class VariantMap:
    """What a vertex's candidates are when they carry per-op variants (ZeRO, recompute).

    Candidate ``i`` is config ``config[i]`` of the configuration space run at ZeRO
    stage ``zero[i]``, with recomputation iff ``recompute[i]``. Set by cost models
    that search variants (:mod:`pase.costing.variants`); solvers ignore it.
    """

    config: np.ndarray
    zero: np.ndarray
    recompute: np.ndarray

    def variant(self, i: int) -> tuple[int, bool]:
        """``(zero stage, recompute)`` of candidate ``i``."""
        return int(self.zero[i]), bool(self.recompute[i])


class Problem:
    """Per-vertex cost vectors and per-edge cost matrices.

    Args:
        vertex_costs: one 1-D array per vertex, ``vertex_costs[v][i]`` = cost of
            candidate ``i`` at vertex ``v``.
        edges: ``(u, v)`` vertex-index pairs.
        edge_costs: one ``(K_u, K_v)`` matrix per edge.
        names: vertex names for messages (default ``v0, v1, ...``).
        memory: optional per-vertex memory vectors (bytes per device).
        memory_cap: optional cap on the summed memory of the chosen candidates. A
            NaN cap is refused (ProblemError); ``+inf`` constrains nothing and is
            stored as None (uncapped). Under a cap, a candidate with ``+inf``
            memory is forbidden.
        unit: what the costs measure (``"FLOP"``, ``"s"``...).
        candidates: optional per-vertex :class:`Candidates` (set by cost models).
        devices: the device count the candidates were enumerated for, if known.
        variants: optional per-vertex :class:`VariantMap` (a candidate is a config
            with a variant); None when candidate ``i`` is simply config ``i``.

    Edges between the same two vertices (in either direction) are merged into one
    matrix by summing, so every solver sees simple undirected pairs with ``u < v``.

    Examples:
        >>> import numpy as np
        >>> p = Problem([np.array([1.0, 5.0]), np.array([2.0, 0.0])], [(0, 1)],
        ...             [np.array([[0.0, 9.0], [0.0, 0.0]])])
        >>> p.evaluate([0, 0]), p.evaluate([1, 1]), p.evaluate([0, 1])
        (3.0, 5.0, 10.0)
    """

    def __init__(
        self,
        vertex_costs: Sequence[np.ndarray],
        edges: Sequence[tuple[int, int]],
        edge_costs: Sequence[np.ndarray],
        names: Sequence[str] | None = None,
        memory: Sequence[np.ndarray] | None = None,
        memory_cap: float | None = None,
        unit: str = "FLOP",
        candidates: Sequence[Candidates] | None = None,
        devices: int | None = None,
        variants: Sequence[VariantMap] | None = None,
    ):
        self.vertex_costs = [_as_vector(c, f"vertex_costs[{i}]") for i, c in enumerate(vertex_costs)]
        n = len(self.vertex_costs)
        self.names = list(names) if names is not None else [f"v{i}" for i in range(n)]
        if len(self.names) != n:
            raise ProblemError(f"{len(self.names)} names for {n} vertices")
        if len(edges) != len(edge_costs):
            raise ProblemError(f"{len(edges)} edges but {len(edge_costs)} edge cost matrices")
        self.edges, self.edge_costs = self._merge_edges(edges, edge_costs)
        self.memory = None if memory is None else [
            _as_vector(m, f"memory[{i}]") for i, m in enumerate(memory)]
        if self.memory is not None:
            for v, m in enumerate(self.memory):
                if m.shape != self.vertex_costs[v].shape:
                    raise ProblemError(f"memory[{v}] has {m.size} entries for "
                                       f"{self.vertex_costs[v].size} candidates")
        if memory_cap is not None and self.memory is None:
            raise ProblemError("memory_cap given without per-vertex memory vectors")
        self.memory_cap = _as_cap(memory_cap)
        self._check_sums()
        self.unit = unit
        self.devices = devices
        self.candidates = None if candidates is None else list(candidates)
        if self.candidates is not None:
            if len(self.candidates) != n:
                raise ProblemError(f"{len(self.candidates)} candidate sets for {n} vertices")
            for v, c in enumerate(self.candidates):
                if len(c.configs) != self.vertex_costs[v].size:
                    raise ProblemError(f"vertex {v} ({self.names[v]}) lists {len(c.configs)} "
                                       f"configs for {self.vertex_costs[v].size} costs")
        self.variants = None if variants is None else list(variants)
        if self.variants is not None:
            if len(self.variants) != n:
                raise ProblemError(f"{len(self.variants)} variant maps for {n} vertices")
            for v, vm in enumerate(self.variants):
                if not len(vm.config) == len(vm.zero) == len(vm.recompute) == self.vertex_costs[v].size:
                    raise ProblemError(f"vertex {v} ({self.names[v]}) maps {len(vm.config)} "
                                       f"variants for {self.vertex_costs[v].size} costs")

    def _check_sums(self) -> None:
        """Refuse costs (and memory) that overflow float64 once a strategy adds them up.

        Each entry is finite, but a strategy paying the largest of every vertex and edge
        must stay below ``FLOAT_MAX`` too: past it totals turn into +inf (a solver would
        call every strategy infeasible) and ``math.fsum`` raises OverflowError. (+inf
        entries forbid candidates; a cost model's Problem refuses them: :meth:`check_finite`.)
        """
        self._check_terms("cost", list(zip(self.names, self.vertex_costs))
                          + [(f"{self.names[u]} -> {self.names[v]}", m)
                             for (u, v), m in zip(self.edges, self.edge_costs)])
        if self.memory is not None:
            self._check_terms("memory", list(zip(self.names, self.memory)))

    def _check_terms(self, what: str, terms: list[tuple[str, np.ndarray]]) -> None:
        worst, seen = 0.0, {}
        for label, a in terms:
            kind = "edge" if " -> " in label else "vertex"
            if id(a) not in seen:
                seen[id(a)] = _largest_finite(a)
            largest = seen[id(a)]
            if largest is None:
                continue  # all +inf: forbidden, so the Problem is infeasible, not overflowing
            worst += largest
            if worst > FLOAT_MAX:
                plural = "costs" if what == "cost" else "memory footprints"
                raise ProblemError(
                    f"the {plural} overflow float64 when a strategy adds them up: with the largest "
                    f"of {kind} {label!r} ({largest:.3g}) the largest possible total passes "
                    f"{FLOAT_MAX:.3g}; rescale them to a larger unit")

    def check_finite(self, where: str) -> None:
        """Refuse any +inf cost or memory: what a cost model builds is finite unless an
        attribute or a size overflowed float64 (``pw`` of 1e308); names the op."""
        seen: set[int] = set()  # a shared (read-only) array is checked once

        def finite(a: np.ndarray) -> bool:
            if id(a) in seen:
                return True
            seen.add(id(a))
            return bool(np.isfinite(a).all())

        for label, arrays in (("cost", self.vertex_costs), ("memory", self.memory or [])):
            for v, a in enumerate(arrays):
                if not finite(a):
                    raise ProblemError(f"{where}: op {self.names[v]!r} has an infinite {label} "
                                       f"(its attributes or sizes overflow float64)")
        for (u, v), m in zip(self.edges, self.edge_costs):
            if not finite(m):
                raise ProblemError(f"{where}: the edge {self.names[u]!r} -> {self.names[v]!r} "
                                   f"has an infinite cost (the tensor sizes overflow float64)")

    def _merge_edges(self, edges, edge_costs):
        n = len(self.vertex_costs)
        merged: dict[tuple[int, int], np.ndarray] = {}
        checked: dict[int, np.ndarray] = {}  # a matrix shared by many edges is scanned once
        for e, ((u, v), m) in enumerate(zip(edges, edge_costs)):
            u, v = int(u), int(v)
            if not (0 <= u < n and 0 <= v < n):
                raise ProblemError(f"edge {e} ({u}, {v}) names a vertex outside 0..{n - 1}")
            if u == v:
                raise ProblemError(f"edge {e} is a self-loop on vertex {u} ({self.names[u]})")
            m = np.asarray(m, dtype=np.float64)
            want = (self.vertex_costs[u].size, self.vertex_costs[v].size)
            if m.shape != want:
                raise ProblemError(f"edge {e} ({self.names[u]} -> {self.names[v]}) has a "
                                   f"{m.shape} matrix; expected {want}")
            if id(m) not in checked and kept(_BAD, m, None, lambda: bool(
                    np.isnan(m).any() or (m == -np.inf).any())):  # noqa: B023 (called here)
                raise ProblemError(f"edge {e} ({self.names[u]} -> {self.names[v]}) has NaN or -inf")
            checked[id(m)] = m
            if u > v:
                u, v, m = v, u, m.T if m.flags.writeable else _kept_transpose(m)
            merged[(u, v)] = merged[(u, v)] + m if (u, v) in merged else m
        keys = sorted(merged)
        return keys, [np.ascontiguousarray(merged[k]) for k in keys]

    # -- sizes -------------------------------------------------------------
    @property
    def num_vertices(self) -> int:
        return len(self.vertex_costs)

    @property
    def sizes(self) -> np.ndarray:
        """Number of candidates per vertex."""
        return np.array([c.size for c in self.vertex_costs], dtype=np.int64)

    def num_strategies(self) -> int:
        """Product of candidate counts (a Python int: it overflows int64 quickly)."""
        total = 1
        for k in self.sizes:
            total *= int(k)
        return total

    def edge_matrix(self, u: int, v: int) -> np.ndarray:
        """The cost matrix of edge ``{u, v}`` oriented ``(K_u, K_v)``, whichever index is lower.

        Raises ProblemError when ``u`` and ``v`` are not adjacent.
        """
        index = self._edge_index()
        if (u, v) in index:
            return self.edge_costs[index[(u, v)]]
        if (v, u) in index:
            return self._transposed(self.edge_costs[index[(v, u)]])
        raise ProblemError(f"vertices {u} and {v} share no edge")

    def _transposed(self, m: np.ndarray) -> np.ndarray:
        """``m.T``; for a matrix several edges share (repeated layers), a C-ordered copy made
        once: the dp copies each base it sums into, and a copy of a transposed view walks it
        a whole row apart, 2-4x slower, on every use (each dual step of the decomposition).
        At most one copy per shared matrix, so at most the Problem's own edge bytes. (What
        solvers derive from a read-only matrix is kept by its owner, views included:
        :mod:`pase.array_memo`.)"""
        shared = self.__dict__.get("_shared_ids")
        if shared is None:
            counts = Counter(id(a) for a in self.edge_costs)
            shared = self.__dict__["_shared_ids"] = {i for i, c in counts.items() if c > 1}
        if id(m) not in shared:
            return m.T
        cache = self.__dict__.setdefault("_transposes", {})
        held = cache.get(id(m))
        if held is None or held[0] is not m:  # the matrix is kept, so its id stays its own
            t = np.ascontiguousarray(m.T)
            t.flags.writeable = False
            held = cache[id(m)] = (m, t)
        return held[1]

    def _edge_index(self) -> dict[tuple[int, int], int]:
        cached = self.__dict__.get("_edges_by_pair")
        if cached is None:
            cached = self.__dict__["_edges_by_pair"] = {e: i for i, e in enumerate(self.edges)}
        return cached

    def neighbors(self) -> list[list[int]]:
        """Each vertex's neighbours, in edge order."""
        return [[w for w, _ in self.incident(v)] for v in range(self.num_vertices)]

    def incident(self, v: int) -> list[tuple[int, np.ndarray]]:
        """``(w, matrix)`` per edge of ``v``, the matrix oriented ``(K_v, K_w)``.

        So ``matrix[c, choice[w]]`` is the edge's cost with ``v`` at candidate ``c``.

        Examples:
            >>> p = Problem([np.zeros(2), np.zeros(3)], [(0, 1)], [np.ones((2, 3))])
            >>> [(w, m.shape) for w, m in p.incident(1)]
            [(0, (3, 2))]
        """
        cached = self.__dict__.get("_incident")
        if cached is None:
            cached = [[] for _ in range(self.num_vertices)]
            for (a, b), m in zip(self.edges, self.edge_costs):
                cached[a].append((b, m))
                cached[b].append((a, m.T))
            self.__dict__["_incident"] = cached
        return cached[v]

    # -- evaluation ----------------------------------------------------------
    def check_choice(self, choice: Sequence[int]) -> np.ndarray:
        """``choice`` as an int64 array, one candidate index per vertex; else ProblemError.

        Entries must be integers (Python or numpy; an integral float such as ``2.0``
        from JSON is accepted): ``0.9`` or ``True`` is refused, not truncated.

        Examples:
            >>> p = Problem([np.zeros(2), np.zeros(2)], [], [])
            >>> p.check_choice([np.int64(1), 0.0]).tolist()
            [1, 0]
            >>> p.check_choice([0.9, 1])
            Traceback (most recent call last):
            ...
            pase.errors.ProblemError: choice for vertex 0 (v0) must be an integer index, got 0.9
        """
        n = self.num_vertices
        if isinstance(choice, np.ndarray) and choice.dtype.kind in "iu":
            c = choice.astype(np.int64, copy=False)  # the solvers' fast path
            if c.shape != (n,):
                raise ProblemError(f"a choice needs one index per vertex ({n}), got shape {c.shape}")
        else:
            if isinstance(choice, (str, bytes, dict)) or not hasattr(choice, "__iter__"):
                raise ProblemError(f"a choice is a list of {n} candidate indices, one per vertex; "
                                   f"got {type(choice).__name__} {choice!r:.60}")
            items = list(choice)
            if len(items) != n:
                raise ProblemError(f"a choice needs one index per vertex ({n}), got {len(items)}")
            values = []
            for v, x in enumerate(items):
                index = _as_index(x)
                if index is None:
                    raise ProblemError(f"choice for vertex {v} ({self.names[v]}) must be an "
                                       f"integer index, got {x!r:.60}")
                if not 0 <= index < self.vertex_costs[v].size:
                    raise ProblemError(f"choice {index} for vertex {v} ({self.names[v]}) is "
                                       f"outside 0..{self.vertex_costs[v].size - 1}")
                values.append(index)
            c = np.array(values, dtype=np.int64).reshape(n)
        bad = np.flatnonzero((c < 0) | (c >= self.sizes))
        if bad.size:
            v = int(bad[0])
            raise ProblemError(f"choice {int(c[v])} for vertex {v} ({self.names[v]}) is outside "
                               f"0..{int(self.sizes[v]) - 1}")
        return c

    def evaluate(self, choice: Sequence[int]) -> float:
        """Total cost of one choice (vertex costs plus edge costs)."""
        c = self.check_choice(choice)
        total = sum(float(self.vertex_costs[v][c[v]]) for v in range(self.num_vertices))
        total += sum(float(m[c[u], c[v]]) for (u, v), m in zip(self.edges, self.edge_costs))
        return total

    def term_scale(self, choice: Sequence[int]) -> float:
        """The summed magnitudes of the terms ``choice`` pays (vertex costs and edge entries).

        The scale at which a cost of ``choice`` is compared (at :data:`COST_RTOL`): float
        rounding grows with it, and it ignores every entry the choice does not pay, so one
        huge (big-M) entry elsewhere in the Problem cannot hide a wrong answer.

        Examples:
            >>> p = Problem([np.array([3.0, 1.0]), np.array([-2.0])], [(0, 1)],
            ...             [np.array([[0.0], [1e15]])])
            >>> p.term_scale([0, 0]), p.evaluate([0, 0])
            (5.0, 1.0)
        """
        c = self.check_choice(choice)
        total = math.fsum(abs(float(self.vertex_costs[v][c[v]])) for v in range(self.num_vertices))
        return total + math.fsum(abs(float(m[c[u], c[v]]))
                                 for (u, v), m in zip(self.edges, self.edge_costs))

    def evaluate_many(self, choices: np.ndarray) -> np.ndarray:
        """Costs of many choices at once: ``choices`` is ``(N, num_vertices)``."""
        choices = np.asarray(choices, dtype=np.int64)
        total = np.zeros(choices.shape[0])
        for v, cost in enumerate(self.vertex_costs):
            total += cost[choices[:, v]]
        for (u, v), m in zip(self.edges, self.edge_costs):
            total += m[choices[:, u], choices[:, v]]
        return total

    def memory_of(self, choice: Sequence[int]) -> float:
        """Summed memory of a choice (0 when the Problem has no memory vectors)."""
        if self.memory is None:
            return 0.0
        c = self.check_choice(choice)
        return float(sum(self.memory[v][c[v]] for v in range(self.num_vertices)))

    def min_memory(self) -> float:
        """The least total memory any strategy needs (memory is additive per vertex)."""
        if self.memory is None:
            return 0.0
        return float(sum(m.min() for m in self.memory))

    def with_memory_cap(self, cap: float | None) -> "Problem":
        """The same Problem with another memory cap (None: uncapped)."""
        return Problem(self.vertex_costs, self.edges, self.edge_costs, self.names, self.memory,
                       cap, self.unit, self.candidates, self.devices, self.variants)

    def fits(self, choice: Sequence[int]) -> bool:
        return self.memory_cap is None or self.memory_of(choice) <= self.memory_cap

    def __repr__(self) -> str:
        return (f"Problem({self.num_vertices} vertices, {len(self.edges)} edges, "
                f"max {int(self.sizes.max()) if self.num_vertices else 0} candidates, unit={self.unit})")


def _largest_finite(a: np.ndarray) -> float | None:
    """The largest finite |entry| of ``a`` (no copy when all are finite); None if none is."""
    top, bottom = float(a.max()), float(a.min())
    if top != math.inf:
        return max(top, -bottom)
    finite = a[np.isfinite(a)]
    return float(np.abs(finite).max()) if finite.size else None


def check_problem(problem: Any, where: str) -> Problem:
    """``problem`` when it is a :class:`Problem`; else a ProblemError naming ``where`` (a solver
    handed a string or a graph would fail deep inside with an AttributeError)."""
    if not isinstance(problem, Problem):
        hint = (" (build one with pase.build_problem(model, devices).problem)"
                if not hasattr(problem, "problem") else "; pass its .problem")
        shown = " ".join(repr(problem).split())
        raise ProblemError(f"{where} needs a pase.problem.Problem, got "
                           f"{type(problem).__name__} {shown:.60}{hint}")
    return problem


def _as_index(x: Any) -> int | None:
    """An integer (not a bool) or an integral finite float as an int, else None."""
    if isinstance(x, (bool, np.bool_)):
        return None
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)) and math.isfinite(x) and float(x).is_integer():
        return int(x)
    return None


def _as_cap(cap: Any) -> float | None:
    """The memory cap as a float; None for no cap or ``+inf``; NaN is refused."""
    if cap is None:
        return None
    try:
        value = float(cap)
    except (TypeError, ValueError):
        raise ProblemError(f"memory_cap must be a number of bytes, got {cap!r}") from None
    if math.isnan(value):
        raise ProblemError("memory_cap is NaN; give a number of bytes, or None for no cap")
    return None if value == math.inf else value


# (id, None) -> of a read-only matrix: whether it holds NaN or -inf; its transposed copy when
# an edge is given the other way (pase.array_memo.kept: a pipeline search builds many
# Problems over the same layer matrices)
_BAD: dict = {}
_TRANSPOSES: dict = {}


def _kept_transpose(m: np.ndarray) -> np.ndarray:
    """A read-only matrix's transpose, C-ordered and read-only: one copy while it lives."""
    def derive() -> np.ndarray:
        t = np.ascontiguousarray(m.T)
        t.flags.writeable = False
        return t
    return kept(_TRANSPOSES, m, None, derive)


def _as_vector(values: Any, what: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ProblemError(f"{what} must be a non-empty 1-D array, got shape {arr.shape}")
    if np.isnan(arr).any() or (arr == -np.inf).any():
        raise ProblemError(f"{what} has NaN or -inf entries")
    return arr


class Status(enum.Enum):
    """How far a solver's answer can be trusted."""

    OPTIMAL = "optimal"        # proven optimal (exact solver, or a backend's proof)
    FEASIBLE = "feasible"      # a valid strategy, optimality not proven
    TIME_LIMIT = "time_limit"  # stopped by the time limit; the choice is the best found
    INFEASIBLE = "infeasible"  # no choice within the constraints (exact solvers: none exists)

    def __str__(self) -> str:
        return self.value


@dataclass
class Solution:
    """A solver's answer to a Problem.

    ``choice`` is None when ``status`` is INFEASIBLE, or TIME_LIMIT when nothing that
    fits was found in time (``cost`` is then inf). ``lower_bound`` is the
    best proven bound on the optimum (equal to ``cost`` when OPTIMAL), or None.
    """

    choice: tuple[int, ...] | None
    cost: float
    status: Status
    solver: str
    lower_bound: float | None = None
    wall_time: float = 0.0
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def gap(self) -> float | None:
        """Relative gap between cost and lower bound (0 when proven optimal)."""
        if self.lower_bound is None or self.choice is None:
            return None
        if self.cost == 0:
            return 0.0
        return max(0.0, (self.cost - self.lower_bound) / abs(self.cost))

    @property
    def is_optimal(self) -> bool:
        return self.status is Status.OPTIMAL

"""Exact config pruning: drop every config that another config of its vertex dominates.

As a reduction (:mod:`pase.solvers.dp.core` chains it before the recurrence):

    apply(problem, memory=..., deadline=...) -> (reduced Problem, PruneResult)
    invert(choice of the reduced Problem, PruneResult) -> choice of ``problem``

Config ``c'`` of vertex ``v`` dominates ``c`` when it is no worse in every term
``c`` could pay: ``vertex_cost(c') <= vertex_cost(c)``, for every neighbour
``u`` and every config ``x`` of ``u`` ``edge(c', x) <= edge(c, x)``, and, when
memory counts (under a cap), ``memory(c') <= memory(c)``. :func:`prune_dominated`
keeps, per vertex, the configs no other config dominates (the Pareto-minimal rows
of ``[vertex cost, every incident edge row, memory]``).

Ties: among configs with exactly equal rows the lowest index is kept; the answer's
cost is unchanged because a twin pays exactly the same terms as the kept one in
every strategy.

Why the optimum is unchanged: take any strategy and replace, one vertex at a
time, a dropped config by a kept one that dominates it (one exists: dominance
is transitive and the configs are finite; an exact tie is dominated by its
lowest-index twin, which is kept). Each replacement changes only terms the
dominance compares, against every config of each neighbour, so the cost and the
memory never increase, whatever the neighbours hold. After all replacements the
strategy uses kept configs only: the reduced Problem's optimum is the original's,
and a choice in it maps back (``kept[v][choice[v]]``) to a choice of equal cost.

How (vectorised): per incident matrix the configs fall in classes of equal rows
(an edge cost reads a config only through its port's split, so classes are few);
one table per matrix says which class's row is <= which, and ``c`` is dropped when
some config's vertex cost is no higher and its class is <= ``c``'s on every
matrix: ``K * K / 8`` bytes of bit-set AND per neighbour. Vertices with equal
vectors and the same (shared) matrices are done once. A vertex whose work would
exceed ``work_limit`` keeps all its configs (counted in ``skipped``).
``max_passes`` > 1 repeats on the reduced Problem (a neighbour's dropped configs
no longer count); on the paper's Transformer a second pass dropped nothing.

Measured (paper model): Transformer p = 64 drops 1,456 of 52,613 configs in
0.35 s, p = 256 4,148 of 131,303 in 1.8 s; gpt2 (12 layers) p = 64 1,780 of 50,656.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from pase.array_memo import kept
from pase.errors import TimeLimitError
from pase.problem import Problem

__all__ = ["PruneResult", "apply", "invert", "prune_dominated"]

# Element comparisons one vertex may spend before it is skipped (a few tenths of a second).
DEFAULT_WORK_LIMIT = 4 * 10**8
DEFAULT_MAX_PASSES = 1
_CHUNK_ELEMENTS = 2**22  # booleans per comparison chunk
_SCREEN_COLUMNS = 32
_PAIR_COLUMNS = 32  # columns compared at a time, pair by pair


@dataclass
class PruneResult:
    """The reduced Problem, per vertex the kept original config indices (ascending),
    and how many configs were dropped."""

    problem: Problem
    kept: list[np.ndarray]
    dropped: int
    passes: int = 0
    skipped: int = 0
    seconds: float = 0.0


def apply(problem: Problem, *, memory: bool | None = None, deadline: float | None = None
          ) -> tuple[Problem, PruneResult]:
    """The reduced Problem (:func:`prune_dominated`, one pass) and the inverse data."""
    result = prune_dominated(problem, memory=memory, deadline=deadline)
    return result.problem, result


def invert(choice: tuple[int, ...], inverse: PruneResult) -> tuple[int, ...]:
    """A choice of the reduced Problem as the original's config indices (same cost)."""
    return tuple(int(k[c]) for k, c in zip(inverse.kept, choice))


def prune_dominated(problem: Problem, *, memory: bool | None = None,
                    max_passes: int = DEFAULT_MAX_PASSES,
                    work_limit: int = DEFAULT_WORK_LIMIT,
                    deadline: float | None = None) -> PruneResult:
    """The Problem without dominated configs (see the module docstring); exact.

    Memory counts in the dominance when ``memory`` is true (default: when the
    Problem has a memory cap and memory vectors). Without it the reduced Problem
    keeps the optimum of the uncapped Problem only.
    Shared arrays stay shared: vertices with the same cost vector and the same
    incident matrices are pruned once, and a shared edge matrix is cut once per
    pair of kept sets.
    """
    start = time.perf_counter()
    n = problem.num_vertices
    kept = [np.arange(k, dtype=np.int64) for k in problem.sizes]
    use_memory = problem.memory is not None and (
        problem.memory_cap is not None if memory is None else memory)
    current = problem
    passes = skipped = 0
    for _ in range(max_passes):
        passes += 1
        memo: dict[tuple, np.ndarray | None] = {}
        changed = False
        skipped = 0
        new_kept = []
        sides: list[list[tuple[np.ndarray, bool]]] = [[] for _ in range(n)]
        for (a, b), m in zip(current.edges, current.edge_costs):
            sides[a].append((m, False))
            sides[b].append((m, True))
        for v in range(n):
            if deadline is not None and time.perf_counter() > deadline:
                raise TimeLimitError("dp exceeded its time limit while pruning dominated configs; "
                                     "the DP has no partial answer")
            vc = current.vertex_costs[v]
            mem = current.memory[v] if use_memory else None
            # Equal vectors and the same (shared) matrices in the same roles: the same answer.
            key = (vc.tobytes(), None if mem is None else mem.tobytes(),
                   tuple(sorted((id(m), t) for m, t in sides[v])))
            if key not in memo:
                memo[key] = _pareto_rows(vc, sides[v], mem, work_limit)
            local = memo[key]
            if local is None:
                skipped += 1
                new_kept.append(kept[v])
                continue
            if local.size < vc.size:
                changed = True
            new_kept.append(kept[v][local])
        if not changed:
            break
        local_kept = [np.searchsorted(kept[v], new_kept[v]) for v in range(n)]
        current = _restrict(current, local_kept)
        kept = new_kept
    dropped = int(problem.sizes.sum() - sum(k.size for k in kept))
    return PruneResult(current, kept, dropped, passes, skipped, time.perf_counter() - start)


def _pareto_rows(vertex: np.ndarray, sides: list[tuple[np.ndarray, bool]],
                 memory: np.ndarray | None, work_limit: int) -> np.ndarray | None:
    """Indices (ascending) of the configs no other config dominates, ties kept at the
    lowest index; None when the comparisons would exceed ``work_limit``. ``sides``: the
    incident matrices, each with whether the vertex is its column side (transposed).

    Per incident matrix the configs fall in classes of equal rows (few: an edge cost
    reads a config only through its port's split); a small table says which class's
    row is <= which, stored as a bit set over the configs. After exact twins are
    merged (lowest index kept), ``c`` is dropped when some other config has a vertex
    cost (and memory) no higher and, for every neighbour, a class whose row is <=
    ``c``'s: one AND of bit sets per neighbour, ``K * K / 8`` bytes each.
    """
    k = vertex.size
    if k == 1:
        return np.zeros(1, dtype=np.int64)
    if k * k // 8 * (len(sides) + 2) > work_limit:
        return None
    classes, tables = [], []
    for m, transposed in sides:
        found = _row_classes(m, transposed, work_limit)
        if found is None:
            return None
        classes.append(found[0])
        tables.append(found[1])
    # Exact twins (equal scalars, equal rows everywhere): the first occurrence is the lowest index.
    scalars = [vertex] + ([] if memory is None else [memory])
    key = np.column_stack(scalars + [c.astype(np.float64) for c in classes])
    reps = np.sort(np.unique(key, axis=0, return_index=True)[1])
    # Distinct configs in ascending vertex cost: a dominator of c sits before `upper[c]`.
    order = reps[np.argsort(vertex[reps], kind="stable")]
    r = order.size
    cost = vertex[order]
    upper = np.searchsorted(cost, cost, side="right")
    # bits[u][class b] = the configs (in `order`) whose class's row is <= class b's row
    bits = [np.packbits(le[cls[order]].T, axis=1) for cls, le in zip(classes, tables)]
    mem = None if memory is None else memory[order]
    drop = np.zeros(r, dtype=bool)
    byte_index = np.arange((r + 7) // 8)
    step = max(1, _CHUNK_ELEMENTS // max(1, byte_index.size))
    for c0 in range(0, r, step):
        c = np.arange(c0, min(r, c0 + step))
        width = (int(upper[c[-1]]) + 7) // 8  # no dominator lies beyond
        acc = np.full((c.size, width), 0xFF, dtype=np.uint8)
        for cls, b in zip(classes, bits):
            acc &= b[cls[order[c]], :width]
        if mem is not None:
            acc &= np.packbits(mem[None, :width * 8 if width * 8 <= r else r]
                               <= mem[c, None], axis=1)[:, :width]
        # Keep bits below upper[c] only, and never c itself.
        full, part = upper[c] // 8, upper[c] % 8
        prefix = np.where(byte_index[None, :width] < full[:, None], 0xFF,
                          np.where(byte_index[None, :width] == full[:, None],
                                   (0xFF << (8 - part[:, None])) & 0xFF, 0)).astype(np.uint8)
        acc &= prefix
        acc[np.arange(c.size), c // 8] &= ~(np.uint8(0x80) >> (c % 8).astype(np.uint8))
        drop[c] = acc.any(axis=1)
    return np.sort(order[~drop])


def _row_classes(m: np.ndarray, transposed: bool, work_limit: int
                 ) -> tuple[np.ndarray, np.ndarray] | None:
    """Per row of ``m`` (of ``m.T`` when ``transposed``) its class of equal rows, and the
    classes' :func:`_row_le` table; None past ``work_limit``. Kept while a read-only ``m``
    lives: a pipeline search prunes the same shared layer matrices in every stage's solve
    (about a second a table for GPT-3 at p = 1,024), and a read-only array cannot change."""
    def derive():
        uniq, cls = np.unique(_distinct_columns(m.T if transposed else m), axis=0,
                              return_inverse=True)
        if uniq.shape[0] ** 2 * min(uniq.shape[1], _SCREEN_COLUMNS) > work_limit:
            return None
        le = _row_le(uniq, work_limit)
        return None if le is None else (cls.reshape(-1), le)

    return kept(_TABLES, m, (transposed, work_limit), derive)


# (id, (transposed, work_limit)) -> :func:`_row_classes`' answers (pase.array_memo.kept)
_TABLES: dict = {}


def _row_le(rows: np.ndarray, work_limit: float = np.inf) -> np.ndarray | None:
    """``le[a, b]``: row ``a`` <= row ``b`` everywhere; None once the comparisons pass
    ``work_limit`` (a table too costly to be worth its pruning: on GPT-3 at p = 1,024 a
    stage's tables of 2,855 classes took 5-12 s each and their extra drops saved the dp
    nothing). A screen first: sums over ``_SCREEN_COLUMNS`` interleaved groups of columns
    (rounding is monotone, so ``a <= b`` implies each group's ``sum a <= sum b``); then
    the pairs left are compared ``_PAIR_COLUMNS`` columns at a time, on each column's
    dense ranks (equal order, a quarter of the bytes), dropping a pair at its first
    column where ``a > b``."""
    s, cols = rows.shape
    g = min(cols, _SCREEN_COLUMNS)
    parts = np.pad(rows, ((0, 0), (0, -cols % g))).reshape(s, -1, g).sum(axis=1)
    maybe = np.empty((s, s), dtype=bool)
    step = max(1, _CHUNK_ELEMENTS // max(1, s * g))
    for b in range(0, s, step):
        maybe[:, b:b + step] = (parts[:, None, :] <= parts[None, b:b + step, :]).all(axis=2)
    work = s * s * g
    i, j = np.nonzero(maybe)
    for c in range(0, cols, _PAIR_COLUMNS):
        work += i.size * min(_PAIR_COLUMNS, cols - c)
        if work > work_limit:
            return None
        block = np.ascontiguousarray(_dense_ranks(rows[:, c:c + _PAIR_COLUMNS]).T)
        ok = (block[:, i] <= block[:, j]).all(axis=0)
        i, j = i[ok], j[ok]
    le = np.zeros((s, s), dtype=bool)
    le[i, j] = True
    return le


def _dense_ranks(rows: np.ndarray) -> np.ndarray:
    """Each entry's rank among its column's distinct values (0 the least; equal values,
    equal ranks), so ranks compare as the values do."""
    order = np.argsort(rows, axis=0, kind="stable")
    ordered = np.take_along_axis(rows, order, axis=0)
    dtype = np.uint16 if rows.shape[0] <= 2**16 else np.uint32
    step = np.zeros(rows.shape, dtype=dtype)
    np.cumsum(ordered[1:] != ordered[:-1], axis=0, out=step[1:])
    ranks = np.empty_like(step)
    np.put_along_axis(ranks, order, step, axis=0)
    return ranks


def _distinct_columns(m: np.ndarray) -> np.ndarray:
    """``m`` with repeated columns removed (they add nothing to a dominance test)."""
    if m.shape[1] <= 1:
        return m
    cols = np.ascontiguousarray(m.T)
    view = cols.view(np.dtype((np.void, cols.dtype.itemsize * cols.shape[1]))).ravel()
    _, first = np.unique(view, return_index=True)
    return m[:, np.sort(first)]


def _restrict(problem: Problem, kept: list[np.ndarray]) -> Problem:
    """``problem`` on the given config subsets; arrays shared before stay shared."""
    whole = [k.size == s for k, s in zip(kept, problem.sizes)]
    cut: dict[tuple, np.ndarray] = {}

    def take(a: np.ndarray, *index: np.ndarray) -> np.ndarray:
        key = (id(a),) + tuple(i.tobytes() for i in index)
        if key not in cut:
            sub = a[np.ix_(*index)] if len(index) > 1 else a[index[0]]
            sub.flags.writeable = False
            cut[key] = sub
        return cut[key]

    vertex = [c if whole[v] else take(c, kept[v]) for v, c in enumerate(problem.vertex_costs)]
    memory = None if problem.memory is None else [
        m if whole[v] else take(m, kept[v]) for v, m in enumerate(problem.memory)]
    matrices = [m if whole[u] and whole[v] else take(m, kept[u], kept[v])
                for (u, v), m in zip(problem.edges, problem.edge_costs)]
    candidates = None if problem.candidates is None else [
        c if whole[v] else type(c)(c.kind, c.dims, c.roles, c.configs[kept[v]])
        for v, c in enumerate(problem.candidates)]
    return Problem(vertex, problem.edges, matrices, problem.names, memory, problem.memory_cap,
                   problem.unit, candidates, problem.devices)

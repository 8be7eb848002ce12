"""Finding repeated blocks in a Problem: the chains :mod:`pase.solvers.dp.blocks.fold` reduces.

    find_one(problem: Problem | IdGraph, usable: int | None = None) -> BlockChain | None

What is accepted (a *chain*). Vertices are numbered in build order; a chain is a
period ``P``, a start ``a`` and a count ``m >= 2``. Block ``U_i`` is the vertex
range ``[a + iP, a + (i+1)P)`` for ``i = 1..m``; ``U_0 = [a, a+P)`` is only the
home of the first separator and need not match the others. With offsets taken
inside a block:

- the separator ``S`` is the set of offsets of the ``U_0`` vertices that have an
  edge into ``U_1``; ``S_i = a + iP + S``; the *shared* vertices ``G`` are the
  neighbours of ``U_1`` outside ``U_0, U_1, U_2`` (the encoder output in an
  encoder-decoder model) and lie outside ``U_0..U_m``;
- for every ``i = 1..m``, ``U_i`` has the vertex cost vectors and memory vectors
  of ``U_1`` (exact equality, offset by offset), and the same edges, with equal
  matrices, inside ``U_i``, from ``S_{i-1}`` into ``U_i`` and from ``G`` into ``U_i``;
- every other edge of a vertex of ``U_i`` joins ``S_i`` to ``U_{i+1}`` (i < m)
  or, for the last block only, leaves ``S_m`` to anywhere.

So the rest of the graph touches the chain only at ``S_0`` (and all of ``U_0``),
``S_m`` and ``G``. ``U_0`` may begin before vertex 0: only ``S_0`` must exist.
A transformer layer's separator is its last op (the residual stream). In gpt2
the position embedding joins layer 0 exactly as a residual joins the next
layer, so all L layers are blocks (``m = L``, ``S_0`` the embedding); where the
embedding's edges differ, layer 0 is ``U_0`` and ``m = L - 1``.

Detection (:func:`find_one`; every chain, one after another:
:func:`pase.solvers.dp.blocks.fold.find_blocks`) hashes each vertex's costs with its incident
edge matrices, finds for each period the longest run where vertex ``v`` looks
like ``v + P`` (numpy, ``O(n)`` per period), then verifies the candidates exactly
at every alignment; it keeps the chain removing the most vertices, then the one
with the fewest separator states. Chains whose state ``K_G * K_S`` would make the
power too large (:data:`MAX_POWER_WORK`) are skipped.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pase.array_memo import kept
from pase.deadline import check as check_deadline
from pase.problem import Problem

__all__ = ["BlockChain", "IdGraph", "MAX_POWER_WORK", "find_one"]

# Most scalar additions one min-plus product of the transfer tensor may take
# (K_G * K_S**3); a chain with a larger separator state is not reduced.
MAX_POWER_WORK = 2 * 10**9
# Most candidate runs verified per detection (longest first). A decoder's period and
# its multiples can fill the first eight (the Transformer at p = 1024 then missed its
# encoder chain); MAX_VISITS bounds the time however many there are.
MAX_CANDIDATES = 32
# Vertex visits detection may spend checking candidates (about a second); past it the
# best chain so far is used (a chain missed costs time, never exactness).
MAX_VISITS = 1_000_000


@dataclass(frozen=True)
class BlockChain:
    """A chain of ``count`` identical blocks, in the Problem it was found in.

    ``start`` is the first vertex of ``U_1``; block ``i`` (1-based) spans
    ``start + (i-1)*period ... start + i*period - 1``. ``separator`` lists the
    offsets of ``S`` inside a block (``S_0`` is ``start - period + offset``);
    ``shared`` lists the vertices of ``G``. ``states`` is ``K_G * K_S``.
    """

    start: int
    period: int
    count: int
    separator: tuple[int, ...]
    shared: tuple[int, ...]
    states: int
    pattern_edges: tuple[tuple[int, int], ...] = field(repr=False, default=())

    def block(self, i: int) -> range:
        """Vertices of block ``i`` (0 is ``U_0``, the first separator's home)."""
        first = self.start + (i - 1) * self.period
        return range(first, first + self.period)

    def separator_vertices(self, i: int) -> tuple[int, ...]:
        base = self.start + (i - 1) * self.period
        return tuple(base + o for o in self.separator)

    def transfer_vertices(self) -> tuple[list[int], list[int]]:
        """Block 1's transfer, laid out: ``(local, kept)``. ``local`` is the shared
        vertices, ``S_0`` and ``U_1`` in that order (positions in the block Problem);
        ``kept`` the vertices the transfer keeps as axes: shared, ``S_0``, ``S_1``."""
        outside = list(self.shared) + list(self.separator_vertices(0))
        return outside + list(self.block(1)), outside + list(self.separator_vertices(1))

    def removed(self) -> set[int]:
        """Vertices the reduction eliminates: blocks 1..count but the last separator."""
        out = set(range(self.start, self.start + self.count * self.period))
        return out - set(self.separator_vertices(self.count))

    def contiguous(self, original: list[int]) -> bool:
        """Whether the blocks are vertex ranges of the first Problem too, given each
        vertex's number there (``original``; chains are found in reduced Problems)."""
        first = min(self.start - self.period + o for o in self.separator)
        last = self.start + self.count * self.period - 1
        return original[last] - original[first] == last - first

    def describe(self, problem: Problem) -> dict[str, Any]:
        return {"first_block": problem.names[self.start],
                "period": self.period, "count": self.count,
                "separator": [problem.names[v] for v in self.separator_vertices(1)],
                "shared": [problem.names[v] for v in self.shared], "states": self.states}


# -- detection -------------------------------------------------------------------

# (id, None) -> a read-only array's content digest, while it lives (pase.array_memo.kept)
_DIGESTS: dict = {}


class _Interner:
    """Exact content ids for arrays: equal ids iff equal shape and equal bytes."""

    def __init__(self) -> None:
        self.by_digest: dict[tuple, list[tuple[np.ndarray, int]]] = {}
        self.memo: dict[int, int] = {}
        self.count = 0

    def __call__(self, arr: np.ndarray) -> int:
        cached = self.memo.get(id(arr))
        if cached is not None:
            return cached
        flat = np.ascontiguousarray(arr)
        # a read-only array's digest is taken once in its life (a capped solve folds the
        # same matrices under every multiplier)
        key = kept(_DIGESTS, arr, None, lambda: (flat.shape, str(flat.dtype), hashlib.blake2b(
            flat.view(np.uint8), digest_size=16).digest()))
        bucket = self.by_digest.setdefault(key, [])
        # A digest match is confirmed byte for byte.
        same = [k for rep, k in bucket
                if rep is flat or np.array_equal(rep.view(np.uint8), flat.view(np.uint8))]
        if same:
            ident = same[0]
        else:
            ident = self.count
            self.count += 1
            bucket.append((flat, ident))
        self.memo[id(arr)] = ident
        return ident


class IdGraph:
    """A Problem as ids: vertex content ids and adjacency (w, edge content id).

    Equal ids promise equal arrays: the ids of array contents (:meth:`of`) or, for
    dry runs, a cost model's sharing keys. ``vid``, ``sizes`` and ``eids`` are per
    vertex, per vertex and per edge of ``edges``.
    """

    @classmethod
    def of(cls, problem: Problem) -> IdGraph:
        """The graph of ``problem``'s array contents (vertex costs with memory, edge matrices)."""
        intern = _Interner()
        memory = problem.memory
        vid = [(intern(problem.vertex_costs[v]), -1 if memory is None else intern(memory[v]))
               for v in range(problem.num_vertices)]
        return cls(vid, problem.sizes, problem.edges, [intern(m) for m in problem.edge_costs])

    def __init__(self, vid: list[Any], sizes: Any, edges: list[tuple[int, int]], eids: list[Any]):
        n = len(vid)
        self.n = n
        self.vid = list(vid)
        self.adj: list[list[tuple[int, int]]] = [[] for _ in range(n)]  # (w, signed edge id)
        self.eid: dict[tuple[int, int], int] = {}
        for (u, w), e in zip(edges, eids):
            self.eid[(u, w)] = e
            self.adj[u].append((w, e))
            self.adj[w].append((u, e))
        self.sizes = [int(k) for k in sizes]
        # What detection compares first: the vertex's costs and memory only (a block's
        # last separator has edges the others lack); candidates are verified exactly.
        looks: dict[tuple, int] = {}
        self.look = np.array([looks.setdefault(self.vid[v], len(looks)) for v in range(n)],
                             dtype=np.int64)

    def edge_id(self, u: int, w: int) -> int:
        return self.eid[(u, w)] if u < w else self.eid[(w, u)]


def _runs(look: np.ndarray, limit: int) -> list[tuple[int, int, int]]:
    """``(span, period, start)`` of the longest stretches where ``look[v] == look[v + P]``.

    Runs of matches joined across gaps of at most ``P // 2`` (a block's last
    separator may look different) form a stretch; stretches of at least
    ``P - P // 2`` are candidates, to be verified exactly.
    """
    n = look.size
    out = []
    for period in range(1, n // 2 + 1):
        eq = np.concatenate(([False], look[:-period] == look[period:], [False]))
        d = np.diff(eq.astype(np.int8))
        starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
        if starts.size == 0:
            continue
        group = np.concatenate(([0], np.cumsum(starts[1:] - ends[:-1] > period // 2)))
        first = np.flatnonzero(np.diff(np.concatenate(([-1], group))))  # each group's first run
        last = np.concatenate((first[1:], [group.size])) - 1
        spans = ends[last] - starts[first]
        k = int(spans.argmax())
        if spans[k] >= period - period // 2:
            out.append((int(spans[k]), period, int(starts[first[k]])))
    out.sort(key=lambda r: (-r[0], r[1], r[2]))
    return out[:limit]


def _chain_at(g: IdGraph, a: int, period: int, usable: int) -> BlockChain | None:
    """The chain with ``U_0 = [a, a + period)``, verified exactly, or None (see module doc)."""
    P = period
    if a <= -P or a + 3 * P > usable:  # U_0 may start before vertex 0: only S_0 must exist
        return None
    u1 = a + P
    sep = sorted({w - a for v in range(u1, u1 + P) for w, _ in g.adj[v] if a <= w < u1})
    if not sep:
        return None
    shared = sorted({w for v in range(u1, u1 + P) for w, _ in g.adj[v]
                     if not a <= w < a + 3 * P})
    if any(w >= usable for w in shared):
        return None
    shared_index = {w: k for k, w in enumerate(shared)}
    sep_set = set(sep)
    pattern = None
    count = 0
    pattern_edges: list[tuple[int, int]] = []
    i = 1
    while True:
        base = a + i * P
        if base + P > usable:
            break
        sig: list[tuple] = []
        edges: list[tuple[int, int]] = []
        middle = True  # whether the block may be followed by another one
        ok = True
        for o in range(P):
            v = base + o
            if g.vid[v] != g.vid[v - P] and i > 1:
                ok = False
                break
            for w, e in g.adj[v]:
                if base <= w < base + P:
                    if w > v:
                        sig.append(("in", o, w - base, e))
                        edges.append((v, w))
                elif base - P <= w < base:
                    if w - base + P not in sep_set:
                        ok = False
                        break
                    sig.append(("back", w - base + P, o, e))
                    edges.append((w, v) if w < v else (v, w))
                elif w in shared_index:
                    sig.append(("shared", shared_index[w], o, e))
                    edges.append((w, v) if w < v else (v, w))
                elif o in sep_set:
                    if not base + P <= w < base + 2 * P:
                        middle = False  # S_i leaves the chain: block i can only be the last
                else:
                    ok = False
                    break
            if not ok:
                break
        if ok:
            sig.sort()
            if pattern is None:
                pattern = sig
            ok = sig == pattern
        if not ok:
            break
        count, pattern_edges = i, edges
        if not middle:
            break
        i += 1
    if count < 2 or pattern is None:
        return None
    last = a + (count + 1) * P
    if any(a <= w < last for w in shared):
        return None
    states = math.prod(g.sizes[w] for w in shared) * math.prod(g.sizes[a + o] for o in sep)
    if states * math.prod(g.sizes[a + o] for o in sep) ** 2 > MAX_POWER_WORK:
        return None
    return BlockChain(a + P, P, count, tuple(sep), tuple(shared), states, tuple(pattern_edges))


def find_one(problem: Problem | IdGraph, usable: int | None = None) -> BlockChain | None:
    """The best chain among vertices ``0..usable-1`` (all by default), or None (module doc)."""
    g = problem if isinstance(problem, IdGraph) else IdGraph.of(problem)
    usable = g.n if usable is None else usable
    best, best_key = None, None
    found: list[int] = []  # periods with a chain: their multiples repeat it, coarser
    visits = 0  # vertices whose edges were read: bounds detection on big irregular graphs
    for _length, period, start in _runs(g.look[:usable], MAX_CANDIDATES):
        if any(period % f == 0 for f in found):
            continue
        for a in range(max(1 - period, start - 2 * period), start + period):
            visits += period
            if visits > MAX_VISITS:
                return best
            check_deadline("the dp looked for repeated blocks; the dp has no partial answer")
            chain = _chain_at(g, a, period, usable)
            if chain is None:
                continue
            key = (-(chain.count * period), chain.states, period, a)
            if best_key is None or key < best_key:
                best, best_key = chain, key
            if period not in found:
                found.append(period)
    return best


"""Exact reduction of repeated blocks: the dp on an L-layer model in log2 L min-plus products.

An LLM's Problem is L copies of one layer chained through the residual stream.
This module folds such chains (found on the Problem alone, no model is
special-cased: :mod:`pase.solvers.dp.blocks.find`) into ``(min, +)`` matrix
powers, as a reduction:

    apply(problem) -> (reduced Problem, Folding)
    invert(choice of the reduced Problem, Folding) -> choice of ``problem``

The reduced Problem's optimum is the original's (same cost to rounding; ties
may pick another minimiser, deterministically), and :func:`invert` maps its
minimiser back to every vertex. :mod:`pase.solvers.dp.core` solves the reduced
Problem with the ordinary dp in between; nothing here solves.

Reduction. One block's transfer tensor ``T[g, s, t]`` is the least cost of the
block (its vertex costs, inner edges, edges from ``S_{i-1}`` and ``G``) over its
inner vertices, given ``G`` at ``g``, ``S_{i-1}`` at ``s`` and ``S_i`` at ``t``;
it comes from the dp kernel (:func:`pase.solvers.dp.kernel.min_plus`) run on
the block with the separator and shared vertices eliminated last (not at all).
``T^m`` by repeated squaring keeps each product's argmin (the middle
separator state). The chain is replaced by one edge between ``S_0`` and ``S_m``
(a separator of several vertices, or shared vertices, become a product vertex
tied to its members by 0/inf edges); chains are reduced one after another
until none is left. Inverting walks the argmin tables down to every separator
and every inner vertex.

Memory is not carried: the reduced Problem has no memory and no cap. Under a
cap the dp folds the uncapped Problem first (its optimum is the answer when it
fits), then :mod:`pase.solvers.dp.blocks.capped` folds ``cost + lam * memory``
per Lagrange multiplier.
"""
from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from pase.array_memo import owned_by
from pase.deadline import check as check_deadline
from pase.problem import Problem
from pase.solvers.dp.blocks.find import BlockChain, find_one
from pase.solvers.dp.config_classes import class_min_plus
from pase.solvers.dp.kernel import Ledger, min_plus
from pase.solvers.dp.ordering import inner_order
from pase.solvers.dp.plan import Plan, plan_for_order

__all__ = ["Folding", "apply", "find_blocks", "invert", "min_plus_product"]

# Size of one chunk of a min-plus product's broadcast sum, in float64 entries.
PRODUCT_CHUNK = 2**19


# -- the transfer tensor of one block ----------------------------------------------

@dataclass
class _Block:
    """One block's transfer tensor ``T[g, s, t]`` and the argmins to rebuild its inside."""

    transfer: np.ndarray                 # (K_G, K_S, K_S)
    kept: tuple[int, ...]                 # local ids of G, S_0, S_1 (T's axes in this order)
    kept_sizes: tuple[int, ...]
    local: list[int]                      # local id -> vertex of U_1, G or S_0 (problem numbers)
    plan: Plan | None
    argmins: list[np.ndarray]
    powers: dict[int, "_Power"] = field(default_factory=dict)  # count -> T^count (shared by copies)

    def inside(self, states: dict[int, int]) -> dict[int, int]:
        """Configs of the block's inner vertices given its kept local vertices' configs."""
        choice = dict(states)
        if self.plan is not None:
            for step in reversed(self.plan.steps):
                choice[step.vertex] = int(
                    self.argmins[step.position][tuple(choice[u] for u in step.dependent)])
        return choice


def _block_transfer(problem: Problem, chain: BlockChain) -> _Block:
    """Block 1's transfer tensor, or the one computed last time from the same read-only
    arrays in the same pattern (a pipeline search folds the same layers in every stage)."""
    u1 = list(chain.block(1))
    local, kept_vertices = chain.transfer_vertices()
    index = {v: k for k, v in enumerate(local)}
    outside = len(local) - len(u1)
    # Block 1's own edges: inside U_1 (once), and from S_0 and G into it (not those to U_2).
    inside = set(u1)
    edges, mats = [], []
    for v in u1:
        for w, m in problem.incident(v):
            if w in index and (w not in inside or w > v):
                edges.append((index[v], index[w]))
                mats.append(m)
    own = [problem.vertex_costs[v] for v in u1]
    kept = tuple(index[v] for v in kept_vertices)
    arrays = own + mats
    if any(a.flags.writeable for a in arrays):
        return _transfer(problem, chain, local, own, edges, mats, kept)
    # a view (a matrix turned to face the other way) by its owner and where it lies in it
    owners = [owned_by(a) for a in arrays]
    held = [o for o, _ in owners]
    key = (tuple(int(problem.vertex_costs[v].size) for v in local[:outside]),
           tuple((id(o), where) for o, where in owners), tuple(edges), kept, len(chain.shared))
    hit = _TRANSFERS.get(key)
    if hit is None:  # (an entry holds its arrays, so their ids in its key stay theirs)
        hit = (held, _transfer(problem, chain, local, own, edges, mats, kept))
        _TRANSFERS[key] = hit
        while len(_TRANSFERS) > TRANSFERS_KEPT:
            del _TRANSFERS[next(iter(_TRANSFERS))]
    else:
        _TRANSFERS.move_to_end(key)
    return replace(hit[1], local=local)


# the last TRANSFERS_KEPT transfers: key -> (the arrays, held so their ids stay theirs; block)
TRANSFERS_KEPT = 8
_TRANSFERS: OrderedDict = OrderedDict()


def _transfer(problem: Problem, chain: BlockChain, local: list[int], own: list[np.ndarray],
              edges: list[tuple[int, int]], mats: list[np.ndarray], kept: tuple[int, ...]
              ) -> _Block:
    outside = len(local) - len(own)
    costs = [np.zeros(problem.vertex_costs[v].size) for v in local[:outside]] + own
    block = Problem(costs, edges, mats)
    kept_set = set(kept)
    inner = inner_order(block, kept_set)
    ledger = Ledger()
    axes_sizes = tuple(int(block.sizes[k]) for k in kept)
    total = np.zeros(axes_sizes)
    argmins: list[np.ndarray] = []
    plan = None
    if inner:
        order = inner + list(kept)
        last = inner[-1]
        plan = plan_for_order(block, order, stop=lambda v, dep: v == last)
        values: dict[int, np.ndarray] = {}
        sizes = [int(k) for k in block.sizes]
        memo: dict = {}
        for step in plan.steps:
            children = [values.pop(j) for j in step.children]
            terms = children + [block.edge_matrix(u, step.vertex) for u in step.later] + \
                [block.vertex_costs[step.vertex]]
            by_class = class_min_plus(step, terms, sizes, memo)
            values[step.position], arg = by_class if by_class is not None else \
                min_plus(step, terms, len(children), ledger)
            argmins.append(arg)
        for position, table in values.items():  # the messages left: over kept vertices only
            total = total + _on_axes(table, plan.steps[position].dependent, kept)
    for k in kept[outside:]:
        total = total + _on_axes(block.vertex_costs[k], (k,), kept)
    for (x, y), m in zip(block.edges, block.edge_costs):
        if x in kept_set and y in kept_set:
            total = total + _on_axes(m, (x, y), kept)
    kg = math.prod(axes_sizes[:len(chain.shared)])
    ks = math.prod(axes_sizes[len(chain.shared):outside])
    return _Block(total.reshape(kg, ks, ks), kept, axes_sizes, local, plan, argmins)


def _on_axes(table: np.ndarray, axes: tuple[int, ...], target: tuple[int, ...]) -> np.ndarray:
    """``table`` over ``axes`` transposed and expanded to broadcast over ``target``."""
    where = [target.index(a) for a in axes]
    order = sorted(range(len(axes)), key=lambda k: where[k])
    moved = np.transpose(np.asarray(table), order) if len(axes) > 1 else np.asarray(table)
    present = {where[k] for k in order}
    return moved[tuple(slice(None) if t in present else None for t in range(len(target)))]


# -- min-plus powers --------------------------------------------------------------

def min_plus_product(left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``C[g, a, b] = min_c left[g, a, c] + right[g, c, b]`` and its argmin ``c`` (first minimum).

    Examples:
        >>> a = np.array([[[0.0, 3.0], [2.0, 0.0]]])
        >>> c, arg = min_plus_product(a, a)  # C[0, 1, 0]: 2 + 0 and 0 + 2 tie; the first wins
        >>> c.tolist(), arg.tolist()
        ([[[0.0, 3.0], [2.0, 0.0]]], [[[0, 0], [0, 1]]])
    """
    kg, ka, kc = left.shape
    kb = right.shape[2]
    value = np.empty((kg, ka, kb))
    arg = np.empty((kg, ka, kb), dtype=np.intp)
    rows = max(1, min(ka, PRODUCT_CHUNK // max(1, kc * kb)))
    # The sum is laid out (a, b, c), the minimised axis last and contiguous: numpy's
    # argmin along it is about twice as fast as along a middle axis, and one buffer
    # serves every chunk. The same additions, so the same values and first minima.
    buffer = np.empty(rows * kb * kc)
    offsets = np.arange(rows * kb, dtype=np.intp) * kc  # flat start of each (a, b) row
    for g in range(kg):
        right_t = np.ascontiguousarray(right[g].T)  # (b, c)
        for r0 in range(0, ka, rows):
            check_deadline("the dp raised a block's transfer matrix to its power; "
                           "the dp has no partial answer")
            r1 = min(ka, r0 + rows)
            n = (r1 - r0) * kb
            s = buffer[:n * kc].reshape(r1 - r0, kb, kc)
            np.add(left[g, r0:r1, None, :], right_t[None], out=s)
            at = arg[g, r0:r1].reshape(n)
            np.argmin(s.reshape(n, kc), axis=1, out=at)
            np.take(buffer, at + offsets[:n], out=value[g, r0:r1].reshape(n), mode="clip")
    return value, arg


class _Power:
    """``T^m`` by repeated squaring, with the argmins to recover every middle state."""

    def __init__(self, transfer: np.ndarray, m: int):
        self.m = m
        self.squares = [transfer]           # T^(2^k)
        self.middles: list[np.ndarray] = []  # middles[k - 1]: midpoint state of T^(2^k)
        self.products = 0
        bits = [k for k in range(m.bit_length()) if m >> k & 1]
        for _ in range(1, bits[-1] + 1):
            value, arg = min_plus_product(self.squares[-1], self.squares[-1])
            self.squares.append(value)
            self.middles.append(arg)
            self.products += 1
        # Combine highest power first: R = T^(2^k1) * T^(2^k2) * ...
        self.bits = bits[::-1]
        value = self.squares[self.bits[0]]
        self.joins: list[np.ndarray] = []
        for k in self.bits[1:]:
            value, arg = min_plus_product(value, self.squares[k])
            self.joins.append(arg)
            self.products += 1
        self.value = value

    def states(self, g: int, first: int, last: int) -> list[int]:
        """The separator states ``S_0 .. S_m`` of a minimiser with the given ends."""
        segments = []  # (k, a, b) from the last one back
        b = last
        for k, join in zip(reversed(self.bits[1:]), reversed(self.joins)):
            c = int(join[g, first, b])
            segments.append((k, c, b))
            b = c
        segments.append((self.bits[0], first, b))
        out = [first]
        for k, a, b in reversed(segments):
            out.extend(self._expand(g, k, a, b))
        return out

    def _expand(self, g: int, k: int, a: int, b: int) -> list[int]:
        """States after ``a`` up to ``b`` along a T^(2^k) segment."""
        if k == 0:
            return [b]
        c = int(self.middles[k - 1][g, a, b])
        return self._expand(g, k - 1, a, c) + self._expand(g, k - 1, c, b)


# -- the reduction: apply and invert ------------------------------------------------

class _Reduction:
    """One chain folded into an edge: the reduced Problem and the way back."""

    def __init__(self, problem: Problem, chain: BlockChain, original: list[int]):
        self.problem, self.chain, self.original = problem, chain, original
        self.block = _block_transfer(problem, chain)
        powers = self.block.powers
        if chain.count not in powers:
            powers[chain.count] = _Power(self.block.transfer, chain.count)
        self.power = powers[chain.count]
        removed = chain.removed()
        self.kept = [v for v in range(problem.num_vertices) if v not in removed]
        new = {v: k for k, v in enumerate(self.kept)}
        drop = set(chain.pattern_edges)
        last_sep = set(chain.separator_vertices(chain.count))
        costs = [np.zeros(problem.vertex_costs[v].size) if v in last_sep
                 else problem.vertex_costs[v] for v in self.kept]
        names = [problem.names[v] for v in self.kept]
        edges, mats = [], []
        for (u, w), m in zip(problem.edges, problem.edge_costs):
            if u in removed or w in removed or (u, w) in drop:
                continue
            edges.append((new[u], new[w]))
            mats.append(m)
        kg, ks, _ = self.block.transfer.shape
        head = list(chain.shared) + list(chain.separator_vertices(0))
        tail = list(chain.separator_vertices(chain.count))
        self.head = self._end(head, costs, names, edges, mats, new, "head")
        self.tail = self._end(tail, costs, names, edges, mats, new, "tail")
        edges.append((self.head, self.tail))
        mats.append(self.power.value.reshape(kg * ks, ks))
        self.reduced = Problem(costs, edges, mats, names, unit=problem.unit,
                               devices=problem.devices)
        self.synthetic_from = len(self.kept)

    def _end(self, members, costs, names, edges, mats, new, tag) -> int:
        """The reduced vertex that carries ``members``' joint state (a product if several)."""
        if len(members) == 1:
            return new[members[0]]
        sizes = [self.problem.vertex_costs[v].size for v in members]
        states = np.indices(sizes).reshape(len(sizes), -1)  # row k: member k's config per state
        x = len(costs)
        costs.append(np.zeros(states.shape[1]))
        names.append(f"<blocks {tag}: " + ", ".join(self.problem.names[v] for v in members) + ">")
        for k, v in enumerate(members):
            tie = np.full((states.shape[1], sizes[k]), np.inf)
            tie[np.arange(states.shape[1]), states[k]] = 0.0
            edges.append((new[v], x))
            mats.append(tie.T)
        return x

    def expand(self, reduced_choice: tuple[int, ...]) -> list[int]:
        """The original Problem's choice for a choice of the reduced one."""
        problem, chain, block = self.problem, self.chain, self.block
        choice = [-1] * problem.num_vertices
        for k, v in enumerate(self.kept):
            choice[v] = int(reduced_choice[k])
        kg, ks, _ = block.transfer.shape
        head_state = int(reduced_choice[self.head]) if self.head >= self.synthetic_from else \
            choice[(list(chain.shared) + list(chain.separator_vertices(0)))[0]]
        g, s_first = divmod(head_state, ks)
        s_last = int(reduced_choice[self.tail]) if self.tail >= self.synthetic_from else \
            choice[chain.separator_vertices(chain.count)[0]]
        states = self.power.states(g, s_first, s_last)
        sizes = block.kept_sizes
        n_shared = len(chain.shared)
        n_sep = len(chain.separator)
        g_configs = np.unravel_index(g, sizes[:n_shared]) if n_shared else ()
        seps = [np.unravel_index(s, sizes[n_shared:n_shared + n_sep]) for s in states]
        for i in range(1, chain.count + 1):
            fixed = dict(zip(block.kept[:n_shared], (int(c) for c in g_configs)))
            fixed.update(zip(block.kept[n_shared:n_shared + n_sep], (int(c) for c in seps[i - 1])))
            fixed.update(zip(block.kept[n_shared + n_sep:], (int(c) for c in seps[i])))
            inside = block.inside(fixed)
            shift = (i - 1) * chain.period
            for k, c in inside.items():
                if k >= n_shared + n_sep:  # a vertex of U_1, moved to U_i
                    choice[block.local[k] + shift] = c
        return choice

    def original_chain(self) -> BlockChain:
        c, o = self.chain, self.original
        start = o[c.start]
        # Blocks are contiguous in the reduced numbering; reductions keep order, so
        # they are contiguous in the original one too when nothing was removed inside.
        return BlockChain(start, c.period, c.count, c.separator,
                          tuple(o[w] for w in c.shared), c.states,
                          tuple((o[u], o[w]) for u, w in c.pattern_edges))


@dataclass
class Folding:
    """The inverse data of :func:`apply`: each chain's reduction, in order, and the time taken."""

    reductions: list[_Reduction] = field(default_factory=list)
    seconds: float = 0.0

    def chains(self) -> list[BlockChain]:
        """The chains folded, in the first Problem's vertex numbers."""
        return [r.original_chain() for r in self.reductions]

    def stats(self, problem: Problem) -> dict[str, Any]:
        """What the dp reports of the folding of ``problem``: ``blocks`` (one dict per
        chain: first block's first vertex, period, count, separator and shared vertex
        names, states), ``blocks_found``, ``vertices_removed``, ``blocks_seconds``
        (detection, transfer tensors and powers) and ``block_products``."""
        return {"blocks": [c.describe(problem) for c in self.chains()],
                "blocks_found": len(self.reductions),
                "vertices_removed": sum(len(r.chain.removed()) for r in self.reductions),
                "blocks_seconds": self.seconds,
                "block_products": sum(r.power.products for r in self.reductions)}


def apply(problem: Problem, max_chains: int = 16, chains: list[BlockChain] | None = None
          ) -> tuple[Problem, Folding]:
    """``problem`` with its chains of repeated blocks folded, and the way back.

    Up to ``max_chains`` chains, each found in the Problem the ones before left; a
    chain that involves a product vertex of an earlier one is not taken. Nothing
    found: ``problem`` itself and an empty Folding. Memory and cap are dropped.
    ``chains``: fold these instead (a Folding's ``reductions[i].chain``, found on a
    Problem of the same edges whose blocks are identical wherever these are: the same
    Problem with ``cost + lam * memory``, whose blocks were equal in both).
    """
    start = time.perf_counter()
    folding = Folding()
    current = problem
    original = list(range(problem.num_vertices))
    usable = problem.num_vertices
    given = None if chains is None else iter(chains)
    for _ in range(max_chains if chains is None else len(chains)):
        chain = find_one(current, usable) if given is None else next(given)
        if chain is None or not chain.contiguous(original):
            break
        reduction = _Reduction(current, chain, original)
        folding.reductions.append(reduction)
        original = [original[v] for v in reduction.kept] + [-1] * (
            reduction.reduced.num_vertices - len(reduction.kept))  # -1: a product vertex
        current = reduction.reduced
        usable = sum(1 for v in reduction.kept if v < usable)  # synthetic vertices come last
    folding.seconds = time.perf_counter() - start
    return current, folding


def invert(choice: tuple[int, ...], folding: Folding) -> tuple[int, ...]:
    """The first Problem's choice for a choice of the reduced one (same cost)."""
    for r in reversed(folding.reductions):
        choice = tuple(r.expand(choice))
    return choice


def find_blocks(problem: Problem) -> list[BlockChain]:
    """Every chain :func:`apply` folds, in ``problem``'s vertex numbers.

    Examples:
        >>> from pase.testing import random_chain
        >>> find_blocks(random_chain(6, seed=3))
        []
    """
    return apply(problem)[1].chains()

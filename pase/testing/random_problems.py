"""Seeded random Problems: chains, trees, DAGs and dense blocks with random costs and memory.

Every generator takes a ``seed`` (the same seed gives the same Problem) and a
``scale`` that multiplies every cost: ``scale=1e-9`` gives costs the size of
seconds, ``scale=1e15`` the size of FLOP counts, so a solver is tested at the
magnitudes real cost models produce. Costs are small non-negative integers
(times ``scale``) so ties are common; ``zero_prob`` of the entries are zero.

With ``with_memory`` every candidate gets a memory footprint (an integer from 1
to 49, times ``memory_scale``); ``cap`` (implies ``with_memory``) then sets a
memory cap that fraction of the way from the least to the most any strategy
needs, as :func:`cap_memory` does (negative: nothing fits).

    >>> p = random_chain(4, 3, seed=1, scale=1e-9)
    >>> p.edges
    [(0, 1), (1, 2), (2, 3)]
    >>> random_tree(6, seed=2).num_vertices, len(random_tree(6, seed=2).edges)
    (6, 5)
"""
from __future__ import annotations

import numpy as np

from pase.problem import Problem

# Memory footprints are drawn from 1..MAX_MEMORY - 1 units.
MAX_MEMORY = 50


def random_problem(
    num_vertices: int,
    max_candidates: int = 6,
    extra_edges: int = 2,
    seed: int = 0,
    *,
    tie_prob: float = 0.2,
    zero_prob: float = 0.1,
    with_memory: bool = False,
    scale: float = 1.0,
) -> Problem:
    """A connected random Problem: a random tree (each vertex joins an earlier one)
    plus up to ``extra_edges`` more forward edges, so a DAG when any are added.

    Kept for the many tests that pin its seeds; :func:`random_dag` is the same
    shape with memory scaling and guaranteed extra edges.
    """
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, max_candidates + 1, size=num_vertices)

    def costs(shape):
        return _costs(rng, shape, tie_prob, zero_prob) * scale

    edges = {(int(rng.integers(0, v)), v) for v in range(1, num_vertices)}
    for _ in range(extra_edges):
        if num_vertices < 3:
            break
        u, v = sorted(rng.choice(num_vertices, size=2, replace=False).tolist())
        edges.add((u, v))
    edges_sorted = sorted(edges)
    memory = ([rng.integers(1, MAX_MEMORY, size=k).astype(float) for k in sizes]
              if with_memory else None)
    return Problem([costs(k) for k in sizes], edges_sorted,
                   [costs((sizes[u], sizes[v])) for u, v in edges_sorted], memory=memory)


def random_chain(num_vertices: int, max_candidates: int = 6, seed: int = 0, *,
                 scale: float = 1.0, with_memory: bool = False, memory_scale: float = 1.0,
                 cap: float | None = None, tie_prob: float = 0.2,
                 zero_prob: float = 0.1) -> Problem:
    """A chain: vertex ``i`` is linked to ``i + 1`` and nothing else."""
    edges = [(i, i + 1) for i in range(num_vertices - 1)]
    return _problem(np.random.default_rng(seed), num_vertices, edges, max_candidates, scale,
                    with_memory, memory_scale, cap, tie_prob, zero_prob)


def random_tree(num_vertices: int, max_candidates: int = 6, seed: int = 0, *,
                scale: float = 1.0, with_memory: bool = False, memory_scale: float = 1.0,
                cap: float | None = None, tie_prob: float = 0.2,
                zero_prob: float = 0.1) -> Problem:
    """A random tree with shuffled vertex numbers (any vertex may be a leaf or a hub)."""
    rng = np.random.default_rng(seed)
    label = rng.permutation(num_vertices)
    edges = [tuple(sorted((int(label[rng.integers(0, v)]), int(label[v]))))
             for v in range(1, num_vertices)]
    return _problem(rng, num_vertices, sorted(edges), max_candidates, scale,
                    with_memory, memory_scale, cap, tie_prob, zero_prob)


def random_dag(num_vertices: int, max_candidates: int = 6, extra_edges: int = 2, seed: int = 0,
               *, scale: float = 1.0, with_memory: bool = False, memory_scale: float = 1.0,
               cap: float | None = None, tie_prob: float = 0.2,
               zero_prob: float = 0.1) -> Problem:
    """A random tree plus ``extra_edges`` distinct extra edges (as many as fit), so it has cycles
    when seen undirected (diamonds, fork-joins) once ``num_vertices >= 3``."""
    rng = np.random.default_rng(seed)
    edges = {(int(rng.integers(0, v)), v) for v in range(1, num_vertices)}
    room = num_vertices * (num_vertices - 1) // 2 - len(edges)
    wanted = len(edges) + min(extra_edges, room)
    while len(edges) < wanted:
        u, v = sorted(rng.choice(num_vertices, size=2, replace=False).tolist())
        edges.add((u, v))
    return _problem(rng, num_vertices, sorted(edges), max_candidates, scale,
                    with_memory, memory_scale, cap, tie_prob, zero_prob)


def random_dense(blocks: int, block_size: int, max_candidates: int = 4, seed: int = 0, *,
                 scale: float = 1.0, with_memory: bool = False, memory_scale: float = 1.0,
                 cap: float | None = None, tie_prob: float = 0.2,
                 zero_prob: float = 0.1) -> Problem:
    """Dense blocks in a chain, as in DenseNet: within a block every vertex reads every
    earlier one (the block's input included), and a block's last vertex is the next
    block's input. ``blocks * block_size + 1`` vertices; each block is a clique."""
    edges, start = [], 0
    for _ in range(blocks):
        members = range(start, start + block_size + 1)
        edges += [(u, v) for v in members for u in members if u < v]
        start += block_size
    return _problem(np.random.default_rng(seed), start + 1, edges, max_candidates, scale,
                    with_memory, memory_scale, cap, tie_prob, zero_prob)


def scale_costs(problem: Problem, factor: float) -> Problem:
    """The same Problem with every cost (vertex and edge) multiplied by ``factor``."""
    return Problem([c * factor for c in problem.vertex_costs], problem.edges,
                   [m * factor for m in problem.edge_costs], problem.names, problem.memory,
                   problem.memory_cap, problem.unit, problem.candidates, problem.devices)


def add_memory(problem: Problem, seed: int = 0, memory_scale: float = 1.0) -> Problem:
    """The same Problem with random memory vectors (replacing any it had), uncapped."""
    rng = np.random.default_rng(seed)
    memory = [rng.integers(1, MAX_MEMORY, size=c.size) * float(memory_scale)
              for c in problem.vertex_costs]
    return Problem(problem.vertex_costs, problem.edges, problem.edge_costs, problem.names,
                   memory, None, problem.unit, problem.candidates, problem.devices)


def cap_memory(problem: Problem, fraction: float) -> Problem:
    """Cap memory ``fraction`` of the way from the least to the most any strategy uses.

    ``fraction < 0`` gives a cap nothing fits under. The cap sits half a memory
    unit (the gcd of the footprints) off any reachable total, so whether a
    strategy fits never hangs on rounding.
    """
    if problem.memory is None:
        raise ValueError("cap_memory needs a Problem with memory vectors (see add_memory)")
    low = problem.min_memory()
    high = float(sum(m.max() for m in problem.memory))
    unit = _memory_unit(problem.memory)
    if fraction < 0:
        return problem.with_memory_cap(low - unit / 2)
    steps = np.floor((low + fraction * (high - low)) / unit)
    return problem.with_memory_cap(float(steps * unit + unit / 2))


def _memory_unit(memory: list[np.ndarray]) -> float:
    """The largest ``smallest / d`` that divides every footprint (every total is a multiple)."""
    values = np.concatenate(memory)
    values = values[values > 0]
    if values.size == 0:
        return 1.0
    smallest = float(values.min())
    for d in range(1, 1025):
        counts = values / (smallest / d)
        if np.allclose(counts, np.round(counts), rtol=0, atol=1e-9):
            return smallest / d
    return smallest / 1024  # footprints with no common unit: ties at the cap are unlikely


def _costs(rng: np.random.Generator, shape, tie_prob: float, zero_prob: float) -> np.ndarray:
    top = 4 if rng.random() < tie_prob else 100
    c = rng.integers(0, top, size=shape).astype(float)
    c[rng.random(shape) < zero_prob] = 0.0
    return c


def _problem(rng, n, edges, max_candidates, scale, with_memory, memory_scale, cap,
             tie_prob, zero_prob) -> Problem:
    sizes = rng.integers(1, max_candidates + 1, size=n)
    vertex = [_costs(rng, k, tie_prob, zero_prob) * scale for k in sizes]
    matrices = [_costs(rng, (sizes[u], sizes[v]), tie_prob, zero_prob) * scale for u, v in edges]
    memory = ([rng.integers(1, MAX_MEMORY, size=k) * float(memory_scale) for k in sizes]
              if with_memory or cap is not None else None)
    problem = Problem(vertex, edges, matrices, memory=memory)
    return problem if cap is None else cap_memory(problem, cap)

"""Seeded random Problems: connected DAG-shaped graphs with random costs."""
from __future__ import annotations

import numpy as np

from pase.problem import Problem


def random_problem(
    num_vertices: int,
    max_candidates: int = 6,
    extra_edges: int = 2,
    seed: int = 0,
    *,
    tie_prob: float = 0.2,
    zero_prob: float = 0.1,
    with_memory: bool = False,
) -> Problem:
    """A connected random Problem.

    A random spanning tree (each vertex joins an earlier one) plus up to
    ``extra_edges`` more forward edges. Costs are small non-negative integers so
    ties are common; ``zero_prob`` of the entries are zero. With ``with_memory``
    every candidate also gets a random memory footprint, and no cap is set.
    """
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, max_candidates + 1, size=num_vertices)

    def costs(shape):
        scale = 4 if rng.random() < tie_prob else 100
        c = rng.integers(0, scale, size=shape).astype(float)
        c[rng.random(shape) < zero_prob] = 0.0
        return c

    edges = {(int(rng.integers(0, v)), v) for v in range(1, num_vertices)}
    for _ in range(extra_edges):
        if num_vertices < 3:
            break
        u, v = sorted(rng.choice(num_vertices, size=2, replace=False).tolist())
        edges.add((u, v))
    edges_sorted = sorted(edges)
    memory = [rng.integers(1, 50, size=k).astype(float) for k in sizes] if with_memory else None
    return Problem(
        [costs(k) for k in sizes],
        edges_sorted,
        [costs((sizes[u], sizes[v])) for u, v in edges_sorted],
        memory=memory,
    )

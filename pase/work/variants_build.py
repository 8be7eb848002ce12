"""Variants in a Problem: each vertex's candidates are its configs times its kept variants.

Used by :meth:`pase.costing.CostModel.problem` for a cost model that prices an
op's work (``work(op, configs) -> OpWork`` and ``work_costs(work) -> seconds``)
and has the ``zero`` / ``recompute`` options (the alpha-beta model).

Candidate layout of a vertex with ``K`` configs: candidate ``k < K`` is config
``k`` under the *base* variant (the options' fixed stage and recompute flag,
``auto`` read as 0 / none), so a choice made of config indices means "every op at
the base variant"; then, config by config, each other variant that no variant of
the same config dominates in (time, memory): one at most as slow and as large,
and better in one of the two. Variants with equal time and memory are kept once.
Edges do not depend on variants: an edge's matrix is the config matrix with rows
and columns repeated (:func:`expand_matrix`).
"""
from __future__ import annotations

from typing import Any, Hashable, Mapping

import numpy as np

from pase.errors import OptionError
from pase.ir import Graph, Op
from pase.problem import VariantMap
from pase.work.variants import (
    DEFAULT,
    Variant,
    apply_variant,
    data_parallel_groups,
    variant_from_json,
)

# Relative slack when comparing times of two variants (sums in another order).
TIME_RTOL = 1e-12


def supports_variants(model: Any) -> bool:
    """Whether ``model`` prices an op from its work and has the variant options."""
    return all(hasattr(model, a) for a in ("work", "work_costs", "zero", "recompute"))


def model_choices(model: Any) -> list[Variant] | None:
    """The variants ``model``'s options allow, the base first; None when only the default
    applies (the Problem is then built exactly as without variants)."""
    if not supports_variants(model):
        return None
    from pase.work.variants import variant_choices

    choices = variant_choices(str(model.zero), str(model.recompute))
    fixed = getattr(model, "fixed_variants", None)
    if choices == [DEFAULT] and not fixed:
        return None
    return choices


def op_choices(model: Any, op: Op, choices: list[Variant]) -> list[Variant]:
    """The variants searched for ``op``: the model's, or the one fixed for it
    (:meth:`pase.costing.CostModel.with_variants`: every op fixed, unnamed ops at the base)."""
    fixed = getattr(model, "fixed_variants", None)
    if fixed is None:
        return choices
    return [fixed.get(op.name, choices[0])]


def check_fixed_variants(graph: Graph, fixed: Mapping[str, Any]) -> dict[str, Variant]:
    """``{op: Variant}`` from ``{op: Variant | {"zero": .., "recompute": ..}}``, ops checked."""
    out = {}
    for name, v in fixed.items():
        if name not in graph:
            raise OptionError(f"variants name unknown op {name!r} (graph {graph.name!r})")
        out[str(name)] = variant_from_json(v, f"variant of op {name!r}")
    return out


def variant_terms(model: Any, op: Op, configs: np.ndarray, choices: list[Variant]
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[Variant]]:
    """Cost, memory, config index and variant of each kept candidate of ``op``."""
    base = model.work(op, configs)
    K = len(configs)
    groups = data_parallel_groups(base)
    costs, mems = [], []
    for v in choices:
        w = apply_variant(base, v.zero if groups else 0, v.recompute)
        costs.append(np.asarray(model.work_costs(w), dtype=np.float64))
        # a heterogeneous cluster's memory vector is the smallest-memory device type's share
        mems.append(np.asarray(model.work_memory(w) if hasattr(model, "work_memory") else w.memory,
                               dtype=np.float64))
    # ZeRO over groups of one device changes nothing: such candidates are stage 0
    sharded = np.zeros(K, dtype=bool)
    for dims, _ in groups.values():
        sharded |= np.prod(configs[:, list(dims)], axis=1) > 1 if dims else False
    cost = [costs[0]]
    mem = [mems[0]]
    config_of = [np.arange(K)]
    variant_of = [Variant(choices[0].zero if sharded[k] else 0, choices[0].recompute) for k in range(K)]
    for k in range(K):
        kept = [0]
        for i in range(1, len(choices)):
            t, m = costs[i][k], mems[i][k]
            if not any(_covers(costs[j][k], mems[j][k], t, m) for j in kept):
                kept = [j for j in kept if j == 0 or not _covers(t, m, costs[j][k], mems[j][k])]
                kept.append(i)
        for i in kept[1:]:
            cost.append(costs[i][k:k + 1])
            mem.append(mems[i][k:k + 1])
            config_of.append(np.array([k]))
            variant_of.append(Variant(choices[i].zero if sharded[k] else 0, choices[i].recompute))
    return np.concatenate(cost), np.concatenate(mem), np.concatenate(config_of), variant_of


def _covers(t1: float, m1: float, t2: float, m2: float) -> bool:
    """Whether (t1, m1) is at least as good as (t2, m2) in both (times within TIME_RTOL)."""
    return t1 <= t2 + TIME_RTOL * abs(t2) and m1 <= m2


def expand_matrix(matrix: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """A config matrix on candidates: ``matrix[rows[i], cols[j]]`` (a view-free copy; the
    identity layouts return ``matrix`` itself)."""
    if len(rows) == matrix.shape[0] and len(cols) == matrix.shape[1]:
        return matrix
    return matrix[rows[:, None], cols[None, :]]


def all_variant_terms(model: Any, graph: Graph, space: Any, shape: Any, choices: list[Variant]
                      ) -> tuple[list, list[VariantMap]]:
    """Per vertex (cost, memory) of its kept candidates and its VariantMap; a vertex that
    shares its layer's vectors (``shape.vertex_shared_with``) and variants shares them."""
    fixed = getattr(model, "fixed_variants", None)
    if fixed is not None:
        check_fixed_variants(graph, fixed)
    terms: list = []
    maps: list[VariantMap] = []
    seen: dict[Hashable, int] = {}
    for i, op in enumerate(graph.ops):
        mine = op_choices(model, op, choices)
        first = shape.vertex_shared_with[i] if shape.vertex_shared_with else i
        key = (first, tuple(mine))
        if key in seen:  # the same layer with the same variants: shared, read-only
            j = seen[key]
            for a in (*terms[j], maps[j].config, maps[j].zero, maps[j].recompute):
                a.flags.writeable = False
            terms.append(terms[j])
            maps.append(maps[j])
            continue
        seen[key] = i
        cost, mem, config_of, variant_of = variant_terms(model, op, space.configs[i], mine)
        terms.append((cost, mem))
        maps.append(VariantMap(config_of.astype(np.int64),
                               np.array([v.zero for v in variant_of], dtype=np.int8),
                               np.array([v.recompute for v in variant_of], dtype=bool)))
    return terms, maps


def expanded_shape(shape: Any, maps: list[VariantMap]) -> Any:
    """``shape`` with each vertex's candidates and each edge's sharing under the variant maps:
    two edges share a matrix when their config matrices do and their ends expand alike."""
    from pase.costing import ProblemShape, array_key

    sizes = np.array([len(m.config) for m in maps], dtype=np.int64)
    first_with: dict[Hashable, int] = {}
    shared = []
    for e, (u, v) in enumerate(shape.edges):
        key = (shape.shared_with[e], array_key(maps[u].config), array_key(maps[v].config))
        shared.append(first_with.setdefault(key, e))
    vertex_shared = []
    first_map: dict[int, int] = {}
    for i, m in enumerate(maps):
        vertex_shared.append(first_map.setdefault(id(m), i))
    largest = max(shape.edges, key=lambda e: int(sizes[e[0]]) * int(sizes[e[1]]), default=None)
    return ProblemShape(shape.names, sizes, shape.edges, shape.has_memory, largest, shared,
                        vertex_shared, list(shape.shared_with))

"""Variants in a Problem: each vertex's candidates are its configs times its kept variants.

Used by :meth:`pase.costing.CostModel.problem` for a cost model that prices an
op's work (``work(op, configs) -> OpWork`` and ``work_costs(work) -> seconds``)
and has the ``zero`` / ``recompute`` options (the alpha-beta model).

Candidate layout of a vertex with ``K`` configs: candidate ``k < K`` is config
``k`` under the *base* variant (the options' fixed stage and recompute flag,
``auto`` read as 0 / none), so a choice made of config indices means "every op at
the base variant"; then, config by config, each other variant that no variant of
the same config dominates: one at most as slow and at most as large in memory, in
state bytes and in activation bytes (so the pruning stays exact for a pipeline
stage that holds several micro-batches' activations). Of variants equal in all
four, the first is kept.
Edges do not depend on variants: an edge's matrix is the config matrix with rows
and columns repeated (:func:`expand_matrix`).
"""
from __future__ import annotations

import copy
from typing import Any, Hashable, Mapping

import numpy as np

from pase.costing.keys import array_key
from pase.costing.shape import ProblemShape
from pase.deadline import check as check_deadline
from pase.errors import OptionError
from pase.gather import outer_take
from pase.ir import Graph, Op
from pase.problem import VariantMap
from pase.work.variants import (
    DEFAULT,
    Variant,
    apply_variant,
    check_op_variant,
    data_parallel_groups,
    variant_choices,
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
    choices = variant_choices(str(model.zero), str(model.recompute))
    fixed = getattr(model, "fixed_variants", None)
    if choices == [DEFAULT] and not fixed:
        return None
    return choices


def bind_variants(model: Any, variants: Mapping[str, Any]) -> Any:
    """A copy of ``model`` that prices every op at one variant (see
    :meth:`pase.costing.CostModel.with_variants`); ``model`` itself when it has no
    variants and every one given is the default."""
    if not supports_variants(model):
        if any(not variant_from_json(v, f"variant of op {op!r}").is_default
               for op, v in variants.items()):
            raise OptionError(f"cost model {model.name!r} has no ZeRO or recomputation; use "
                              f"'alpha-beta' for a strategy with variants")
        return model
    bound = copy.copy(model)
    bound.fixed_variants = {str(op): variant_from_json(v, f"variant of op {op!r}")
                            for op, v in variants.items()}
    return bound


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
        where = f"variant of op {name!r}"
        out[str(name)] = check_op_variant(graph.op(name), variant_from_json(v, where), where)
    return out


def variant_terms(model: Any, op: Op, configs: np.ndarray, choices: list[Variant]
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[Variant]]:
    """Cost, memory, config index and variant of each kept candidate of ``op``."""
    base = model.work(op, configs)
    K = len(configs)
    groups = data_parallel_groups(base)
    # per choice, rows: time, the Problem's memory, state bytes, activation bytes
    terms = np.stack([_criteria(model, apply_variant(base, v.zero if groups else 0, v.recompute))
                      for v in choices])
    # ZeRO over groups of one device changes nothing: such candidates are stage 0
    sharded = np.zeros(K, dtype=bool)
    for dims, _ in groups.values():
        if dims:
            sharded |= np.prod(configs[:, list(dims)], axis=1) > 1
    variant_of = [Variant(choices[0].zero if sharded[k] else 0, choices[0].recompute) for k in range(K)]
    # the kept variants past the base, config by config, each config's in choice order
    ks, extra = np.nonzero(_undominated_all(terms)[1:].T)
    extra = extra + 1
    variant_of += [Variant(choices[i].zero if sharded[k] else 0, choices[i].recompute)
                   for k, i in zip(ks.tolist(), extra.tolist())]
    return (np.concatenate([terms[0, 0], terms[extra, 0, ks]]),
            np.concatenate([terms[0, 1], terms[extra, 1, ks]]),
            np.concatenate([np.arange(K), ks.astype(np.int64)]), variant_of)


def _criteria(model: Any, work: Any) -> np.ndarray:
    """``(4, K)``: seconds, the Problem's memory vector (on a heterogeneous cluster, the
    smallest-memory device type's share: ``work_memory``), state and activation bytes;
    a fifth row, the once-a-step seconds, where the model keeps them apart (``once_costs``:
    :mod:`pase.pipeline.stages`)."""
    mem = model.work_memory(work) if hasattr(model, "work_memory") else work.memory
    rows = [np.asarray(model.work_costs(work), dtype=np.float64),
            np.asarray(mem, dtype=np.float64),
            np.asarray(work.state_bytes, dtype=np.float64),
            np.asarray(work.activation_bytes, dtype=np.float64)]
    if hasattr(model, "once_costs"):  # a pipeline stage prices its once-a-step tail apart
        rows.append(np.asarray(model.once_costs(work), dtype=np.float64))
    return np.stack(rows)


def _undominated(rows: np.ndarray) -> list[int]:
    """Indices of the rows (one per choice, columns as :func:`_criteria`) that no kept row
    covers; row 0 (the base) always first. Memory is compared as a whole and split into
    state and activations, so a dropped variant stays dropped when a pipeline stage holds
    several micro-batches' activations (memory = state + m x activations, m >= 1)."""
    kept = [0]
    for i in range(1, len(rows)):
        if not any(_covers(rows[j], rows[i]) for j in kept):
            kept = [j for j in kept if j == 0 or not _covers(rows[i], rows[j])]
            kept.append(i)
    return kept


def _undominated_all(terms: np.ndarray) -> np.ndarray:
    """:func:`_undominated` for every config at once: ``terms`` is ``(choices, criteria, K)``;
    returns the ``(choices, K)`` mask of the kept rows (the same greedy pass, vectorised)."""
    a, b = terms[:, None], terms[None, :]  # covers[j, i, k]: row j covers row i at config k
    covers = (a[:, :, 0] <= b[:, :, 0] + TIME_RTOL * np.abs(b[:, :, 0])) & \
        (a[:, :, 1:] <= b[:, :, 1:]).all(axis=2)
    kept = np.zeros((len(terms), terms.shape[2]), dtype=bool)
    kept[0] = True
    for i in range(1, len(terms)):
        add = ~(covers[:, i] & kept).any(axis=0)
        dropped = covers[i] & add
        dropped[0] = False
        kept &= ~dropped
        kept[i] = add
    return kept


def _covers(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` is at least as good as ``b`` in every criterion (times within TIME_RTOL)."""
    return bool(a[0] <= b[0] + TIME_RTOL * abs(b[0]) and (a[1:] <= b[1:]).all())


def expand_matrix(matrix: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """A config matrix on candidates: ``matrix[rows[i], cols[j]]`` (a view-free copy; the
    identity layouts return ``matrix`` itself)."""
    if len(rows) == matrix.shape[0] and len(cols) == matrix.shape[1]:
        return matrix
    return outer_take(matrix, rows, cols)


def all_variant_terms(model: Any, graph: Graph, space: Any, shape: ProblemShape,
                      choices: list[Variant]) -> tuple[list, list[VariantMap]]:
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
        check_deadline(f"costing op {op.name!r} ({i + 1} of {len(graph.ops)})")
        cost, mem, config_of, variant_of = variant_terms(model, op, space.configs[i], mine)
        terms.append((cost, mem))
        maps.append(VariantMap(config_of.astype(np.int64),
                               np.array([v.zero for v in variant_of], dtype=np.int8),
                               np.array([v.recompute for v in variant_of], dtype=bool)))
    return terms, maps


def expanded_shape(shape: ProblemShape, maps: list[VariantMap]) -> ProblemShape:
    """``shape`` with each vertex's candidates and each edge's sharing under the variant maps:
    two edges share a matrix when their config matrices do and their ends expand alike."""
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
                        vertex_shared, list(shape.shared_with), port_classes=shape.port_classes)

"""The CostModel interface (module `pase.costing`): Graph + configuration space -> Problem.

A cost model prices every candidate config of every op (a vertex cost) and every
pair of configs across an edge (a re-distribution cost). Solvers never see it;
they see the Problem it builds.

Building is guarded: :func:`problem_shape` predicts the Problem's sizes, edges
and array bytes from the configuration space alone, and :meth:`CostModel.problem`
refuses with a :class:`~pase.errors.TooLargeError` before allocating anything
when the arrays would exceed a budget (:data:`DEFAULT_BUILD_BUDGET`).
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Mapping

import numpy as np

from pase.errors import OptionError, TooLargeError, check_float
from pase.ir import Graph, Op, Port
from pase.problem import Candidates, Problem, VariantMap
from pase.space import ConfigSpace
from pase.work import variants_build as vb

# Bytes of cost arrays a Problem build may allocate unless told otherwise. At the
# peak a build holds these plus about two of the largest edge matrices.
DEFAULT_BUILD_BUDGET = 4 * 2**30

# Every Problem array is float64.
_ITEM_BYTES = 8


@dataclass(frozen=True, eq=False)  # eq would compare numpy arrays ambiguously
class ProblemShape:
    """What a Problem will look like, known before any cost is computed.

    Attributes:
        names: vertex (op) names.
        sizes: candidates per vertex (int64).
        edges: ``(u, v)`` pairs with ``u < v``, sorted and unique: connections
            between the same two ops merged, as :class:`~pase.problem.Problem` does.
        has_memory: whether the Problem will carry memory vectors.
        largest_edge: ``(producer, consumer)`` of the largest edge matrix, or None.
        shared_with: per edge, the index of the first edge whose matrix it
            shares (its own index when it has its own); see :meth:`CostModel.edge_key`.
        vertex_shared_with: per vertex, the index of the first vertex whose cost
            (and memory) vectors it shares; see :meth:`CostModel.vertex_key`.
            Empty means none is shared.
    """

    names: list[str]
    sizes: np.ndarray
    edges: list[tuple[int, int]]
    has_memory: bool
    largest_edge: tuple[int, int] | None
    shared_with: list[int]
    vertex_shared_with: list[int] = field(default_factory=list)
    base_shared_with: list[int] = field(default_factory=list)  # with variants: before expansion

    @property
    def num_vertices(self) -> int:
        return len(self.names)

    @property
    def vertex_bytes(self) -> int:
        """Bytes of the vertex-cost vectors, a shared vector counted once (the memory
        vectors are as large again)."""
        if not self.vertex_shared_with:
            return _ITEM_BYTES * int(self.sizes.sum())
        return _ITEM_BYTES * sum(int(self.sizes[v]) for v, first in enumerate(self.vertex_shared_with)
                                 if first == v)

    def edge_bytes(self, u: int, v: int) -> int:
        """Bytes of one ``(K_u, K_v)`` edge matrix."""
        return _ITEM_BYTES * int(self.sizes[u]) * int(self.sizes[v])

    @property
    def array_bytes(self) -> int:
        """Bytes of every vertex-cost vector, edge matrix and memory vector (a shared
        edge matrix counted once)."""
        edges = sum(self.edge_bytes(u, v) for e, (u, v) in enumerate(self.edges)
                    if self.shared_with[e] == e)
        return self.vertex_bytes * (2 if self.has_memory else 1) + edges

    def describe_largest_edge(self) -> str:
        """``"a -> b (K_a x K_b, N MiB)"`` for the largest edge matrix ("" when none)."""
        if self.largest_edge is None:
            return ""
        u, v = self.largest_edge
        return (f"{self.names[u]} -> {self.names[v]} ({int(self.sizes[u])} x {int(self.sizes[v])}, "
                f"{_format_bytes(self.edge_bytes(u, v))})")


def problem_shape(graph: Graph, space: ConfigSpace, *,
                  cost_model: "CostModel | None" = None) -> ProblemShape:
    """The shape of the Problem ``cost_model`` would build on ``space``, without costs.

    Without a cost model every connection is an edge, no matrix is shared and
    memory vectors are counted: an upper bound on what any model builds.

    Examples:
        >>> from pase.registry import MODELS
        >>> g = MODELS.get("chain")(length=3)
        >>> shape = problem_shape(g, ConfigSpace(g, 4))
        >>> shape.num_vertices, shape.edges
        (3, [(0, 1), (1, 2)])
    """
    return _plan(graph, space, cost_model)[0]


_Connection = tuple[int, int, int, int]  # (producer, output, consumer, input) indices


def graph_connections(graph: Graph) -> list[_Connection]:
    """The graph's connections as ``(producer, output, consumer, input)`` indices."""
    return [(graph.index(c.src), c.src_output, graph.index(c.dst), c.dst_input)
            for c in graph.connections]


def tied_connections(graph: Graph) -> list[_Connection]:
    """``(owner, -1 - j, user, -1 - k)`` for each op whose first parameter is tied to
    another op's (``tied``): the owner keeps the matrix (weight ``j``) in its layout
    and the user reads it as its weight ``k``, so the matrix is re-laid forward and its
    gradient back, like an activation between two ops. A negative port index names a
    weight (see :func:`connection_ports`)."""
    out = []
    for v, op in enumerate(graph.ops):
        owner = op.attrs.get("tied")
        if owner is None or owner not in graph:
            continue
        u = graph.index(owner)
        j, k = _first_parameter(graph.ops[u]), _first_parameter(op)
        if j is not None and k is not None:
            out.append((u, -1 - j, v, -1 - k))
    return out


def connection_ports(graph: Graph, conn: _Connection) -> tuple[Op, Port, Op, Port]:
    """The ops and ports of a connection: output/input indices, or ``-1 - j`` for weight j."""
    u, out, v, inp = conn
    pu, pv = graph.ops[u], graph.ops[v]
    return (pu, pu.outputs[out] if out >= 0 else pu.weights[-1 - out],
            pv, pv.inputs[inp] if inp >= 0 else pv.weights[-1 - inp])


def _first_parameter(op: Op) -> int | None:
    return next((j for j, w in enumerate(op.weights) if op.is_parameter(w)), None)


def _plan(graph: Graph, space: ConfigSpace, cost_model: "CostModel | None"
          ) -> tuple[ProblemShape, list[list[_Connection]]]:
    """The shape, and the costed connections of each of its edges."""
    _check_space(graph, space)
    connections = graph_connections(graph) if cost_model is None else cost_model.edges(graph)
    by_pair: dict[tuple[int, int], list[_Connection]] = {}
    for conn in connections:
        u, _, v, _ = conn
        by_pair.setdefault((min(u, v), max(u, v)), []).append(conn)
    edges = sorted(by_pair)
    shared_with: list[int] = []
    first_with_key: dict[Hashable, int] = {}
    for e, pair in enumerate(edges):
        conns = by_pair[pair]
        key = None
        # Only a single connection, oriented as the Problem stores it, can be shared as is.
        if cost_model is not None and len(conns) == 1 and conns[0][0] < conns[0][2]:
            u, _, v, _ = conns[0]
            pu, port_u, pv, port_v = connection_ports(graph, conns[0])
            key = cost_model.edge_key(pu, port_u, space.configs[u], pv, port_v, space.configs[v])
        shared_with.append(e if key is None else first_with_key.setdefault(key, e))
    vertex_shared_with: list[int] = []
    if cost_model is not None:
        first_with_vertex_key: dict[Hashable, int] = {}
        for v, op in enumerate(graph.ops):
            vkey = cost_model.vertex_key(op, space.configs[v])
            vertex_shared_with.append(v if vkey is None else first_with_vertex_key.setdefault(vkey, v))
    sizes = np.array(space.sizes, dtype=np.int64)
    largest = max(edges, key=lambda e: int(sizes[e[0]]) * int(sizes[e[1]]), default=None)
    producer = None if largest is None else tuple(by_pair[largest][0][::2])
    shape = ProblemShape([op.name for op in graph.ops], sizes, edges,
                         True if cost_model is None else cost_model.has_memory(), producer, shared_with,
                         vertex_shared_with)
    return shape, [by_pair[pair] for pair in edges]


def check_build_budget(shape: ProblemShape, memory_budget: float | None = None) -> None:
    """Raise TooLargeError when ``shape``'s arrays exceed ``memory_budget`` bytes.

    ``None`` means :data:`DEFAULT_BUILD_BUDGET`; ``math.inf`` turns the check off.
    """
    budget = DEFAULT_BUILD_BUDGET if memory_budget is None else check_float(
        "memory_budget", memory_budget, 0.0, strict=True, finite=False)
    need = shape.array_bytes
    if need > budget:
        biggest = shape.describe_largest_edge()
        raise TooLargeError(
            f"the Problem's cost arrays would take {_format_bytes(need)}, over the "
            f"{_format_bytes(budget)} build budget"
            f"{f'; the largest edge matrix is {biggest}' if biggest else ''}; use fewer devices, "
            f"a larger --cutoff or --powers-of-two (or raise the build budget: --build-budget, memory_budget= in the API)")


def pairwise(src_rows: np.ndarray, dst_rows: np.ndarray,
             kernel: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """An edge matrix computed once per distinct pair of key rows.

    ``kernel(a, b)`` gets ``a`` of shape ``(S, 1, c)`` and ``b`` of ``(1, D, c)``
    (the distinct rows of ``src_rows`` ``(K_u, c)`` and ``dst_rows`` ``(K_v, d)``)
    and returns their ``(S, D)`` matrix; the result is expanded to ``(K_u, K_v)``
    with one allocation. Edge costs depend on a config only through a few
    numbers (a port's split factors), so ``S`` and ``D`` are often a tenth of
    ``K``: this saves time and the kernel's ``(K_u, K_v, rank)`` temporaries.

    Examples:
        >>> a = np.array([[1], [2], [1]]); b = np.array([[3], [3]])
        >>> pairwise(a, b, lambda x, y: (x * y)[..., 0])
        array([[3, 3],
               [6, 6],
               [3, 3]])
    """
    src, src_of = np.unique(src_rows, axis=0, return_inverse=True)
    dst, dst_of = np.unique(dst_rows, axis=0, return_inverse=True)
    small = kernel(src[:, None, :], dst[None, :, :])
    return small[src_of.reshape(-1)[:, None], dst_of.reshape(-1)[None, :]]


class CostModel(abc.ABC):
    """Base class of cost models. Subclasses set ``name`` and ``unit``."""

    name: str = "abstract"
    unit: str = "FLOP"

    @abc.abstractmethod
    def layer_costs(self, op: Op, configs: np.ndarray) -> np.ndarray:
        """Cost of each config (rows of ``configs``) of ``op``: shape ``(K,)``."""

    @abc.abstractmethod
    def edge_costs(self, producer: Op, output: Port, src_configs: np.ndarray,
                   consumer: Op, input: Port, dst_configs: np.ndarray) -> np.ndarray:
        """Re-distribution cost of each (producer config, consumer config): ``(K_u, K_v)``."""

    def memory(self, op: Op, configs: np.ndarray) -> np.ndarray | None:
        """Bytes per device of each config, or None when the model has no memory notion."""
        return None

    def has_memory(self) -> bool:
        """Whether the model gives memory vectors (it overrides :meth:`memory` or :meth:`vertex_terms`)."""
        cls = type(self)
        return cls.memory is not CostModel.memory or cls.vertex_terms is not CostModel.vertex_terms

    def vertex_terms(self, op: Op, configs: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Layer costs and memory of each config; override to share work between the two."""
        return self.layer_costs(op, configs), self.memory(op, configs)

    def edge_key(self, producer: Op, output: Port, src_configs: np.ndarray,
                 consumer: Op, input: Port, dst_configs: np.ndarray) -> Hashable | None:
        """A key equal for two edges only if their cost matrices are equal, or None.

        Edges with equal keys share one (read-only) matrix in the Problem and it
        is computed once: a Transformer's repeated layers have 256 edges but 16
        distinct matrices. Build keys with :func:`array_key` from exactly what
        :meth:`edge_costs` reads. Default None: every edge has its own matrix.
        """
        return None

    def vertex_key(self, op: Op, configs: np.ndarray) -> Hashable | None:
        """A key equal for two ops only if their :meth:`vertex_terms` are equal, or None.

        Ops with equal keys share one (read-only) cost vector and memory vector,
        computed once: the L identical layers of a model cost one layer's work.
        :func:`op_signature` plus :func:`array_key` of ``configs`` is exact for a
        model whose formulas read neither the op's name nor its producers' names.
        Default None: every op is priced on its own.
        """
        return None

    def edges(self, graph: Graph) -> list[tuple[int, int, int, int]]:
        """The costed connections as (producer, output, consumer, input) indices; a
        negative index ``-1 - j`` names weight ``j`` (:func:`tied_connections`).

        Default: every connection (several between one pair add up in the Problem).
        """
        return graph_connections(graph)

    def problem(self, graph: Graph, space: ConfigSpace, *,
                memory_budget: float | None = None) -> Problem:
        """The Problem of ``graph`` on ``space``.

        Raises TooLargeError, before computing any cost, when its arrays would
        exceed ``memory_budget`` bytes (default :data:`DEFAULT_BUILD_BUDGET`;
        ``math.inf`` for no limit).
        """
        shape, plan = _plan(graph, space, self)
        check_build_budget(shape, memory_budget)
        choices = vb.model_choices(self)
        maps = None
        if choices is None:
            terms = self._vertex_terms(graph, space, shape)
        else:  # candidates are configs x kept variants (pase.work.variants_build)
            terms, maps = vb.all_variant_terms(self, graph, space, shape, choices)
            shape = vb.expanded_shape(shape, maps)
            check_build_budget(shape, memory_budget)
        vertex = [cost for cost, _ in terms]
        memory = [mem for _, mem in terms]
        matrices = self._edge_matrices(graph, space, shape, plan, maps)
        configs = [space.configs[i] if maps is None else space.configs[i][maps[i].config]
                   for i in range(len(graph.ops))]
        candidates = [Candidates(op.kind, op.dim_names, tuple(d.role for d in op.dims), configs[i])
                      for i, op in enumerate(graph.ops)]
        return Problem(vertex, shape.edges, matrices, names=shape.names,
                       unit=self.unit, candidates=candidates, devices=space.devices,
                       memory=None if any(m is None for m in memory) else memory, variants=maps)

    def with_variants(self, variants: Mapping[str, Any]) -> "CostModel":
        """A copy that prices every op at one variant: ``variants[op]`` (a
        :class:`~pase.work.variants.Variant` or ``{"zero": 3, "recompute": true}``) for
        the ops named, the options' fixed stage and recompute flag (``auto`` read as 0 /
        none) for the others; what ``pase evaluate`` does with a strategy's variants.
        Only for a model with the ``zero`` / ``recompute`` options (alpha-beta)."""
        return vb.bind_variants(self, variants)

    def _vertex_terms(self, graph: Graph, space: ConfigSpace, shape: "ProblemShape"
                      ) -> list[tuple[np.ndarray, np.ndarray | None]]:
        terms: list[tuple[np.ndarray, np.ndarray | None]] = []
        for i, op in enumerate(graph.ops):
            first = shape.vertex_shared_with[i] if shape.vertex_shared_with else i
            if first != i:
                terms.append(terms[first])
                continue
            cost, mem = self.vertex_terms(op, space.configs[i])
            terms.append((np.asarray(cost, dtype=np.float64),
                          None if mem is None else np.asarray(mem, dtype=np.float64)))
        for i, first in enumerate(shape.vertex_shared_with):
            if first != i:  # shared, like edge matrices: read-only
                for a in terms[first]:
                    if a is not None:
                        a.flags.writeable = False
        return terms

    def _edge_matrices(self, graph: Graph, space: ConfigSpace, shape: "ProblemShape",
                       plan: list[list[_Connection]], maps: list[VariantMap] | None) -> list[np.ndarray]:
        """Each edge's matrix: computed once per sharing key, then (with variants) its rows
        and columns repeated for each candidate's config."""
        base: dict[int, np.ndarray] = {}
        matrices: list[np.ndarray] = []
        for e, conns in enumerate(plan):
            first = shape.shared_with[e]
            if first != e:
                matrices.append(matrices[first])
                continue
            key = shape.base_shared_with[e] if shape.base_shared_with else e
            if key not in base:
                base[key] = self._edge_sum(graph, space, conns)
            m = base[key]
            if maps is not None:
                u, v = shape.edges[e]
                m = vb.expand_matrix(m, maps[u].config, maps[v].config)
            matrices.append(m)
        for e, first in enumerate(shape.shared_with):
            if first != e:  # shared: a solver writing into it would change other edges
                matrices[first].flags.writeable = False
        return matrices

    def _edge_sum(self, graph: Graph, space: ConfigSpace, conns: list[_Connection]) -> np.ndarray:
        # Connections between one pair are summed as they come, so at most one
        # extra matrix is alive at a time (the Problem would merge them too).
        total = None
        for conn in conns:
            u, _, v, _ = conn
            pu, port_u, pv, port_v = connection_ports(graph, conn)
            m = self.edge_costs(pu, port_u, space.configs[u], pv, port_v, space.configs[v])
            m = np.asarray(m, dtype=np.float64)
            if u > v:
                m = m.T
            total = m if total is None else total + m
        assert total is not None
        return total


def op_signature(op: Op) -> tuple:
    """Everything about ``op`` but its name and its inputs' producers: kind, dims
    (names, sizes, roles), ports (shapes, dim mappings), pinned dims, contiguity and
    attributes. Two ops with equal signatures are the same layer at another place.

    Examples:
        >>> from pase.ir import Dim, Op
        >>> a = Op("a", "Softmax", (Dim("b", 8), Dim("n", 4)), attrs={"axis": 1})
        >>> op_signature(a) == op_signature(Op("z", "Softmax", a.dims, attrs={"axis": 1}))
        True
    """
    ports = tuple(tuple((p.shape, p.dims) for p in group)
                  for group in (op.inputs, op.outputs, op.weights))
    return (op.kind, op.dims, ports, op.pinned, op.contiguous, op.attrs)


def array_key(*parts: object) -> tuple:
    """A hashable key from numpy arrays (by shape, dtype and bytes) and plain values.

    Examples:
        >>> array_key((4, 4), np.array([[1, 2]])) == array_key((4, 4), np.array([[1, 2]]))
        True
        >>> array_key(np.array([1, 2])) == array_key(np.array([[1, 2]]))
        False
    """
    return tuple((p.shape, p.dtype.str, p.tobytes()) if isinstance(p, np.ndarray) else p
                 for p in parts)


def _check_space(graph: Graph, space: ConfigSpace) -> None:
    if space.graph is not graph:
        raise OptionError("the configuration space was built for another graph")


def _format_bytes(n: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"

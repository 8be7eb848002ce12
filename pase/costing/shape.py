"""The shape of a Problem, known before any cost is computed, and the build guard.

:func:`problem_shape` predicts a Problem's sizes, edges and array bytes from the
configuration space alone (and the cost model's sharing keys), so
:func:`check_build_budget` can refuse a build with a
:class:`~pase.errors.TooLargeError` before anything is allocated.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Collection, Hashable

import numpy as np

from pase.costing.keys import build_memo
from pase.deadline import check as check_deadline
from pase.errors import OptionError, TooLargeError, check_float
from pase.ir import Graph, Op, Port
from pase.space import ConfigSpace

if TYPE_CHECKING:  # only for annotations: the model module imports this one
    from pase.costing.model import CostModel

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
        port_classes: the cost model's ``edges_read_port_splits``: the dp's folded
            transfer steps can group configurations into classes.
    """

    names: list[str]
    sizes: np.ndarray
    edges: list[tuple[int, int]]
    has_memory: bool
    largest_edge: tuple[int, int] | None
    shared_with: list[int]
    vertex_shared_with: list[int] = field(default_factory=list)
    base_shared_with: list[int] = field(default_factory=list)  # with variants: before expansion
    port_classes: bool = False

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
    return plan_problem(graph, space, cost_model)[0]


# A connection as (producer, output, consumer, input) indices; a negative port index
# ``-1 - j`` names weight ``j`` (see :func:`connection_ports`).
Connection = tuple[int, int, int, int]


def graph_connections(graph: Graph) -> list[Connection]:
    """The graph's connections as ``(producer, output, consumer, input)`` indices."""
    return [(graph.index(c.src), c.src_output, graph.index(c.dst), c.dst_input)
            for c in graph.connections]


def tied_connections(graph: Graph) -> list[Connection]:
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


def connection_ports(graph: Graph, conn: Connection) -> tuple[Op, Port, Op, Port]:
    """The ops and ports of a connection: output/input indices, or ``-1 - j`` for weight j."""
    u, out, v, inp = conn
    pu, pv = graph.ops[u], graph.ops[v]
    return (pu, pu.outputs[out] if out >= 0 else pu.weights[-1 - out],
            pv, pv.inputs[inp] if inp >= 0 else pv.weights[-1 - inp])


def _first_parameter(op: Op) -> int | None:
    return next((j for j, w in enumerate(op.weights) if op.is_parameter(w)), None)


def plan_problem(graph: Graph, space: ConfigSpace, cost_model: "CostModel | None",
                 among: Collection[int] | None = None
                 ) -> tuple[ProblemShape, list[list[Connection]]]:
    """The shape of the Problem ``cost_model`` builds (any model's upper bound when None),
    and the costed connections of each of its edges, in the shape's edge order; with
    ``among``, only the connections between those ops."""
    _check_space(graph, space)
    connections = graph_connections(graph) if cost_model is None else cost_model.edges(graph)
    if among is not None:
        inside = set(among)
        connections = [c for c in connections if c[0] in inside and c[2] in inside]
    by_pair: dict[tuple[int, int], list[Connection]] = {}
    for conn in connections:
        u, _, v, _ = conn
        by_pair.setdefault((min(u, v), max(u, v)), []).append(conn)
    edges = sorted(by_pair)
    shared_with: list[int] = []
    first_with_key: dict[Hashable, int] = {}
    with build_memo():  # what one layer's edges compute serves the other layers' (keys.py)
        for e, pair in enumerate(edges):
            conns = by_pair[pair]
            key = None
            if cost_model is not None:
                check_deadline(f"keying edge {e + 1} of {len(edges)}")
                key = _edge_sum_key(graph, space, cost_model, conns)
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
                         vertex_shared_with,
                         port_classes=cost_model is not None and cost_model.edges_read_port_splits)
    return shape, [by_pair[pair] for pair in edges]


def _edge_sum_key(graph: Graph, space: ConfigSpace, cost_model: "CostModel",
                  conns: list[Connection]) -> Hashable | None:
    """A key for the sum of an edge's connection matrices, in the order the build adds
    them: each connection's :meth:`~CostModel.edge_key` and whether it is transposed
    (its producer after its consumer in vertex order); None when one has no key."""
    keys = []
    for conn in conns:
        u, _, v, _ = conn
        pu, port_u, pv, port_v = connection_ports(graph, conn)
        key = cost_model.edge_key(pu, port_u, space.configs[u], pv, port_v, space.configs[v])
        if key is None:
            return None
        keys.append((key, u > v))
    return tuple(keys)


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


def _check_space(graph: Graph, space: ConfigSpace) -> None:
    if space.graph is not graph:
        raise OptionError("the configuration space was built for another graph")


def _format_bytes(n: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"

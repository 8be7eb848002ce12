"""The CostModel interface: Graph + configuration space -> Problem.

A cost model prices every candidate config of every op (a vertex cost) and every
pair of configs across an edge (a re-distribution cost). Solvers never see it;
they see the Problem it builds.

Building is guarded: :meth:`CostModel.problem` predicts the Problem's shape
(:func:`~pase.costing.problem_shape`) and refuses with a
:class:`~pase.errors.TooLargeError` before allocating anything when the arrays
would exceed a budget (:data:`~pase.costing.DEFAULT_BUILD_BUDGET`). With the
``zero`` / ``recompute`` options, candidates are configs x variants
(:mod:`pase.costing.variants`).
"""
from __future__ import annotations

import abc
from typing import Any, Collection, Hashable, Mapping

import numpy as np

from pase.costing import variants as vb
from pase.costing.edge_sums import edge_sums
from pase.costing.shape import (
    Connection,
    ProblemShape,
    check_build_budget,
    connection_ports,
    graph_connections,
    plan_problem,
)
from pase.deadline import check as check_deadline
from pase.errors import OptionError
from pase.ir import Graph, Op, Port
from pase.problem import Candidates, Problem, VariantMap
from pase.space import ConfigSpace


class CostModel(abc.ABC):
    """Base class of cost models. Subclasses set ``name`` and ``unit``."""

    name: str = "abstract"
    unit: str = "FLOP"
    # True when an edge matrix reads a config only through its ports' split factors (the
    # paper model): columns then fall in few classes, which the dp's folded transfer steps
    # group (pase.solvers.dp.config_classes), and dry runs predict those steps at that
    # faster rate. A model reading the tiles' placement on devices (alpha-beta) leaves False.
    edges_read_port_splits: bool = False
    # Dim roles this model prices split by factors that do not divide them (padded, as
    # Megatron-LM pads a vocabulary): its space holds such splits (ConfigSpace's
    # padded_roles). Empty here: every tile is exact.
    padded_roles: tuple[str, ...] = ()

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
                memory_budget: float | None = None,
                among: Collection[int] | None = None) -> Problem:
        """The Problem of ``graph`` on ``space``.

        Raises TooLargeError, before computing any cost, when its arrays would
        exceed ``memory_budget`` bytes (default :data:`DEFAULT_BUILD_BUDGET`;
        ``math.inf`` for no limit). ``among``: only the connections between these op
        indices get an edge (one pipeline stage's, priced alone); every op keeps its
        vertex, priced as in the whole graph.
        """
        extra = set(getattr(space, "padded_roles", ())) - set(self.padded_roles)
        if extra:
            raise OptionError(f"cost model {self.name!r} prices exact tiles only, but the space "
                              f"pads dims of role {', '.join(sorted(extra))}; build the space "
                              f"with padded_roles={self.padded_roles!r}")
        shape, plan = plan_problem(graph, space, self, among)
        check_build_budget(shape, memory_budget)
        choices = vb.model_choices(self)
        maps = None
        if choices is None:
            terms = self._vertex_terms(graph, space, shape)
        else:  # candidates are configs x kept variants (pase.costing.variants)
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
        problem = Problem(vertex, shape.edges, matrices, names=shape.names,
                          unit=self.unit, candidates=candidates, devices=space.devices,
                          memory=None if any(m is None for m in memory) else memory, variants=maps)
        problem.check_finite(f"cost model {self.name!r}")  # +inf here is an overflow, never meant
        return problem

    def edge_matrix(self, graph: Graph, space: ConfigSpace, pair: tuple[int, int],
                    variants: list[VariantMap] | None = None) -> np.ndarray:
        """The matrix of the Problem's edge ``pair`` (``u < v``) as :meth:`problem` builds
        it (its connections summed; with ``variants``, the Problem's candidate maps, per
        candidate), alone: a caller that re-prices one edge builds no whole Problem."""
        conns = [c for c in self.edges(graph) if (min(c[0], c[2]), max(c[0], c[2])) == pair]
        if not conns:
            raise OptionError(f"no costed connection between ops {pair[0]} and {pair[1]}")
        m = self._edge_sum(graph, space, conns)
        if variants is not None:
            m = vb.expand_matrix(m, variants[pair[0]].config, variants[pair[1]].config)
        return m

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
            check_deadline(f"costing op {op.name!r} ({i + 1} of {len(graph.ops)})")
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
                       plan: list[list[Connection]], maps: list[VariantMap] | None) -> list[np.ndarray]:
        """Each edge's matrix: computed once per sharing key, then (with variants) its rows
        and columns repeated for each candidate's config."""
        keys = [shape.base_shared_with[e] if shape.base_shared_with else e
                for e in range(len(plan))]
        todo: dict[int, tuple[int, tuple[int, int]]] = {}
        for e, (u, v) in enumerate(shape.edges):
            if shape.shared_with[e] == e and keys[e] not in todo:
                todo[keys[e]] = (e, (len(space.configs[u]), len(space.configs[v])))
        base = edge_sums(todo, lambda key: self._edge_sum(graph, space, plan[todo[key][0]]),
                         len(plan))
        matrices: list[np.ndarray] = []
        for e in range(len(plan)):
            first = shape.shared_with[e]
            if first != e:
                matrices.append(matrices[first])
                continue
            m = base[keys[e]]
            if maps is not None:
                u, v = shape.edges[e]
                m = vb.expand_matrix(m, maps[u].config, maps[v].config)
            matrices.append(m)
        for e, first in enumerate(shape.shared_with):
            if first != e:  # shared: a solver writing into it would change other edges
                matrices[first].flags.writeable = False
        return matrices

    def _edge_sum(self, graph: Graph, space: ConfigSpace, conns: list[Connection]) -> np.ndarray:
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

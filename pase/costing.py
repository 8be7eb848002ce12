"""The CostModel interface (module `pase.costing`): Graph + configuration space -> Problem.

A cost model prices every candidate config of every op (a vertex cost) and every
pair of configs across an edge (a re-distribution cost). Solvers never see it;
they see the Problem it builds.
"""
from __future__ import annotations

import abc

import numpy as np

from pase.ir import Graph, Op, Port
from pase.problem import Candidates, Problem
from pase.space import ConfigSpace


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

    def vertex_terms(self, op: Op, configs: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Layer costs and memory of each config; override to share work between the two."""
        return self.layer_costs(op, configs), self.memory(op, configs)

    def edges(self, graph: Graph) -> list[tuple[int, int, int, int]]:
        """The costed connections as (producer, output, consumer, input) indices.

        Default: every connection (several between one pair add up in the Problem).
        """
        return [(graph.index(c.src), c.src_output, graph.index(c.dst), c.dst_input)
                for c in graph.connections]

    def problem(self, graph: Graph, space: ConfigSpace) -> Problem:
        if space.graph is not graph:
            raise ValueError("the configuration space was built for another graph")
        terms = [self.vertex_terms(op, space.configs[i]) for i, op in enumerate(graph.ops)]
        vertex = [cost for cost, _ in terms]
        memory = [mem for _, mem in terms]
        pairs, matrices = [], []
        for u, out, v, inp in self.edges(graph):
            pu, pv = graph.ops[u], graph.ops[v]
            matrices.append(self.edge_costs(pu, pu.outputs[out], space.configs[u],
                                            pv, pv.inputs[inp], space.configs[v]))
            pairs.append((u, v))
        candidates = [Candidates(op.kind, op.dim_names, tuple(d.role for d in op.dims), space.configs[i])
                      for i, op in enumerate(graph.ops)]
        return Problem(vertex, pairs, matrices, names=[op.name for op in graph.ops], unit=self.unit,
                       candidates=candidates, devices=space.devices,
                       memory=None if any(m is None for m in memory) else memory)

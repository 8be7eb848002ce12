"""The CostModel interface (package `pase.costing`): Graph + configuration space -> Problem.

- :mod:`pase.costing.model`: :class:`CostModel`, the base class every cost model
  subclasses, and its Problem build.
- :mod:`pase.costing.shape`: :func:`problem_shape` and the build guard
  (:func:`check_build_budget`, :data:`DEFAULT_BUILD_BUDGET`), the graph's connections.
- :mod:`pase.costing.keys`: sharing keys (:func:`array_key`, :func:`op_signature`)
  and :func:`pairwise`.
- :mod:`pase.costing.variants`: candidates as configs x variants (ZeRO, recompute).

The names below are the interface cost models and tools import
(``from pase.costing import CostModel``). ``keys`` imports nothing else of the
package, ``shape`` only ``keys``, ``variants`` builds on them and ``model`` on all three.
"""
from pase.costing.keys import array_key, op_signature, pairwise
from pase.costing.model import CostModel
from pase.costing.shape import (
    DEFAULT_BUILD_BUDGET,
    Connection,
    ProblemShape,
    check_build_budget,
    connection_ports,
    graph_connections,
    problem_shape,
    tied_connections,
)

__all__ = ["DEFAULT_BUILD_BUDGET", "Connection", "CostModel", "ProblemShape", "array_key",
           "check_build_budget", "connection_ports", "graph_connections", "op_signature", "pairwise",
           "problem_shape", "tied_connections"]

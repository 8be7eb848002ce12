"""A topology-aware alpha-beta cost model: seconds on a real cluster.

Each op's per-device work (:mod:`pase.work`) is priced on a
:class:`~pase.cluster.Cluster`:

- compute: ``FLOP / (peak_tflops * 1e12 * efficiency)``, forward plus backward;
- collectives: the alpha-beta ring formulas, hierarchical when a group spans
  nodes (:mod:`pase.work.collectives`): ring all-reduce ``2(q-1)(a + n/(qB))``,
  all-gather and reduce-scatter ``(q-1)(a + n/(qB))``; across ``N`` nodes of
  ``L`` devices, reduce-scatter inside nodes, all-reduce across nodes, all-gather
  inside nodes (Thakur, Rabenseifner & Gropp, IJHPCA 2005; NCCL docs). Whether a
  group spans nodes follows the device mapping of :mod:`pase.work`. Every
  collective is charged in full, parameter-gradient syncs included: the model
  does not credit their overlap with compute (the simulator does);
- re-distribution on an edge: the bytes each device must receive (the paper's
  tile-overlap rule, in bytes), once forward for the activation and once
  backward for its gradient, each ``a + bytes/B`` on the slowest link crossed:
  the inter-node link when the producer's or the consumer's devices
  (ranks ``0 .. max(P_u, P_v) - 1``) occupy more than one node, else intra-node.
  Every connection is costed (a consumer reading two outputs of one producer
  pays for both), unlike the paper's model.

Costs are seconds. The Problem also carries per-vertex memory vectors (bytes per
device: parameters x optimizer state factor + kept output activations); the
memory cap stays None here (the API sets it).
"""
from __future__ import annotations

import copy
import math

import numpy as np

from pase.cluster import Cluster, get_cluster
from pase.costing import CostModel, array_key, pairwise
from pase.errors import OptionError
from pase.ir import Graph, Op, Port
from pase.problem import Problem
from pase.registry import COST_MODELS
from pase.space import ConfigSpace
from pase.work import OPTIMIZER_STATE, collective_time, group_topology, op_work, overlap_elements
from pase.work.ops import OpWork
from pase.work.tiles import port_factors


@COST_MODELS.register("alpha-beta", "seconds on a cluster: compute at a fraction of peak, "
                      "hierarchical ring collectives, link latency and bandwidth")
class AlphaBetaCostModel(CostModel):
    """Costs in seconds on a cluster (alpha-beta communication).

    Args:
        cluster: a :class:`~pase.cluster.Cluster`, a preset name (``"dgx-a100"``,
            ``"dgx-a100x2"``) or a cluster JSON path; presets grow to as many nodes
            as the ConfigSpace's device count needs (resolved in :meth:`problem`).
        efficiency: fraction of the device's peak FLOP/s that compute reaches, in
            ``(0, 1]`` (default 0.5).
        bytes_per_element: size of one tensor element, default 4 (fp32).
        optimizer: ``"adam"`` (weights, gradients and two moments: 4x the weight
            bytes), ``"momentum"`` (3x) or ``"sgd"`` (2x); memory vectors only.
    """

    name = "alpha-beta"
    unit = "s"

    def __init__(self, cluster: str | Cluster = "dgx-a100", efficiency: float = 0.5,
                 bytes_per_element: float = 4, optimizer: str = "adam"):
        if isinstance(efficiency, bool) or not isinstance(efficiency, (int, float)) \
                or not 0 < efficiency <= 1:
            raise OptionError(f"efficiency must be a number in (0, 1], got {efficiency!r}")
        if isinstance(bytes_per_element, bool) or not isinstance(bytes_per_element, (int, float)) \
                or not bytes_per_element > 0 or math.isinf(bytes_per_element):
            raise OptionError(f"bytes_per_element must be a positive number, got {bytes_per_element!r}")
        if optimizer not in OPTIMIZER_STATE:
            raise OptionError(f"unknown optimizer {optimizer!r}; allowed: {', '.join(OPTIMIZER_STATE)}")
        self.cluster_spec = cluster
        self.cluster = get_cluster(cluster)
        self.efficiency = float(efficiency)
        self.bytes_per_element = float(bytes_per_element)
        self.optimizer = optimizer

    @property
    def flops(self) -> float:
        """Sustained FLOP/s of one device."""
        return self.cluster.device.peak_tflops * 1e12 * self.efficiency

    def work(self, op: Op, configs: np.ndarray) -> OpWork:
        return op_work(op, configs, self.bytes_per_element, self.optimizer)

    def for_devices(self, devices: int) -> "AlphaBetaCostModel":
        """This model on its cluster resolved for ``devices`` devices (a preset grows
        to enough nodes; a fixed cluster that is too small is an OptionError).

        Returns a copy; the model itself is never changed.
        """
        bound = copy.copy(self)
        bound.cluster = get_cluster(self.cluster_spec, devices)
        return bound

    # -- CostModel -----------------------------------------------------------------
    def problem(self, graph: Graph, space: ConfigSpace, *,
                memory_budget: float | None = None) -> Problem:
        """The Problem on ``space.devices`` devices, with per-vertex memory vectors."""
        bound = self.for_devices(space.devices)
        return CostModel.problem(bound, graph, space, memory_budget=memory_budget)

    def memory(self, op: Op, configs: np.ndarray) -> np.ndarray:
        return self.work(op, configs).memory

    def vertex_terms(self, op: Op, configs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        work = self.work(op, configs)  # one decomposition serves both costs and memory
        return self.work_costs(work), work.memory

    def layer_costs(self, op: Op, configs: np.ndarray) -> np.ndarray:
        return self.work_costs(self.work(op, configs))

    def work_costs(self, work: OpWork) -> np.ndarray:
        """Seconds per config: compute plus every collective, serially."""
        total = work.flop / self.flops
        for c in work.collectives:
            nodes, local = group_topology(work.op, work.configs, c.dims, self.cluster)
            total = total + c.rounds * collective_time(c.kind, c.nbytes, nodes, local, self.cluster)
        return total

    def edge_costs(self, producer: Op, output: Port, src_configs: np.ndarray,
                   consumer: Op, input: Port, dst_configs: np.ndarray) -> np.ndarray:
        src, dst = self._rows(producer, output, src_configs), self._rows(consumer, input, dst_configs)
        return pairwise(src, dst, lambda a, b: self._edge_kernel(output.shape, a, b))

    def edge_key(self, producer: Op, output: Port, src_configs: np.ndarray,
                 consumer: Op, input: Port, dst_configs: np.ndarray) -> tuple:
        src, dst = self._rows(producer, output, src_configs), self._rows(consumer, input, dst_configs)
        return array_key(output.shape, src, dst)

    def _rows(self, op: Op, port: Port, configs: np.ndarray) -> np.ndarray:
        """What an edge's cost reads of each config: the port's split factors and
        whether ranks ``0 .. P-1`` span nodes (ranks fill nodes in order, so the
        larger of two such sets spans nodes iff either does)."""
        spans = self.cluster.spans_nodes(np.prod(configs, axis=1)).astype(np.int64)
        return np.column_stack([port_factors(op, port, configs), spans])

    def _edge_kernel(self, shape: tuple[int, ...], src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Seconds for rows ``(port factors..., spans nodes)``: ``(S, 1, r+1)`` x ``(1, D, r+1)``."""
        nbytes = overlap_elements(shape, src[..., :-1], dst[..., :-1]) * self.bytes_per_element
        inter = (src[..., -1] + dst[..., -1]) > 0  # the slowest link crossed is the inter-node one
        latency = np.where(inter, self.cluster.inter.latency_s, self.cluster.intra.latency_s)
        bandwidth = np.where(inter, self.cluster.inter.bytes_per_second,
                             self.cluster.intra.bytes_per_second)
        # Factor 2: the activation forward and its gradient backward.
        return np.where(nbytes > 0, 2.0 * (latency + nbytes / bandwidth), 0.0)

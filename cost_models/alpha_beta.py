"""A topology-aware alpha-beta cost model: seconds on a real cluster.

Each op's per-device work (:mod:`pase.work`) is priced on a
:class:`~pase.cluster.Cluster`:

- compute: ``FLOP / (peak_tflops * 1e12 * efficiency)``, forward plus backward, the
  FLOP in standard units (a multiply-add is two, as the peak counts it;
  :mod:`pase.work.ops`), so ``efficiency`` is the achieved fraction of the dense peak;
  plus the bytes of work priced by memory (an embedding's gather and scatter-add) at
  the device's achieved HBM bandwidth (:mod:`pase.traffic`);
- collectives: the one formula of :mod:`pase.perf.comms` with the idealised
  constants :data:`pase.perf.hardware.IDEAL` (bus bandwidth = the raw link figure):
  a ring all-reduce of ``n`` bytes over ``q`` ranks takes ``2(q-1)/q n/B`` plus
  ``2(q-1)`` hops of latency ``a`` (a tree ``2n/B`` plus ``2 log2 q`` hops when
  faster); all-gather and reduce-scatter ``(q-1)/q n/B`` plus ``q-1`` hops. Across
  ``N`` nodes with ``L`` ranks in each, ``B`` is ``L`` NICs' bandwidth (capped by the
  intra-node link) and the ring's hops are ``L-1`` inside nodes and ``N-1`` across
  (NCCL's bus bandwidth). Whether a
  group spans nodes follows the device mapping of :mod:`pase.work`. Every
  collective is charged in full, parameter-gradient syncs included: the model
  does not credit their overlap with compute (the simulator does);
- re-distribution on an edge (:func:`pase.work.relayout.edge_bytes`, placement by
  :mod:`pase.work.layout`): forward, the bytes the worst device receives to go
  from the producer's output layout to the consumer's input layout; backward,
  separately, the bytes to bring the gradient from the consumer's input layout
  back to the producer's output layout. A replicated source is only sliced (0
  bytes). Each direction costs ``a + bytes/B`` (:func:`pase.perf.comms.point_to_point`)
  on the slowest link a receiver
  crosses (inter-node when the devices it may fetch from, those differing from
  it only in the mesh axes that change, span nodes), and nothing when no bytes
  move. Every connection is costed (a consumer reading two outputs of one
  producer pays for both), unlike the paper's model. With ``reduce_scatter``, a
  GEMM all-reduce that its neighbour only slices is priced on the edge as a
  reduce-scatter (docs/cost-model.md, "The alpha-beta re-distribution rule").

On a heterogeneous cluster (groups of device types, :mod:`pase.cluster`) an op runs
on the smallest prefix of groups (fastest first) that holds its split, priced there
with the slowest device and links of the groups it touches; ``split="balanced"``
gives batch slices shares proportional to speed; memory vectors are in bytes of the
smallest-memory type (docs/heterogeneous.md; :mod:`cost_models.alpha_beta_hetero`).

Costs are seconds. The Problem also carries per-vertex memory vectors (bytes per
device: parameters x optimizer state factor + kept output activations); the
memory cap stays None here (the API sets it). With zero/recompute other than the
defaults, a vertex's candidates are configs x kept variants (pase.costing.variants).
"""
from __future__ import annotations

import copy
import functools
import math
from typing import Collection

import numpy as np

from pase.cluster import PRECISIONS, Cluster, get_cluster
from pase.cost_models import alpha_beta_edges as edges
from pase.cost_models import alpha_beta_hetero as hetero
from pase.costing import CostModel, array_key, op_signature, tied_connections
from pase.costing.keys import memoised
from pase.errors import OptionError
from pase.gather import outer_take
from pase.ir import Graph, Op, Port
from pase.perf.comms import collective_seconds
from pase.perf.hardware import IDEAL
from pase.perf.roofline import achieved_rate, pricer
from pase.problem import Problem
from pase.registry import COST_MODELS
from pase.space import ConfigSpace
from pase.traffic import traffic_rate
from pase.work import OPTIMIZER_STATE, group_topology, op_work
from pase.work.hetero import SPLITS
from pase.work.layout import mesh_order, owned_axes
from pase.work.ops import OpWork
from pase.work.relayout import placement_rows, relayout_matrix

ZERO_CHOICES = ("0", "1", "2", "3", "auto")
COMPUTE_CHOICES = ("flat", "roofline")
RECOMPUTE_CHOICES = ("none", "auto", "all")


def movable_collectives(graph: Graph) -> dict[str, frozenset[str]]:
    """Per op, the GEMM all-reduces ``reduce_scatter`` charges on an edge: ``"out"``
    when the op's (first) output feeds exactly one connection, ``"in<i>"`` for each
    input ``i`` made by another op."""
    fanout: dict[str, int] = {}
    for c in graph.connections:
        if c.src_output == 0:
            fanout[c.src] = fanout.get(c.src, 0) + 1
    moved: dict[str, set[str]] = {}
    for c in graph.connections:
        moved.setdefault(c.dst, set()).add(f"in{c.dst_input}")
    for name, n in fanout.items():
        if n == 1:
            moved.setdefault(name, set()).add("out")
    return {name: frozenset(tags) for name, tags in moved.items()}


@COST_MODELS.register("alpha-beta", "seconds on a cluster: compute at a fraction of peak, "
                      "the calibrated core's rules with idealised constants (the teaching model)")
class AlphaBetaCostModel(CostModel):
    """Costs in seconds on a cluster (alpha-beta communication).

    Args:
        cluster: a :class:`~pase.cluster.Cluster`, a preset name (``"dgx-a100"``,
            ``"dgx-a100x2"``) or a cluster JSON path; presets grow to as many nodes
            as the ConfigSpace's device count needs (resolved in :meth:`problem`).
        efficiency: achieved fraction of the device's dense peak FLOP/s, in ``(0, 1]``
            (default 0.5: 50% of peak; FLOP count a multiply-add as two, as the peak does).
        bytes_per_element: size of one tensor element, default 4 (fp32).
        optimizer: ``"adam"`` (weights, gradients and two moments: 4x the weight
            bytes), ``"momentum"`` (3x) or ``"sgd"`` (2x); memory vectors only.
        reduce_scatter: price a GEMM's in-layer all-reduce as a reduce-scatter
            where its neighbour only slices the result (what GPU compilers emit;
            default False: XLA on CPU emits all-reduce + dynamic-slice). It
            applies to a forward output all-reduce when the output has exactly
            one consumer, and to an input gradient's all-reduce (an input has one
            producer); such a collective is charged on that edge instead of the
            op, as a reduce-scatter when the edge moves no bytes that way and the
            neighbour's layout splits the tensor over every mesh axis of the
            group, else as the all-reduce. An output read by several consumers
            keeps its all-reduce on the op (one whole copy serves them all).
        zero: ZeRO stage over each op's data-parallel group (the devices holding the same
            parameter tile): "0" (default) none, "1" optimizer state, "2" also gradients,
            "3" also parameters, for every op; "auto" searches it per op
            (docs/zero-and-recompute.md).
        recompute: activation recomputation: "none" (default), "all" (every op keeps no
            activations and runs its forward again in backward), "auto" (searched per op).
        split: on a heterogeneous cluster, ``"even"`` tiles (default) or
            ``"balanced"``: batch shares proportional to device speed
            (docs/heterogeneous.md). No effect on a homogeneous cluster.
        compute: ``"flat"`` (default): every FLOP at ``efficiency`` of the peak;
            ``"roofline"``: the performance model's kernels (:mod:`pase.perf.roofline`:
            each GEMM at the efficiency its per-device shape reaches, memory-bound ops at
            HBM speed, a cost per kernel; ``efficiency`` unused), homogeneous clusters only.
        precision: the peak ``compute="roofline"`` runs at: ``bf16`` (default), ``fp16``,
            ``fp8`` or ``fp32``.
    """

    name = "alpha-beta"
    unit = "s"

    def __init__(self, cluster: str | Cluster = "dgx-a100", efficiency: float = 0.5,
                 bytes_per_element: float = 4, optimizer: str = "adam", reduce_scatter: bool = False,
                 zero: str = "0", recompute: str = "none", split: str = "even",
                 compute: str = "flat", precision: str = "bf16"):
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
        # memory vectors are bytes of this device (the least memory of a mixed cluster)
        self.memory_reference = self.cluster.device.memory_bytes
        self.efficiency = float(efficiency)
        self.bytes_per_element = float(bytes_per_element)
        self.optimizer = optimizer
        if not isinstance(reduce_scatter, (bool, np.bool_)):
            raise OptionError(f"reduce_scatter must be true or false, got {reduce_scatter!r}")
        self.reduce_scatter = bool(reduce_scatter)
        zero, recompute = str(zero), str(recompute)
        if zero not in ZERO_CHOICES:
            raise OptionError(f"unknown zero {zero!r}; allowed: {', '.join(ZERO_CHOICES)}")
        if recompute not in RECOMPUTE_CHOICES:
            raise OptionError(f"unknown recompute {recompute!r}; allowed: {', '.join(RECOMPUTE_CHOICES)}")
        if split not in SPLITS:
            raise OptionError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
        self.split = split  # batch shares on a heterogeneous cluster: "even" or "balanced"
        if compute not in COMPUTE_CHOICES:
            raise OptionError(f"unknown compute {compute!r}; allowed: {', '.join(COMPUTE_CHOICES)}")
        if precision not in PRECISIONS:
            raise OptionError(f"unknown precision {precision!r}; allowed: {', '.join(PRECISIONS)}")
        self.compute = compute
        self.precision = precision
        if compute == "roofline":
            if self.cluster.groups:
                raise OptionError("compute=roofline prices a homogeneous cluster; "
                                  f"{self.cluster.name} mixes device types")
            self.cluster.device.peak(precision)  # an unknown peak fails here, naming the device
        self.zero = zero  # ZeRO stage of every op, or "auto" (searched per op)
        self.recompute = recompute  # "none", "all", or "auto" (searched per op)
        self.devices: int | None = None  # set by for_devices (problem); else the cluster's
        # reduce_scatter: per op, the collectives' ports charged on edges ("out", "in<i>")
        self.moved: dict[str, frozenset[str]] = {}

    @property
    def flops(self) -> float:
        """Sustained FLOP/s of one device (2 FLOP per multiply-add)."""
        return self.cluster.device.peak_tflops * 1e12 * self.efficiency

    def compute_rate(self, work: OpWork) -> float | np.ndarray:
        """FLOP/s per config: ``efficiency`` of the peak, or the roofline's achieved rate
        (the op's own work over its kernels' seconds; a variant's extra FLOP run at it)."""
        if self.compute == "flat":
            return self.flops
        base = op_work(work.op, work.configs, self.bytes_per_element, self.optimizer)
        return achieved_rate(work.op, work.configs, base.flop,
                             pricer(self.cluster.device, self.precision))

    def memory_rate(self, work: OpWork) -> np.ndarray:
        """Bytes/s per config for the op's memory traffic (:mod:`pase.traffic`)."""
        if self.compute == "flat" or not work.traffic.any():
            return traffic_rate(work.op, work.configs, work.flop, work.traffic, self.cluster.device)
        base = op_work(work.op, work.configs, self.bytes_per_element, self.optimizer)
        return traffic_rate(work.op, work.configs, base.flop, base.traffic, self.cluster.device,
                            pricer(self.cluster.device, self.precision))

    def work(self, op: Op, configs: np.ndarray) -> OpWork:
        return op_work(op, configs, self.bytes_per_element, self.optimizer)

    def op_collectives(self, op: Op, configs: np.ndarray) -> tuple:
        """The collectives of ``op``'s work (what an edge may take over)."""
        return self.work(op, configs).collectives

    def for_devices(self, devices: int) -> "AlphaBetaCostModel":
        """This model on its cluster resolved for ``devices`` devices (a preset grows
        to enough nodes; a fixed cluster that is too small is an OptionError).

        Returns a copy; the model itself is never changed.
        """
        bound = copy.copy(self)
        bound.cluster = get_cluster(self.cluster_spec, devices)
        if bound.cluster.groups and not bound.cluster.prefixes(devices):
            bound.cluster = bound.cluster.view(devices)  # the devices lie in one group
        bound.devices = int(devices)
        return bound

    def _homogeneous(self, devices: int) -> "AlphaBetaCostModel":
        """This bound model on ranks ``0 .. devices - 1`` as a homogeneous cluster
        (their slowest device and links), even tiles."""
        sub = copy.copy(self)
        sub.cluster = self.cluster.view(devices)
        sub.devices = int(devices)
        return sub

    @property
    def p(self) -> int:
        """The device count placement uses: the bound one, else the cluster's."""
        return self.cluster.devices if self.devices is None else self.devices

    def _at(self, *configs: np.ndarray) -> "AlphaBetaCostModel":
        """This model bound to a device count: its own, else (unbound, as when
        ``problem_shape`` asks for edge keys) the cluster's, grown to the most
        devices a config uses. The placement depends on ``p``."""
        if self.devices is not None:
            return self
        need = max((int(np.prod(np.asarray(c), axis=1).max(initial=1)) for c in configs), default=1)
        return self.for_devices(max(self.cluster.devices, need))

    # -- CostModel -----------------------------------------------------------------
    def problem(self, graph: Graph, space: ConfigSpace, *,
                memory_budget: float | None = None,
                among: Collection[int] | None = None) -> Problem:
        """The Problem on ``space.devices`` devices, with per-vertex memory vectors."""
        bound = self.for_devices(space.devices)
        if self.reduce_scatter:
            bound.moved = movable_collectives(graph)
        return CostModel.problem(bound, graph, space, memory_budget=memory_budget, among=among)

    def edges(self, graph: Graph) -> list[tuple[int, int, int, int]]:
        """Every connection, and a tied parameter's re-layout from its owner's layout to
        its other user's and back (:func:`pase.costing.tied_connections`)."""
        return CostModel.edges(self, graph) + tied_connections(graph)

    def vertex_key(self, op: Op, configs: np.ndarray) -> tuple:
        """Exact: the work formulas read the op's structure, whether each input has a
        producer (an input nobody makes gets no gradient) and, with ``reduce_scatter``,
        which of its all-reduces its edges carry (that depends on its consumers)."""
        return (op_signature(op), tuple(p.source is None for p in op.inputs),
                tuple(sorted(self.moved.get(op.name, ()))), array_key(configs))

    def memory(self, op: Op, configs: np.ndarray) -> np.ndarray:
        return self.work_memory(self.work(op, configs))

    def work_memory(self, work: OpWork) -> np.ndarray:
        """Memory vector: bytes per device; on a heterogeneous cluster, in bytes of
        its smallest-memory type, the default cap (cost_models/alpha_beta_hetero.py),
        also when the devices used lie in one larger-memory group."""
        bound = self._at(work.configs) if self.cluster.groups else self
        if bound.cluster.groups:
            return hetero.memory(bound, work)
        own = bound.cluster.device.memory_bytes
        if own != self.memory_reference:  # e.g. -p 16 on the A100 half of a mixed cluster
            return work.memory * (self.memory_reference / own)
        return work.memory

    def vertex_terms(self, op: Op, configs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        work = self.work(op, configs)  # one decomposition serves both costs and memory
        return self.work_costs(work), self.work_memory(work)

    def layer_costs(self, op: Op, configs: np.ndarray) -> np.ndarray:
        return self.work_costs(self.work(op, configs))

    def work_costs(self, work: OpWork) -> np.ndarray:
        """Seconds per config: compute and memory traffic plus every collective, serially."""
        if self.devices is None:
            return self._at(work.configs).work_costs(work)
        if self.cluster.groups:
            return hetero.work_costs(self, work)
        total = work.flop / self.compute_rate(work) + work.traffic / self.memory_rate(work)
        moved = self.moved.get(work.op.name, frozenset())
        off = None
        for c in work.collectives:
            nodes, _ = group_topology(work.op, work.configs, c.dims, self.cluster, self.p)
            time = c.rounds * collective_seconds(c.kind, c.nbytes, work.group_size(c), nodes,
                                                 self.cluster, IDEAL)
            if c.port is not None and c.port in moved:  # charged on the edge, on the mesh
                off = owned_axes(work.op, work.configs, self.p)[1] if off is None else off
                time = np.where(off, time, 0.0)
            total = total + time
        return total

    def edge_costs(self, producer: Op, output: Port, src_configs: np.ndarray,
                   consumer: Op, input: Port, dst_configs: np.ndarray) -> np.ndarray:
        if self.devices is None:
            return self._at(src_configs, dst_configs).edge_costs(producer, output, src_configs,
                                                                 consumer, input, dst_configs)
        if self.cluster.groups:
            return hetero.edge_costs(self, producer, output, src_configs, consumer, input, dst_configs)
        extra_s, extra_d = self._moved_groups(producer, output, src_configs, consumer, input, dst_configs)
        parts, src_of, dst_of, src, dst = relayout_matrix(
            producer, output, src_configs, consumer, input, dst_configs, self.p, small=True,
            src_extra=extra_s, dst_extra=extra_d)
        seconds = self._seconds(*parts)
        if extra_s is not None:
            seconds = seconds + edges.moved_seconds(self.cluster, self.p, self.bytes_per_element,
                                                    output.shape, src, dst, parts)
        return outer_take(seconds, src_of, dst_of)

    def edge_key(self, producer: Op, output: Port, src_configs: np.ndarray,
                 consumer: Op, input: Port, dst_configs: np.ndarray) -> tuple:
        # What relayout_matrix reads: the placement rows, and (for configs off the
        # mesh) how each op maps its dims to the port's axes and orders them.
        if self.devices is None:
            return self._at(src_configs, dst_configs).edge_key(producer, output, src_configs,
                                                               consumer, input, dst_configs)
        src = placement_rows(producer, output, src_configs, self.p)
        dst = placement_rows(consumer, input, dst_configs, self.p)
        extra = self._moved_groups(producer, output, src_configs, consumer, input, dst_configs)
        if self.cluster.groups:  # placement and shares read the whole configs
            extra = extra + (src_configs, dst_configs, tuple(d.role for d in producer.dims),
                             tuple(d.role for d in consumer.dims), self.split)
        return array_key(output.shape, self.p, src, dst, tuple(map(tuple, producer.port_axes(output))),
                         mesh_order(producer), tuple(map(tuple, consumer.port_axes(input))),
                         mesh_order(consumer), *(e for e in extra if e is not None))

    def _moved_groups(self, producer: Op, output: Port, src_configs: np.ndarray, consumer: Op,
                      input: Port, dst_configs: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """With ``reduce_scatter``: per config, the mesh-axis mask of the producer's
        output all-reduce and of the consumer's input-gradient all-reduce charged on
        this edge (0: none); ``(None, None)`` when nothing is moved here."""
        if not self.moved:
            return None, None
        out_tag = "out" if any(p is output for p in producer.outputs[:1]) else None
        in_tag = next((f"in{i}" for i, q in enumerate(consumer.inputs) if q is input), None)
        masks = []
        for op, configs, tag in ((producer, src_configs, out_tag), (consumer, dst_configs, in_tag)):
            if tag is None or tag not in self.moved.get(op.name, ()):
                masks.append(np.zeros((len(configs), 1), dtype=np.int64))
                continue
            # One layer's op and its copies in the others have equal masks: within a
            # build, computed once per vertex key (exact for the work formulas, whose
            # collectives the mask reads) and what else the work reads of the model.
            vkey = self.vertex_key(op, configs)
            if vkey is None:
                masks.append(self._moved_mask(op, configs, tag))
            else:
                key = ("moved mask", type(self), self.p, self.bytes_per_element, self.optimizer,
                       tuple(getattr(self, "padded_roles", ())), vkey, tag)
                masks.append(memoised(key, functools.partial(self._moved_mask, op, configs, tag)))
        return masks[0], masks[1]

    def _moved_mask(self, op: Op, configs: np.ndarray, tag: str) -> np.ndarray:
        """``(K, 1)``: per config, the mesh-axis mask of ``op``'s all-reduces on port
        ``tag`` (read-only: a build memo may hand it to several edges)."""
        mask = np.zeros((len(configs), 1), dtype=np.int64)
        owns, _ = owned_axes(op, configs, self.p)
        weights = np.left_shift(np.int64(1), np.arange(owns.shape[2], dtype=np.int64))
        for c in self.op_collectives(op, configs):
            if c.port == tag and c.dims:
                mask[:, 0] |= (owns[:, list(c.dims), :].any(axis=1) * weights).sum(axis=1)
        mask.flags.writeable = False
        return mask

    def _seconds(self, forward: np.ndarray, backward: np.ndarray, fwd_axes: np.ndarray,
                 bwd_axes: np.ndarray) -> np.ndarray:
        """Seconds of an edge on this cluster (:func:`cost_models.alpha_beta_edges.edge_seconds`)."""
        return edges.edge_seconds(self.cluster, self.p, self.bytes_per_element, forward, backward,
                                  fwd_axes, bwd_axes)

"""The calibrated cost model's rules: the performance model priced for every config of every op.

``pase evaluate --layout`` prices one named layout with the performance model
(:mod:`pase.perf`), calibrated on published runs. This cost model prices every
candidate config of every op, and every re-layout between them, with the same
rules, so the solvers search the model that prices published runs and every
plan they find can be priced by it (:mod:`pase.cost_models.calibrated_plan`):

- **kernels**: the roofline of :mod:`pase.perf.kernels` per config (each GEMM at
  the efficiency its per-device shape reaches, fused attention, memory-bound ops
  at achieved HBM bandwidth, an embedding lookup as a gather, a fixed cost per
  kernel), forward and backward, times the micro-batches of a step;
- **collectives** at NCCL bus bandwidth for the group's real placement
  (:func:`pase.perf.comms.collective_seconds`: NVLink inside a node, the node's
  network across nodes, ring or tree): an op's forward and backward collectives on
  the critical path each micro-batch; parameter-gradient syncs (and ZeRO's
  reduce-scatter and all-gather) once per step, hidden behind the backward pass
  but for the overlap tax; ZeRO-3's parameter gathers each micro-batch, hidden
  behind the compute they prefetch for, but for the tax;
- **re-layouts** on edges: the bytes :mod:`pase.work.relayout` counts, at the
  achieved bus bandwidth of the links they cross, each micro-batch (priced by
  :mod:`pase.cost_models.calibrated_edges`, a mixin of this class);
- **the optimizer step**: Adam's traffic over the parameters a device updates
  (30 bytes each) at HBM speed;
- **memory**: mixed-precision states (2 + 2 + 12 bytes a parameter: weight,
  gradient, fp32 master and Adam's two moments; fp32: 4 + 4 + 8), sharded by the
  ZeRO stage over the parameter's data-parallel group; kept activations by the
  performance model's rules, each kept tensor charged once to its producer.

A vocabulary may split by a factor that does not divide it: each device holds
``ceil(V / f)``, padded, as Megatron-LM pads it and the layout path prices it
(:mod:`pase.cost_models.calibrated_padding`; the space holds such splits only for this
model, :data:`padded_roles`).

An op's priced work (:class:`PricedWork`) and the collectives it keeps are
:mod:`pase.cost_models.calibrated_work`'s, which the plan pricing reads too.

Candidates are configs times variants (ZeRO stage, recomputation; :mod:`pase.costing.variants`).
``recompute``: ``none``; ``selective`` (the attention core recomputed); ``full``
(every op of every layer recomputed, only layer inputs kept); ``auto`` (searched per op).

Two terms are not a sum over ops, so the Problem carries a bound and the plan
pricing adds the rest (docs/cost-model.md, "The calibrated model"): the
gradient sync is charged at its overlap tax, exact while the backward pass hides
it (the exposed excess is added when the plan is priced, which the solve reports
as a gap); under full recomputation the working set of the layer being rebuilt
is added to the memory of the priced plan.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Collection

import numpy as np

from pase.cluster import PRECISIONS, Cluster, get_cluster
from pase.cost_models import calibrated_hetero as hetero
from pase.cost_models import calibrated_padding as padding
from pase.cost_models.alpha_beta import AlphaBetaCostModel, movable_collectives
from pase.cost_models.calibrated_edges import CalibratedEdges
from pase.cost_models.calibrated_work import (
    PricedWork,
    kept_collectives,
    parameter_elements,
    recomputes,
)
from pase.errors import OptionError
from pase.ir import Graph, Op
from pase.perf.comms import bucket_latency, collective_seconds
from pase.perf.context import OpContext, op_contexts, recomputed
from pase.perf.hardware import Achieved, achieved
from pase.perf.kernels import (
    MEMORY_BOUND,
    VIEWS,
    OpTime,
    attention_time,
    einsum_time,
    is_linear,
    make_pricer,
    memory_bound_time,
)
from pase.perf.layout import padded_extent
from pase.perf.step import OPTIMIZER_BYTES, OPTIMIZER_KERNELS
from pase.problem import Problem
from pase.space import PADDED_ROLES, ConfigSpace
from pase.work import op_work
from pase.work.layout import owned_axes
from pase.work.mapping import group_topology
from pase.work.memory import FP32_BYTES, kept_bytes, state_split
from pase.work.ops import Collective, OpWork, owned_parameters
from pase.work.tiles import port_tiles
from pase.work.variants import Variant

RECOMPUTE = ("none", "selective", "full", "auto")
MAX_MICROBATCHES = 1_000_000  # more micro-batches in one step than any training run takes
_KIND = {"exchange": "send"}  # pase.work's point-to-point exchange is a send


class CalibratedRules(CalibratedEdges, AlphaBetaCostModel):
    """The performance model's rules as a cost model (module docstring); registered, with
    its plan pricing and certified search, as
    :class:`pase.cost_models.calibrated.CalibratedCostModel`.

    Args:
        cluster: a :class:`~pase.cluster.Cluster`, a preset name or a cluster JSON path
            (a preset grows to the device count); a mixed cluster is priced per device
            type (:mod:`pase.cost_models.calibrated_hetero`).
        precision: ``bf16``, ``fp16``, ``fp8`` (mixed precision: 2-byte activations, 16
            bytes of state a parameter) or ``fp32``; default bf16 where the device has a
            bf16 peak, else the device's own precision.
        microbatches: micro-batches per step (gradient accumulation): the graph is one
            micro-batch of every data-parallel rank together; per-micro-batch terms are
            charged this many times, once-per-step terms once. Default 1.
        zero: ZeRO stage of every op (``0``-``3``) or ``auto`` (searched per op).
        recompute: ``none`` (default), ``selective``, ``full`` or ``auto``.
        attention: ``fused`` (default: one flash-attention kernel, no ``L x M`` tensor)
            or ``unfused``.
        tp_overlap: hide an op's own critical-path collectives behind its GEMMs (Megatron-LM's
            --tp-comm-overlap), as ``pase evaluate --layout --tp-overlap on`` does; a
            collective a re-layout on an edge takes over is not hidden. Default False.
        ep_overlap: hide the experts' all-to-alls behind another micro-batch's compute, as
            ``pase evaluate --layout --ep-overlap on`` does; ``auto`` (default): when there
            is another micro-batch (``microbatches > 1``; a pipeline stage's model is told
            its step's count, :func:`pase.pipeline.stage_model.stage_cost_model`), as the layout
            family's ``--ep-overlap auto`` decides.
        split: on a mixed cluster, ``even`` tiles (default: the slowest type paces an op)
            or ``balanced`` batch shares by device speed (docs/heterogeneous.md). No
            effect on a homogeneous cluster.
    """

    name = "calibrated"
    unit = "s"
    padded_roles = PADDED_ROLES  # dims split with padding (calibrated_padding)
    launch_op: str | None = None  # the op charged the optimizer step's fixed kernels
    synced_elements: float = 0.0  # the graph's parameters: its syncs share one bucket's hops

    def __init__(self, cluster: str | Cluster = "dgx-a100", precision: str | None = None,
                 microbatches: int = 1, zero: str = "0", recompute: str = "none",
                 attention: str = "fused", tp_overlap: bool = False,
                 ep_overlap: bool | str = "auto",
                 split: str = "even"):
        resolved = get_cluster(cluster)
        if precision is None:  # on a mixed cluster, one every type runs: its slowest type's
            precision = default_precision(hetero.slowest_device(resolved, resolved.devices))
        recompute = "full" if str(recompute) == "all" else str(recompute)
        if recompute not in RECOMPUTE:
            raise OptionError(f"unknown recompute {recompute!r}; allowed: {', '.join(RECOMPUTE)}")
        if precision not in PRECISIONS:
            raise OptionError(f"unknown precision {precision!r}; allowed: {', '.join(PRECISIONS)}")
        mixed = precision != "fp32"
        super().__init__(cluster, bytes_per_element=2.0 if mixed else 4.0, reduce_scatter=True,
                         zero=str(zero), recompute="auto" if recompute == "auto" else "none",
                         split=split,
                         compute="flat" if resolved.groups else "roofline", precision=precision)
        if isinstance(microbatches, bool) or not isinstance(microbatches, (int, np.integer)) \
                or not 1 <= microbatches <= MAX_MICROBATCHES:
            raise OptionError(f"microbatches must be an integer from 1 to {MAX_MICROBATCHES:,}, "
                              f"got {microbatches!r}")
        if attention not in ("fused", "unfused"):
            raise OptionError(f"unknown attention {attention!r}; allowed: fused, unfused")
        self.microbatches = int(microbatches)
        self.recompute_mode = recompute
        self.attention = attention
        if not isinstance(tp_overlap, (bool, np.bool_)):
            raise OptionError(f"tp_overlap must be true or false, got {tp_overlap!r}")
        self.tp_overlap = bool(tp_overlap)
        if not isinstance(ep_overlap, (bool, np.bool_)) and ep_overlap != "auto":
            raise OptionError(f"ep_overlap must be true, false or auto, got {ep_overlap!r}")
        self.ep_overlap_auto = ep_overlap == "auto"
        self.ep_overlap = self.microbatches > 1 if self.ep_overlap_auto else bool(ep_overlap)
        self.hw: Achieved = achieved(self.cluster.device)
        if self.cluster.groups:  # the slowest type's, for what a plan prices as a whole
            self.hw, self.pricer = hetero.hardware(self.cluster, self.cluster.devices, precision)
        else:
            self.pricer = make_pricer(self.cluster.device, self.hw, precision)
        self.mixed = bool(self.cluster.groups)  # a mixed cluster, even where one group is used
        # per device type a prefix touches: (constants, pricer); None: (hw, pricer) alone
        self.kinds: tuple | None = None
        # balanced split: per config, the multiple its activation collectives scale by
        self.activation_scale: np.ndarray | None = None
        self.contexts: dict[str, OpContext] = {}
        # the share of once-per-step terms (syncs, optimizer) charged here: a pipeline
        # stage prices one micro-batch and is charged 1 / m of them (pase.pipeline.stages)
        self.once_share = 1.0

    # -- the graph's facts, bound once per Problem ---------------------------------------
    def problem(self, graph: Graph, space: ConfigSpace, *,
                memory_budget: float | None = None,
                among: Collection[int] | None = None) -> Problem:
        bound = self.bind(graph, space.devices)
        return super(AlphaBetaCostModel, bound).problem(graph, space, memory_budget=memory_budget,
                                                        among=among)

    def bind(self, graph: Graph, devices: int) -> "CalibratedRules":
        """A copy bound to ``graph`` and ``devices``: what :meth:`problem` prices with."""
        bound = self.for_graph(graph).for_devices(devices)
        bound.moved = movable_collectives(graph)
        return bound

    def for_graph(self, graph: Graph) -> "CalibratedRules":
        """A copy that knows ``graph``'s facts (:func:`pase.perf.context.op_contexts`) and,
        for ``selective`` and ``full`` recomputation, each op's recompute flag."""
        bound = copy.copy(self)
        bound.contexts = op_contexts(graph, self.attention)
        bound.launch_op = graph.ops[0].name if graph.ops else None
        bound.synced_elements = sum(parameter_elements(op) for op in graph.ops)
        if self.recompute_mode in ("selective", "full"):
            if str(self.zero) == "auto":
                raise OptionError(f"zero=auto searches ZeRO with recompute none or auto; "
                                  f"recompute={self.recompute_mode} fixes it per op")
            zero = int(self.zero)
            fixed = dict(getattr(self, "fixed_variants", None) or {})
            for op in graph.ops:
                if op.name not in fixed:
                    fixed[op.name] = Variant(zero if owned_parameters(op) and zero else 0,
                                             recomputed(bound.contexts[op.name], self.recompute_mode))
            bound.fixed_variants = fixed
        return bound

    def for_devices(self, devices: int) -> "CalibratedRules":
        bound = super().for_devices(devices)
        bound.__dict__.pop("_prefix_models", None)
        if self.mixed:
            # a mixed cluster: the slowest type of the ranks used (one group's own type when
            # they lie in one group, the cluster then its view)
            bound.hw, bound.pricer = hetero.hardware(bound.cluster, bound.p, self.precision)
        return bound

    def context(self, op: Op) -> OpContext:
        return self.contexts.get(op.name, OpContext())

    def vertex_key(self, op: Op, configs: np.ndarray) -> tuple:
        return super().vertex_key(op, configs) + (self.context(op).key(),
                                                  op.name == self.launch_op)

    def work(self, op: Op, configs: np.ndarray) -> PricedWork:
        configs = np.asarray(configs, dtype=np.int64)
        parts = padding.groups(op, configs, self.padded_roles)
        if parts is not None:  # each padding on its padded op (calibrated_padding)
            return padding.stitched(op, configs, [(rows, self.work(padded, configs[rows]))
                                                  for padded, rows in parts])
        if self.cluster.groups and self.devices is None:
            return self._at(configs).work(op, configs)
        e = self.bytes_per_element
        base = op_work(op, configs, e, "adam")
        ctx = self.context(op)
        colls = kept_collectives(op, base.collectives, ctx.shares_input_gradient, e)
        if self.cluster.groups:  # each config on its prefix's device types
            fwd, bwd, weight = hetero.kernels(self, op, configs, base, ctx)
        else:
            fwd, bwd, weight = self._kernels(op, configs, base, ctx)
        kept = self._kept_bytes(op, configs, ctx.kept_outputs, ctx.extras, ctx.linear_kept)
        block = self._kept_bytes(op, configs, ctx.block_outputs, ())
        if self.recompute_mode == "full":
            kept = kept + self._kept_bytes(op, configs, tuple(set(ctx.block_outputs) -
                                                                set(ctx.kept_outputs)), ())
        factor = sum(state_split(e, "adam")) / e  # weight + gradient + optimizer state
        low = self.pricer.quantised_bytes
        # a linear layer's two low-precision weight copies (row- and column-wise)
        copies = 2 * low * base.parameter_bytes / e if low and is_linear(op) else None
        states = base.parameter_bytes * factor + (0.0 if copies is None else copies)
        fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(OpWork)}
        fields.update(collectives=colls, state_bytes=states,
                      activation_bytes=kept, state_factor=factor)
        return PricedWork(**fields, forward_seconds=fwd, backward_seconds=bwd,
                          weight_seconds=weight, base_backward_flop=base.backward_flop,
                          low_copies=copies,
                          block_bytes=block)

    def op_collectives(self, op: Op, configs: np.ndarray) -> tuple:
        configs = np.asarray(configs, dtype=np.int64)
        parts = padding.groups(op, configs, self.padded_roles)
        if parts is not None:
            return padding.stitched(op, configs, [(rows, self.work(padded, configs[rows]))
                                                  for padded, rows in parts]).collectives
        e = self.bytes_per_element
        return kept_collectives(op, op_work(op, configs, e).collectives,
                                self.context(op).shares_input_gradient, e)

    def _kernels(self, op: Op, configs: np.ndarray, base: OpWork,
                 ctx: OpContext) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Forward and backward kernel seconds of one micro-batch, and the backward's
        weight-gradient part (what zero-bubble schedules put off), per config: on a prefix
        of a mixed cluster, its slowest device type's (each at its own constants)."""
        if not self.kinds:
            return self._kernels_on(op, configs, base, ctx, self.hw, self.pricer)
        times = [self._kernels_on(op, configs, base, ctx, hw, pr) for hw, pr in self.kinds]
        return tuple(np.max([t[j] for t in times], axis=0) for j in range(3))

    def _kernels_on(self, op: Op, configs: np.ndarray, base: OpWork, ctx: OpContext,
                    hw: Achieved, pricer) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`_kernels` on one device type (``hw``, ``pricer``). An op the layout
        path has no kernel rule for (a convolution, an LSTM) defers no weight gradient."""
        K = len(configs)
        cfg = configs.astype(np.float64)
        splits = {d.name: cfg[:, i] for i, d in enumerate(op.dims)}
        tile = {d.name: padded_extent(d.size, cfg[:, i]) for i, d in enumerate(op.dims)}
        t = OpTime(op.name)
        if ctx.attention == "inner" or op.kind in VIEWS:
            return np.zeros(K), np.zeros(K), np.zeros(K)
        if ctx.attention == "scores":
            attention_time(op, ctx.values, ctx.causal, tile, pricer, t, ctx.window)
        elif op.kind == "Einsum":
            einsum_time(op, tile, splits, pricer, t, collectives=False)
        elif op.kind in MEMORY_BOUND:
            memory_bound_time(op, tile, splits, pricer, t, False, collectives=False)
        else:  # convolutions, LSTMs...: pase.work's FLOP at large-GEMM efficiency
            rate = pricer.peak_flops * hw.gemm
            return (base.forward_flop / rate + hw.launch_s,
                    base.backward_flop / rate + 2 * hw.launch_s, np.zeros(K))
        return tuple(np.broadcast_to(np.asarray(x, dtype=np.float64), (K,)).copy()
                     for x in (t.forward_s, t.backward_s, t.weight_s))

    def _kept_bytes(self, op: Op, configs: np.ndarray, outputs: tuple[int, ...],
                    extras: tuple[str, ...], quantised: tuple[int, ...] = ()) -> np.ndarray:
        """Bytes ``op`` keeps of its ``outputs`` (those of ``quantised``, kept only by
        linear layers, at the low precision's bytes where there is one) and ``extras``."""
        e, K = self.bytes_per_element, len(configs)
        low = self.pricer.quantised_bytes
        tiles = [port_tiles(op, op.outputs[i], configs) for i in outputs
                 if not (low and i in quantised)]
        if "pre-activation" in extras:
            tiles.append(port_tiles(op, op.outputs[0], configs))
        total = kept_bytes(tiles, K, e)
        if low and set(outputs) & set(quantised):
            total = total + kept_bytes([port_tiles(op, op.outputs[i], configs)
                                        for i in outputs if i in quantised], K, low)
        if "probabilities" in extras:  # the loss keeps fp32 probabilities
            total = total + kept_bytes([port_tiles(op, p, configs) for p in op.inputs], K,
                                       FP32_BYTES)
        return total

    # -- seconds and bytes per config ---------------------------------------------------
    def work_costs(self, work: OpWork) -> np.ndarray:
        """Seconds per step of each config: every micro-batch's kernels and critical-path
        collectives (ZeRO-3's prefetched ones at the overlap tax), the once-per-step syncs
        at their tax, the optimizer step."""
        assert isinstance(work, PricedWork)
        if self.devices is None:
            return self._at(work.configs).work_costs(work)
        if self.cluster.groups:  # each config on its prefix
            return hetero.work_costs(self, work)
        t, tax = self.collective_roles(work), self.hw.overlap
        per_micro = work.forward_seconds + work.backward_seconds + \
            np.where(recomputes(work), work.forward_seconds, 0.0) + t["critical"] + \
            tax * (t["gather_forward"] + t["gather_backward"] + t["scatter"])
        once = tax * (t["sync"] + t["refresh"]) + self.optimizer_seconds(work)
        return self.microbatches * per_micro + once * self.once_share

    def collective_roles(self, work: PricedWork) -> dict[str, np.ndarray]:
        """Seconds per config of the op's collectives by role: ``critical`` (on the path each
        micro-batch; a GEMM all-reduce an edge takes over is not here); ZeRO-3's
        ``gather_forward``, ``gather_backward`` and ``scatter`` (each micro-batch, prefetched
        behind the neighbouring unit's compute); ``sync`` (a gradient's all-reduce or
        reduce-scatter, once a step, behind the backward pass) and ``refresh`` (ZeRO 1-2's
        gather of the updated weights, once a step, behind the next forward pass).

        A step's syncs travel in buckets: one collective over the group pays its hops
        once (the layout path's one sync and one gather a step). ``sync_hops`` and
        ``refresh_hops`` are the hops of the op's own (its group's bucket); ``sync`` and
        ``refresh`` carry the op's share of them, its parameters over the graph's
        (:attr:`synced_elements`): over a plan whose parameters sync over one group they
        add up to that group's hops once (over several groups, to their mean by size)."""
        if self.cluster.groups and self.devices is not None:  # each config on its prefix
            return hetero.per_prefix(self, work, lambda sub, part: sub.collective_roles(part))
        roles = dict.fromkeys(("critical", "critical_forward", "gather_forward",
                               "gather_backward", "scatter", "sync", "refresh", "sync_hops",
                               "refresh_hops"), np.zeros(len(work.configs)))
        fsdp = any(c.weight is not None and c.kind == "all-gather" and c.phase == "forward"
                   for c in work.collectives)
        for c, t in zip(work.collectives, self.critical_charges(work)):
            if t is not None:
                roles["critical"] = roles["critical"] + t
                if c.phase == "forward":  # of which the forward pass's (zero-bubble schedules)
                    roles["critical_forward"] = roles["critical_forward"] + t
                continue
            t = self.collective(work.op, work.configs, c)
            if c.weight is not None and (fsdp or c.phase != "gradient"):
                role = {"forward": "gather_forward", "backward": "gather_backward"}.get(c.phase,
                                                                                      "scatter")
            else:
                role = "refresh" if c.kind == "all-gather" else "sync"
                q, nodes = self._group(work.op, work.configs, c)
                hops = bucket_latency(_KIND.get(c.kind, c.kind), q, nodes, self.cluster, self.hw)
                roles[role + "_hops"] = np.maximum(roles[role + "_hops"], hops)
            roles[role] = roles[role] + t
        share = parameter_elements(work.op) / max(1.0, self.synced_elements)
        roles["sync"] = roles["sync"] + share * roles["sync_hops"]
        roles["refresh"] = roles["refresh"] + share * roles["refresh_hops"]
        return roles

    def critical_charges(self, work: PricedWork) -> list[np.ndarray | None]:
        """Per collective of the op's work, the seconds per config it adds to the critical
        path each micro-batch (None for a sync or a ZeRO gather, which are not on it): a
        GEMM all-reduce an edge takes over is 0 here (the edge charges it), and with
        ``tp_overlap`` each phase's are hidden together behind the op's GEMMs (two forward,
        the backward's own; as pase.perf.step), each charged its share of what shows."""
        moved = self.moved.get(work.op.name, frozenset())
        off = None
        out: list[np.ndarray | None] = []
        by_phase = {"forward": 0.0, "backward": 0.0}  # the critical ones tp overlap can hide
        for c in work.collectives:
            if c.phase == "gradient" or c.weight is not None:
                out.append(None)
                continue
            t = self.collective(work.op, work.configs, c)
            if c.port is not None and c.port in moved:  # charged on the edge instead
                off = owned_axes(work.op, work.configs, self.p)[1] if off is None else off
                t = np.where(off, t, 0.0)
            if self.tp_overlap and c.phase in by_phase:
                by_phase[c.phase] = by_phase[c.phase] + t
            out.append(t)
        if self.tp_overlap:
            for phase, compute in (("forward", 2 * work.forward_seconds),
                                   ("backward", work.backward_seconds)):
                total = np.asarray(by_phase[phase], dtype=np.float64)
                if not total.any():
                    continue
                shown = self.hw.overlapped(total, compute)
                scale = np.divide(shown, total, out=np.zeros(np.broadcast(shown, total).shape),
                                  where=total > 0)
                out = [t * scale if t is not None and c.phase == phase else t
                       for c, t in zip(work.collectives, out)]
        return out

    def optimizer_seconds(self, work: PricedWork) -> np.ndarray:
        """Adam's step over the parameters each config updates: its ZeRO shard, or all, at
        the layout path's bytes a parameter; the graph's first op (:attr:`launch_op`) also
        carries the step's fixed kernels, once a plan (a pipeline stage's are added by
        :func:`pase.cost_models.calibrated_plan.tally`)."""
        if self.cluster.groups and self.devices is not None:  # at its prefix's slowest HBM
            return hetero.per_prefix(self, work, lambda sub, part: sub.optimizer_seconds(part))
        updated = None
        for c in work.collectives:
            if c.kind == "reduce-scatter" and c.weight is not None:  # ZeRO: a shard is updated
                q = np.prod(work.configs[:, list(c.dims)], axis=1) if c.dims else 1.0
                updated = (0.0 if updated is None else updated) + c.nbytes / q
        if updated is None:
            updated = work.parameter_bytes
        per = OPTIMIZER_BYTES["fp32" if self.precision == "fp32" else "mixed"]
        return updated / work.bytes_per_element * per / self.pricer.hbm + \
            (self.optimizer_fixed() if work.op.name == self.launch_op else 0.0)

    def optimizer_fixed(self) -> float:
        """Seconds of the optimizer step's fixed kernels, once a stage (as the layout path)."""
        return OPTIMIZER_KERNELS * self.pricer.hw.launch_s

    def work_memory(self, work: OpWork) -> np.ndarray:
        """Bytes per device: states plus kept activations; on a mixed cluster per device
        type, in bytes of its smallest-memory type (alpha-beta's rule)."""
        kept = self.kept_activation_bytes(work)
        if self.mixed:
            return super().work_memory(dataclasses.replace(work, activation_bytes=kept))
        return work.state_bytes + kept

    def kept_activation_bytes(self, work: OpWork) -> np.ndarray:
        """Activation bytes an op keeps for its backward pass, per config: a recomputed op
        keeps only the outputs that leave its layer (a pipeline stage holds these for each
        micro-batch in flight)."""
        assert isinstance(work, PricedWork)
        return np.where(recomputes(work), work.block_bytes, work.activation_bytes)

    def collective(self, op: Op, configs: np.ndarray, c: Collective) -> np.ndarray:
        """Seconds of collective ``c`` over the devices splitting its dims, per config; a
        parameter's (gradient sync, ZeRO gather) travels in a bucket: no hop latency."""
        q, nodes = self._group(op, configs, c)
        t = collective_seconds(_KIND.get(c.kind, c.kind), np.broadcast_to(c.nbytes, q.shape), q,
                               nodes, self.cluster, self.hw, latency=c.weight is None) * c.rounds
        if self.activation_scale is not None and c.weight is None and c.phase != "gradient":
            t = t * self.activation_scale  # balanced shares: the worst slice's activations
        return t

    def _group(self, op: Op, configs: np.ndarray, c: Collective) -> tuple[np.ndarray, np.ndarray]:
        """Per config, the size of collective ``c``'s group and the nodes it spans."""
        dims = list(c.dims)
        q = np.prod(configs[:, dims], axis=1) if dims else np.ones(len(configs), np.int64)
        nodes, _ = group_topology(op, configs, dims, self.cluster, self.p)
        return q, nodes


def default_precision(device) -> str:
    """bf16 where the device has a bf16 peak, fp16 on a 16-bit tensor-core device without
    one (V100), else the device's own precision (fp32)."""
    if device.bf16_tflops > 0:
        return "bf16"
    if "16" in device.precision:
        return "fp16"
    return device.precision if device.precision in PRECISIONS else "fp32"


__all__ = ["CalibratedRules", "PricedWork", "default_precision", "parameter_elements",
           "recomputes"]

"""The calibrated cost model's re-layout prices: what each edge between two ops costs.

Part of :class:`pase.cost_models.calibrated_rules.CalibratedRules` (a mixin it inherits;
apart because the edges are a job of their own beside the ops' prices). An edge is priced
per pair of configs of its producer and its consumer, each micro-batch:

- **re-layouts**: the bytes :mod:`pase.work.relayout` counts, at the bus bandwidth NCCL
  achieves on the links they cross (:attr:`CalibratedEdges.link_cluster`), with the GEMM
  all-reduces the edge takes over from its ops;
- **expert exchange** instead of the re-layout where expert parallelism moves the routed
  tokens by an all-to-all (:meth:`CalibratedEdges._exchange`);
- **context parallelism's ring** instead of the re-layout into a fused attention
  (:meth:`CalibratedEdges._ring`);
- **tp overlap**: hidden behind the einsums beside the edge (:meth:`CalibratedEdges._hidden`);
- **a tied matrix's gradient sync**, once a step at the overlap tax
  (:meth:`CalibratedEdges.tied_sync`).

A producer's padded configs are priced on its padded ops
(:mod:`pase.cost_models.calibrated_padding`); on a mixed cluster each pair on its
prefixes (:func:`pase.cost_models.calibrated_hetero.edge_costs`).
"""
from __future__ import annotations

import dataclasses
from functools import partial

import numpy as np

from pase.cluster import Cluster, Link
from pase.cost_models import alpha_beta_edges as edges
from pase.cost_models import calibrated_hetero as hetero
from pase.cost_models import calibrated_padding as padding
from pase.costing import array_key
from pase.gather import outer_take
from pase.ir import Op, Port
from pase.perf.comms import collective_seconds
from pase.perf.layout import experts_of
from pase.work.layout import axis_sizes, owned_axes
from pase.work.mapping import group_topology
from pase.work.relayout import relayout_matrix
from pase.work.tiles import port_tiles

MOE_EXCHANGE = ("MoEDispatch", "MoECombine")


class CalibratedEdges:
    """The edge prices of :class:`~pase.cost_models.calibrated_rules.CalibratedRules`
    (module docstring): a mixin, listed before its cost model's base, that reads the
    rules' bound facts and op prices (``cluster``, ``p``, ``hw``, ``microbatches``,
    ``context``, ``work``, ``vertex_key``...)."""

    @property
    def link_cluster(self) -> Cluster:
        """The cluster with its links at the bus bandwidth NCCL achieves on them."""
        cl = self.cluster
        return dataclasses.replace(
            cl, intra=Link(cl.intra.bandwidth_gbps * self.hw.nvlink, cl.intra.latency_us),
            inter=Link(cl.inter.bandwidth_gbps * self.hw.network, cl.inter.latency_us))

    def edge_costs(self, producer: Op, output: Port, src_configs: np.ndarray,
                   consumer: Op, input: Port, dst_configs: np.ndarray) -> np.ndarray:
        padded = self._padded_pairs(self.edge_costs, producer, output, src_configs, consumer,
                                    input, dst_configs)
        if padded is not None:
            return padded
        if self.devices is None:
            return self._at(src_configs, dst_configs).edge_costs(producer, output, src_configs,
                                                                 consumer, input, dst_configs)
        if self.cluster.groups:  # each pair of configs on its prefixes
            full = hetero.edge_costs(self, producer, output, src_configs, consumer, input,
                                     dst_configs)
            tied = self.tied_sync(producer, output, src_configs, consumer, input, dst_configs,
                                  across=True)
            return full if tied is None else full + self.hw.overlap * self.once_share * tied
        links = self.link_cluster
        extra_s, extra_d = self._moved_groups(producer, output, src_configs, consumer, input,
                                              dst_configs)
        parts, src_of, dst_of, src, dst = relayout_matrix(
            producer, output, src_configs, consumer, input, dst_configs, self.p, small=True,
            src_extra=extra_s, dst_extra=extra_d)
        forward = np.zeros_like(parts[0]) if self.shared_read(consumer, input) else parts[0]
        seconds = edges.edge_seconds(links, self.p, self.bytes_per_element, forward, *parts[1:])
        full = outer_take(seconds * self.microbatches, src_of, dst_of)
        exchange = self._exchange(producer, output, src_configs, consumer, input, dst_configs)
        if exchange is not None:  # the tokens' all-to-all instead of the re-layout
            mask, a2a = exchange
            full = np.where(mask, a2a * self.microbatches, full)
        ring = self._ring(producer, output, src_configs, consumer, input, dst_configs)
        if ring is not None:  # context parallelism's key/value ring instead of the re-layout
            mask, sends = ring
            full = np.where(mask, sends * self.microbatches, full)
        if extra_s is not None:  # the GEMM all-reduces moved here, as a reduce-scatter or whole
            moved = edges.moved_seconds(links, self.p, self.bytes_per_element, output.shape, src,
                                        dst, parts)
            moved = outer_take(moved * self.microbatches, src_of, dst_of)
            # the ring's backward passes the keys' and values' gradients round: no all-reduce
            full = full + (moved if ring is None else np.where(ring[0], 0.0, moved))
        if self.tp_overlap and "Einsum" in (producer.kind, consumer.kind) and not \
                {"MoEDispatch", "MoECombine"} & {producer.kind, consumer.kind}:
            full = self._hidden(full, producer, src_configs, consumer, dst_configs)
        tied = self.tied_sync(producer, output, src_configs, consumer, input, dst_configs)
        if tied is not None:  # a gradient sync: once a step, behind the backward pass
            full = full + self.hw.overlap * self.once_share * tied
        return full

    def shared_read(self, consumer: Op, input: Port) -> bool:
        """Whether ``input`` is the tensor a later projection reads beside the first reader
        (a gated MLP's up beside its gate: Megatron-LM's one fused GEMM): the first
        reader's re-layout brings it, as its all-reduce sums the input gradients and the
        expert exchange serves both, so this edge moves nothing forward."""
        return self.context(consumer).shares_input_gradient and input is consumer.inputs[0]

    def tied_sync(self, owner: Op, owner_port: Port, src_configs: np.ndarray, user: Op,
                  user_port: Port, dst_configs: np.ndarray, across: bool = False
                  ) -> np.ndarray | None:
        """Seconds alone (once a step) of a tied matrix's extra gradient sync, per pair of
        configs of its owner and its user, or None when the edge is not a tied one.

        The user's weight gradient is partial over the devices splitting the user's dims
        the matrix does not map (a head's batch). The owner's own all-reduce sums it
        where it runs over those devices too (both split the batch alike); over the rest
        the whole matrix's gradient is reduce-scattered, and gathered again where the
        owner keeps more of it than that leaves on a device (a replicated owner). The
        edge's re-layout moves the summed gradient into the owner's layout; the user's
        own gradient all-reduce is dropped (the matrix is its owner's).

        On a mixed cluster, each pair on the larger of its two prefixes (the prefix's
        model prices a pair on one prefix inside its edge; ``across``: only the pairs on
        two prefixes, which :func:`calibrated_hetero.edge_costs` prices without it)."""
        if user.attrs.get("tied") != owner.name or \
                not any(owner_port is w for w in owner.weights) or \
                not any(user_port is w for w in user.weights):
            return None
        padded = self._padded_pairs(partial(self.tied_sync, across=across), owner, owner_port,
                                    src_configs, user, user_port, dst_configs)
        if padded is not None:
            return padded
        src = np.asarray(src_configs, dtype=np.int64)
        dst = np.asarray(dst_configs, dtype=np.int64)
        out = np.zeros((len(src), len(dst)))
        if self.cluster.groups and self.devices is not None:
            pu, pv = hetero.placed(self, src), hetero.placed(self, dst)
            for nu in np.unique(pu).tolist():
                rows = np.flatnonzero(pu == nu)
                for nv in np.unique(pv).tolist():
                    if across and nu == nv:
                        continue
                    cols = np.flatnonzero(pv == nv)
                    sub = hetero.at_prefix(self, max(nu, nv))
                    out[np.ix_(rows, cols)] = sub.tied_sync(owner, owner_port, src[rows], user,
                                                            user_port, dst[cols])
            return out
        udims, odims = _unmapped(user, user_port), _unmapped(owner, owner_port)
        q = np.prod(dst[:, udims], axis=1) if udims else np.ones(len(dst), np.int64)
        if not (q > 1).any():
            return out
        owns_u, off_u = owned_axes(user, dst, self.p)
        owns_o, off_o = owned_axes(owner, src, self.p)
        axes_u = owns_u[:, udims, :].any(axis=1)  # (Kd, mesh axes) the user's group spans
        axes_o = owns_o[:, odims, :].any(axis=1) if odims else \
            np.zeros((len(src), owns_o.shape[2]), dtype=bool)
        sizes = np.asarray(axis_sizes(self.p), dtype=np.int64)
        # the user's group's mesh axes the owner's sync does not run over
        left = axes_u[None, :, :] & ~axes_o[:, None, :]
        n = np.prod(np.where(left, sizes, 1), axis=2)
        off = off_u[None, :] | off_o[:, None]  # off the mesh: no common axes to rely on
        n = np.where(off, q[None, :], n)
        e = self.bytes_per_element
        whole = float(np.prod(owner_port.shape)) * e
        nodes, _ = group_topology(user, dst, udims, self.cluster, self.p)
        nodes = np.broadcast_to(np.minimum(nodes[None, :], n), n.shape)
        rs = collective_seconds("reduce-scatter", np.full(n.shape, whole), n, nodes,
                                self.cluster, self.hw, latency=False)
        kept = np.prod(port_tiles(owner, owner_port, src), axis=1).astype(np.float64) * e
        g = np.maximum(np.rint(kept[:, None] * n / whole), 1).astype(np.int64)
        ag = collective_seconds("all-gather", np.broadcast_to(kept[:, None], n.shape), g,
                                np.minimum(nodes, g), self.cluster, self.hw, latency=False)
        return np.where(n > 1, rs + ag, 0.0)

    def _padded_pairs(self, price, producer: Op, output: Port, src_configs: np.ndarray,
                      consumer: Op, input: Port, dst_configs: np.ndarray) -> np.ndarray | None:
        """``price`` (an edge's matrix) with the producer's configs on its padded ops
        (:mod:`pase.cost_models.calibrated_padding`), or None when none pads. The consumer's
        padding needs no grouping: a re-layout (and a tied sync) moves the producer's tiles
        (``relayout_matrix`` reads the output's shape, the input's only for its axes), and
        the kernels that hide it are the consumer's :meth:`work`, padded there."""
        src = np.asarray(src_configs, dtype=np.int64)
        parts = padding.groups(producer, src, self.padded_roles)
        if parts is None:
            return None
        out = np.zeros((len(src), len(dst_configs)))
        for p, rows in parts:
            out[rows] = price(p, padding.same_port(p, producer, output), src[rows], consumer,
                              input, dst_configs)
        return out

    def edge_key(self, producer: Op, output: Port, src_configs: np.ndarray,
                 consumer: Op, input: Port, dst_configs: np.ndarray) -> tuple:
        """The re-layout's key, and what else prices this edge: an expert exchange's
        roles, and under tp overlap the einsums whose kernels hide it."""
        key = super().edge_key(producer, output, src_configs, consumer, input, dst_configs)
        kinds = (producer.kind, consumer.kind)
        if set(kinds) & set(MOE_EXCHANGE):
            key = key + (kinds, experts_of(producer), experts_of(consumer),
                         self.context(consumer).shares_input_gradient,
                         input is consumer.inputs[0])
        role = self.context(consumer).attention
        if role is not None and input is not consumer.inputs[0]:  # keys or values: a ring
            key = key + (role, self.vertex_key(consumer, dst_configs))
        if self.tp_overlap and "Einsum" in kinds:
            key = key + (kinds, self.vertex_key(producer, src_configs),
                         self.vertex_key(consumer, dst_configs))
        if self.shared_read(consumer, input):  # nothing forward: the first reader's copy
            key = key + ("shared read",)
        if consumer.attrs.get("tied") == producer.name:  # its gradient sync reads the configs
            key = key + ("tied", producer.name, consumer.name, array_key(src_configs, dst_configs))
        return key

    def _exchange(self, producer: Op, output: Port, src_configs: np.ndarray, consumer: Op,
                  input: Port, dst_configs: np.ndarray, hidden: bool = True
                  ) -> tuple[np.ndarray, np.ndarray] | None:
        """Expert parallelism's token exchange on an edge between a dispatch (or combine)
        and an op that runs the experts: ``(mask, seconds)`` per config pair, or None.

        Where the token side leaves the experts whole and the expert side splits them
        ``n`` ways over as many ranks as the token side splits the tokens (the tile is
        the same size), Megatron-LM moves each rank's routed tokens once, by an
        all-to-all of its buffer over the ``n`` ranks, forward and backward (the
        layout path's price, :func:`pase.perf.comms.collective_seconds`), not the
        re-layout's gather. Under MoE parallel folding (``ep`` over tensor-parallel ranks)
        the expert side splits the tokens ``r`` times finer than the token side, whose
        tile ``r`` ranks of the ep group hold alike (``r`` divides ``n``): the dispatch's
        ``r`` holders each send their own ``1 / r`` of the buffer (the expert side's
        tile) and each holder's combine reads its whole buffer back (the token side's
        tile), as the layout path counts the two. Under ep overlap it hides behind another
        micro-batch's compute but for the tax (``hidden``; the plan price adds what the
        layer's compute cannot hide). A later reader of the same buffer (the up projection
        beside the gate) gets it from the same exchange: nothing more."""
        if producer.kind == "MoEDispatch" and consumer.kind not in MOE_EXCHANGE and \
                experts_of(consumer) is not None:
            expert_op, expert_cfg, port, token_op, token_cfg, token_port = \
                consumer, dst_configs, input, producer, src_configs, output
        elif consumer.kind == "MoECombine" and producer.kind not in MOE_EXCHANGE and \
                experts_of(producer) is not None and input is consumer.inputs[0]:
            expert_op, expert_cfg, port, token_op, token_cfg, token_port = \
                producer, src_configs, output, consumer, dst_configs, input
        else:
            return None
        expert = experts_of(expert_op)
        e_index = expert_op.dim_names.index(expert)
        t_index = token_op.dim_names.index(expert) if expert in token_op.dim_names else None
        n = np.asarray(expert_cfg, dtype=np.int64)[:, e_index]
        held = np.ones(len(token_cfg), np.int64) if t_index is None else \
            np.asarray(token_cfg, dtype=np.int64)[:, t_index]
        # the port's tile on each side: the token side's is r >= 1 times the expert side's,
        # r = 1 where the tokens were split as the experts are, r > 1 under folding
        tile_t = np.prod(port_tiles(token_op, token_port, token_cfg), axis=1)
        tile_e = np.prod(port_tiles(expert_op, port, expert_cfg), axis=1)
        ratio = tile_t[:, None] / tile_e[None, :]
        r = np.maximum(np.rint(ratio), 1).astype(np.int64)
        mask = (held[:, None] == 1) & (n[None, :] > 1) & np.isclose(ratio, r) & \
            (n[None, :] % r == 0)
        if not mask.any():
            return None
        if expert_op is consumer and self.context(consumer).shares_input_gradient:
            seconds = np.zeros(mask.shape)
        else:
            nodes, _ = group_topology(expert_op, expert_cfg, [e_index], self.cluster, self.p)
            # folded: the dispatch's holders of a tile share its sending, the combine's each
            # read all of it back (the layout path's bytes; r = 1: one buffer both ways)
            buffer = tile_e[None, :] if expert_op is consumer else tile_t[:, None]
            seconds = 2 * collective_seconds("all-to-all", buffer * self.bytes_per_element,
                                             n[None, :], nodes[None, :], self.cluster, self.hw)
            seconds = np.broadcast_to(seconds, mask.shape)
            if self.ep_overlap and hidden:
                seconds = self.hw.overlap * seconds
        # (token side, expert side) as (producer, consumer)
        return (mask, seconds) if expert_op is consumer else (mask.T, seconds.T)

    def _ring(self, producer: Op, output: Port, src_configs: np.ndarray, consumer: Op,
              input: Port, dst_configs: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """Context parallelism's key/value ring on an edge into a fused attention:
        ``(mask, seconds)`` per config pair, or None.

        Where the producer splits the keys' (values') sequence ``n`` ways and the attention
        reads them whole, with every other axis split alike, ring attention (Megatron-LM's
        context parallelism) passes one rank's chunk of keys and values to the next rank
        ``n - 1`` times, each step hidden behind one block of the attention kernel (its
        backward sends twice the bytes), as the layout path prices it. The keys' edge into
        the scores op carries both tensors' ring; the values' edge into the context product
        (priced by the same fused kernel) nothing more."""
        role = self.context(consumer).attention
        if role is None or input is consumer.inputs[0] or len(output.shape) != len(input.shape):
            return None
        src_tiles = port_tiles(producer, output, src_configs).astype(np.float64)
        dst_tiles = port_tiles(consumer, input, dst_configs).astype(np.float64)
        seq = next((i for i, names in enumerate(input.dims) if any(
            consumer.dims[consumer.dim_names.index(n)].role == "sequence" for n in names)), None)
        if seq is None:
            return None
        ratio = dst_tiles[None, :, :] / src_tiles[:, None, :]  # (Ks, Kd, axes)
        n = np.rint(ratio[:, :, seq]).astype(np.int64)
        others = np.delete(ratio, seq, axis=2)
        mask = (n > 1) & np.isclose(ratio[:, :, seq], n) & np.all(np.isclose(others, 1.0), axis=2)
        if not mask.any():
            return None
        if role != "scores":
            return mask, np.zeros(mask.shape)
        seq_dims = [producer.dim_names.index(name) for name in output.dims[seq]]
        nodes, _ = group_topology(producer, src_configs, seq_dims, self.cluster, self.p)
        chunk = 2 * np.prod(src_tiles, axis=1) * self.bytes_per_element  # keys and values
        work = self.work(consumer, dst_configs)
        step = collective_seconds("send", np.broadcast_to(chunk[:, None], n.shape), n,
                                  np.broadcast_to(nodes[:, None], n.shape), self.cluster, self.hw)
        steps = np.maximum(n - 1, 0)
        hide = self.hw.overlapped
        seconds = steps * (hide(step, work.forward_seconds[None, :] / np.maximum(n, 1))
                           + hide(2 * step, work.backward_seconds[None, :] / np.maximum(n, 1)))
        return mask, np.where(mask, seconds, 0.0)

    def _hidden(self, seconds: np.ndarray, producer: Op, src_configs: np.ndarray,
                consumer: Op, dst_configs: np.ndarray) -> np.ndarray:
        """tp overlap on an edge beside a GEMM (sequence parallelism's reduce-scatter after
        a row-parallel einsum, its all-gather before a column-parallel one, the partial
        sums a re-layout reduces): hidden behind the einsum's kernels, as pase.perf.step
        hides them: each direction's half behind the einsum's kernels that way (two GEMMs
        forward, the backward's own)."""
        forward, backward = np.zeros(seconds.shape), np.zeros(seconds.shape)
        for op, configs, axis in ((producer, src_configs, 0), (consumer, dst_configs, 1)):
            if op.kind == "Einsum":
                work = self.work(op, configs)
                forward = forward + np.expand_dims(2 * work.forward_seconds, 1 - axis)
                backward = backward + np.expand_dims(work.backward_seconds, 1 - axis)
        m = self.microbatches
        return self.hw.overlapped(seconds / 2, forward * m) + \
            self.hw.overlapped(seconds / 2, backward * m)


def _unmapped(op: Op, port: Port) -> list[int]:
    """Indices of ``op``'s dims that weight ``port`` does not map: its gradient is
    partial over the devices splitting them."""
    mapped = {n for axis in port.dims for n in axis}
    return [i for i, name in enumerate(op.dim_names) if name not in mapped]


__all__ = ["MOE_EXCHANGE", "CalibratedEdges"]

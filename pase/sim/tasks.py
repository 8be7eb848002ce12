"""Build the task graph of one training step from a graph and a config per op.

Per op ``v`` on its devices (the placement of :mod:`pase.work.layout`: every
device, those outside the op's ``P_v`` holding replicas that compute the same
tiles; ranks ``0 .. P_v - 1`` for an op whose ``P_v`` does not divide ``p``):

- forward compute on each device, then the op's forward collectives (one per
  group, members joining when all have computed); the output is ready after them;
- for each connection, transfers of the producer's output blocks each consumer
  device lacks (:mod:`pase.sim.transfers`); the consumer's forward waits for them;
- backward compute on each device after its forward and after the gradients of
  its outputs arrive from every consumer: the consumer's input gradient, laid out
  like its input once its backward collectives ran, re-laid as the producer's
  output (transfers in the reverse direction, the same rule as
  :func:`pase.work.relayout.edge_bytes`); then the op's backward collectives (the
  input gradients are ready after them);
- parameter-gradient collectives start after the backward compute and block
  nothing but the end of the step, so they overlap later backward compute.

A plan a timed cost model priced (the calibrated model; its Strategy carries each op's
seconds, :mod:`pase.prices`) is replayed with those prices (``prices``): each compute
task runs for the op's priced kernel seconds, each collective's flows are stretched so
that alone it takes its priced seconds (sharing ports with others still slows it; a
critical-path one at what the model charges for it, its exposed part where it is hidden
behind the GEMMs), a collective the model leaves out does not run, each connection's
re-layout messages are stretched likewise so that its two directions alone, one after
the other, take the edge's carried seconds (the consumer's ``edges``; an edge the model
prices but whose re-layout moves nothing runs nothing), and each device runs the op's
priced optimizer step once its gradient syncs and its whole backward pass are done. With
``microbatches`` m the compute, critical-path collectives and re-layouts of a micro-batch
are charged m times (the micro-batches back to back), the syncs and the optimizer step
once.

Otherwise compute durations are ``FLOP / (peak * efficiency)``, the FLOP of :mod:`pase.work`
(a multiply-add is two, as the dense peak counts it), plus its memory traffic (an
embedding's gather) at the rate of :mod:`pase.traffic`, as the alpha-beta model
prices both; a device runs forward tasks in topological order before backward ones
in reverse order.

On a heterogeneous cluster (docs/heterogeneous.md) each device computes at its own
speed and its ports run at its group's links (a flow moves at the slowest port it
uses; a message waits the larger latency of its ends); an op runs on the group
prefix :func:`pase.work.hetero.shares` gives, and with ``balanced`` splitting a
device's compute, activations, activation collectives and received bytes scale by
its share multiple.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from pase.cluster import LINK_CLASSES, Cluster
from pase.costing import connection_ports, graph_connections, tied_connections
from pase.ir import Graph
from pase.perf.comms import collective_phases
from pase.perf.hardware import IDEAL
from pase.perf.roofline import achieved_rate
from pase.sim import transfers
from pase.sim.engine import TaskGraph, run
from pase.traffic import hbm_rate, traffic_rate
from pase.work import Collective, op_work
from pase.work.hetero import shares
from pase.work.layout import active_devices, group_members, port_blocks
from pase.work.ops import OpWork
from pase.work.tiles import port_factors


def link_resource(device: int, link: str, receive: bool) -> int:
    """Resource id of a device's port: intra/inter, send/receive direction."""
    return 4 * device + 2 * LINK_CLASSES.index(link) + int(receive)


def resource_name(resource: int) -> str:
    return f"gpu{resource // 4}.{LINK_CLASSES[(resource // 2) % 2]}"


@dataclass
class OpTasks:
    """Task ids and memory of one op, for the result's accounting."""

    name: str
    devices: int
    ids: list[int]
    forward: list[int]
    backward: list[int]
    activation_bytes: float
    state_bytes: float
    activation_by_device: list[float] | None = None  # balanced shares: per device in ids


def topological_order(graph: Graph) -> list[int]:
    """Op indices in dependency order, build order breaking ties."""
    n = len(graph.ops)
    succ: list[set[int]] = [set() for _ in range(n)]
    indeg = [0] * n
    for u, v in graph.vertex_pairs():
        if v not in succ[u]:
            succ[u].add(v)
            indeg[v] += 1
    ready = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        u = heapq.heappop(ready)
        order.append(u)
        for v in sorted(succ[u]):
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(ready, v)
    return order


class _Builder:
    def __init__(self, graph: Graph, configs: list[np.ndarray], cluster: Cluster, devices: int,
                 efficiency: float, bytes_per_element: float, optimizer: str, split: str = "even",
                 variants=None, roofline=None, prices=None, microbatches: int = 1):
        self.graph = graph
        self.prices = prices  # per op its carried prices (pase.prices), or None
        self.m = int(microbatches)
        self.roofline = roofline  # a Pricer: per-op achieved rates (pase.perf.roofline)
        self.configs = configs
        self.cluster = cluster
        self.flops = cluster.device.peak_tflops * 1e12 * efficiency
        self.dt = float(bytes_per_element)
        self.optimizer = optimizer
        self.split = split
        self.variants = variants  # HZ: per op a variant (ZeRO stage, recompute) or None
        # a heterogeneous cluster: per device its group's device and links
        self.hetero = bool(cluster.groups)
        self.speed = cluster.speeds(devices) * 1e12 * efficiency if self.hetero else None
        self.hbm = [hbm_rate(cluster.device_at(d)) for d in range(devices)] \
            if self.hetero else None  # bytes/s of each device's memory traffic
        groups = [cluster.groups[int(g)] for g in cluster.group_of(np.arange(devices))] \
            if self.hetero else [cluster] * devices
        self.links = [{"intra": g.intra, "inter": g.inter} for g in groups]
        cap = []
        for g in groups:
            for link in (g.intra, g.inter):
                cap += [link.bytes_per_second, link.bytes_per_second]
        self.tg = TaskGraph(cap, devices)
        self.devices = devices
        self.out_ready: list[dict[int, int]] = []
        self.grad_ready: list[dict[int, int]] = []
        self.ops: list[OpTasks] = []
        self.alone: dict[tuple, float] = {}  # a re-layout's seconds alone, by its messages
        self.optimizer_steps: list[int] = []  # the priced optimizer steps' compute tasks
        self.synced: dict[int, list[int]] = {}  # per device, each priced op's last sync task

    # -- collectives ---------------------------------------------------------------
    def _collective(self, members: np.ndarray, c: Collective, tokens: dict[int, int], label: str,
                    category: str, scale: float = 1.0, seconds: float | None = None) -> None:
        """Flows of one group's collective, chained after the members' tokens; ``seconds``
        (a priced collective) stretches them to take that long alone."""
        nodes = self.cluster.node_of(members)
        counts = np.unique(nodes, return_counts=True)[1]
        rounds = float(c.rounds[0])
        phases = []
        for ph in collective_phases(c.kind, float(c.nbytes[0]) * scale, len(members), len(counts),
                                    self.cluster, IDEAL):
            volume, steps = float(ph.volume) * rounds, float(ph.steps) * rounds
            if volume <= 0.0 and steps <= 0.0:
                continue
            link = self.cluster.link(ph.link)
            if self.hetero:  # the slowest member's port sets the rate; its latency the pace
                link = max((self.links[int(m)][ph.link] for m in members), key=lambda x: x.latency_us)
            phases.append((ph, volume, steps * link.latency_s, link))
        if seconds is not None:  # the priced time over the time the flows take alone
            alone = sum(v / link.bytes_per_second + lat for _, v, lat, link in phases)
            stretch = seconds / alone if alone > 0 else 0.0
            phases = [(ph, v * stretch, lat * stretch, link) for ph, v, lat, link in phases]
        prev = -1
        for ph, volume, latency, _ in phases:
            if volume <= 0.0 and latency <= 0.0:
                continue
            res = tuple(link_resource(int(m), ph.link, rx) for m in members for rx in (False, True))
            shows = tuple(f"gpu{int(m)}.{ph.link}" for m in members)
            f = self.tg.flow(res, volume, latency, label, category, shows)
            if prev < 0:
                self.tg.after(f, *(tokens[int(m)] for m in members))
            else:
                self.tg.after(f, prev)
            prev = f
        if prev >= 0:
            for m in members:
                tokens[int(m)] = prev

    def _collectives(self, work: OpWork, cfg: np.ndarray, phase: str, tokens: dict[int, int],
                     category: str, placed: int | None = None, share: np.ndarray | None = None,
                     priced: list[float | None] | None = None) -> None:
        """``priced``: per collective of ``work`` its priced seconds (None: not run)."""
        op = work.op
        for i, c in enumerate(work.collectives):
            if c.phase != phase or work.group_size(c)[0] <= 1 or c.nbytes[0] <= 0:
                continue
            seconds = None
            if priced is not None:
                if priced[i] is None or priced[i] <= 0.0:
                    continue  # the model leaves it out (or prices it free)
                seconds = priced[i] * (1 if phase == "gradient" else self.m)
            for members in group_members(op, cfg, c.dims, self.devices if placed is None else placed):
                scale = 1.0 if share is None or phase == "gradient" else float(share[members].max())
                self._collective(members, c, tokens, f"{op.name} {c.label} {c.kind}", category, scale,
                                 seconds)

    # -- ops -----------------------------------------------------------------------
    def add_ops(self, order: list[int]) -> None:
        position = {v: i for i, v in enumerate(order)}
        n = len(self.graph.ops)
        self.out_ready = [{} for _ in range(n)]
        self.grad_ready = [{} for _ in range(n)]
        self.ops = [None] * n  # type: ignore[list-item]
        for v in order:
            op, cfg = self.graph.ops[v], self.configs[v]
            work = op_work(op, cfg[None, :], self.dt, self.optimizer)
            if self.variants is not None and self.variants[v] is not None:  # HZ's hook
                from pase.work.variants import apply_variant
                work = apply_variant(work, *self.variants[v])
            if self.hetero:  # its prefix, each device's speed and share
                sh = shares(op, cfg, self.cluster, self.devices, self.split)
                self._add_op(v, op, cfg, work, position, sh.active.tolist(), sh.share, sh.placed)
            else:
                self._add_op(v, op, cfg, work, position, active_devices(op, cfg, self.devices).tolist())

    def _add_op(self, v: int, op, cfg: np.ndarray, work: OpWork, position: dict[int, int],
                ids: list[int], share: np.ndarray | None = None, placed: int | None = None) -> None:
        """One op's compute tasks on ``ids`` and its collectives; ``share`` (heterogeneous
        clusters) scales each device's work and activation collectives, at its own speed."""
        own = None if self.prices is None else self.prices[v]
        if own is not None:
            return self._add_priced(v, op, cfg, work, position, ids, own)
        rate, base = self.flops, work
        if self.roofline is not None:  # the op's own work over its kernels' seconds
            base = op_work(op, cfg[None, :], self.dt, self.optimizer)
            rate = float(achieved_rate(op, cfg[None, :], base.flop, self.roofline)[0])
        memory = float(traffic_rate(op, cfg[None, :], base.flop, base.traffic, self.cluster.device,
                                    self.roofline)[0]) if share is None else 0.0

        def seconds(flop: np.ndarray, traffic: np.ndarray, d: int) -> float:
            if share is None:
                return float(flop[0]) / rate + float(traffic[0]) / memory
            return float(flop[0]) * share[d] / self.speed[d] \
                + float(traffic[0]) * share[d] / self.hbm[d]

        fwd = [self.tg.compute(d, seconds(work.forward_flop, work.forward_traffic, d),
                               (0, position[v]), f"{op.name} fwd", "forward") for d in ids]
        bwd = [self.tg.compute(d, seconds(work.backward_flop, work.backward_traffic, d),
                               (1, -position[v]), f"{op.name} bwd", "backward") for d in ids]
        for f, b in zip(fwd, bwd):
            self.tg.after(b, f)
        tokens = dict(zip(ids, fwd))
        self._collectives(work, cfg, "forward", tokens, "communication", placed, share)
        self.out_ready[v] = tokens
        tokens = dict(zip(ids, bwd))
        self._collectives(work, cfg, "backward", tokens, "communication", placed, share)
        self.grad_ready[v] = tokens
        self._collectives(work, cfg, "gradient", dict(zip(ids, bwd)), "gradient-sync", placed, share)
        act = float(work.activation_bytes[0])
        self.ops[v] = OpTasks(op.name, int(np.prod(cfg)), ids, fwd, bwd, act, float(work.state_bytes[0]),
                              None if share is None else [act * float(share[d]) for d in ids])

    def _add_priced(self, v: int, op, cfg: np.ndarray, work: OpWork, position: dict[int, int],
                    ids: list[int], own: dict) -> None:
        """One op replayed at its carried prices (:mod:`pase.prices`)."""
        m = self.m
        fwd = [self.tg.compute(d, m * float(own["forward"]), (0, position[v]), f"{op.name} fwd",
                               "forward") for d in ids]
        bwd = [self.tg.compute(d, m * float(own["backward"]), (1, -position[v]), f"{op.name} bwd",
                               "backward") for d in ids]
        for f, b in zip(fwd, bwd):
            self.tg.after(b, f)
        priced = matched(work.collectives, own["collectives"])
        tokens = dict(zip(ids, fwd))
        self._collectives(work, cfg, "forward", tokens, "communication", priced=priced)
        self.out_ready[v] = tokens
        tokens = dict(zip(ids, bwd))
        self._collectives(work, cfg, "backward", tokens, "communication", priced=priced)
        self.grad_ready[v] = tokens
        synced = dict(zip(ids, bwd))
        self._collectives(work, cfg, "gradient", synced, "gradient-sync", priced=priced)
        for d in ids:
            self.synced.setdefault(d, []).append(synced[d])
        if float(own["optimizer"]) > 0:
            for d in ids:
                t = self.tg.compute(d, float(own["optimizer"]), (2, position[v]),
                                    f"{op.name} optimizer", "optimizer")
                self.tg.after(t, synced[d])
                self.optimizer_steps.append(t)
        self.ops[v] = OpTasks(op.name, int(np.prod(cfg)), ids, fwd, bwd,
                              float(work.activation_bytes[0]), float(work.state_bytes[0]))

    def hold_optimizer_steps(self) -> None:
        """Each device's optimizer steps start once its whole backward pass and all its
        gradient syncs have run (as ``optimizer.step()`` follows ``backward()`` and the wait
        for every gradient bucket, the step's tail the model prices): a step ready early
        would otherwise take the device between two backward kernels, or hide the other
        syncs behind it."""
        if not self.optimizer_steps:
            return
        done: dict[int, int] = {}
        for op in self.ops:
            for d, b in zip(op.ids, op.backward):
                if d not in done:
                    done[d] = self.tg.join()
                self.tg.after(done[d], b)
        for d, tasks in self.synced.items():
            for t in tasks:
                self.tg.after(done[d], t)
        for t in self.optimizer_steps:
            self.tg.after(t, done[self.tg.device[t]])

    # -- edges ---------------------------------------------------------------------
    def _messages(self, sends: dict[tuple[int, int], float], scale: np.ndarray | None = None
                  ) -> list[tuple[int, int, str, float, float]]:
        """Per message ``(sender, receiver, link class, bytes, latency)``, micro-batches in."""
        out = []
        for (s, d), elems in sends.items():
            link = self.cluster.link_between(s, d)
            spec = self.cluster.link(link)
            if self.hetero:  # the larger latency of the two ends; each port its own rate
                spec = max(self.links[s][link], self.links[d][link], key=lambda x: x.latency_us)
                elems = elems * (scale[d] if scale is not None else 1.0)
            out.append((s, d, link, elems * self.dt * self.m, spec.latency_s * self.m))
        return out

    def _alone(self, messages: list[tuple[int, int, str, float, float]]) -> float:
        """Seconds a re-layout's messages take together on idle ports (the engine's own
        sharing: a port's bandwidth split between the messages crossing it)."""
        if not messages:
            return 0.0
        key = tuple(messages)
        if key not in self.alone:  # layers alike send alike: run each pattern once
            tg = TaskGraph(self.tg.capacity, self.devices)
            for s, d, link, nbytes, latency in messages:
                tg.flow((link_resource(s, link, False), link_resource(d, link, True)), nbytes,
                        latency, "", "", ())
            self.alone[key] = float(max(run(tg).end))
        return self.alone[key]

    def _transfers(self, messages: list[tuple[int, int, str, float, float]], local: list[int],
                   ready: dict[int, int], waiting: dict[int, int], label: str,
                   stretch: float = 1.0) -> None:
        """The messages' flows (``stretch`` scales their bytes and latency: a priced edge)."""
        for s, d, link, nbytes, latency in messages:
            f = self.tg.flow((link_resource(s, link, False), link_resource(d, link, True)),
                             nbytes * stretch, latency * stretch, label, "communication",
                             (f"gpu{s}.{link}", f"gpu{d}.{link}"))
            self.tg.after(f, ready[s])
            self.tg.after(waiting[d], f)
        for d in local:
            self.tg.after(waiting[d], ready[d])

    def add_edges(self) -> None:
        g = self.graph
        for conn, forward, backward in connection_plans(g, self.configs, self.cluster,
                                                        self.devices, self.split):
            u, _, v, _ = conn
            pu, pv = g.ops[u], g.ops[v]
            fwd_wait = dict(zip(self.ops[v].ids, self.ops[v].forward))
            bwd_wait = dict(zip(self.ops[u].ids, self.ops[u].backward))
            scale = None
            if self.hetero and self.split == "balanced":  # the larger share of the two ends
                scale = np.maximum(shares(pu, self.configs[u], self.cluster, self.devices, self.split).share,
                                   shares(pv, self.configs[v], self.cluster, self.devices, self.split).share)
            there, back = self._messages(forward[0], scale), self._messages(backward[0], scale)
            stretch = self._stretch(conn, there, back)
            self._transfers(there, forward[1], self.out_ready[u], fwd_wait,
                            f"{pu.name}->{pv.name} activation", stretch)
            self._transfers(back, backward[1], self.grad_ready[v], bwd_wait,
                            f"{pv.name}->{pu.name} gradient", stretch)

    def _stretch(self, conn: tuple[int, int, int, int], there: list, back: list) -> float:
        """For a connection the plan priced (its consumer's carried ``edges``), the factor
        that makes its re-layout, both directions alone one after the other, take the
        priced seconds; else 1 (the link's bandwidth)."""
        u, out, v, inp = conn
        own = None if self.prices is None else self.prices[v].get("edges")
        if own is None:
            return 1.0
        name = self.graph.ops[u].name
        seconds = next((float(e[3]) for e in own if (e[0], int(e[1]), int(e[2])) == (name, out, inp)),
                       None)
        if seconds is None:
            return 1.0
        alone = self._alone(there) + self._alone(back)
        return seconds / alone if alone > 0 else 1.0


def connection_plans(graph: Graph, configs: list[np.ndarray], cluster: Cluster, devices: int,
                     split: str = "even"):
    """Per connection ``((u, output, v, input), forward, backward)``, each direction
    ``({(sender, receiver): elements}, receivers using a local copy)``
    (:func:`pase.sim.transfers.plan` on :mod:`pase.work.layout`'s placement).

    A tied parameter (:func:`pase.costing.tied_connections`) is one more connection:
    its owner's matrix re-laid for the other user before that user's forward (sent
    once the owner's forward ran: the owner is the embedding, first in the step), and
    the user's weight gradient re-laid back after the user's backward, before the
    owner's backward adds its own.
    """
    for conn in graph_connections(graph) + tied_connections(graph):
        u, _, v, _ = conn
        pu, out, pv, inp = connection_ports(graph, conn)
        cu, cv = configs[u], configs[v]
        if cluster.groups:  # each op on its group prefix (pase.work.hetero)
            su, sv = shares(pu, cu, cluster, devices, split), shares(pv, cv, cluster, devices, split)
            bu, bv = _padded(port_blocks(pu, out, cu, su.placed), devices), \
                _padded(port_blocks(pv, inp, cv, sv.placed), devices)
            au, av = su.active, sv.active
        else:
            bu, bv = port_blocks(pu, out, cu, devices), port_blocks(pv, inp, cv, devices)
            au, av = active_devices(pu, cu, devices), active_devices(pv, cv, devices)
        fu = port_factors(pu, out, cu[None, :])[0]
        fv = port_factors(pv, inp, cv[None, :])[0]
        forward = transfers.plan(out.shape, bu, fu, bv, fv, cluster, au, av)
        backward = transfers.plan(out.shape, bv, fv, bu, fu, cluster, av, au)
        yield conn, forward, backward


def _padded(blocks: np.ndarray, devices: int) -> np.ndarray:
    """Blocks of a prefix's ranks, ``-1`` rows for the ranks after it."""
    out = np.full((devices, blocks.shape[1]), -1, dtype=np.int64)
    out[:len(blocks)] = blocks
    return out


def matched(collectives, priced: list) -> list[float | None]:
    """Per collective of a work its priced seconds, matching the carried list
    ``[phase, kind, label, port, weight, seconds]`` in order; None where the priced list
    leaves it out (the model runs it elsewhere, or not at all)."""
    out: list[float | None] = []
    j = 0
    for c in collectives:
        key = (c.phase, c.kind, c.label, c.port, c.weight)
        if j < len(priced) and tuple(priced[j][:5]) == key:
            out.append(float(priced[j][5]))
            j += 1
        else:
            out.append(None)
    return out


def build(graph: Graph, configs: list[np.ndarray], cluster: Cluster, devices: int,
          efficiency: float, bytes_per_element: float, optimizer: str, split: str = "even",
          variants=None, roofline=None, prices=None,
          microbatches: int = 1) -> tuple[TaskGraph, list[OpTasks]]:
    """The task graph of one step and per-op task ids (``configs[i]``: op i's factors;
    ``variants[i]``: op i's variant or None, HZ's pase.work.variants; ``roofline``: a
    :class:`pase.perf.kernels.Pricer` whose kernels set compute rates, else ``efficiency``;
    ``prices[i]``: op i's carried prices, replayed instead, with ``microbatches``)."""
    b = _Builder(graph, configs, cluster, devices, efficiency, bytes_per_element, optimizer, split,
                 variants, roofline, prices, microbatches)
    b.add_ops(topological_order(graph))
    b.add_edges()
    b.hold_optimizer_steps()
    return b.tg, b.ops

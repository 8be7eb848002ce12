"""What the layouts of one search group have in common, computed once (:class:`Shared`):
the layout search prices each layout through it (:func:`pase.perf.step.evaluate_layout`'s
``shared``)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from pase.cluster import Cluster
from pase.errors import InternalError
from pase.ir import Graph
from pase.perf.comms import group_collectives
from pase.perf.cuts import Frame
from pase.perf.flop import unit_flop
from pase.perf.hardware import achieved
from pase.perf.kept import KeptIndex
from pase.perf.kernels import Pricer, make_pricer
from pase.perf.layout import Layout
from pase.perf.memory import mirrored, stage_memory
from pase.perf.ops import PricedOp
from pase.perf.stage import op_read, stage_states, stage_terms, unit_sums


@dataclass(frozen=True)
class Placed:
    """One (pp, V) cut of a graph: per stage its layers in order and the bytes its chunks
    receive; per op its unit."""

    layers: list[list[str]]
    received: list[list[float]]
    all_units: list[str]


class Shared:
    """What the layouts priced on one list of priced ops have in common, computed once:
    each (pp, V) cut, each layer's sums (:func:`pase.perf.stage.unit_sums`) per recomputation and
    overlap, its FLOP, and each stage's kept activations per recomputation. A layout
    search keeps one per (micro-batch, tp, cp, ep, etp) and hands it to
    :func:`pase.perf.step.evaluate_layout`. One Shared serves one cluster (its collective
    prices are kept by group sizes, not by cluster)."""

    def __init__(self, graph: Graph, ops: list[PricedOp], cuts: dict | None = None):
        # cuts: the graph's :class:`pase.perf.cuts.Frame` and each (pp, V)'s Cut, which
        # depend on the graph alone: a search shares one dict between a graph's Shareds
        self.graph, self.ops, self._cuts = graph, ops, {} if cuts is None else cuts
        self.by_name = {p.op.name: p for p in ops}
        self._placed: dict[tuple, Placed] = {}
        self._sums: dict[tuple, list[float]] = {}
        self._stage_sums: dict[tuple, dict[str, list[float]]] = {}
        self._kept_at: dict[tuple, tuple[float, float]] = {}
        self._stages: dict[tuple, dict[str, Any]] = {}
        self._equal: dict[tuple, list[float]] = {}
        self._again: dict[tuple, set[str]] = {}
        self._index: KeptIndex | None = None
        self._coll: dict[tuple, float] = {}
        self._flop: dict[str, list[float]] | None = None
        self._unit_ops: dict[str, list[PricedOp]] | None = None
        self._kind: dict[str, int] = {}  # per layer, the class of layers it sums as
        self.memo: dict[str, dict] = {}  # what its users keep of it (pase.perf.bound's terms)

    def placement(self, lay: Layout, element_bytes: float) -> Placed:
        key = (lay.pp, lay.virtual)
        if key not in self._placed:
            if key not in self._cuts:
                if "frame" not in self._cuts:
                    self._cuts["frame"] = Frame(self.graph)
                self._cuts[key] = self._cuts["frame"].cut(lay)
            cut = self._cuts[key]
            self._placed[key] = Placed(cut.layers, cut.received(lay.tp * lay.cp, element_bytes),
                                       cut.units)
            if self._unit_ops is None:
                self._unit_ops = {}
                for p, u in zip(self.ops, cut.units):
                    self._unit_ops.setdefault(u, []).append(p)
                self._index = KeptIndex(self.ops, cut.units, lay)
                # equal layers (all that their sums read equal, op by op) are summed once
                kinds: dict[tuple, int] = {}
                self._kind = {u: kinds.setdefault(tuple(op_read(p) for p in ops), len(kinds))
                              for u, ops in self._unit_ops.items()}
        return self._placed[key]

    def again(self, lay: Layout) -> set[str]:
        """:func:`pase.perf.step.recomputed_units` of ``lay``, from its cut's layers per stage."""
        if lay.recompute != "full":
            return set()
        key = (lay.pp, lay.virtual, lay.recompute_layers)
        if key not in self._again:
            out: set[str] = set()
            for layers in self._placed[key[:2]].layers:
                layers = [u for u in layers if u not in ("pre", "post")]
                out.update(layers[:lay.recompute_layers] if lay.recompute_layers else layers)
            self._again[key] = out
        return self._again[key]

    def sums(self, lay: Layout, stage: int, again: set[str], coll, hw) -> dict[str, list[float]]:
        """Stage ``stage``'s :func:`pase.perf.stage.unit_sums`, each layer's taken from the
        cache (``again``: :meth:`again` of ``lay``, which the stage's are kept by). Not to be
        changed."""
        base = (lay.tp, lay.cp, lay.ep, lay.expert_tp, lay.recompute, lay.tp_overlap,
                lay.ep_overlap)
        where = (lay.pp, lay.virtual, stage, lay.recompute_layers if again else -1,
                 len(again)) + base
        out = self._stage_sums.get(where)
        if out is not None:
            return out
        out = {}
        for unit in self._placed[lay.pp, lay.virtual].layers[stage]:
            key = (self._kind[unit], unit in again) + base
            if key not in self._sums:
                ops = self._unit_ops[unit]
                sums = unit_sums(lay, ops, [unit] * len(ops), again & {unit}, coll, hw)[unit]
                self._sums[key] = self._equal.setdefault(tuple(sums), sums)  # equal layers: one
            out[unit] = self._sums[key]
        self._stage_sums[where] = out
        return out

    def stage(self, lay: Layout, stage: int, again: set[str], coll, pricer: Pricer,
              mixed: bool) -> dict[str, Any]:
        """:func:`pase.perf.stage.stage_terms` of stage ``stage``, shared by the stages with the
        same layer sums and sends under the same groups and ZeRO stage."""
        place = self._placed[lay.pp, lay.virtual]
        sums = self.sums(lay, stage, again, coll, pricer.hw)
        key = (tuple(id(v) for v in sums.values()), tuple(place.received[stage]), lay.tp,
               lay.cp, lay.pp, lay.dp, lay.ep, lay.expert_tp, lay.zero, lay.ep_overlap)
        if key not in self._stages:
            # its ops are not needed: the layer sums and kept activations are the Shared's
            self._stages[key] = stage_terms(lay, None, None, coll, pricer, mixed,
                                            lay.dp * lay.cp, again, place.received[stage], sums)
        return self._stages[key]

    def coll(self, lay: Layout, coll):
        """``coll`` remembered across the layouts with the same groups (a ZeRO-3 stage asks
        for the same gather once per layer)."""
        groups = (lay.tp, lay.cp, lay.pp, lay.dp, lay.ep, lay.expert_tp)

        def remembered(kind: str, nbytes: float, group: str) -> float:
            key = (kind, nbytes, group) + groups
            value = self._coll.get(key)
            if value is None:
                value = self._coll[key] = coll(kind, nbytes, group)
            return value

        return remembered

    def kept(self, lay: Layout, stage: int, again: set[str]) -> tuple[float, float]:
        """Stage ``stage``'s kept activation bytes per micro-batch and recompute working set
        (:func:`pase.perf.memory.activation_bytes`, from its layers: :mod:`pase.perf.kept`)."""
        where = (lay.pp, lay.virtual, stage, lay.recompute, lay.recompute_layers)
        if where not in self._kept_at:
            self._kept_at[where] = self._index.stage(
                self._placed[lay.pp, lay.virtual].layers[stage], again, lay.recompute)
        return self._kept_at[where]

    def memory(self, lay: Layout, coll, pricer: Pricer, mixed: bool) -> float:
        """The peak bytes :func:`pase.perf.step.evaluate_layout` finds for ``lay`` (its
        ``memory_bytes``), without pricing its time: each stage's states (from its layers'
        sums without recomputation, which hold the same parameters) and kept activations."""
        self.placement(lay, pricer.element_bytes)
        again = self.again(lay)
        plain = replace(lay, recompute="none", recompute_layers=0)
        memory = []
        for i in range(lay.pp):
            st = stage_states(lay, self.sums(plain, i, set(), coll, pricer.hw), pricer, mixed,
                              lay.dp * lay.cp)
            memory.append(stage_memory(lay, st, i, self.by_name, again, self.kept(lay, i, again)))
        return max(m["total"] for m in mirrored(lay, memory))

    def fits(self, cl: Cluster, lay: Layout):
        """A function of a layout differing from ``lay`` only in recomputation: whether
        :func:`pase.perf.step.evaluate_layout` finds that it fits ``cl``'s device memory."""
        hw = achieved(cl.device)
        pricer = make_pricer(cl.device, hw, lay.precision)
        coll = self.coll(lay, group_collectives(cl, lay, hw))
        mixed, capacity = lay.precision != "fp32", cl.device.memory_bytes
        return lambda other: self.memory(other, coll, pricer, mixed) <= capacity

    def flop(self) -> dict[str, list[float]]:
        if self._flop is None:
            self._flop = unit_flop(self.graph, self.ops, self.placed_units())
        return self._flop

    def placed_units(self) -> list[str]:
        return next(iter(self._placed.values())).all_units

    def layer_units(self) -> list[str]:
        """Per op its unit (the same under every cut)."""
        if not self._placed:
            raise InternalError("Shared.layer_units before any placement")
        return self.placed_units()

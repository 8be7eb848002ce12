"""A stage's kept activations from its layers, not its ops (the layout search's memory check).

:func:`pase.perf.memory.activation_bytes` walks every op of a stage and merges their kept
tensors: the larger size of a tensor two ops keep, the attention core's dropped under
selective recomputation, a recomputed block's input kept whole, and the largest rebuilt
block's own tensors as the working set. Most tensors are touched by one layer only (made
and kept inside it); their share of that walk is a per-layer sum, the same in every stage
that holds the layer. :class:`KeptIndex` sums them once per layer and keeps, per layer,
only the few tensors that cross layers (a layer's input, kept by the next one), which are
merged per stage as :func:`activation_bytes` merges them. The result is the same
(sizes are whole bytes, so sums in another order are exact); tests/perf/test_kept.py checks
it against :func:`activation_bytes` stage by stage.
"""
from __future__ import annotations

from pase.perf.layout import Layout
from pase.perf.memory import tensor_bytes
from pase.perf.ops import PricedOp


class KeptIndex:
    """Per layer (FSDP unit) of one list of priced ops: the bytes of its own tensors, with
    and without the attention core's, and the tensors it shares with other layers."""

    def __init__(self, ops: list[PricedOp], units: list[str], lay: Layout):
        # ``lay``: its precision, which a recomputed block's kept input is counted at
        unit_of = {p.op.name: u for p, u in zip(ops, units)}
        by_name = {p.op.name: p for p in ops}
        self._core = {p.op.name for p in ops if p.attention_core and p.op.kind != "Einsum"}
        touched: dict[tuple, set[str]] = {}  # tensor -> the layers that keep, take or make it
        own: dict[str, dict[tuple, float]] = {}  # per layer, its ops' kept tensors (largest)
        inputs: dict[str, dict[tuple, None]] = {}  # per layer, what it reads from another
        for p, u in zip(ops, units):
            mine = own.setdefault(u, {})
            for k, v in p.kept.items():
                touched.setdefault(k, {unit_of[k[0]]}).add(u)
                mine[k] = max(v, mine.get(k, 0.0))
            taken = inputs.setdefault(u, {})
            for port in p.op.inputs:
                if port.source is not None and unit_of[port.source[0]] != u:
                    k = (port.source[0], int(port.source[1]))
                    touched.setdefault(k, {unit_of[k[0]]}).add(u)
                    taken[k] = None
        self.unit_of = unit_of
        # per layer: the sum of its own tensors (all, and less the attention core's), then
        # its tensors shared with another layer, and its inputs at their whole size
        self.alone: dict[str, tuple[float, float]] = {}
        self.shared: dict[str, list[tuple[tuple, float]]] = {}
        self.inputs: dict[str, list[tuple[tuple, float]]] = {}
        for u, mine in own.items():
            every = kept = 0.0
            shared = []
            for k, v in mine.items():
                if len(touched[k]) > 1:
                    shared.append((k, v))
                else:
                    every += v
                    kept += 0.0 if k[0] in self._core else v
            self.alone[u] = (every, kept)
            self.shared[u] = shared
        for u, taken in inputs.items():
            self.inputs[u] = [(k, tensor_bytes(by_name[k[0]], k[1], lay)) for k in taken]

    def stage(self, layers: list[str], again: set[str], recompute: str) -> tuple[float, float]:
        """The kept activation bytes per micro-batch and the recompute working set of a stage
        holding ``layers`` (:func:`pase.perf.memory.activation_bytes`), the layers in
        ``again`` rebuilt in the backward."""
        selective = recompute == "selective"
        here = set(layers)
        total = 0.0
        kept: dict[tuple, float] = {}  # the shared tensors, as activation_bytes merges them
        whole: dict[tuple, float] = {}  # recomputed blocks' inputs: kept whole, whoever keeps them
        held: dict[tuple, float] = {}  # every shared tensor at its largest (the working set)
        rebuilt = []
        for u in layers:
            again_u = u in again
            every, alone = self.alone.get(u, (0.0, 0.0))
            if again_u:
                rebuilt.append(u)
                whole.update(self.inputs.get(u, ()))
            else:
                total += alone if selective else every
            for k, v in self.shared.get(u, ()):
                if v > held.get(k, 0.0):
                    held[k] = v
                if not again_u and not (selective and k[0] in self._core
                                        and self.unit_of[k[0]] in here):
                    if v > kept.get(k, 0.0):
                        kept[k] = v
        kept.update(whole)
        total += sum(kept.values())
        working = 0.0
        if rebuilt:
            made: dict[str, float] = {u: self.alone.get(u, (0.0, 0.0))[0] for u in rebuilt}
            for k, v in held.items():
                u = self.unit_of[k[0]]
                if u in made:
                    made[u] += v
            working = max(made.values())
        return total, working

"""Per-op variants: ZeRO stages 1-3 (sharded optimizer state, gradients, parameters)
and activation recomputation, applied to an op's own work (:class:`OpWork`).

A variant never changes what an op reads or writes, so the tensors on its edges
and their layouts stay as they are: only the op's collectives, FLOP and memory
change. :func:`apply_variant` is the one definition, shared by the alpha-beta
Problem build (each candidate is a config with a variant) and the simulator.

ZeRO acts on each parameter over its *data-parallel group*: the devices that hold
the same tile of that parameter, which are the group of its gradient all-reduce
(the op dims the parameter does not map, for a GEMM its batch-like dims). With
``q`` the group size, ``P`` the tile's bytes and ``S`` the optimizer's copies of
a parameter (weights, gradients and ``S - 2`` optimizer moments; Adam: ``S = 4``):

========  ==============================  =================================================
stage     memory per device               collectives per parameter (in place of all-reduce)
========  ==============================  =================================================
0         ``S P``                         all-reduce of the gradient (``P`` bytes)
1         ``2P + (S - 2) P / q``          reduce-scatter of the gradient, all-gather of the
                                          updated parameter (both after backward)
2         ``P + (S - 1) P / q``           as stage 1
3         ``S P / q``                     all-gather before forward, all-gather again before
                                          backward, reduce-scatter of the gradient
========  ==============================  =================================================

A ring all-reduce moves ``2(q-1)/q P`` per device and a reduce-scatter or an
all-gather ``(q-1)/q P``, so stages 1 and 2 move what the all-reduce moved and
stage 3 moves 1.5 times as much. Stage 3's gathered parameters are transient
(freed after use); the additive per-op memory of a Problem does not count them.

Recomputation keeps none of the op's output activations for the backward pass
and runs its forward again in backward: its forward FLOP are added to the
backward FLOP, and its forward collectives (a split reduction's all-reduce,
row statistics) run again as backward collectives. ZeRO-3's parameter gather is
not repeated: the backward gather serves the recomputation.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, NamedTuple

import numpy as np

from pase.errors import OptionError
from pase.ir import Op
from pase.work.memory import sharded_states
from pase.work.ops import Collective, OpWork, owned_parameters
from pase.work.tiles import port_tiles

ZERO_STAGES = (0, 1, 2, 3)


class Variant(NamedTuple):
    """How an op runs: its ZeRO stage (0-3) and whether it recomputes its activations."""

    zero: int = 0
    recompute: bool = False

    def __str__(self) -> str:
        """``"zero 3 + recompute"``, ``"zero 1"``, ``"recompute"`` or ``"-"``."""
        parts = ([f"zero {self.zero}"] if self.zero else []) + (["recompute"] if self.recompute else [])
        return " + ".join(parts) or "-"

    @property
    def is_default(self) -> bool:
        return self.zero == 0 and not self.recompute

    def to_json(self) -> dict[str, Any]:
        return {"zero": int(self.zero), "recompute": bool(self.recompute)}


DEFAULT = Variant()


def check_variant(zero: Any, recompute: Any, where: str = "variant") -> Variant:
    """A validated :class:`Variant` (one-line OptionError naming ``where`` on bad input)."""
    if isinstance(zero, bool) or not isinstance(zero, (int, np.integer)) or int(zero) not in ZERO_STAGES:
        raise OptionError(f"{where}: zero must be one of 0, 1, 2, 3, got {zero!r}")
    if not isinstance(recompute, (bool, np.bool_)):
        raise OptionError(f"{where}: recompute must be true or false, got {recompute!r}")
    return Variant(int(zero), bool(recompute))


def variant_from_json(data: Any, where: str = "variant") -> Variant:
    """A Variant from ``{"zero": 3, "recompute": true}`` (missing keys: 0, false)."""
    if isinstance(data, Variant):
        return data
    if not isinstance(data, Mapping):
        raise OptionError(f"{where} must be an object like {{\"zero\": 3, \"recompute\": true}}, "
                          f"got {type(data).__name__}")
    unknown = sorted(set(map(str, data)) - {"zero", "recompute"})
    if unknown:
        raise OptionError(f"{where} has unknown key {unknown[0]!r}; allowed: zero, recompute")
    return check_variant(data.get("zero", 0), data.get("recompute", False), where)


def variant_choices(zero: str = "0", recompute: str = "none") -> list[Variant]:
    """The variants a cost model's ``zero`` / ``recompute`` options allow, the fixed one
    (``auto`` read as 0 / none) first: ``("auto", "none")`` gives stages 0-3 without
    recomputation."""
    zeros = list(ZERO_STAGES) if zero == "auto" else [int(zero)]
    recs = [False, True] if recompute == "auto" else [recompute == "all"]
    return [Variant(z, r) for r in recs for z in zeros]


def apply_variant(work: OpWork, zero: int = 0, recompute: bool = False) -> OpWork:
    """``work`` run under ZeRO stage ``zero`` and, if ``recompute``, with recomputation.

    Returns a new OpWork (``work`` itself when the variant is the default).
    """
    variant = check_variant(zero, recompute)
    if variant.is_default:
        return work
    colls = list(work.collectives)
    state, params = work.state_bytes, work.parameter_bytes
    if variant.zero:
        colls, groups = _zero_collectives(work, variant.zero)
        state = _zero_state(work, variant.zero, groups)
    fwd, bwd, acts = work.forward_flop, work.backward_flop, work.activation_bytes
    traffic = work.backward_traffic
    if variant.recompute:
        again = [dataclasses.replace(c, phase="backward", port=None, label=f"{c.label} (recompute)")
                 for c in work.collectives if c.phase == "forward"]
        colls += again
        bwd = bwd + fwd
        traffic = traffic + work.forward_traffic  # the forward's memory traffic again too
        acts = np.zeros_like(acts)
    return dataclasses.replace(work, backward_flop=bwd, backward_traffic=traffic,
                               collectives=tuple(colls), state_bytes=state,
                               parameter_bytes=params, activation_bytes=acts)


def data_parallel_groups(work: OpWork) -> dict[int, tuple[tuple[int, ...], np.ndarray]]:
    """Per index of a weight the op owns: (the op dims of its gradient all-reduce's group,
    the synced bytes).

    The all-reduce over several dims is listed once per dim (:mod:`pase.work.ops`);
    their union is the whole data-parallel group. A tied matrix (``tied``: a language-model
    head reading the embedding's) is held and sharded by its owner, so the user's gradient
    all-reduce of it stays as it is and an op owning no parameter has no group."""
    owned = owned_weight_indices(work.op)
    groups: dict[int, tuple[set[int], np.ndarray]] = {}
    for c in work.collectives:
        if c.phase == "gradient" and c.weight in owned and c.kind == "all-reduce":
            dims, nbytes = groups.setdefault(c.weight, (set(), c.nbytes))
            dims.update(c.dims)
    return {j: (tuple(sorted(d)), n) for j, (d, n) in groups.items()}


def owned_weight_indices(op: Op) -> set[int]:
    """Indices (among ``op.weights``) of the parameters ``op`` holds in memory."""
    owned = owned_parameters(op)
    return {j for j, w in enumerate(op.weights) if any(w is p for p in owned)}


def check_op_variant(op: Op, variant: Variant, where: str) -> Variant:
    """``variant`` for ``op``; a one-line OptionError for a ZeRO stage on an op that holds
    no parameter of its own (ZeRO shards parameter state; a tied matrix is its owner's)."""
    if variant.zero and not owned_weight_indices(op):
        tied = op.attrs.get("tied")
        why = f"its matrix is tied to op {tied!r}" if tied is not None else "it has no parameters"
        raise OptionError(f"{where}: zero must be 0 for op {op.name!r}, which holds no parameter "
                          f"state to shard ({why}); got {variant.zero}")
    return variant


def _zero_collectives(work: OpWork, stage: int) -> tuple[list[Collective], dict]:
    groups = data_parallel_groups(work)
    kept = [c for c in work.collectives
            if not (c.phase == "gradient" and c.weight in groups and c.kind == "all-reduce")]
    added = []
    for j, (dims, nbytes) in sorted(groups.items()):
        label = f"w{j}"
        one = np.ones_like(nbytes)
        rs = Collective("reduce-scatter", "gradient", nbytes, dims, one, f"{label} gradient (zero)",
                        weight=j)
        if stage == 3:
            added += [Collective("all-gather", "forward", nbytes, dims, one,
                                 f"{label} parameters (zero)", weight=j),
                      Collective("all-gather", "backward", nbytes, dims, one,
                                 f"{label} parameters (zero)", weight=j), rs]
        else:
            added += [rs, Collective("all-gather", "gradient", nbytes, dims, one,
                                     f"{label} updated parameters (zero)", weight=j)]
    return kept + added, groups


def _zero_state(work: OpWork, stage: int, groups: dict) -> np.ndarray:
    """Parameter and optimizer bytes per device under ZeRO ``stage`` (see the module table)."""
    op, e = work.op, work.bytes_per_element
    # weight and gradient at the element size, the rest of the model's state factor beside
    # them (pase.work.memory: the optimizer's fp32 state and master copy)
    weight, gradient, state = e, e, (work.state_factor - 2.0) * e
    total = np.zeros(len(work.configs))
    padded = getattr(work, "weight_tiles", None)  # a padded vocabulary's (calibrated model)
    for port in owned_parameters(op):
        j = next(i for i, w in enumerate(op.weights) if w is port)
        tile = padded[j] if padded is not None else np.prod(port_tiles(op, port, work.configs),
                                                            axis=1)
        dims = groups.get(j, ((), None))[0]
        q = np.prod(work.configs[:, list(dims)], axis=1).astype(np.float64) if dims else 1.0
        total = total + sharded_states(tile, stage, q, weight, gradient, state)
    copies = getattr(work, "low_copies", None)  # a low precision's weight copies (calibrated)
    if copies is not None and stage in (1, 2):  # the distributed optimizer keeps them, not
        total = total + copies - work.parameter_bytes  # the 16-bit weights; FSDP neither
    return total

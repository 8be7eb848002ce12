"""An op's work as the calibrated cost model prices it, and the facts read off it.

:class:`PricedWork` is :class:`pase.work.ops.OpWork` with the calibrated model's extras
per config (kernel seconds, what a recomputed layer keeps, padded weight tiles);
:func:`kept_collectives` the collectives it keeps, as the layout path runs them (less the
ones another op runs for it, a weight's gradient syncs merged into one). Apart from
:mod:`pase.cost_models.calibrated_rules`, which makes the work, because the plan pricing
(:mod:`pase.cost_models.calibrated_plan`) reads the same facts off it.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from pase.ir import Op
from pase.work.memory import FP32_BYTES
from pase.work.ops import OpWork, owned_parameters
from pase.work.variants import owned_weight_indices

# a loss's mean over split rows: reported, not on the training path (the gradient's mean
# is the data-parallel sync's; Megatron-LM averages the loss for its log), so not charged
REPORTED = ("loss mean",)
# a vocabulary-parallel loss: one fp32 all-reduce of each row's max and sum, as the layout
# path prices it (its label logit travels with the sum; its backward needs no statistics)
LOSS_STATISTICS, LOSS_FOLDED = "max and sum", ("label logit", "row sum of the gradient")


@dataclasses.dataclass(frozen=True)
class PricedWork(OpWork):
    """An op's work with the calibrated model's extras per config."""

    forward_seconds: np.ndarray | None = None  # kernels, one micro-batch
    backward_seconds: np.ndarray | None = None
    weight_seconds: np.ndarray | None = None  # of backward_seconds, the weight gradients
    base_backward_flop: np.ndarray | None = None  # before a variant adds recomputation
    block_bytes: np.ndarray | None = None  # the outputs a recomputed layer still keeps
    # per weight, its elements a device holds, where configs pad (calibrated_padding): the
    # ZeRO state of a variant reads them (pase.work.variants); None: the port's exact tiles
    weight_tiles: tuple[np.ndarray, ...] | None = None
    # a linear layer's two low-precision weight copies under fp8 / mxfp8 / nvfp4, bytes a
    # device holds: in its states under ZeRO 0, in place of its 16-bit weights under ZeRO
    # 1-2, none under ZeRO 3 (pase.work.variants reads them); None: no copies
    low_copies: np.ndarray | None = None


def kept_collectives(op: Op, collectives: tuple, shares_input_gradient: bool,
                     bytes_per_element: float) -> tuple:
    """``op``'s collectives less the ones another op runs for it: a tied matrix's
    gradient is synced once, by its owner; partial input gradients of a tensor
    several projections read (``shares_input_gradient``) are summed into the first
    reader's all-reduce; the loss's mean over split rows is only reported
    (:data:`REPORTED`) and its statistics over a split vocabulary take one all-reduce
    (:data:`LOSS_STATISTICS`), as the layout path has them. Gradient syncs of one weight
    over several dims are merged (:func:`merged_syncs`)."""
    owned = owned_weight_indices(op)
    colls = tuple(c for c in collectives if (c.phase != "gradient" or c.weight is None
                                             or c.weight in owned) and c.label not in REPORTED)
    if shares_input_gradient:
        colls = tuple(c for c in colls if not (c.phase == "backward" and c.port == "in0"))
    if op.kind == "SoftmaxCrossEntropy":
        colls = tuple(dataclasses.replace(c, nbytes=c.nbytes / bytes_per_element
                                          * 2 * FP32_BYTES, rounds=np.ones_like(c.rounds))
                      if c.label == LOSS_STATISTICS else c
                      for c in colls if c.label not in LOSS_FOLDED)
    return merged_syncs(colls)


def merged_syncs(collectives: tuple) -> tuple:
    """A weight's gradient all-reduces over several replicated dims (data and context
    parallel ranks) as one all-reduce over all of them: Megatron-LM and FSDP sync a
    gradient over the whole data-parallel group at once (its dp x cp ranks), as the
    ZeRO collectives and the layout path do, not one dim's group after another."""
    first: dict[tuple, int] = {}
    out: list = []
    for c in collectives:
        if c.phase != "gradient" or c.kind != "all-reduce" or c.weight is None:
            out.append(c)
            continue
        key = (c.weight, c.label)
        if key not in first:
            first[key] = len(out)
            out.append(c)
            continue
        i = first[key]
        out[i] = dataclasses.replace(out[i], dims=tuple(sorted(set(out[i].dims) | set(c.dims))))
    return tuple(out)


def parameter_elements(op: Op) -> float:
    """Elements of the parameters ``op`` holds (a tied matrix is its owner's)."""
    return float(sum(np.prod(p.shape) for p in owned_parameters(op)))


def recomputes(work: PricedWork) -> np.ndarray:
    """Per config, whether a variant runs the op's forward again (its backward FLOP grew)."""
    return work.backward_flop > work.base_backward_flop * (1 + 1e-12)


__all__ = ["LOSS_FOLDED", "LOSS_STATISTICS", "REPORTED", "PricedWork", "kept_collectives",
           "merged_syncs", "parameter_elements", "recomputes"]

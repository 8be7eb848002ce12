"""A named layout as a per-op plan: what each op's config and variant are under it.

``tp=2,dp=4`` is one way to write a plan: :func:`layout_configs` gives each op's split
(``tp``, ``cp`` and ``ep`` as :func:`pase.perf.layout.op_splits` has them, ``dp`` on the
batch) for a graph built at the micro-batch of every data-parallel rank together
(``micro_batch x dp``). Under expert parallelism an op that runs the experts (their
MLPs) splits its experts ``ep`` ways, its hidden size ``etp`` ways and its tokens the
rest of the ``tp x cp x dp`` devices (the expert-data-parallel group,
:attr:`~pase.perf.layout.Layout.expert_data`: the batch ``dp / ep`` ways where ``ep``
divides ``dp``): each rank runs its experts on the tokens of the ``ep`` ranks of its
group, as the layout pricing has it; the dispatch and the combine run on each rank's own
tokens as the attention has them (batch split ``dp`` ways, every expert), so the edges
between them and the experts are the token exchange the calibrated model prices as
Megatron-LM's all-to-all; a router holds every expert. So it is under MoE parallel
folding (``ep`` not dividing ``dp``, or ``etp`` not ``tp``: the ep group spans
tensor-parallel ranks, which hold the same tokens and each send their share of them; the
router's softmax and top-k and the combine run whole on each of them, the dispatch splits
its routing groups among them, where the layout path gives each its share:
docs/cost-model.md, "One price, checked"). Folded under sequence parallelism (``etp`` =
1), each tp rank holds and routes its own share of the tokens: the router splits the
sequence as its norm does, the dispatch and the combine their routing groups, so nothing
is gathered and each rank holds its own share of the buffer. Folding over context- and
tensor-parallel ranks together has no per-op form, nor has an ``etp`` between 1 and
``tp`` under sequence parallelism, an ``etp`` other than ``tp`` without ``ep``, unfolded
experts (``ep`` > 1, ``etp`` = ``tp``) under sequence parallelism, a dispatch routing as
one group under sequence-parallel folding (a model imported from PyTorch), or any layout
that would split a pinned dim: refused (:class:`~pase.errors.NoPlanFormError`). :func:`layout_variants`
gives each op's ZeRO stage and recomputation flag and :func:`plan_cost_options` the cost
options. The calibrated cost model prices that plan with the same rules as the layout
(:mod:`pase.cost_models.calibrated`), which is how the two prices are checked against
each other, and ``pase view --layout`` draws it. A pipeline layout (pp > 1) is a
pipeline plan (:func:`pase.pipeline.layout_plan.layout_pipeline`, the format ``pase solve --pipeline`` writes),
priced by :func:`pase.cost_models.calibrated_pipeline.price_pipeline`.

A vocabulary the split does not divide: Megatron-LM pads it and the layout path prices
each rank's ``ceil(V / tp)`` rows. For a cost model that prices such splits (the
calibrated model: its ``padded_roles``, :data:`pase.space.PADDED_ROLES`,
:mod:`pase.cost_models.calibrated_padding`) :func:`layout_configs` splits it as the layout
does, so the plan is priced as the layout is (a pipeline layout's plan, priced by that
model alone, always); for one whose tiles are exact it is left unsplit and reported.
Any other dim the split does not divide is left unsplit and reported.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

from pase.errors import NoPlanFormError
from pase.ir import Graph, Op
from pase.perf.context import op_contexts, recomputed
from pase.perf.layout import Layout, experts_of, op_splits
from pase.perf.pipeline import placement, recomputed_units
from pase.work.variants import owned_weight_indices

NOT_EXPERTS = ("Softmax", "TopK", "MoEDispatch", "MoECombine")


def layout_configs(graph: Graph, lay: Layout, unsplit: list[str] | None = None,
                   padded_roles: Sequence[str] = ()) -> dict[str, dict[str, int]]:
    """``{op: {dim: factor}}`` of ``lay`` (pp = 1) on ``graph`` built at ``micro_batch x dp``;
    a dim of ``padded_roles`` (a cost model's: the calibrated one's pads the vocabulary)
    split with padding as the layout splits it, other dims the split does not divide left
    unsplit and appended to ``unsplit`` as ``op.dim``. A layout whose ep group reaches
    past the data-parallel ranks (MoE parallel folding) under context parallelism with
    tp > 1, or with 1 < etp < tp under sequence parallelism, an etp other than tp without
    ep, unfolded experts (ep > 1) under sequence parallelism with tp > 1, or one that
    would split an op's pinned dim, has no per-op form yet: refused, naming it."""
    folded = lay.dp % lay.ep or lay.expert_tp != lay.tp
    why = ("context parallelism and tp > 1" if lay.cp > 1 and lay.tp > 1 else
           "ep=1" if lay.ep == 1 else "sequence parallelism and 1 < etp < tp"
           if lay.sequence_parallel and 1 < lay.expert_tp < lay.tp else None)
    if folded and why:
        raise NoPlanFormError(
            f"layout ep={lay.ep} over dp={lay.dp}{f', etp={lay.etp}' if lay.etp else ''} with "
            f"{why}: experts folded over tensor- or context-parallel ranks there have no "
            "per-op plan yet (the plan's exchange would move the tokens other than the "
            "layout's all-to-all, run whole experts on a share of the tokens with no "
            "exchange, or send each tp rank's tokens tp / etp ways where the layout sends "
            "them tp ways); allowed: ep dividing dp with etp equal to tp, or ep > 1 folded "
            "over tensor-parallel ranks (etp = 1 under sequence parallelism) or over "
            "context-parallel ranks with tp = 1")
    if not folded and lay.ep > 1 and lay.tp > 1 and lay.sequence_parallel:
        raise NoPlanFormError(
            f"layout tp={lay.tp}, ep={lay.ep} dividing dp={lay.dp} with sequence parallelism: "
            "experts split over the tensor-parallel ranks gather each rank's tokens before "
            "the exchange, which the plan's exchange does not price yet; allowed: ep > 1 "
            "folded over the tensor-parallel ranks (etp = 1), or without sequence parallelism")
    routed = folded and lay.sequence_parallel  # each tp rank routes its own tokens
    configs = {}
    for op in graph.ops:
        # the router's softmax and top-k read every expert's score: they hold all experts;
        # the dispatch and combine run on each rank's own tokens (the all-to-all is the
        # re-layout on their edges to the experts); folded, they keep the tokens the
        # tensor-parallel ranks share, as the attention has them (etp=0: tp)
        experts = experts_of(op) if op.kind not in NOT_EXPERTS else None
        split = dict(zip(op.dim_names, op_splits(op, replace(lay, ep=1, etp=0)
                                                 if experts is None else lay)))
        if experts is not None:
            _expert_tokens(op, split, lay)
        else:
            batch = next((d.name for d in op.dims if d.role == "batch"), None)
            if batch is not None:
                split[batch] *= lay.dp
            if routed:
                _routed_tokens(op, split, lay)
            elif folded and op.kind == "MoEDispatch" and "g" in split:
                split["g"] *= lay.tp // lay.expert_tp  # each holder routes its share
        for d in op.dims:
            if d.size % split[d.name] and d.role not in padded_roles:
                if unsplit is not None:
                    unsplit.append(f"{op.name}.{d.name}")
                split[d.name] = 1
        pinned = [d for d in sorted(op.pinned) if split[d] > 1]
        if pinned:  # unfolded MoE under sequence parallelism splits the capacity slots
            raise NoPlanFormError(
                f"op {op.name!r} would split its pinned dim {pinned[0]!r} {split[pinned[0]]} "
                f"ways; layout tp={lay.tp}, dp={lay.dp}, ep={lay.ep}"
                f"{' with sequence parallelism' if lay.sequence_parallel else ''}: no per-op "
                "plan yet; allowed: pinned dims whole (a mixture of experts under sequence "
                "parallelism only with its experts folded over the tp ranks, etp = 1)")
        configs[op.name] = {d: f for d, f in split.items() if f > 1}
    return configs


def _expert_tokens(op: Op, split: dict[str, int], lay: Layout) -> None:
    """Split an expert op's tokens over its expert-data-parallel group (``tp x cp x dp /
    (ep x etp)`` ways, beside ``ep`` on the experts and ``etp`` on the hidden size, so
    every device runs its share): the sequence as far as the layout splits it (``cp``,
    and ``tp / etp`` where folded) and the group's size divides, the batch the rest."""
    tokens = lay.expert_data
    seq = next((d.name for d in op.dims if d.role == "sequence"), None)
    batch = next((d.name for d in op.dims if d.role == "batch"), None)
    if seq is not None:
        split[seq] = tokens if batch is None else math.gcd(split[seq], tokens)
    if batch is not None:
        split[batch] *= tokens // (split[seq] if seq is not None else 1)


def _routed_tokens(op: Op, split: dict[str, int], lay: Layout) -> None:
    """Sequence parallelism under folding: each tp rank routes its own tokens. The router
    splits the sequence ``tp`` ways as its norm does (its softmax and top-k have that
    split already); a dispatch and a combine split their routing groups ``tp`` ways, as
    the layout does, each rank routing its own tokens into its own slots. With one
    routing group (a model imported from PyTorch) there is no such split: refused."""
    seq = next((d.name for d in op.dims if d.role == "sequence"), None)
    if op.kind in ("MoEDispatch", "MoECombine") and "g" not in op.dim_names:
        raise NoPlanFormError(
            f"op {op.name!r} routes its sequence as one group: under sequence parallelism "
            f"with the experts folded over the tensor-parallel ranks (tp={lay.tp}) each rank "
            "routes its own tokens, which needs routing groups (the zoo's models have them); "
            "allowed: such a layout without sequence parallelism")
    if op.kind == "Einsum" and seq is not None and \
            any(d.role == "expert" for d in op.dims):  # the router
        split[seq] *= lay.tp


def plan_cost_options(lay: Layout) -> dict[str, object]:
    """The calibrated model's options that price ``lay``'s plan as the layout path prices
    the layout (micro-batches, ZeRO, recomputation, precision, attention, overlaps)."""
    return {"microbatches": lay.microbatches, "zero": str(lay.zero), "recompute": lay.recompute,
            "precision": lay.precision, "attention": lay.attention,
            "tp_overlap": lay.tp_overlap, "ep_overlap": lay.ep_overlap}


def layout_variants(graph: Graph, lay: Layout) -> dict[str, dict[str, object]]:
    """``{op: {"zero": Z, "recompute": R}}`` of ``lay``: its ZeRO stage on every op that
    holds parameters, and recomputation by its rule (:func:`recomputed`); full
    recomputation of the first ``recompute_layers`` of each stage only, where it is set
    (:func:`pase.perf.pipeline.recomputed_units`)."""
    contexts = op_contexts(graph, lay.attention)
    stages, units, _ = placement(graph, lay)
    rebuilt = recomputed_units(lay, units, stages) if lay.recompute_layers else None
    out = {}
    for op, unit in zip(graph.ops, units):
        zero = lay.zero if owned_weight_indices(op) else 0
        again = recomputed(contexts[op.name], lay.recompute) and \
            (rebuilt is None or unit in rebuilt)
        if zero or again or rebuilt is not None:  # partial: the cost model's rule is "full"
            out[op.name] = {"zero": zero, "recompute": again}
    return out

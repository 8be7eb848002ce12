"""The cost model of one pipeline stage: the registry's model pricing one of ``m``
micro-batches, its once-a-step terms (gradient syncs, the optimizer step) charged
``1 / m`` per micro-batch or, for the pipeline search's calibrated stages, kept apart as
each candidate's tail (:mod:`pase.pipeline.stages`, :mod:`pase.pipeline.layered`)."""
from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any, Mapping

import numpy as np

from pase import api
from pase.costing import CostModel
from pase.work.ops import OpWork


class GradientShare:
    """Mixed into the alpha-beta model for one micro-batch of a pipeline stage: a
    parameter-gradient sync is charged ``1 / microbatches`` per micro-batch (it runs
    once per step). The model class comes from the registry (:func:`stage_cost_model`)."""

    microbatches: int = 1

    def work_costs(self, work: OpWork) -> np.ndarray:
        """Seconds per config for one micro-batch (ZeRO's gradient collectives included)."""
        if self.microbatches > 1:
            share = 1.0 / self.microbatches
            work = replace(work, collectives=tuple(
                replace(c, rounds=c.rounds * share) if c.phase == "gradient" else c
                for c in work.collectives))
        return super().work_costs(work)  # the registered alpha-beta class, after this mixin


@functools.lru_cache(maxsize=None)
def _stage_class(base: type) -> type:
    """``base`` (the registered alpha-beta class) with :class:`GradientShare` in front."""
    return type("StageCostModel", (GradientShare, base), {"__doc__": GradientShare.__doc__})


class TailApart:
    """Mixed into the calibrated model for a pipeline stage: ``work_costs`` is a
    candidate's time per micro-batch alone and ``once_costs`` its tail (syncs at the tax,
    the optimizer step), so the stage's plans can be weighed by both
    (:mod:`pase.pipeline.layered`)."""

    def work_costs(self, work: OpWork) -> np.ndarray:
        share, self.once_share = self.once_share, 0.0
        try:
            return super().work_costs(work)
        finally:
            self.once_share = share

    def once_costs(self, work: OpWork) -> np.ndarray:
        share = self.once_share
        try:
            self.once_share = 1.0
            full = super().work_costs(work)
            self.once_share = 0.0
            return full - super().work_costs(work)
        finally:
            self.once_share = share


@functools.lru_cache(maxsize=None)
def _apart_class(base: type) -> type:
    return type("StageCalibratedModel", (TailApart, base), {"__doc__": TailApart.__doc__})


def stage_cost_model(options: Mapping[str, Any], microbatches: int,
                     name: str = "alpha-beta", apart: bool = False) -> CostModel:
    """The registry's model ``name`` from cost ``options`` (validated by its signature),
    pricing one of ``microbatches`` micro-batches: the calibrated model charges its
    once-per-step terms (gradient syncs, the optimizer step) ``1 / microbatches`` per
    micro-batch itself, or with ``apart`` keeps them apart (:class:`TailApart`);
    alpha-beta gets :class:`GradientShare`."""
    if name == "calibrated":
        model = api.make_cost_model("calibrated", **dict(options))
        model.once_share = 1.0 / int(microbatches)
        if model.ep_overlap_auto:  # the step's micro-batches, not the one this model prices
            model.ep_overlap = int(microbatches) > 1
        if apart:
            cls = _apart_class(type(model))
            stage = cls.__new__(cls)
            stage.__dict__.update(model.__dict__)
            stage.once_share = 0.0
            return stage
        return model
    model = api.make_cost_model(name, **dict(options))
    cls = _stage_class(type(model))
    stage = cls.__new__(cls)
    stage.__dict__.update(model.__dict__)
    stage.microbatches = int(microbatches)
    return stage

"""The whole-plan search's first incumbent: the layout family's best plan that runs as a plan.

`pase solve MODEL -p N --cluster C --global-batch B` first runs the layout family's search
(:func:`pase.perf.search.search_layouts`, seconds at 1,024 devices) over the schedules a
pipeline plan can run (all of them: 1F1B, interleaving with any ``V``, ZB-H1, DualPipe),
writes its best fitting
layouts as pipeline plans (:mod:`pase.pipeline.layout_plan`) and prices them at the one
price, best first, until one fits. That plan is the op-level search's incumbent from its
first stage solve: a stage that cannot beat it is never solved, and the answer is never
slower than it. The search then has a plan to give at any time limit.

Layouts with no plan form (:class:`~pase.errors.NoPlanFormError`) are passed over.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from pase import api
from pase.deadline import Deadline, active
from pase.errors import OptionError, TimeLimitError
from pase.ir import Graph
from pase.pipeline.plan import PipelinePlan

# The most layouts written and priced as plans, best first, until one fits at the one price.
TRIES = 3
# Of the time left, the most the layout family's search may take: its best layouts still
# need pricing as plans (DeepSeek-V3 on 1,024 H100s: about 40 s for the family, 26 for a
# plan), so that a tight --time-limit ends with the best layout priced so far, not none.
FAMILY_SHARE = 0.5
# The layout family's options the pipeline search's cost options carry over.
CARRIED = ("precision", "attention")


@dataclass
class Seed:
    """A layout's plan at its one price (``price``: ``price_pipeline``'s keys)."""

    plan: PipelinePlan
    price: dict[str, Any]
    layout: Any

    @property
    def step(self) -> float:
        return float(self.price["step_seconds"])

    def summary(self) -> dict[str, Any]:
        """The layout and its plan's step, as the search's JSON records its start."""
        lay = self.layout
        return {"tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "cp": lay.cp, "ep": lay.ep,
                "micro_batch": lay.micro_batch, "schedule": self.plan.schedule,
                "zero": lay.zero, "recompute": lay.recompute, "step_seconds": self.step}


def best_layout_plan(model: str, load: Callable[[int], Graph], devices: int, batch: int,
                     cluster: Any, given: Mapping[str, Any], cap: float | None,
                     model_options: Mapping[str, Any], deadline: Deadline | None = None,
                     progress: Callable[[str], None] | None = None) -> Seed | None:
    """The layout family's best plan that fits ``cap`` at the one price (of its first
    :data:`TRIES` with a plan form, best first), or None. ``given``: the pipeline
    plan's cost options (the seed records the same, so both answers read alike); ``load``:
    the model at a micro-batch size. The layout search takes at most
    :data:`FAMILY_SHARE` of the time ``deadline`` (the command's) has left and gives what
    it priced by then; past ``deadline`` pricing its plans stops."""
    from pase.perf.search import search_layouts
    from pase.pipeline.layout_plan import layout_pipeline

    options = {k: given[k] for k in CARRIED if k in given}
    left = None if deadline is None else deadline.remaining()
    family_deadline = deadline if left is None else Deadline(FAMILY_SHARE * left)
    try:
        with active(family_deadline):
            family = search_layouts(load, devices, cluster, batch, keep=4 * TRIES,
                                    progress=progress, **options)
    except TimeLimitError:
        return None
    except OptionError as exc:  # a family with no layout at all
        if progress:
            progress(f"no layout to start from: {exc}")
        return None
    if progress and not family.exhaustive:
        progress(f"start: the layout family's search stopped at its share of the time limit "
                 f"({FAMILY_SHARE * left:.0f} s), {family.priced} layouts priced, {family.fitting} "
                 "fitting")
    costs = {**dict(given), "cluster": cluster}
    model_cost = api.make_cost_model("calibrated", **costs)
    tried = 0
    for estimate in family.ranked:
        if tried == TRIES:
            break
        if cap is not None and estimate.memory_bytes > cap:
            continue
        lay = estimate.layout
        graph = load(lay.micro_batch * lay.dp)
        try:
            plan = layout_pipeline(graph, lay, model, dict(model_options), costs)
        except OptionError:  # no plan form (NoPlanFormError) or a chunk not one op range
            continue
        plan.memory_cap_bytes = cap
        tried += 1
        try:
            with active(deadline):
                price = model_cost.price_pipeline(plan, graph=graph)
        except TimeLimitError:
            return None
        named = (f"layout tp{lay.tp} pp{lay.pp} dp{lay.dp} cp{lay.cp} ep{lay.ep} "
                 f"mb{lay.micro_batch} {plan.schedule} zero {lay.zero} {lay.recompute}")
        if price["fits_memory"]:
            seed = Seed(plan, price, lay)
            if progress:
                progress(f"start: {named} as a plan: {seed.step:.6g} s")
            return seed
        if progress:  # the plan's one price holds more than the layout path counts
            progress(f"start: {named} fits as a layout ({estimate.memory_bytes / 2**30:.4g} "
                     f"GiB) but not as a plan ({price['memory_bytes'] / 2**30:.4g} GiB); "
                     f"{'the next' if tried < TRIES else 'no more tried'}")
    return None


def seed_answer(seed: Seed, bound: float | None, info: Mapping[str, Any],
                tolerance: float = 1e-9) -> PipelinePlan:
    """The seed as the whole-plan search's answer: its plan at its one price, ``optimal``
    when ``bound`` (the least charge of the search's plans, at most the seed's price) meets
    it and the search was not cut, else ``feasible`` with that bound (None: unknown)."""
    plan = seed.plan.take_price(seed.price)
    plan.search = {**dict(info), "start": seed.summary(), "answer": "start"}
    stopped = "stopped" in info
    plan.lower_bound = None if bound is None or stopped else min(bound, seed.step)
    plan.status = "optimal" if plan.lower_bound is not None and \
        seed.step <= plan.lower_bound * (1 + tolerance) else "feasible"
    return plan

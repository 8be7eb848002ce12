"""The whole-plan search starts from the layout family's best plan (pase.pipeline.seed).

Its answer is never slower than that plan, a time limit that passes after it still gives
a plan (the layout's, with no claim), and a plan the layout family wrote re-prices to the
step the search reported. The deadlines here count checks instead of reading a clock."""
from __future__ import annotations

import re

import pytest

from pase import api
from pase.deadline import Deadline
from pase.errors import OptionError
from pase.perf.search import search_layouts
from pase.pipeline import PipelinePlan, solve_pipeline
from pase.pipeline import solve as solve_module
from pase.pipeline.reprice import reprice

RUN = dict(batch=8, cluster="h100-sxm", model_options={"layers": 2}, schedule="auto",
           cost_options={"zero": "auto", "recompute": "auto"})
# m = 8 of one sequence: every searched plan splits one sequence over 8 devices, slower
# than the layout family's data-parallel plans of larger micro-batches
NARROW = dict(RUN, microbatches=[8])


class Flag(Deadline):
    """A deadline that passes once ``passed`` is set."""

    def __init__(self):
        super().__init__(1e9)
        self.passed = False

    def expired(self) -> bool:
        return self.passed


def _family_best(devices: int = 8) -> float:
    family = search_layouts(lambda mb: api.load_graph("gpt2", batch=mb, layers=2), devices,
                            "h100-sxm", 8, schedules=("1f1b", "interleaved"))
    return family.ranked[0].step_seconds


PROGRESS: list[str] = []  # the seeded search's progress lines


@pytest.fixture(scope="module")
def seeded() -> PipelinePlan:
    return solve_pipeline("gpt2", 8, start_from_layouts=True, progress=PROGRESS.append, **NARROW)


def test_progress_never_reports_a_best_worse_than_the_start(seeded):
    # the start is a plan the search holds: "least charge so far" is at most its step, never inf
    start = seeded.search["start"]["step_seconds"]
    so_far = [re.search(r"least charge so far (\S+)", line).group(1) for line in PROGRESS
              if "least charge so far" in line]
    assert so_far and all(float(x) <= start * (1 + 1e-12) for x in so_far), so_far


def test_a_narrower_space_answers_with_the_layout_plan_and_proves_it(seeded):
    plan = seeded
    assert plan.search["answer"] == "start"
    # the layout's plan at the one price: the family's own price of it within 2%
    assert plan.step_time == pytest.approx(_family_best(), rel=0.02)
    # every searched plan costs at least it: the bound meets the step
    assert plan.status == "optimal" and plan.lower_bound == pytest.approx(plan.step_time)
    again = reprice(PipelinePlan.from_dict(plan.to_dict()))
    assert again["step_seconds"] == pytest.approx(plan.step_time, rel=1e-9)
    assert "search_step_seconds" not in again  # the search never charged a layout's plan
    assert "layout family's best plan" in plan.describe()


def test_without_the_start_the_narrower_space_is_slower(seeded):
    plain = solve_pipeline("gpt2", 8, start_from_layouts=False, **NARROW)
    assert "start" not in plain.search and plain.search["stage_solves"] > 0
    assert seeded.search["stage_solves"] < plain.search["stage_solves"]
    assert plain.step_time > seeded.step_time * 1.01


@pytest.mark.slow  # tests/test_search_vs_layouts.py checks the same in the default suite
def test_the_whole_plan_search_starts_from_layouts_and_never_loses_to_them():
    plan = solve_pipeline("gpt2", 8, **RUN)  # the defaults: a start is taken
    start = plan.search["start"]
    assert plan.step_time <= start["step_seconds"] * (1 + 1e-12)
    assert plan.step_time <= _family_best() * 1.02
    assert plan.lower_bound is not None and plan.lower_bound <= plan.step_time * (1 + 1e-9)


@pytest.mark.parametrize("options, started", [
    ({}, True), (dict(microbatches=[2]), False), (dict(schedule="1f1b"), False),
    (dict(cost_options={"zero": "1", "recompute": "auto"}), False),
    (dict(stage_sizes=[8]), False), (dict(cost_model="alpha-beta", cost_options={}), False)])
def test_only_the_whole_plan_search_starts_from_layouts(monkeypatch, options, started):
    calls, clock = [], Flag()

    def spy(*args, **kwargs):
        calls.append(args)
        clock.passed = True  # no search needed: only whether it starts from layouts

    monkeypatch.setattr(solve_module, "best_layout_plan", spy)
    clock.passed = not started  # a narrowed space is cut at once, before any plan
    with pytest.raises(OptionError, match="give a larger --time-limit"):
        solve_pipeline("gpt2", 8, deadline=clock, **{**RUN, **options})
    assert bool(calls) == started


def test_a_limit_that_passes_after_the_start_gives_the_layout_plan(monkeypatch):
    clock = Flag()
    real = solve_module.best_layout_plan

    def then_pass(*args, **kwargs):
        seed = real(*args, **kwargs)
        clock.passed = True  # the deadline passes once the start is priced
        return seed

    monkeypatch.setattr(solve_module, "best_layout_plan", then_pass)
    lines: list[str] = []
    plan = solve_pipeline("gpt2", 8, deadline=clock, progress=lines.append, **RUN)
    assert plan.search["answer"] == "start" and plan.search["stopped"] == "time limit"
    assert plan.status == "feasible" and plan.lower_bound is None and plan.gap is None
    assert plan.step_time == pytest.approx(plan.search["start"]["step_seconds"])
    assert any(line.startswith("start: layout") for line in lines)

    # without a start the same cut has no plan to give
    clock = Flag()
    monkeypatch.setattr(solve_module, "best_layout_plan",
                        lambda *a, **k: setattr(clock, "passed", True))
    with pytest.raises(OptionError, match="give a larger --time-limit"):
        solve_pipeline("gpt2", 8, deadline=clock, **RUN)


@pytest.mark.slow
def test_deepseeks_best_layout_is_the_start_as_a_plan():
    """DeepSeek-V3's best layout on 64 H100s (tp 2, pp 2, experts folded 32 ways under
    sequence parallelism, DualPipe) fits 31 GiB as a layout and, its dispatch and combine
    splitting their routing groups as its norm splits the sequence, as a plan: it is the
    start. Before, its plan held the dispatch buffers whole on both tensor-parallel ranks
    (31.6 GiB against 30.3), the search passed it over, and at DeepSeek-V3's full size
    found no start at all."""
    from pase.pipeline.seed import best_layout_plan

    options = {"layers": 4, "dense_layers": 1, "seq": 4096}
    lines: list[str] = []
    seed = best_layout_plan("deepseek-v3", lambda mb: api.load_graph("deepseek-v3", batch=mb,
                                                                      **options),
                            64, 64, "h100-sxm", {}, 31 * 2**30, options, progress=lines.append)
    assert seed is not None and seed.price["memory_bytes"] <= 31 * 2**30
    assert lines[-1].startswith("start: layout tp2 pp2 dp16 cp1 ep32 mb1 dualpipe zero 2")
    assert not [line for line in lines if "fits as a layout" in line]


def test_a_layout_whose_plan_holds_more_says_so(monkeypatch):
    """A layout that fits as a layout but whose plan holds more than the cap is passed
    over with a line saying both figures (here the plan's price made 1 GiB heavier)."""
    from pase.cost_models.calibrated import CalibratedCostModel
    from pase.pipeline.seed import TRIES, best_layout_plan

    real = CalibratedCostModel.price_pipeline

    def heavier(self, plan, graph=None):
        price = dict(real(self, plan, graph=graph))
        price["memory_bytes"] += 2**30
        price["fits_memory"] = False
        return price

    monkeypatch.setattr(CalibratedCostModel, "price_pipeline", heavier)
    lines: list[str] = []
    seed = best_layout_plan("gpt2", lambda mb: api.load_graph("gpt2", batch=mb, layers=2), 8, 8,
                            "h100-sxm", {}, 80 * 2**30, {"layers": 2}, progress=lines.append)
    said = [line for line in lines if "fits as a layout" in line]
    assert seed is None and len(said) == TRIES
    assert all(re.search(r"GiB\) but not as a plan \(\d", line) for line in said)
    assert said[-1].endswith("no more tried") and said[0].endswith("the next")


def test_the_layout_family_takes_its_share_of_the_time_limit(monkeypatch):
    """The layout family's search stops at its share of the time left, so that its best
    layouts can still be priced as plans; a line says so (DeepSeek-V3 on 1,024 H100s with
    --time-limit 60 spent it all on the family before and gave no plan)."""
    from pase.pipeline import seed as seed_module

    monkeypatch.setattr(seed_module, "FAMILY_SHARE", 0.0)  # the family's time: none
    lines: list[str] = []
    seed_module.best_layout_plan("gpt2", lambda mb: api.load_graph("gpt2", batch=mb, layers=2),
                                 8, 8, "h100-sxm", {}, None, {"layers": 2},
                                 deadline=Deadline(600), progress=lines.append)
    assert any(line.startswith("start: the layout family's search stopped at its share of "
                               "the time limit (0 s)") for line in lines)

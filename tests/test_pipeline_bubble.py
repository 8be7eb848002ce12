"""A plan's bubble is the idle share of its devices' time: a stage's once-a-step tail
(its gradient sync and optimizer step) is work, not idle, in the priced plan and in the
simulation alike. Expected values are worked by hand from the schedule."""
from __future__ import annotations

import pytest

from pase.pipeline import PipelinePlan
from pase.pipeline.plan import PipelineStage
from pase.sim.pipeline import PipelineSimResult, StageTimes


def _plan(times: list[float], tails: list[float], m: int, step: float) -> PipelinePlan:
    stages = [PipelineStage(("a", "b"), (i, i + 1), (i, i + 1), 1, t, 1.0, {}, tail_seconds=o)
              for i, (t, o) in enumerate(zip(times, tails))]
    return PipelinePlan("toy", len(times), m, m, "1f1b", stages, [0.0] * (len(times) - 1), step)


def test_one_stage_with_a_tail_has_no_bubble():
    # m = 4 micro-batches of 1 s, then 0.5 s of sync and optimizer: busy all 4.5 s
    plan = _plan([1.0], [0.5], 4, 4.5)
    assert plan.bubble == pytest.approx(0.0, abs=1e-12)
    assert "bubble 0.0%" in plan.describe()
    assert plan.to_dict()["bubble"] == pytest.approx(0.0, abs=1e-12)


def test_two_stages_idle_only_in_fill_drain_and_the_shorter_tail():
    # 1F1B, s = 2, m = 4, t = 1: (m + s - 1) t = 5 s of schedule, then the tails, 0.5 s
    # and 0.2 s: step 5.5 s. Each stage idles 1 s in fill or drain; the second also
    # 0.3 s while the first's tail runs: 2.3 s idle of 2 x 5.5 s.
    plan = _plan([1.0, 1.0], [0.5, 0.2], 4, 5.5)
    assert plan.bubble == pytest.approx(2.3 / 11.0)


def test_a_plan_without_tails_keeps_the_textbook_bubble():
    # alpha-beta plans have no tails: (s - 1) / (m + s - 1) for equal stages
    plan = _plan([1.0] * 4, [0.0] * 4, 8, 11.0)
    assert plan.bubble == pytest.approx(3 / 11)


def test_the_simulation_counts_a_gradient_sync_as_busy():
    # one stage, m = 2 of F = B = 1, then a 5 s sync: 9 s, all of it busy
    one = PipelineSimResult("toy", 1, 2, "1f1b", 9.0, [StageTimes(1, 1, 5.0)], [1], [0.0])
    assert one.bubble == pytest.approx(0.0, abs=1e-12)
    # two stages, the tail on the first: it ends its schedule at 6 s and its sync at 11 s,
    # idle 2 s; the second ends at 5 s, busy 4 s of the 11: 2 + 7 = 9 of 22 s idle
    two = PipelineSimResult("toy", 2, 2, "1f1b", 11.0,
                            [StageTimes(1, 1, 5.0), StageTimes(1, 1, 0.0)], [2, 1], [0.0, 0.0])
    assert two.bubble == pytest.approx(9 / 22)

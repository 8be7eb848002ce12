"""Pipeline simulation: the schedule by hand, the bubble formula, the plan's JSON, the CLI."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pase.errors import StrategyError
from pase.pipeline import PipelinePlan, read_pipeline_plan, solve_pipeline
from pase.sim.pipeline import StageTimes, program, run_schedule, simulate_pipeline


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize("s,m", [(1, 1), (2, 2), (4, 8), (3, 5), (4, 2)])
def test_uniform_schedule_takes_m_plus_s_minus_1_slots(schedule, s, m):
    f, b = 1.0, 2.0
    step, events, held = run_schedule([StageTimes(f, b, 0.0)] * s, [0.0] * (s - 1), m, schedule)
    assert step == pytest.approx((m + s - 1) * (f + b))
    want = [m] * s if schedule == "gpipe" else [min(m, s - i) for i in range(s)]
    assert held == want
    assert sum(e.kind == "forward" for e in events) == s * m


def test_two_stage_1f1b_by_hand():
    # F = 1, B = 1, s = 2, m = 2 (worked on paper): stage 0 runs F0 [0,1] F1 [1,2] B0 [3,4]
    # B1 [5,6]; stage 1 runs F0 [1,2] B0 [2,3] F1 [3,4] B1 [4,5]; links free.
    step, events, _ = run_schedule([StageTimes(1, 1, 0)] * 2, [0.0], 2, "1f1b")
    got = {(e.resource, e.label): (e.start, e.end) for e in events}
    assert got[("stage0", "B1")] == (5, 6) and got[("stage1", "F1")] == (3, 4)
    assert step == 6


def test_programs_hold_every_microbatch_once():
    for schedule in ("1f1b", "gpipe"):
        for i in range(4):
            prog = program(schedule, 4, i, 6)
            assert sorted(prog) == sorted([("F", j) for j in range(6)] + [("B", j) for j in range(6)])


def test_slow_link_paces_the_pipeline():
    # A link slower than the stages is the busiest server: m transfers back to back.
    step, _, _ = run_schedule([StageTimes(1, 1, 0)] * 2, [3.0], 4, "gpipe")
    assert step >= 4 * 3.0


def test_gradient_tail_ends_the_step():
    step, _, _ = run_schedule([StageTimes(1, 1, 5.0), StageTimes(1, 1, 0.0)], [0.0], 2, "1f1b")
    assert step == 6 + 5.0


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_simulated_uniform_pipeline_matches_the_bubble_formula(schedule):
    """A real uniform pipeline (equal stages of 8 FC layers, one device each, transfers
    under 1% of a stage): the simulated step over m micro-batches of one stage is
    (m + s - 1) / m within 2% (issue 17's check)."""
    opts = {"length": 32, "width": 16384}
    plan = solve_pipeline("chain", 4, batch=256, microbatches=16, stage_sizes=[1],
                          schedule=schedule, model_options=opts, memory_cap="none",
                          cost_model="alpha-beta")  # the simulator replays alpha-beta's tasks
    assert [st.op_range[1] - st.op_range[0] for st in plan.stages] == [8, 8, 8, 8]
    result = simulate_pipeline(plan)
    s, m = len(plan.stages), plan.microbatches
    per_mb = max(t.forward + t.backward for t in result.stages)
    assert max(plan.links) < 0.01 * per_mb
    assert result.step_time / (m * per_mb) == pytest.approx((m + s - 1) / m, rel=0.02)
    # the priced step agrees with the simulated one as well
    assert plan.step_time == pytest.approx(result.step_time, rel=0.02)


def test_simulated_interleaved_pipeline_matches_its_bubble_formula():
    """Four equal stages of two chunks each (8 FC layers cut in 8 chunks of 4): interleaved
    1F1B runs m V chunk slots plus s - 1 of bubble, a period of one chunk (Narayanan et al.),
    and holds 2 (s - i - 1) + (V - 1) s + 1 chunks on stage i at its peak."""
    opts = {"length": 32, "width": 16384}
    plan = solve_pipeline("chain", 4, batch=256, microbatches=16, stage_sizes=[1],
                          schedule="interleaved:2", model_options=opts, memory_cap="none",
                          cost_model="alpha-beta")
    s, m, v = len(plan.stages), plan.microbatches, 2
    assert [len(st.ranges) for st in plan.stages] == [v] * s
    result = simulate_pipeline(plan)
    per_chunk = max(t.forward + t.backward for t in result.stages) / v
    assert result.step_time / (m * v * per_chunk) == pytest.approx((m * v + s - 1) / (m * v),
                                                                   rel=0.02)
    assert result.peak_in_flight == [2 * (s - i - 1) + (v - 1) * s + 1 for i in range(s)]
    assert plan.step_time == pytest.approx(result.step_time, rel=0.02)


def test_plan_json_round_trip(tmp_path):
    plan = solve_pipeline("chain", 4, batch=8, microbatches=2, memory_cap="none")
    path = tmp_path / "plan.json"
    plan.to_json(path)
    back = read_pipeline_plan(path)
    assert back.to_dict() == plan.to_dict()
    data = json.loads(path.read_text())
    data["stages"][0]["device_range"] = [1, 2]
    with pytest.raises(StrategyError, match="device_range"):
        PipelinePlan.from_dict(data)


def _pase(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pase", *args], capture_output=True, text=True)


def test_cli_solve_then_simulate(tmp_path):
    pytest.importorskip("matplotlib")
    plan, png = tmp_path / "plan.json", tmp_path / "pipe.png"
    r = _pase("solve", "chain", "-p", "4", "--pipeline", "--microbatches", "4",
              "--schedule", "gpipe", "--output", str(plan))
    assert r.returncode == 0, r.stderr
    assert "stages" in r.stdout and "gpipe" in r.stdout
    r = _pase("simulate", "chain", "-p", "4", "--cluster", "dgx-a100", "--strategy", str(plan),
              "--plot", str(png), "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["kind"] == "pipeline" and out["microbatches"] == 4 and png.stat().st_size > 0


def test_cli_refuses_what_does_not_apply():
    r = _pase("solve", "chain", "-p", "4", "--pipeline", "--cost-model", "paper")
    assert r.returncode == 2 and "alpha-beta" in r.stderr and "Traceback" not in r.stderr
    r = _pase("solve", "chain", "-p", "4", "--microbatches", "2")
    assert r.returncode == 2 and "--pipeline" in r.stderr
    r = _pase("solve", "chain", "-p", "4", "--pipeline", "--microbatches", "3")
    assert r.returncode == 2 and "divisor" in r.stderr

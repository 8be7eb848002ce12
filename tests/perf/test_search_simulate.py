"""The layout search is exact over its family, and the event simulation agrees with the
analytic schedule (and with pase.sim's pipeline simulator)."""
from __future__ import annotations

import itertools
import json

import pytest

from pase.api import load_graph, search_layouts
from pase.cli import main
from pase.perf import evaluate_layout, make_layout
from pase.perf.simulate import programs, simulate_step
from pase.sim.pipeline import StageTimes, run_schedule

OPTS = dict(layers=4, width=256, heads=8, ff=1024, vocab=1024, seq=512, positions=512)


def build(m: int):
    return load_graph("gpt3", batch=m, **OPTS)


def test_search_is_the_best_of_brute_force_over_its_family():
    found = search_layouts("gpt3", 8, cluster="dgx-a100", global_batch=8, model_options=OPTS)
    best = None
    for tp, pp, micro, zero, rc in itertools.product((1, 2, 4, 8), (1, 2, 4), (1, 2, 4, 8),
                                                     (0, 1, 2, 3), ("none", "selective", "full")):
        if 8 % (tp * pp):
            continue
        dp = 8 // (tp * pp)
        if 8 % (micro * dp):
            continue
        m = 8 // (micro * dp)
        for schedule in ["1f1b"] + [f"interleaved:{v}" for v in (2,) if pp > 1 and m % pp == 0
                                    and pp * v <= 4]:
            lay = make_layout(dict(tp=tp, pp=pp, dp=dp), devices=8, micro_batch=micro,
                              global_batch=8, schedule=schedule, zero=zero, recompute=rc,
                              sequence_parallel=tp > 1)
            e = evaluate_layout(build(micro), "dgx-a100", lay)
            if e.fits_memory and (best is None or e.step_seconds < best):
                best = e.step_seconds
    assert found.best.step_seconds <= best * (1 + 1e-12)
    again = search_layouts("gpt3", 8, cluster="dgx-a100", global_batch=8, model_options=OPTS)
    assert again.best.to_dict() == found.best.to_dict()  # deterministic


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_simulation_matches_pase_sims_pipeline_simulator(schedule):
    lay = make_layout("pp=4", devices=4, micro_batch=1, global_batch=8, schedule=schedule)
    e = evaluate_layout(build(1), "dgx-a100", lay)
    d = e.details
    times = [StageTimes(f, b, 0.0) for f, b in zip(d["stage_forward_seconds"],
                                                    d["stage_backward_seconds"])]
    links = [d["send_seconds"][i + 1] for i in range(3)]
    theirs, _, _ = run_schedule(times, links, 8, schedule)
    assert simulate_step(e) == pytest.approx(theirs + d["once_seconds"], rel=1e-9)


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved:2"])
def test_simulation_is_within_5_percent_of_the_analytic_step(schedule):
    lay = make_layout("pp=2,dp=2", devices=4, micro_batch=1, global_batch=8, schedule=schedule)
    e = evaluate_layout(build(1), "dgx-a100", lay)
    assert simulate_step(e) == pytest.approx(e.step_seconds, rel=0.05)


def test_interleaved_programs_run_every_task_once():
    for prog in programs("interleaved", 4, 8, 2):
        assert sorted(prog) == sorted({(k, c, j) for k, c, j in prog})
        assert len(prog) == 2 * 8 * 2


def test_cli_search(capsys):
    args = ["solve", "gpt3", "-p", "4", "--cluster", "dgx-a100", "--layouts"]
    for key, value in OPTS.items():
        args += ["--model-option", f"{key}={value}"]
    assert main(args + ["--global-batch", "4", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["best"]["step_seconds"] == min(r["step_seconds"] for r in data["ranked"])
    assert data["priced"] >= data["fitting"] >= len(data["ranked"]) > 0
    assert main(args) == 2
    assert "--layouts needs --global-batch" in capsys.readouterr().err

"""The pipeline search's interleaved schedules and its certificate (lower bound, gap)."""
from __future__ import annotations

import pytest

from pase import api
from pase.errors import OptionError
from pase.pipeline import PipelinePlan, solve_pipeline
from pase.pipeline.reprice import reprice
from pase.sim.pipeline import simulate_pipeline

GPT2 = dict(cluster="h100-sxm", model_options={"layers": 4}, batch=8, microbatches=[4],
            stage_sizes=[4])


def test_interleaved_plan_is_round_robin_and_priced_by_the_closed_form():
    plan = solve_pipeline("gpt2", 8, schedule="interleaved:2", **GPT2)
    s, v, m = 2, 2, 4
    assert plan.schedule == "interleaved:2" and len(plan.stages) == s
    units = plan.search["units"]  # four layers: one unit each, one chunk each
    assert [st.chunks for st in plan.stages] == [[(units[0], units[1]), (units[2], units[3])],
                                                 [(units[1], units[2]), (units[3], units[4])]]
    assert plan.stages[0].ops == ("wte", "h0.mlp_residual", "h2.attn_norm", "h2.mlp_residual")
    assert [st.device_range for st in plan.stages] == [(0, 4), (4, 8)]
    # Korthikanti et al.: stage i holds (s - i)(1 + (s - 1)/(s V)) micro-batches
    assert [st.in_flight for st in plan.stages] == pytest.approx([2 * 1.25, 1 * 1.25])
    # (m + (s - 1)/V) T + the largest tail: T the slowest group, its sends (the links: chunks
    # 1, 2, 3) already in its time, as the layout path folds them
    times = [st.seconds_per_microbatch for st in plan.stages]
    tails = [st.tail_seconds for st in plan.stages]
    assert min(tails) > 0 and all(x > 0 for x in plan.links)
    want = (m + (s - 1) / v) * max(times) + max(tails)
    assert plan.search["search_step_seconds"] == pytest.approx(want, rel=1e-12)
    price = reprice(PipelinePlan.from_dict(plan.to_dict()))
    assert price["search_step_seconds"] == pytest.approx(want, rel=1e-12)
    # the search prices by the one price's rule: the two agree, and the bound is the search's
    assert plan.step_time == pytest.approx(price["step_seconds"], rel=1e-12)
    assert price["step_seconds"] == pytest.approx(want, rel=1e-12)
    assert plan.lower_bound is not None and plan.lower_bound <= plan.step_time
    simulated = simulate_pipeline(plan)  # interleaved 1F1B's own event program, chunk by chunk
    assert simulated.schedule == "interleaved:2" and len(simulated.stages) == s
    assert simulated.step_time == pytest.approx(plan.step_time, rel=0.1)
    # the page: every op once, in op order, each row on its chunk's stage (it refused:
    # "variants name unknown op", the second chunk's ops in the first's graph)
    from pase.viewer.pipeline import pipeline_model

    rows = pipeline_model(plan, simulate=False)["ops"]
    graph = api.load_graph("gpt2", batch=2, layers=4)
    assert [r["n"] for r in rows] == [op.name for op in graph.ops]
    stage_of = {j: i for i, st in enumerate(plan.stages) for a, b in st.chunks
                for j in range(a, b)}
    assert [r["s"] for r in rows] == [stage_of[j] for j in range(len(graph.ops))]


def test_auto_takes_the_faster_of_1f1b_and_the_interleavings():
    steps = {name: solve_pipeline("gpt2", 8, schedule=name, **GPT2).search["search_step_seconds"]
             for name in ("1f1b", "interleaved:2")}
    both = solve_pipeline("gpt2", 8, schedule="auto", **GPT2)
    assert both.search["search_step_seconds"] == pytest.approx(min(steps.values()), rel=1e-12)


def test_interleaving_needs_m_a_multiple_of_the_stages():
    with pytest.raises(OptionError, match="multiple of s"):
        solve_pipeline("gpt2", 8, schedule="interleaved:2", **{**GPT2, "microbatches": [1]})
    with pytest.raises(OptionError, match="unknown schedule 'interleaved:1'"):
        solve_pipeline("gpt2", 8, schedule="interleaved:1", **GPT2)


def test_an_empty_space_is_not_blamed_on_the_memory_cap():
    # two layers cut into two units, fewer than the s x V = 4 chunks: no stage was ever
    # priced, and the refusal said "no pipeline plan fits the memory cap of 1e+04 GiB"
    with pytest.raises(OptionError) as err:
        solve_pipeline("gpt2", 8, schedule="interleaved:2", memory_cap="10000GiB",
                       **{**GPT2, "model_options": {"layers": 2}})
    assert str(err.value) == (
        "no pipeline plan in the declared space on 8 devices: an interleaved plan needs s >= 2 "
        "stages of p / s devices, m a multiple of s and s x V units to cut, and the model cuts "
        "into 2 units at m = 4; take fewer virtual stages, a model with more layers or another m")


def test_exposed_syncs_give_a_gap_and_the_per_op_searchs_bound():
    # one stage, one micro-batch: the per-op certified search (cost_models/calibrated_search)
    # prices and bounds the same plans, by its own code (a batch of 2: at 4 the head split
    # over the padded vocabulary proves its plan optimal)
    opts = dict(cluster="dgx-a100-80gb", model_options={"layers": 2},
                cost_options={"zero": "auto", "recompute": "auto"})
    lines: list[str] = []
    plan = solve_pipeline("gpt2", 16, batch=2, microbatches=[1], stage_sizes=[16],
                          progress=lines.append, **opts)
    assert plan.status == "feasible" and plan.search["bounding_searches"] == 3
    # each search's "least charge so far" says whose charges it is: a lifted search's
    # are higher, and read as the first one's they seemed to rise
    charged = [line for line in lines if "least charge so far" in line]
    assert len(charged) == 3 and charged[0].startswith("m=1:")
    assert charged[1].startswith("bounding search 2, charges lifted by x = 1: m=1:")
    assert charged[2].startswith("bounding search 3, charges lifted by x = ")
    assert 0 < plan.lower_bound < plan.step_time and plan.gap > 0.001
    per_op = api.solve("gpt2", 16, batch=2, cluster="dgx-a100-80gb", powers_of_two=True,
                       model_options={"layers": 2}, cost_options={
                           "zero": "auto", "recompute": "auto", "tp_overlap": True})
    assert plan.step_time == pytest.approx(per_op.to_dict()["step_seconds"], rel=1e-9)
    # both bounds hold; the pipeline search's last lifted search crosses at its own x
    assert per_op.solution.lower_bound * (1 - 1e-9) <= plan.lower_bound <= plan.step_time
    # the bound holds for another plan of the space (every op at ZeRO 0, no recompute)
    plain = solve_pipeline("gpt2", 16, batch=2, microbatches=[1], stage_sizes=[16],
                           **{**opts, "cost_options": {}})
    assert plan.lower_bound <= plain.step_time


def test_an_optimal_plan_has_no_gap_even_an_ulp_above_its_bound():
    # the one price restates the search's sum in another order: a step one ulp above the
    # bound printed "optimal" with gap 4.2e-16
    import math

    from pase.pipeline.plan import PipelinePlan

    bound = 0.0031012263243482534
    step = math.nextafter(bound, 1.0)
    optimal = PipelinePlan("mlp", 1, 1, 1, "1f1b", [], [], step, "optimal", lower_bound=bound)
    assert optimal.gap == 0.0  # the JSON and the table read it
    feasible = PipelinePlan("mlp", 1, 1, 1, "1f1b", [], [], 2 * bound, "feasible",
                            lower_bound=bound)
    assert feasible.gap == pytest.approx(0.5)

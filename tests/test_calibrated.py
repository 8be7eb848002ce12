"""The calibrated cost model: one price for layouts and per-op plans, searched exactly.

The reference for every comparison is ``pase evaluate --layout``'s own path
(:func:`pase.perf.evaluate_layout`, which walks the graph under one named layout),
not the cost model under test.
"""
from __future__ import annotations

import json
import math

import pytest

from pase import api
from pase.cli import main
from pase.perf import evaluate_layout, make_layout
from pase.perf.plan import layout_configs, layout_variants

GPT2 = {"layers": 2, "vocab": 50304}  # a vocabulary tp divides, as Megatron-LM pads it
LLAMA = {"layers": 2}


def _both(model, opts, devices, degrees, cluster, micro, global_batch, **options):
    """(the layout's estimate, the same layout priced as a per-op plan)."""
    lay = make_layout(degrees, devices=devices, micro_batch=micro, global_batch=global_batch,
                      **options)
    est = evaluate_layout(api.load_graph(model, batch=micro, **opts), cluster, lay)
    graph = api.load_graph(model, batch=micro * lay.dp, **opts)
    plan = api.evaluate(graph, {"strategy": layout_configs(graph, lay),
                                "variants": layout_variants(graph, lay)}, devices, "calibrated",
                        cluster=cluster, cost_options=layout_cost_options(lay))
    return est, plan.meta


def layout_cost_options(lay):
    return {"microbatches": lay.microbatches, "zero": str(lay.zero), "recompute": lay.recompute,
            "precision": lay.precision, "attention": lay.attention, "tp_overlap": lay.tp_overlap}


# Rows where the two prices are known to differ by 2-3.5% carry their own tolerance, so a
# regression past it still fails: sequence parallelism's reduce-scatter moved onto edges,
# and two-layer models where the vocabulary-parallel embedding and head weigh most.
NEAR = 0.035

GRID = [
    ("gpt2", GPT2, 8, "tp=1,dp=8", "dgx-a100-80gb", 4, 32, {}),
    ("gpt2", GPT2, 8, "tp=2,dp=4", "dgx-a100-80gb", 2, 16, {}),
    ("gpt2", GPT2, 16, "tp=2,dp=8", "dgx-a100-80gb", 4, 64, {}),  # two nodes
    ("gpt2", GPT2, 16, "tp=4,dp=4", "dgx-a100-80gb", 4, 32, {"zero": 1}),
    ("gpt2", GPT2, 16, "tp=1,dp=16", "dgx-a100-80gb", 4, 64, {"zero": 2}),
    ("gpt2", GPT2, 16, "tp=4,dp=4", "dgx-a100-80gb", 4, 32, {"zero": 3}),
    ("gpt2", GPT2, 8, "tp=2,dp=4", "dgx-a100-80gb", 2, 16, {"recompute": "full"}),
    ("gpt2", GPT2, 8, "tp=2,dp=4", "dgx-a100-80gb", 2, 16, {"recompute": "selective"}),
    ("gpt2", GPT2, 8, "tp=4,dp=2", "h100-sxm", 2, 8,
     {"sequence_parallel": True, "tp_overlap": "off", "rel": NEAR}),
    # tp overlap: the layout hides an op's collectives behind its GEMMs, the plan the
    # re-layouts on the edges beside a GEMM behind that GEMM (1-2.5% apart)
    ("gpt2", GPT2, 8, "tp=4,dp=2", "h100-sxm", 2, 8, {"sequence_parallel": True, "rel": NEAR}),
    ("gpt2", GPT2, 8, "tp=4,dp=2", "h100-sxm", 2, 8, {"tp_overlap": "on", "rel": NEAR}),
    ("llama2-7b", {"layers": 4}, 8, "tp=8,dp=1", "h100-sxm", 1, 4,
     {"sequence_parallel": True, "rel": NEAR}),
    ("llama2-7b", LLAMA, 16, "tp=4,dp=4", "h100-sxm", 1, 16, {"rel": NEAR}),  # grouped-query
    ("llama2-7b", {"layers": 8}, 16, "tp=4,dp=4", "h100-sxm", 1, 16, {}),
    ("llama2-7b", LLAMA, 64, "tp=1,dp=64", "h100-sxm", 1, 128, {"zero": 3, "rel": NEAR}),
    # tp=8 with sequence parallelism on a two-layer model: the plan moves the final norm's
    # sequence-split output to the vocabulary-parallel head as a re-layout (an all-gather)
    # that the layout path leaves out, 5.7% in all
    ("llama2-7b", LLAMA, 16, "tp=8,dp=2", "h100-sxm", 1, 8,
     {"zero": 1, "recompute": "selective", "sequence_parallel": True, "tp_overlap": "off",
      "rel": 0.06}),
]


@pytest.mark.parametrize("model, opts, p, degrees, cluster, micro, gb, options", GRID)
def test_a_layout_priced_as_a_plan_gives_the_same_step_and_memory(model, opts, p, degrees, cluster,
                                                                   micro, gb, options):
    rel = options.pop("rel", 0.02)
    est, plan = _both(model, opts, p, degrees, cluster, micro, gb, **options)
    assert plan["step_seconds"] == pytest.approx(est.step_seconds, rel=rel)
    assert plan["memory_bytes"] == pytest.approx(est.memory_bytes, rel=0.02)
    assert plan["mfu"] == pytest.approx(est.mfu, rel=rel)


SEARCHED = [  # (model, options, devices, global batch, cluster)
    ("gpt2", GPT2, 8, 16, "dgx-a100-80gb"),
    ("gpt2", GPT2, 16, 32, "dgx-a100-80gb"),  # two nodes
    ("gpt2", GPT2, 16, 16, "h100-sxm"),  # a small batch across nodes: syncs show
    ("llama2-7b", LLAMA, 8, 8, "h100-sxm"),
    ("bert-base", {"layers": 2}, 8, 16, "dgx-a100-80gb"),
    ("vit-b16", {"layers": 2}, 16, 64, "h100-sxm"),
]


@pytest.mark.parametrize("model, opts, p, batch, cluster", SEARCHED)
def test_the_search_is_never_slower_than_a_layout_of_its_space(model, opts, p, batch, cluster):
    """Every tp x dp layout at one micro-batch is a plan of the search's space, so the
    certified bound is at most each layout's price as a plan, and the plan found is at most
    the best of them; it re-prices to the same step."""
    graph = api.load_graph(model, batch=batch, **opts)
    found = api.solve(graph, p, "dp", "calibrated", cluster=cluster)
    assert found.solution is not None and found.solution.lower_bound is not None
    prices = []
    for tp in (t for t in (1, 2, 4, 8) if p % t == 0 and batch % (p // t) == 0):
        lay = make_layout(f"tp={tp},dp={p // tp}", devices=p, micro_batch=batch // (p // tp),
                          global_batch=batch)
        try:
            plan = api.evaluate(graph, {"strategy": layout_configs(graph, lay)}, p, "calibrated",
                                cluster=cluster)
        except ValueError:  # tp does not divide this model's heads: not in the family
            continue
        prices.append(plan.meta["step_seconds"])
        assert found.solution.lower_bound <= plan.meta["step_seconds"] * (1 + 1e-9)
    assert prices, "no layout of the family to compare"
    assert found.meta["step_seconds"] <= min(prices) * (1 + 1e-9)
    again = api.evaluate(graph, found.to_dict(), p, "calibrated", cluster=cluster)
    assert again.meta["step_seconds"] == pytest.approx(found.meta["step_seconds"], rel=1e-9)


def test_same_input_same_plan_and_price():
    a = api.solve("gpt2", 8, "auto", "calibrated", cluster="h100-sxm", model_options=GPT2)
    b = api.solve("gpt2", 8, "auto", "calibrated", cluster="h100-sxm", model_options=GPT2)
    assert a.configs == b.configs and a.meta["step_seconds"] == b.meta["step_seconds"]


def test_an_embedding_lookup_is_a_gather_not_a_product():
    """gpt2's table (50304 x 768) looked up by 1024 tokens reads the rows it needs; the LM
    head multiplies by the whole table. The lookup must cost a small fraction."""
    s = api.evaluate("gpt2", {}, 1, "calibrated", cluster="h100-sxm", model_options=GPT2)
    assert s.op_costs["wte"] < 0.1 * s.op_costs["lm_head"]  # its optimizer step included


def test_an_exposed_gradient_sync_is_a_gap_not_a_proof():
    """A small batch across nodes: the gradient sync outlasts the backward pass, so the
    Problem's tax is below the plan's price; the answer says feasible with its gap."""
    s = api.solve("gpt2", 16, "dp", "calibrated", cluster="dgx-a100-80gb", batch=16,
                  model_options=GPT2)
    meta = s.meta
    assert meta["step_seconds"] >= meta["search_seconds"]
    if meta["sync_correction_seconds"] > 0:
        assert str(s.solution.status) == "feasible" and s.solution.gap > 0
    else:
        assert str(s.solution.status) == "optimal"
    assert s.solution.lower_bound <= meta["step_seconds"]


def test_cli_solve_and_evaluate_a_plan_with_the_layout_keys(tmp_path, capsys):
    out = tmp_path / "plan.json"
    main(["solve", "gpt2", "-p", "8", "--cluster", "h100-sxm", "--model-option", "layers=2",
          "--model-option", "vocab=50304", "--format", "json", "--output", str(out)])
    solved = json.loads(out.read_text())
    capsys.readouterr()
    assert solved["cost_model"] == "calibrated"
    main(["evaluate", "gpt2", "-p", "8", "--cluster", "h100-sxm", "--model-option", "layers=2",
          "--model-option", "vocab=50304", "--strategy", str(out), "--format", "json"])
    priced = json.loads(capsys.readouterr().out)
    for key in ("step_seconds", "memory_bytes", "fits_memory", "mfu", "breakdown"):
        assert key in priced
    assert priced["step_seconds"] == pytest.approx(solved["step_seconds"], rel=1e-9)
    assert math.isclose(sum(priced["breakdown"].values()), priced["step_seconds"], rel_tol=1e-6)


@pytest.mark.parametrize("extra", [[], ["--recompute", "full", "--zero", "1"]])
def test_a_layout_written_as_a_plan_reprices_the_same(tmp_path, capsys, extra):
    """`evaluate --layout --output` writes the layout as a per-op plan; `evaluate --strategy`
    of that file prices it with the calibrated model: the same step within 2%."""
    out = tmp_path / "layout.json"
    common = ["gpt2", "-p", "8", "--cluster", "dgx-a100-80gb", "--model-option", "layers=2",
              "--model-option", "vocab=50304"]
    assert main(["evaluate", *common, "--layout", "tp=2,dp=4", "--micro-batch", "2",
                 "--global-batch", "16", *extra, "--format", "json", "--output", str(out)]) == 0
    layout = json.loads(out.read_text())
    assert layout["plan"]["cost_model"] == "calibrated" and layout["strategy"]["h0.mlp.fc1"]
    capsys.readouterr()
    assert main(["evaluate", *common, "--strategy", str(out), "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["cost_model"] == "calibrated"
    assert plan["step_seconds"] == pytest.approx(layout["step_seconds"], rel=0.02)
    assert plan["memory_bytes"] == pytest.approx(layout["memory_bytes"], rel=0.02)


def test_a_pipeline_layout_has_no_per_op_plan(capsys):
    assert main(["evaluate", "gpt2", "-p", "8", "--cluster", "dgx-a100-80gb", "--layout",
                 "tp=2,pp=2,dp=2", "--micro-batch", "1", "--global-batch", "8", "--model-option",
                 "layers=2", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"] is None


@pytest.mark.slow  # 12-22 s on two cores
def test_the_whole_plan_search_takes_the_global_batch(capsys):
    """`solve --global-batch B` searches stages, micro-batches and per-op splits; on one
    node its plan is one stage, priced as the per-op search prices it."""
    common = ["gpt2", "-p", "8", "--cluster", "h100-sxm", "--model-option", "layers=2",
              "--model-option", "vocab=50304", "--format", "json"]
    assert main(["solve", *common, "--global-batch", "16"]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert whole["kind"] == "pipeline" and whole["cost_model"] == "calibrated"
    assert main(["solve", *common, "--batch", "16"]) == 0
    flat = json.loads(capsys.readouterr().out)
    assert whole["step_seconds"] <= flat["step_seconds"] * (1 + 1e-9)
    for key in ("step_seconds", "memory_bytes", "fits_memory", "status", "gap"):
        assert key in whole


@pytest.mark.slow  # 20 s; CI runs it (the fast suite stays under 10 minutes on 2 cores)
def test_a_pipeline_with_exposed_syncs_claims_no_proof(capsys, tmp_path):
    """64 devices, a batch of 16, a slow network between nodes: the gradient syncs outlast
    the backward pass, which the stages' price assumes hides them: the plan's own price is
    above the search's bound, so it is feasible, not optimal, with the gap it proves (the
    pipeline search prices every plan at its one price, so a bound holds for any stages)."""
    from pase.cluster import get_cluster

    slow = get_cluster("h100-sxm").to_dict()
    slow.update(name="h100-slow-network", nodes=8, inter={"bandwidth_gbps": 5.0, "latency_us": 5.0})
    path = tmp_path / "slow.json"
    path.write_text(json.dumps(slow))
    # ZeRO 0 and no recomputation pinned: the search over each op's variants (the
    # whole-plan default) takes 70 s here, and the syncs are exposed either way
    assert main(["solve", "gpt2", "-p", "64", "--cluster", str(path), "--model-option",
                 "layers=2", "--global-batch", "16", "--zero", "0", "--recompute", "none",
                 "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["status"] == "feasible" and plan["search"]["bounding_searches"] > 1
    assert plan["search"]["search_step_seconds"] == pytest.approx(plan["step_seconds"], rel=1e-9)
    assert plan["lower_bound"] < plan["step_seconds"]
    assert plan["gap"] == pytest.approx(1 - plan["lower_bound"] / plan["step_seconds"])


def test_simulate_runs_the_kernels_as_the_calibrated_model_priced_them(capsys):
    """`pase simulate --cluster` solves with the calibrated model; its simulation used to run
    at alpha-beta's flat 50% of peak with 4-byte elements (20 us for a plan priced 134 us)."""
    argv = ["mlp", "-p", "8", "--cluster", "dgx-a100", "--format", "json"]
    assert main(["simulate", *argv]) == 0
    simulated = json.loads(capsys.readouterr().out)["step_time"]
    assert main(["solve", *argv]) == 0
    priced = json.loads(capsys.readouterr().out)["step_seconds"]
    assert 0.5 < simulated / priced < 2.0

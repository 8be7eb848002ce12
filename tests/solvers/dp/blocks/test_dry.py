"""Dry runs with the reduction applied: the chains, counts and reduced plan predicted from
the shape alone are the ones the solver folds and plans."""
from __future__ import annotations

import pytest

from pase.api import build_space, make_cost_model
from pase.costing import problem_shape
from pase.solvers import dp
from pase.solvers.dp import core


@pytest.fixture
def blocks_always(monkeypatch):
    monkeypatch.setattr(core, "BLOCKS_MIN_ENTRIES", 0)


@pytest.mark.parametrize("model,layers,p", [("gpt2", 4, 16), ("gpt2", 3, 64), ("transformer", 3, 16),
                                            ("transformer", 2, 64), ("bert-base", 3, 16)])
def test_prediction_matches_the_solver(blocks_always, model, layers, p):
    graph, space = build_space(model, p, model_options={"layers": layers})
    cost_model = make_cost_model("paper")
    report = dp.dry_run(problem_shape(graph, space, cost_model=cost_model))
    blocks = report["blocks"]
    solution = dp.solve(cost_model.problem(graph, space))
    assert blocks["tried"] and blocks["predicted"]
    assert blocks["blocks_found"] == solution.stats["blocks_found"] >= 1
    assert blocks["vertices_removed"] == solution.stats["vertices_removed"]
    assert [(c["first_block"], c["period"], c["count"], c["separator"], c["shared"], c["states"])
            for c in blocks["chains"]] == [
        (c["first_block"], c["period"], c["count"], c["separator"], c["shared"], c["states"])
        for c in solution.stats["blocks"]]
    assert blocks["reduced"]["table_entries"] == solution.stats["table_entries"]
    assert blocks["power_products"] == solution.stats["block_products"]
    assert report["estimated_seconds"] == blocks["estimated_seconds"] > 0


def test_counts_by_hand():
    """gpt2 with 5 layers: one chain of 5 blocks of 12 ops; T^5 = T^4 * T takes 2 squarings
    and 1 join, each K_S^3 additions (K_S: the residual's candidates)."""
    graph, space = build_space("gpt2", 64, model_options={"layers": 5})
    report = dp.dry_run(problem_shape(graph, space, cost_model=make_cost_model("paper")),
                        memory_budget=2**20)  # over budget: blocks are tried whatever the size
    (chain,) = report["blocks"]["chains"]
    k = space.sizes[graph.index("h0.mlp_residual")]
    assert (chain["period"], chain["count"], chain["power_products"]) == (12, 5, 3)
    assert chain["power_work"] == 3 * k ** 3 and chain["states"] == k
    assert report["blocks"]["vertices_removed"] == 5 * 12 - 1


def test_small_plans_are_not_folded_and_a_bare_shape_says_why():
    graph, space = build_space("gpt2", 8, model_options={"layers": 2})
    report = dp.dry_run(problem_shape(graph, space, cost_model=make_cost_model("paper")))
    assert report["blocks"]["tried"] is False
    assert report["estimated_seconds"] < 1
    bare = dp.dry_run(problem_shape(graph, space), memory_budget=2**10)
    assert bare["blocks"]["predicted"] is False and "sharing keys" in bare["blocks"]["reason"]


@pytest.mark.parametrize("seed", range(4))
def test_random_graphs_agree_with_the_solver(blocks_always, seed):
    graph, space = build_space("random", 8, model_options={"seed": seed})
    cost_model = make_cost_model("paper")
    blocks = dp.dry_run(problem_shape(graph, space, cost_model=cost_model))["blocks"]
    solution = dp.solve(cost_model.problem(graph, space))
    assert blocks["blocks_found"] == solution.stats.get("blocks_found", 0)
    assert [(c["first_block"], c["period"], c["count"]) for c in blocks["chains"]] == [
        (c["first_block"], c["period"], c["count"]) for c in solution.stats.get("blocks", [])]
    if blocks["blocks_found"]:
        assert blocks["reduced"]["table_entries"] == solution.stats["table_entries"]


def _class_share(monkeypatch, cost_model) -> float:
    """The share of the fold's transfer entries that steps on classes of configurations
    computed (:mod:`pase.solvers.dp.config_classes`)."""
    from pase.solvers.dp.blocks import fold

    steps = []
    real = fold.class_min_plus

    def counted(step, *args):
        answer = real(step, *args)
        steps.append((answer is not None, step.entries))
        return answer

    monkeypatch.setattr(fold, "class_min_plus", counted)
    graph, space = build_space("gpt2", 64, model_options={"layers": 3})
    assert dp.solve(cost_model.problem(graph, space)).stats["blocks_found"] == 1
    return sum(e for by_class, e in steps if by_class) / sum(e for _, e in steps)


def test_the_two_transfer_rates_follow_the_classes_the_fold_finds(blocks_always, monkeypatch):
    """Paper edges read only port split factors, so most of the fold runs on classes;
    alpha-beta edges read the placement, so little does: the dry run prices the second's
    transfer at the slower rate, and the shapes say which applies. (Alpha-beta's share was
    under 0.2 until sequence splits took the mesh axes beside the batch's, which lets more
    of its edges fall in one class: 0.33 since.)"""
    paper, alpha_beta = make_cost_model("paper"), make_cost_model("alpha-beta", cluster="dgx-a100")
    assert _class_share(monkeypatch, paper) > 0.5 > 0.4 > _class_share(monkeypatch, alpha_beta)
    graph, space = build_space("gpt2", 256, model_options={"layers": 3})
    shapes = [problem_shape(graph, space, cost_model=m) for m in (paper, alpha_beta)]
    assert [s.port_classes for s in shapes] == [True, False]
    reports = [dp.dry_run(s, memory_budget=2**20)["blocks"] for s in shapes]
    assert reports[0]["transfer_entries"] == reports[1]["transfer_entries"] > 0
    assert reports[1]["transfer_entries_per_second"] < reports[0]["transfer_entries_per_second"]


def test_the_api_dry_run_takes_the_pricing_cost_model_and_its_cap():
    import pase

    paper = pase.dry_run("gpt2", 256, model_options={"layers": 3}, memory_budget=2**20)
    priced = pase.dry_run("gpt2", 256, model_options={"layers": 3}, memory_budget=2**20,
                          cluster="h100-sxm", cost_model="alpha-beta")
    assert (paper["cost_model"], priced["cost_model"]) == ("paper", "alpha-beta")
    assert priced["blocks"]["chains"] == paper["blocks"]["chains"]  # found by the same keys
    assert priced["blocks"]["fold_seconds"] > paper["blocks"]["fold_seconds"]
    # alpha-beta on a cluster caps at the device memory by default: no probe, and it says so
    assert "when it fits the cap" in priced["auto"]["note"] and "note" not in paper["auto"]
    uncapped = pase.dry_run("gpt2", 256, model_options={"layers": 3}, memory_budget=2**20,
                            cluster="h100-sxm", cost_model="alpha-beta", memory_cap="none")
    assert "note" not in uncapped["auto"]

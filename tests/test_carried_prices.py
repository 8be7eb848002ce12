"""A Strategy carries its ops' own prices (pase.prices), its JSON keeps them, and pase.sim
replays a calibrated plan at them."""
from __future__ import annotations

import json

import pytest

import pase
from pase.cli import main
from pase.sim import simulate
from pase.strategy import Strategy

GPT = {"layers": 1, "width": 128, "heads": 2, "ff": 256, "vocab": 512, "seq": 32, "positions": 64}


@pytest.fixture(scope="module")
def gpt8():
    return pase.solve("gpt2", 8, cluster="dgx-a100", model_options=GPT)


def test_the_carried_seconds_add_up_to_the_plans_breakdown(gpt8):
    # price_plan sums compute and optimizer its own way; the per-op prices must agree with it
    prices = gpt8.op_prices
    assert set(prices) == set(gpt8.configs)
    m = gpt8.meta["microbatches"]
    compute = m * sum(p["forward"] + p["backward"] for p in prices.values())
    assert compute == pytest.approx(gpt8.meta["breakdown"]["compute"], rel=1e-9)
    optimizer = sum(p["optimizer"] for p in prices.values())
    assert optimizer == pytest.approx(gpt8.meta["breakdown"]["optimizer"], rel=1e-9)
    assert sum(p["memory"] for p in prices.values()) == pytest.approx(
        gpt8.meta["memory"]["states_and_activations"], rel=1e-9)


def test_json_round_trip_keeps_costs_and_prices(gpt8):
    back = Strategy.from_dict(json.loads(gpt8.to_json()))
    assert back.op_prices == gpt8.op_prices and back.op_costs == gpt8.op_costs
    assert back.edge_costs == gpt8.edge_costs and back.total_cost == gpt8.total_cost
    assert back.cost_model == "calibrated" and str(back.solution.status) == "optimal"
    assert back.meta["step_seconds"] == gpt8.meta["step_seconds"]


def test_alpha_beta_carries_memory_only():
    s = pase.solve("mlp", 4, cost_model="alpha-beta", cluster="dgx-a100")
    assert all(set(p) == {"memory"} for p in s.op_prices.values())
    assert "op_prices" not in pase.solve("mlp", 4).to_dict()  # the paper model: nothing


@pytest.mark.parametrize("microbatches", [1, 3])
def test_one_device_replays_the_priced_step_exactly(microbatches):
    # On one device nothing communicates: the step is every op's kernels, m times, and the
    # optimizer once, which is the calibrated plan's price
    s = pase.solve("gpt2", 1, cluster="dgx-a100", model_options=GPT,
                   cost_options={"microbatches": microbatches})
    r = simulate(pase.api.load_graph("gpt2", **GPT), s, "dgx-a100")
    assert r.stats["timing"] == "the strategy's own prices (calibrated)"
    assert r.stats["microbatches"] == microbatches
    assert r.step_time == pytest.approx(s.meta["step_seconds"], rel=1e-9)


def test_the_simulation_follows_the_calibrated_price(gpt8):
    graph = pase.api.load_graph("gpt2", **GPT)
    own = simulate(graph, gpt8, "dgx-a100")
    # compute runs the priced kernels: the busiest device's forward and backward tasks
    # take the priced compute, plus its share of optimizer steps
    assert own.compute_busy.max() == pytest.approx(
        gpt8.meta["breakdown"]["compute"] + gpt8.meta["breakdown"]["optimizer"], rel=1e-9)
    assert own.step_time >= own.compute_busy.max()
    # elsewhere (another cluster) the prices do not hold: the simulator's own rules
    other = simulate(graph, gpt8, "h100-sxm")
    assert other.stats["timing"].startswith("the simulator's rules (the strategy was priced on")
    assert simulate(graph, gpt8, "dgx-a100", own_prices=False).stats["timing"] == \
        "the simulator's rules"


def test_cli_simulates_a_solve_file_at_its_prices(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    opts = [f"--model-option={k}={v}" for k, v in GPT.items()]
    assert main(["solve", "gpt2", "-p", "8", *opts, "--cluster", "dgx-a100", "--output",
                 str(plan)]) == 0
    capsys.readouterr()
    assert main(["simulate", "gpt2", "-p", "8", *opts, "--cluster", "dgx-a100", "--strategy",
                 str(plan), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["stats"]["timing"] == "the strategy's own prices (calibrated)"
    assert main(["simulate", "gpt2", "-p", "8", *opts, "--cluster", "dgx-a100", "--strategy",
                 str(plan)]) == 0
    assert "timed by the strategy's own prices (calibrated)" in capsys.readouterr().out

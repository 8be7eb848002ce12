"""A strategy as DTensor placements: the plan, what it cannot express, and a run on 4
gloo processes whose loss and gradients equal the unsharded module's (1e-5)."""
import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import pase  # noqa: E402
from pase.cli import main  # noqa: E402
from pase.export.dtensor import to_dtensor  # noqa: E402
from pase.frontends.torch import import_torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from torch_models import gpt2, mlp  # noqa: E402

MEGATRON_MLP = {"fc1": {"b": 4}, "fc2": {"c": 4}}  # fc1 by output features, fc2 by input


def test_megatron_mlp_plan():
    model, args = mlp.build()
    plan = to_dtensor(model, import_torch(model, args), MEGATRON_MLP, devices=4)
    assert (plan.mesh_shape, plan.mesh_dim_names) == ((2, 2), ("x0", "x1"))
    placements = {k: v.placements for k, v in plan.parameters.items()}
    assert placements == {"fc1.weight": ["Shard(0)", "Shard(0)"],
                          "fc1.bias": ["Shard(0)", "Shard(0)"],
                          "fc2.weight": ["Shard(1)", "Shard(1)"],
                          "fc2.bias": ["Replicate()", "Replicate()"]}
    assert plan.activations["fc1"].placements == ["Shard(1)", "Shard(1)"]
    assert plan.inputs[0].placements == ["Replicate()", "Replicate()"]
    assert plan.inexpressible == []


def test_two_dim_split_takes_batch_first():
    model, args = mlp.build()
    plan = to_dtensor(model, import_torch(model, args), {"fc1": {"a": 2, "b": 2}}, devices=4)
    # pase's mapping: batch dims take the first (slowest) mesh dims
    assert plan.parameters["fc1.weight"].placements == ["Replicate()", "Shard(0)"]
    assert plan.activations["fc1"].placements == ["Shard(0)", "Shard(1)"]


def test_an_inexpressible_layout_is_reported_not_hidden():
    model, args = gpt2.block()
    imported = import_torch(model, args)
    heads = [d.name for d in imported.graph.op("attn.c_attn").dims if d.role == "heads"][0]
    plan = to_dtensor(model, imported, {"attn.c_attn": {heads: 4}}, devices=4)
    weight = plan.parameters["attn.c_attn.weight"]
    assert not weight.exact and "strided" in weight.note and "3 x 4 x 8" in weight.note
    assert weight.placements == ["Replicate()", "Replicate()"]
    assert any(line.startswith("attn.c_attn.weight:") for line in plan.inexpressible)
    assert "NOT EXPRESSIBLE" in plan.table()


def test_plan_from_a_solve(capsys, tmp_path):
    ref = f"{Path(__file__).parent / 'torch_models' / 'mlp.py'}:build"
    solved = tmp_path / "s.json"
    assert main(["solve", ref, "-p", "4", "--format", "json", "--output", str(solved)]) == 0
    capsys.readouterr()
    out = tmp_path / "plan.json"
    assert main(["export", ref, "-p", "4", "--strategy", str(solved), "--engine", "torch",
                 "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["mesh"]["shape"] == [2, 2] and set(data["parameters"]) == {
        "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    model, args = mlp.build()
    direct = to_dtensor(model, import_torch(model, args, name="mlp.build"), pase.solve(ref, devices=4))
    assert json.loads(direct.to_json()) == data
    code = main(["export", "gpt2", "-p", "4", "--strategy", str(solved), "--engine", "torch"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "--engine torch places a PyTorch module's tensors, so MODEL must be FILE.py:FUNCTION" in err


def _solved(build, solver):
    model, args = build()
    return pase.solve(import_torch(model, args).graph, devices=4, solver=solver)


@pytest.mark.slow
def test_round_trip_mlp_on_4_gloo_processes():
    from pase.export.dtensor_run import check_round_trip

    strategies = [_solved(mlp.build, "data-parallel"), _solved(mlp.build, "megatron"),
                  {"fc1": {"a": 2, "b": 2}, "fc2": {"a": 2, "c": 2}}]
    assert dict(strategies[1].configs) == {"fc1": {"a": 1, "b": 4, "c": 1},
                                           "fc2": {"a": 1, "b": 1, "c": 4}}  # = MEGATRON_MLP
    results = check_round_trip(mlp.build, strategies, 4)
    for result in results:
        assert result["loss_diff"] <= 1e-5 and result["grad_diff"] <= 1e-5, result
        assert result["inexpressible"] == []
    assert results[1]["sharded"] == ["fc1.bias", "fc1.weight", "fc2.weight"]


@pytest.mark.slow
def test_round_trip_gpt2_mlp_on_4_gloo_processes():
    from pase.export.dtensor_run import check_round_trip

    megatron_4 = {"mlp.c_fc": {"c": 4}, "mlp.c_proj": {"d": 4}}
    strategies = [_solved(gpt2.mlp_block, "megatron"), _solved(gpt2.mlp_block, "data-parallel"),
                  megatron_4]
    results = check_round_trip(gpt2.mlp_block, strategies, 4)
    for result in results:
        assert result["loss_diff"] <= 1e-5 and result["grad_diff"] <= 1e-5, result
    assert "mlp.c_fc.weight" in results[0]["sharded"] and "mlp.c_fc.weight" in results[2]["sharded"]


# -- a padded vocabulary split (67 tokens, a prime: no split divides it) -----------------
PADDED = [{"lm_head": {"c": 4}, "cross_entropy_loss": {"c": 4}},
          {"wte": {"d": 2}, "lm_head": {"c": 2}, "cross_entropy_loss": {"c": 2}}]


def test_padded_vocabulary_plan():
    """The logits split 4 ways over 67 tokens: Shard(2) on both mesh dims (DTensor holds
    17, 17, 17 and 16); the tied table, whose dims the importer does not record, is
    said to stay replicated rather than called exact."""
    from torch_models import tied_head

    model, args = tied_head.build()
    imported = import_torch(model, args)
    plan = to_dtensor(model, imported, PADDED[0], devices=4)
    assert plan.activations["lm_head"].placements == ["Shard(2)", "Shard(2)"]
    assert plan.activations["lm_head"].shape == (2, 4, 67)
    assert plan.inexpressible == []  # the table is unsplit at wte
    plan = to_dtensor(model, imported, PADDED[1], devices=4)
    table = plan.parameters["wte.weight"]
    assert table.placements == ["Replicate()", "Replicate()"] and not table.exact
    assert "d=2" in table.note and "wte.weight:" in plan.inexpressible[0]


@pytest.mark.slow
def test_round_trip_padded_vocabulary_on_4_gloo_processes():
    """Logits and loss split 4 and 2 ways over 67 tokens (uneven shards) agree with the
    unsharded module; the LM head's weight, tied to the table, stays one parameter."""
    from torch_models import tied_head

    from pase.export.dtensor_run import check_round_trip

    for result in check_round_trip(tied_head.build, PADDED, 4):
        assert result["loss_diff"] <= 1e-5 and result["grad_diff"] <= 1e-5, result

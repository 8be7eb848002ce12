"""A vocabulary split with padding, as Megatron-LM pads it: in the calibrated model's space
and prices only (docs/cost-model.md, "A vocabulary splits with padding").

GPT-2's vocabulary, 50,257 = 29 x 1,733, has no divisor from 2 to 16: the exact spaces
cannot split it over a tensor-parallel group. Every count and size below is worked out
by hand from the graph's dims (b = 2, l = 1024, e = 768, V = 50257; cutoff 1, the GPT-2
graph's).
"""
from __future__ import annotations

import numpy as np
import pytest

from pase import api
from pase.errors import OptionError
from pase.perf import evaluate_layout, make_layout
from pase.perf.plan import layout_configs, layout_variants, plan_cost_options
from pase.space import ConfigSpace, candidate_factors

V = 50257
CEIL_V_4 = 12565  # 4 x 12,564 = 50,256 < V: the last of 4 ranks holds 12,564 rows and a pad


@pytest.fixture(scope="module")
def gpt2():
    return api.load_graph("gpt2", batch=2, layers=1)


def test_vocabulary_factors_pad_only_when_asked():
    assert candidate_factors(V, 16, 4) == [1]  # 29 is the least divisor above 1
    assert candidate_factors(V, 16, 4, powers_of_two=True, padded=True) == [1, 2, 4, 8, 16]
    # the divisors of p: every layout's tp divides the devices
    assert candidate_factors(V, 6, 4, padded=True) == [1, 2, 3, 6]
    assert candidate_factors(V, 12, 4, powers_of_two=True, padded=True) == [1, 2, 4]
    # the cutoff still holds: a tile of at least `cutoff` rows
    assert candidate_factors(10, 8, 4, padded=True) == [1, 2]


@pytest.mark.parametrize("cost_model, cluster", [("paper", None), ("alpha-beta", "h100-sxm")])
def test_exact_spaces_are_unchanged(cost_model, cluster):
    """lm_head (b=2, l=1024, v=V, e=768) on 8 devices, cutoff 1: b in {1, 2}, l in
    {1, 2, 4, 8}, v in {1}, e in {1, 2, 3, 4, 6, 8}. Pairs (l, e) with l e <= 8: 13, <= 4:
    7; so 13 (b = 1) + 7 (b = 2) = 20 configs."""
    built = api.build_problem("gpt2", 8, cost_model, batch=2, cluster=cluster,
                              model_options={"layers": 1})
    assert getattr(built.space, "padded_roles", ()) == ()  # (an older space has none)
    lm_head = built.graph.index("lm_head")
    assert built.space.sizes[lm_head] == 20
    assert {int(f) for f in built.space.configs[lm_head][:, 2]} == {1}


def test_calibrated_space_splits_the_vocabulary():
    """The same op in the calibrated space: v in {1, 2, 4, 8} too. With N(B) the pairs
    (l, e) of product <= B (N(8) = 13, N(4) = 7, N(2) = 3, N(1) = 1): b = 1 gives
    13 + 7 + 3 + 1 = 24 (v = 1, 2, 4, 8), b = 2 gives 7 + 3 + 1 = 11 (v = 1, 2, 4): 35."""
    built = api.build_problem("gpt2", 8, batch=2, cluster="h100-sxm",
                              model_options={"layers": 1}, powers_of_two=False)
    assert built.cost_model.name == "calibrated"
    lm_head = built.graph.index("lm_head")
    assert built.space.sizes[lm_head] == 35
    assert {int(f) for f in built.space.configs[lm_head][:, 2]} == {1, 2, 4, 8}
    built = api.build_problem("gpt2", 16, batch=2, cluster="h100-sxm",
                              model_options={"layers": 1}, powers_of_two=True)
    factors = {int(f) for f in built.space.configs[built.graph.index("loss")][:, 2]}
    assert factors == {1, 2, 4, 8, 16}


def test_an_exact_model_refuses_a_padded_space(gpt2):
    from pase.space import PADDED_ROLES

    space = ConfigSpace(gpt2, 4, padded_roles=PADDED_ROLES)
    with pytest.raises(OptionError, match="padded_roles"):
        api.make_cost_model("alpha-beta", cluster="h100-sxm").problem(gpt2, space)


def test_lm_head_split_four_ways_charges_padded_gemms(gpt2):
    """lm_head ``ble,ve->blv`` split 4 ways over v: each device multiplies (2 x 1024) x 768
    by 768 x 12,565, 2 FLOP a multiply-add; the embedding's table, split alike, keeps
    12,565 x 768 bf16 weights a device."""
    model = api.make_cost_model("calibrated", cluster="h100-sxm").bind(gpt2, 8)
    work = model.work(gpt2.op("lm_head"), np.array([[1, 1, 4, 1]]))
    assert work.matmul_flop[0] == 2 * 2 * 1024 * CEIL_V_4 * 768
    assert work.forward_flop[0] == 2 * 2 * 1024 * CEIL_V_4 * 768  # no bias, no activation
    assert work.output_tiles[0].tolist() == [[2, 1024, CEIL_V_4]]
    wte = model.work(gpt2.op("wte"), np.array([[1, 1, 1, 4]]))  # dims a, b, d, c (vocabulary)
    assert wte.parameter_bytes[0] == CEIL_V_4 * 768 * 2
    # the loss keeps its fp32 probabilities of the padded tile
    loss = model.work(gpt2.op("loss"), np.array([[1, 1, 4]]))
    assert loss.activation_bytes[0] == 2 * 1024 * CEIL_V_4 * 4


def test_zero_shards_the_padded_table(gpt2):
    """ZeRO-1 of the table split 4 ways over the vocabulary and 2 over the batch: 2 + 2
    bytes of weight and gradient a parameter, the 12 of Adam's fp32 states halved, over
    12,565 x 768 rows a device; priced with other paddings in one call, or alone."""
    from pase.work.variants import apply_variant

    model = api.make_cost_model("calibrated", cluster="h100-sxm").bind(gpt2, 8)
    configs = np.array([[2, 1, 1, 4], [1, 1, 1, 1], [2, 1, 1, 2]])  # dims a, b, d, c
    states = apply_variant(model.work(gpt2.op("wte"), configs), 1).state_bytes
    assert states.tolist() == [CEIL_V_4 * 768 * (2 + 2 + 6), V * 768 * 16,
                               25129 * 768 * (2 + 2 + 6)]  # 2 x 25,129 = V + 1
    alone = apply_variant(model.work(gpt2.op("wte"), configs[:1]), 1).state_bytes
    assert alone[0] == CEIL_V_4 * 768 * (2 + 2 + 6)


def test_configs_priced_together_as_alone(gpt2):
    """Configs of several paddings priced in one call are each priced as alone (the groups
    are put back in order)."""
    from pase.cost_models.calibrated_padding import padded_op

    model = api.make_cost_model("calibrated", cluster="h100-sxm").bind(gpt2, 8)
    op = gpt2.op("lm_head")
    configs = np.array([[1, 1, 4, 1], [2, 1, 1, 1], [1, 1, 3, 2], [1, 2, 4, 1], [1, 1, 2, 1]])
    together = model.work(op, configs)
    for k, row in enumerate(configs):
        alone = model.work(op, row[None, :])
        assert together.forward_seconds[k] == alone.forward_seconds[0]
        assert together.backward_seconds[k] == alone.backward_seconds[0]
        assert together.activation_bytes[k] == alone.activation_bytes[0]
        for c, d in zip(together.collectives, alone.collectives):
            assert np.broadcast_to(c.nbytes, (len(configs),))[k] == \
                np.broadcast_to(d.nbytes, (1,))[0]
    # the padded op: the vocabulary and every axis it splits grown to 4 x 12,565
    grown = padded_op(op, (2, 1024, 4 * CEIL_V_4, 768))
    assert [p.shape for p in grown.outputs + grown.weights] == [(2, 1024, 50260), (50260, 768)]


@pytest.mark.parametrize("degrees, dp, options", [("tp=4,dp=2", 2, {}),
                                                  ("tp=2,dp=4", 4, {"zero": 1})])
def test_a_layout_with_an_odd_vocabulary_is_one_price(degrees, dp, options):
    """tp over GPT-2's odd vocabulary: the layout path pads it, and its per-op plan now
    splits the head, the loss and the embedding's table as many ways too, priced alike."""
    lay = make_layout(degrees, devices=8, micro_batch=1, global_batch=dp,
                      **options)
    graph = api.load_graph("gpt2", batch=lay.dp, layers=1)
    unsplit: list[str] = []
    configs = layout_configs(graph, lay, unsplit, padded_roles=("vocabulary",))
    assert unsplit == []
    assert configs["lm_head"] == {"b": lay.dp, "v": lay.tp}
    assert configs["wte"] == {"a": lay.dp, "c": lay.tp}
    est = evaluate_layout(api.load_graph("gpt2", batch=1, layers=1), "h100-sxm", lay)
    plan = api.evaluate(graph, {"strategy": configs, "variants": layout_variants(graph, lay)},
                        8, "calibrated", cluster="h100-sxm",
                        cost_options=plan_cost_options(lay)).meta
    assert plan["step_seconds"] == pytest.approx(est.step_seconds, rel=1e-9)
    assert plan["memory_bytes"] == pytest.approx(est.memory_bytes, rel=1e-9)
    # for a model of exact tiles the bridge leaves the vocabulary unsplit, and says so
    unsplit = []
    assert "v" not in layout_configs(graph, lay, unsplit)["lm_head"]
    assert "lm_head.v" in unsplit

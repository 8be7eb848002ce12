"""transformers' Mixtral (its grouped-matmul experts) imports as the zoo's MoE layer.

Expected values come from torch: ``numel()`` of the unique parameters, and
``FlopCounterMode``. transformers runs the experts in one custom op
(``transformers::grouped_mm_fallback``) whose matrix products FlopCounterMode
does not see (it counts 0 for them); the same model with
``_experts_implementation = "eager"`` runs each expert's rows through
``F.linear``, which it counts: ``tokens * k`` rows per product, the reference here.
"""
import math
import sys
import types
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import pase  # noqa: E402
from pase.counts import counts  # noqa: E402
from pase.frontends.torch import ModelImportError, import_torch  # noqa: E402
from pase.graphs.moe import mixtral as zoo_mixtral  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from real_models import catalogue  # noqa: E402

MOE_KINDS = ["Einsum", "Softmax", "TopK", "MoEDispatch", "Einsum", "Einsum", "Elementwise",
             "Einsum", "MoECombine"]


def _import(model, args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        imp = import_torch(model, args, name="mixtral")
    assert [str(w.message) for w in caught] == []
    return imp


@pytest.fixture(scope="module")
def mixtral():
    model, args = catalogue.mixtral()
    return model, args, _import(model, args)


def _torch_flops(model, args, experts="eager"):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    config = model.model.config
    was, config._experts_implementation = config._experts_implementation, experts
    try:
        with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter, \
                torch.no_grad():
            out = model(*args)
    finally:
        config._experts_implementation = was
    return counter.get_total_flops(), out


def _counted(imp, where=""):
    by_op = counts(imp.graph).by_op()
    return sum(by_op[op.name].matmul_flops for op in imp.graph.ops
               if imp.ops[op.name].counted and where in op.name)


def test_parameters_are_torchs_numel(mixtral):
    model, _, imp = mixtral
    unique = sum({id(p): p.numel() for p in model.parameters()}.values())
    assert pase.counts.parameters(imp.graph) == unique


def test_matmul_flops_are_torchs_per_token_expert_count(mixtral):
    model, args, imp = mixtral
    eager, out = _torch_flops(model, args)
    grouped, grouped_out = _torch_flops(model, args, "grouped_mm")
    assert torch.allclose(out, grouped_out, atol=1e-5)  # one model, two ways to run it
    assert grouped < eager  # the grouped custom op hides the experts' products
    assert _counted(imp) == pytest.approx(eager, rel=0.01)
    # Here the buffers hold exactly the routed rows (4 experts divide 2 * 32), so exactly.
    assert _counted(imp) == eager


def test_capacity_rounds_up_when_experts_do_not_divide_the_routed_tokens():
    model, args = _one_layer("MixtralConfig", "MixtralForCausalLM", num_local_experts=3)
    imp = _import(model, args)
    experts_off, _ = _torch_flops(model, args, "grouped_mm")  # everything but the experts
    eager, _ = _torch_flops(model, args)
    seq, k, x = args[0].shape[1], 2, 3
    slots = x * math.ceil(k * seq / x)  # the zoo's capacity factor 1: 3 * 22 = 66 for 64 rows
    assert _counted(imp, ".experts.") == pytest.approx((eager - experts_off) * slots / (k * seq),
                                                       rel=1e-12)
    assert _counted(imp) == pytest.approx(eager, rel=0.05)


def test_dp_at_p8_is_optimal(mixtral):
    strategy = pase.solve(mixtral[2].graph, devices=8, cost_model="alpha-beta")
    assert strategy.solution.status.value == "optimal"
    assert math.isfinite(strategy.total_cost) and strategy.total_cost > 0


def test_each_layer_is_the_zoos_moe_with_the_expert_dim(mixtral):
    model, args, imp = mixtral
    config = model.model.config
    batch, seq = args[0].shape
    zoo = zoo_mixtral("zoo", batch=batch, seq=seq, layers=1, width=config.hidden_size,
                      heads=config.num_attention_heads, kv_heads=config.num_key_value_heads,
                      ff=config.intermediate_size, vocab=config.vocab_size,
                      experts=config.num_local_experts, top_k=config.num_experts_per_tok,
                      capacity_factor=1.0)
    want = [op for op in zoo.ops if ".moe." in op.name and "norm" not in op.name]
    assert [op.kind for op in want] == MOE_KINDS
    for layer in range(config.num_hidden_layers):
        got = [op for op in imp.graph.ops if f"layers.{layer}.mlp." in op.name]
        assert [op.kind for op in got] == MOE_KINDS
        for g, z in zip(got, want):
            assert sorted((d.size, d.role) for d in g.dims) == _one_group(z), (g.name, z.name)
            assert counts(imp.graph).by_op()[g.name].forward_flops == \
                pytest.approx(counts(zoo).by_op()[z.name].forward_flops, rel=1e-12), g.name
        experts = {d.size for op in got if op.kind in ("Einsum", "MoEDispatch", "MoECombine")
                   for d in op.dims if d.role == "expert"}
        assert experts == {config.num_local_experts}
        gate = next(op for op in got if op.name.endswith(".experts.gate"))
        assert gate.attrs["act"] == "silu"
        assert next(op for op in got if op.kind == "TopK").attrs["normalize"] is True


def _one_group(op):
    """``op``'s sorted (size, role) dims with its routing groups folded back into its tokens
    and slots: the importer routes the sequence as one group, the zoo in groups."""
    groups = next((d.size for d in op.dims if d.name == "g"), 1)
    return sorted((d.size * (groups if d.name in "lc" and op.kind.startswith("MoE") else 1),
                   d.role) for d in op.dims if d.name != "g")


def test_experts_weights_are_where_their_parameters_are(mixtral):
    _, _, imp = mixtral
    assert imp.parameter_axes["model.model.layers.0.mlp.experts.gate_up_proj"][0] == \
        "model.model.layers.0.mlp.experts.gate"
    assert imp.parameter_axes["model.model.layers.1.mlp.experts.down_proj"][0] == \
        "model.model.layers.1.mlp.experts.down"


def test_an_unknown_op_in_the_experts_is_refused_up_front_listing_every_one():
    model, args = catalogue.mixtral()

    def odd_gate(self, gate_up):
        gate, up = gate_up.chunk(2, dim=-1)
        return torch.special.i0(gate) * torch.cos(up)  # cos: known to pase, not to the pattern

    for layer in model.model.model.layers:
        layer.mlp.experts._apply_gate = types.MethodType(odd_gate, layer.mlp.experts)
    with pytest.raises(ModelImportError) as err:
        import_torch(model, args)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith("4 unsupported ATen op(s): ")
    for layer in (0, 1):  # each op once, with the experts it sits in
        where = f"(in the experts model.model.layers.{layer}.mlp.experts)"
        assert text.count(where) == 2
    assert text.count("aten.special_i0 at ") == 1 and text.count("aten.cos at ") == 1
    assert text.count("(2 calls)") == 2


def _one_layer(config_cls, model_cls, batch=catalogue.BATCH, **config):
    model = catalogue._hf(config_cls, model_cls, num_hidden_layers=1, num_key_value_heads=2,
                          num_experts_per_tok=2, vocab_size=1000, **catalogue.SMALL, **config)
    return model, (catalogue._ids(1000, batch=batch),)


@pytest.mark.parametrize("config_cls, model_cls, experts", [
    ("OlmoeConfig", "OlmoeForCausalLM", {"num_experts": 4}),
    ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", {"num_experts": 4, "moe_intermediate_size": 64}),
])
def test_other_grouped_mm_experts_import_exactly(config_cls, model_cls, experts):
    model, args = _one_layer(config_cls, model_cls, **experts)
    imp = _import(model, args)
    assert pase.counts.parameters(imp.graph) == \
        sum({id(p): p.numel() for p in model.parameters()}.values())
    assert _counted(imp) == _torch_flops(model, args)[0]
    assert [op.kind for op in imp.graph.ops if ".mlp." in op.name] == MOE_KINDS


def test_a_batch_of_one_is_refused_in_one_line():
    model, args = _one_layer("MixtralConfig", "MixtralForCausalLM", batch=1, num_local_experts=4)
    with pytest.raises(ModelImportError, match=r"^cannot import the experts model\.model\.layers"
                       r"\.0\.mlp\.experts at .*: give the example input a batch of at least 2"):
        import_torch(model, args)

"""The model zoo: parameter counts against the reference implementations, forward FLOP
against the analytic count, dp at p = 8 and 64 under both cost models, dp against
ilp-highs, JSON round-trips and one-line errors for bad model options.

Reference parameter counts are those printed by the standard implementations
(``sum(p.numel() for p in model.parameters())``): Hugging Face ``transformers``
for BERT (``BertModel``), GPT-2, Llama, Mixtral and Switch; timm for ViT;
torchvision for DenseNet. Each is re-derived below from the published
architecture (independent arithmetic), so a typo in a constant fails too.
"""
from __future__ import annotations

import math

import pytest

import pase
from pase.api import build_problem, run_solver
from pase.counts import counts, parameters
from pase.errors import OptionError
from pase.ir import Graph
from pase.registry import MODELS

ZOO = ["bert-base", "bert-large", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt3",
       "gpt3-175b", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "mixtral-8x7b",
       "switch-base-8", "vit-b16", "vit-l16", "densenet121"]
FAMILIES = ["bert-base", "gpt2", "llama2-70b", "mixtral-8x7b", "switch-base-8", "vit-b16",
            "densenet121"]


# -- independent arithmetic of the published architectures ---------------------------

def _bert(layers, e, vocab=30522, positions=512, types=2):
    """BertModel: embeddings + LayerNorm, layers, pooler (Hugging Face)."""
    layer = 4 * (e * e + e) + 2 * e + (e * 4 * e + 4 * e) + (4 * e * e + e) + 2 * e
    return (vocab + positions + types) * e + 2 * e + layers * layer + e * e + e


def _mlm_head(e, vocab=30522):
    """BertForMaskedLM's head: dense + bias, LayerNorm, decoder bias (its matrix is tied)."""
    return e * e + e + 2 * e + vocab


def _gpt2(layers, e, vocab=50257, positions=1024):
    layer = 2 * e + (3 * e * e + 3 * e) + (e * e + e) + 2 * e + (4 * e * e + 4 * e) + (4 * e * e + e)
    return (vocab + positions) * e + layers * layer + 2 * e


def _llama(layers, e, heads, kv, ff, vocab, experts=1):
    d = e // heads
    attn = e * heads * d + 2 * e * kv * d + heads * d * e
    mlp = experts * 3 * e * ff + (e * experts if experts > 1 else 0)
    return 2 * vocab * e + layers * (attn + mlp + 2 * e) + e


def _vit(layers, e, patch=16, image=224, classes=1000):
    n = (image // patch) ** 2
    layer = 2 * e + (3 * e * e + 3 * e) + (e * e + e) + 2 * e + (4 * e * e + 4 * e) + (4 * e * e + e)
    return (3 * patch * patch * e + e) + e + (n + 1) * e + layers * layer + 2 * e + e * classes + classes


def _densenet121(growth=32, bn_size=4, init=64, blocks=(6, 12, 24, 16), classes=1000):
    total = 3 * init * 49 + 2 * init
    c = init
    for i, n in enumerate(blocks):
        for _ in range(n):
            total += 2 * c + c * bn_size * growth + 2 * bn_size * growth + bn_size * growth * growth * 9
            c += growth
        if i + 1 < len(blocks):
            total += 2 * c + c * (c // 2)
            c //= 2
    return total + 2 * c + c * classes + classes


def _switch(e=768, ff=3072, layers=12, heads=12, d_kv=64, vocab=32128, experts=8):
    """SwitchTransformersForConditionalGeneration (google/switch-base-8's config)."""
    attn = 4 * e * heads * d_kv
    dense, sparse = 2 * e * ff, e * experts + experts * 2 * e * ff
    rel_bias = 32 * heads  # one bucket table per stack, in its first layer
    enc = sum(attn + e + (sparse if i % 2 else dense) + e for i in range(layers)) + e + rel_bias
    dec = sum(2 * attn + 2 * e + (sparse if i % 2 else dense) + e for i in range(layers)) + e + rel_bias
    return vocab * e + enc + dec  # LM head tied to the shared embedding


# model -> (reference count, source, what the IR leaves out (elements), why)
REFERENCE = {
    "bert-base": (109_482_240, "HF bert-base-uncased BertModel", -_mlm_head(768),
                  "the zoo model adds BertForMaskedLM's head (dense 768x768 + bias, LayerNorm, "
                  "decoder bias 30522; decoder matrix tied): 622,650 more"),
    "bert-large": (335_141_888, "HF bert-large-uncased BertModel", -_mlm_head(1024),
                   "plus the masked-LM head: 1024^2 + 1024 + 2048 + 30522 = 1,082,170 more"),
    "gpt2": (124_439_808, "HF gpt2 GPT2LMHeadModel", 0, ""),
    "gpt2-medium": (354_823_168, "HF gpt2-medium", 0, ""),
    "gpt2-large": (774_030_080, "HF gpt2-large", 0, ""),
    "gpt2-xl": (1_557_611_200, "HF gpt2-xl", 0, ""),
    "llama2-7b": (6_738_415_616, "HF meta-llama/Llama-2-7b-hf LlamaForCausalLM", 0, ""),
    "llama2-13b": (13_015_864_320, "HF meta-llama/Llama-2-13b-hf", 0, ""),
    "llama2-70b": (68_976_648_192, "HF meta-llama/Llama-2-70b-hf", 0, ""),
    "llama3-8b": (8_030_261_248, "HF meta-llama/Meta-Llama-3-8B", 0, ""),
    "mixtral-8x7b": (46_702_792_704, "HF mistralai/Mixtral-8x7B-v0.1", 0, ""),
    "switch-base-8": (619_339_008, "HF google/switch-base-8 (arithmetic from its config: width "
                      "768, ff 3072, 12+12 layers, 6+6 sparse, 8 experts, vocab 32128, tied)",
                      768, "T5's relative position bias (32 buckets x 12 heads, one table per "
                      "stack: 2 x 384) is not modelled"),
    "vit-b16": (86_567_656, "timm vit_base_patch16_224", 0, ""),
    "vit-l16": (304_326_632, "timm vit_large_patch16_224", 0, ""),
    "densenet121": (7_978_856, "torchvision densenet121", 0,
                    "BatchNorm running statistics are buffers, not parameters, in both"),
}


def test_the_references_agree_with_the_published_architectures():
    assert _bert(12, 768) == 109_482_240 and _bert(24, 1024) == 335_141_888
    assert [_gpt2(12, 768), _gpt2(24, 1024), _gpt2(36, 1280), _gpt2(48, 1600)] == [
        124_439_808, 354_823_168, 774_030_080, 1_557_611_200]
    assert _llama(32, 4096, 32, 32, 11008, 32000) == 6_738_415_616
    assert _llama(40, 5120, 40, 40, 13824, 32000) == 13_015_864_320
    assert _llama(80, 8192, 64, 8, 28672, 32000) == 68_976_648_192
    assert _llama(32, 4096, 32, 8, 14336, 128256) == 8_030_261_248
    assert _llama(32, 4096, 32, 8, 14336, 32000, experts=8) == 46_702_792_704
    assert _vit(12, 768) == 86_567_656 and _vit(24, 1024) == 304_326_632
    assert _densenet121() == 7_978_856
    assert _switch() == 619_339_008


@pytest.mark.parametrize("model", sorted(REFERENCE))
def test_parameter_counts_match_the_reference_implementations(model):
    reference, source, left_out, why = REFERENCE[model]
    assert parameters(pase.load_graph(model)) == reference - left_out, (source, why)


def test_gpt3_175b_has_175_billion_parameters():
    # Brown et al. 2020, Table 2.1: 96 layers, width 12288, 96 heads, context 2048 ("175.0B").
    e, layers = 12288, 96
    expected = (50257 + 2048) * e + layers * (12 * e * e + 13 * e) + 2 * e
    assert parameters(pase.load_graph("gpt3-175b")) == expected == 174_604_259_328


def test_tied_weights_count_once():
    g = pase.load_graph("gpt2", **MODELS.entry("gpt2").info["tiny"])
    per_op = counts(g).by_op()
    assert per_op["lm_head"].parameters == 0 and per_op["wte"].parameters == 64 * 32


# -- forward FLOP against the analytic count --------------------------------------------

GEMM_KINDS = ("Einsum", "FC", "MoEDispatch", "MoECombine")


def _analytic(model: str, o: dict) -> float:
    """Standard forward FLOP (a multiply-add = 2): 2 x every weight matrix's elements x the
    tokens it multiplies, plus attention: 2 x 2 x seq x d_attn per token and attention
    layer (QK^T and AV over the full square: pase computes every score; the causal mask
    selects, it does not skip), and in a MoE layer GShard's dispatch and combine
    einsums, ``k e`` multiply-adds each per token (k the experts a token goes to)."""
    b, s = o.get("batch"), o.get("seq")
    if model.startswith("vit"):
        n = (o["image"] // o["patch"]) ** 2
        t, e = b * (n + 1), o["width"]
        layer = 4 * e * e + 2 * e * o["ff"]
        return (2 * b * n * 3 * o["patch"] ** 2 * e + 2 * t * o["layers"] * layer
                + 4 * o["layers"] * (n + 1) * e * t + 2 * b * e * o["classes"])
    t, e, layers = b * s, o["width"], o["layers"]
    attn_tokens = 4 * layers * s * e * t
    if model.startswith(("gpt", "bert")):
        ff = o["ff"] or 4 * e  # GPT-3's presets: 0 means 4 x width
        flops = 2 * t * (layers * (4 * e * e + 2 * e * ff) + o["vocab"] * e) + attn_tokens
        if model.startswith("bert"):
            flops += 2 * t * e * e + 2 * b * e * e  # MLM transform on every token, pooler on one
        return flops
    if model.startswith(("llama", "mixtral")):
        d = e // o["heads"]
        attn = e * (o["heads"] + 2 * o["kv_heads"]) * d + o["heads"] * d * e
        moe = e * o["experts"] + 2 * o["top_k"] * e if "experts" in o else 0
        mlp = 3 * e * o["ff"] * o.get("top_k", 1) + moe
        return 2 * t * (layers * (attn + mlp) + o["vocab"] * e) + 4 * layers * s * o["heads"] * d * t
    # switch: encoder self-attention; decoder self and cross attention (q, k, v of three inputs)
    hd = o["heads"] * o["d_kv"]
    dense = 2 * e * o["ff"]
    sparse = e * o["experts"] + 2 * e * o["ff"] * o["top_k"] + 2 * o["top_k"] * e
    mlps = sum(sparse if i % 2 else dense for i in range(layers))
    enc = layers * 4 * e * hd + mlps
    dec = layers * 8 * e * hd + mlps  # self: 4; cross: q k v of three inputs stacked (3) + out (1)
    return 2 * t * (enc + dec + o["vocab"] * e) + 3 * 4 * layers * s * hd * t


@pytest.mark.parametrize("model", [m for m in ZOO if m != "densenet121"])
def test_forward_flops_of_the_matrix_products_match_the_analytic_count(model):
    options = dict(MODELS.entry(model).info["options"])
    g = pase.load_graph(model)
    c = counts(g)
    gemm = sum(o.matmul_flops for o in c.ops if o.kind in GEMM_KINDS)  # 2 per multiply-add
    assert gemm == pytest.approx(_analytic(model, options), rel=1e-12)
    # With biases and point-wise tails (1 FLOP per element each) the forward FLOP of
    # those ops are more, by less than 2%.
    assert gemm < sum(o.forward_flops for o in c.ops if o.kind in GEMM_KINDS) < 1.02 * gemm
    # A lookup is a gather, free in the analytic count and in pase (memory traffic, no
    # FLOP), so the whole graph's matrix-product FLOP are the GEMMs'.
    embeddings = [o for o in c.ops if o.kind == "Embedding"]
    assert bool(embeddings) != model.startswith("vit")  # ViT embeds patches with a GEMM
    assert all(o.forward_flops == o.matmul_flops == 0 for o in embeddings)
    assert c.matmul_flops == pytest.approx(gemm, rel=1e-12)
    assert c.forward_flops > gemm


# -- dp solves every model at p = 8 and 64 under both cost models -----------------------

def _small(model: str) -> dict:
    """The default sizes with one layer (two for Switch, whose MoE layers are the odd ones;
    DenseNet with blocks of 2: its dense blocks are the dp's hard case, see the benchmark)."""
    if model == "densenet121":
        return {"block1": 2, "block2": 2, "block3": 2, "block4": 2}
    return {"layers": 2 if model == "switch-base-8" else 1}


def _solve_and_compare(model, p, cost_model, cluster):
    kw = {"cluster": cluster} if cost_model == "alpha-beta" else {}
    built = build_problem(model, p, cost_model, model_options=_small(model), **kw)
    if cost_model == "alpha-beta":  # capped at the device's memory
        assert built.problem.memory_cap == pytest.approx(
            built.cost_model.cluster.device.memory_bytes)
    dp = run_solver("dp", built.problem)
    assert dp.status.name == "OPTIMAL" and math.isfinite(dp.cost)
    for baseline in ("data-parallel", "megatron"):
        other = run_solver(baseline, built.problem)
        if other.choice is not None:
            assert dp.cost <= other.cost * (1 + 1e-9), baseline


FAST = [(m, 8) for m in ZOO] + [("gpt2", 64), ("llama3-8b", 64), ("vit-b16", 64)]
SLOW = [(m, 64) for m in ZOO if (m, 64) not in FAST]


@pytest.mark.parametrize("model, p", FAST)
@pytest.mark.parametrize("cost_model, cluster", [("paper", None), ("alpha-beta", "h100-sxm")])
def test_dp_solves_every_model(model, p, cost_model, cluster):
    _solve_and_compare(model, p, cost_model, cluster)


@pytest.mark.slow
@pytest.mark.parametrize("model, p", SLOW)
@pytest.mark.parametrize("cost_model, cluster", [("paper", None), ("alpha-beta", "dgx-a100")])
def test_dp_solves_every_model_at_64(model, p, cost_model, cluster):
    _solve_and_compare(model, p, cost_model, cluster)


@pytest.mark.parametrize("model", FAMILIES)
@pytest.mark.parametrize("cost_model", ["paper", "alpha-beta"])
def test_dp_equals_ilp_highs_on_a_tiny_two_layer_variant(model, cost_model):
    pytest.importorskip("highspy")
    kw = {"cluster": "dgx-a100"} if cost_model == "alpha-beta" else {}
    built = build_problem(model, 4, cost_model, model_options=MODELS.entry(model).info["tiny"], **kw)
    dp = run_solver("dp", built.problem)
    ilp = run_solver("ilp-highs", built.problem, time_limit=120)
    assert ilp.status.name == "OPTIMAL"
    assert dp.cost == pytest.approx(ilp.cost, rel=1e-6)


# -- JSON, options and errors -----------------------------------------------------------

@pytest.mark.parametrize("model", ZOO)
def test_json_round_trip(model):
    g = pase.load_graph(model)
    again = Graph.from_json(g.to_json(indent=None))
    assert again == g and parameters(again) == parameters(g)


def test_options_are_declared_in_the_registry_and_typed_in_the_signature():
    import inspect
    for model in ZOO:
        entry = MODELS.entry(model)
        declared = entry.info["options"]
        params = inspect.signature(entry.obj).parameters
        assert {k: p.default for k, p in params.items()} == declared
        assert set(entry.info["option_types"]) == set(declared)


def test_api_passes_model_options():
    g = pase.load_graph("gpt2", layers=2, seq="128")  # text is coerced by the annotation
    assert len([op for op in g.ops if op.name.endswith(".attn.scores")]) == 2
    s = pase.solve("gpt2", devices=8, model_options={"layers": 1, "seq": 64})
    assert s.solution.status.name == "OPTIMAL"
    # A registered model's declared options may be plain keywords; the rest go to the solver.
    t = pase.solve("gpt2", devices=8, layers=1, seq=64, ordering="min-fill")
    assert t.total_cost == pytest.approx(s.total_cost, rel=1e-12)
    with pytest.raises(OptionError, match="model option layers given twice"):
        pase.solve("gpt2", devices=8, layers=1, model_options={"layers": 2})


@pytest.mark.parametrize("model, options, words", [
    ("gpt2", {"depth": 3}, "model 'gpt2' has no option 'depth'; allowed: batch, seq, layers"),
    ("gpt2", {"heads": 7}, "model 'gpt2': heads (7) must divide width (768)"),
    ("bert-base", {"heads": 5}, "model 'bert-base': heads (5) must divide width (768)"),
    ("vit-b16", {"heads": 7}, "heads (7) must divide width (768)"),
    ("llama3-8b", {"kv_heads": 6}, "model 'llama3-8b': kv_heads (6) must divide heads (32)"),
    ("mixtral-8x7b", {"top_k": 9}, "model 'mixtral-8x7b': top_k (9) must be at most experts (8)"),
    ("switch-base-8", {"experts": 0}, "option experts must be an integer >= 1, got 0"),
    ("llama2-7b", {"layers": 2.5}, "option layers must be an integer >= 1, got 2.5"),
    ("mixtral-8x7b", {"capacity_factor": -1.0}, "option capacity_factor must be a number > 0"),
    ("densenet121", {"growth": "many"}, "option growth must be an integer >= 1, got 'many'"),
    # today's LLMs (tests/test_zoo_2024.py, tests/test_zoo_hybrid.py)
    ("qwen3-30b-a3b", {"heads": 30}, "model 'qwen3-30b-a3b': kv_heads (4) must divide heads (30)"),
    ("qwen3-30b-a3b", {"top_k": 129}, "top_k (129) must be at most experts (128)"),
    ("qwen3-30b-a3b", {"moe_ff": 0}, "option moe_ff must be an integer >= 1, got 0"),
    ("gpt-oss-120b", {"head_dim": 63}, "head_dim (63) must be even for rotary embeddings"),
    ("gpt-oss-20b", {"top_k": 33}, "model 'gpt-oss-20b': top_k (33) must be at most experts (32)"),
    ("gpt-oss-20b", {"window": -1}, "option window must be an integer >= 0, got -1"),
    ("mixtral-8x22b", {"shared_experts": -1}, "option shared_experts must be an integer >= 0"),
    ("mixtral-8x22b", {"heads": 7}, "model 'mixtral-8x22b': heads (7) must divide width (6144)"),
    ("llama3.1-405b", {"kv_heads": 3}, "kv_heads (3) must divide heads (128)"),
    ("nemotron4-340b", {"heads": 7}, "heads (7) must divide width (18432)"),
    ("llama4-scout", {"top_k": 17}, "top_k (17) must be at most experts (16)"),
    ("llama4-scout", {"head_dim": 64}, "model 'llama4-scout' has no option 'head_dim'"),
    ("deepseek-v3", {"top_k": 300}, "model 'deepseek-v3': top_k (300) must be at most experts (256)"),
    ("deepseek-v3", {"layers": 2}, "model 'deepseek-v3': dense_layers (3) must be at most layers (2)"),
    ("deepseek-v3", {"qk_rope_head_dim": 63}, "qk_rope_head_dim (63) must be even"),
    ("nemotron-3-nano", {"groups": 3}, "n_groups (3) must divide mamba_heads (64)"),
    ("nemotron-3-nano", {"seq": 200}, "seq (200) must be a multiple of chunk (128)"),
    ("nemotron-3-nano", {"kv_heads": 3}, "kv_heads (3) must divide heads (32)"),
    ("nemotron-3-nano", {"latent": 512}, "model 'nemotron-3-nano' has no option 'latent'"),
    ("nemotron-3-super", {"top_k": 513}, "top_k (513) must be at most experts (512)"),
    ("nemotron-3-super", {"chunk": 0}, "option chunk must be an integer >= 1, got 0"),
])
def test_bad_model_options_are_one_line_option_errors(model, options, words):
    with pytest.raises(OptionError) as direct:
        MODELS.get(model)(**options)
    assert words in str(direct.value) and "\n" not in str(direct.value)
    with pytest.raises(OptionError) as api:  # through the API's coercion as well
        pase.load_graph(model, **options)
    assert "\n" not in str(api.value)

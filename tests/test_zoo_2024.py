"""Today's LLMs in the zoo: Llama 3 / 3.1, Mixtral 8x22B, Qwen3 MoE, gpt-oss, Nemotron-4 and
Llama 4 Scout.

Each parameter count is checked against arithmetic written out here from the published
config (Hugging Face ``config.json``), at 1 and 2 layers (so the per-layer and the rest
both agree) and, for the published layer count, against the published total: the
Hugging Face safetensors total where it is known to the parameter (``REFERENCE``), else
the model card's rounded figure. Big models are built with few layers for speed.
"""
from __future__ import annotations

import json
import os

import pytest

import pase
from pase.builder import GraphBuilder
from pase.cli import main
from pase.counts import parameters
from pase.errors import GraphError
from pase.ir import Graph
from pase.registry import MODELS

# -- independent arithmetic of the published architectures ---------------------------------


def _attn(e, heads, kv, d, bias=False):
    """q, k, v and output projections of grouped-query attention (biases on all four)."""
    weights = e * heads * d + 2 * e * kv * d + heads * d * e
    return weights + ((heads + 2 * kv) * d + e if bias else 0)


def _llama(layers, e, heads, kv, ff, vocab):
    """LlamaForCausalLM: embed, (attn + SwiGLU + 2 RMSNorm) per layer, norm, untied head."""
    return 2 * vocab * e + e + layers * (_attn(e, heads, kv, e // heads) + 3 * e * ff + 2 * e)


def _mixtral(layers, e, heads, kv, ff, vocab, experts=8):
    """MixtralForCausalLM: the router (e x experts, no bias) and 8 SwiGLU experts per layer."""
    moe = e * experts + experts * 3 * e * ff
    return 2 * vocab * e + e + layers * (_attn(e, heads, kv, e // heads) + moe + 2 * e)


def _qwen3_moe(layers, e, heads, moe_ff, kv=4, d=128, experts=128, vocab=151936):
    """Qwen3MoeForCausalLM: head_dim 128, q_norm and k_norm (128 each), 128 experts, no bias."""
    attn = _attn(e, heads, kv, d) + 2 * d
    moe = e * experts + experts * 3 * e * moe_ff
    return 2 * vocab * e + e + layers * (attn + moe + 2 * e)


def _gpt_oss(layers, experts, e=2880, heads=64, kv=8, d=64, ff=2880, vocab=201088):
    """GptOssForCausalLM: biased q/k/v/o, one sink per head, a biased router, experts with a
    fused gate_up (e x 2ff + 2ff) and down (ff x e + e) projection, 2 RMSNorms a layer."""
    attn = _attn(e, heads, kv, d, bias=True) + heads
    moe = (e * experts + experts) + experts * (e * 2 * ff + 2 * ff + ff * e + e)
    return 2 * vocab * e + e + layers * (attn + moe + 2 * e)


def _nemotron4(layers, e, heads, ff, kv=8, vocab=256000):
    """NemotronForCausalLM: no projection biases, a 2-matrix squared-ReLU MLP, LayerNorms with
    scale and shift (2 a layer and a final one), untied head."""
    return 2 * vocab * e + 2 * e + layers * (_attn(e, heads, kv, e // heads) + 2 * e * ff + 4 * e)


def _llama4_scout(layers, e=5120, heads=40, kv=8, experts=16, ff=8192, vocab=202048):
    """Llama4ForCausalLM (text): router (no bias), 16 SwiGLU experts and 1 shared one."""
    moe = e * experts + experts * 3 * e * ff + 3 * e * ff
    return 2 * vocab * e + e + layers * (_attn(e, heads, kv, e // heads) + moe + 2 * e)


def _sinks(layers):
    return 64 * layers  # gpt-oss's attention sinks, left out of the graph (64 heads a layer)


# model -> (published layers, hand count of n layers, parameters the graph leaves out of n layers)
ARCH = {
    "llama3-70b": (80, lambda n: _llama(n, 8192, 64, 8, 28672, 128256), None),
    "llama3.1-8b": (32, lambda n: _llama(n, 4096, 32, 8, 14336, 128256), None),
    "llama3.1-70b": (80, lambda n: _llama(n, 8192, 64, 8, 28672, 128256), None),
    "llama3.1-405b": (126, lambda n: _llama(n, 16384, 128, 8, 53248, 128256), None),
    "mixtral-8x22b": (56, lambda n: _mixtral(n, 6144, 48, 8, 16384, 32000), None),
    "qwen3-30b-a3b": (48, lambda n: _qwen3_moe(n, 2048, 32, 768), None),
    "qwen3-235b-a22b": (94, lambda n: _qwen3_moe(n, 4096, 64, 1536), None),
    "gpt-oss-20b": (24, lambda n: _gpt_oss(n, 32), _sinks),
    "gpt-oss-120b": (36, lambda n: _gpt_oss(n, 128), _sinks),
    "nemotron4-15b": (32, lambda n: _nemotron4(n, 6144, 48, 24576), None),
    "nemotron4-340b": (96, lambda n: _nemotron4(n, 18432, 96, 73728), None),
    "llama4-scout": (48, _llama4_scout, None),
}
NEW = sorted(ARCH)
MOE = ["gpt-oss-120b", "gpt-oss-20b", "llama4-scout", "mixtral-8x22b", "qwen3-235b-a22b",
       "qwen3-30b-a3b"]

# Published totals exact to the parameter: Hugging Face safetensors totals (the GGUF
# general.parameter_count agrees for gpt-oss, Qwen3-30B-A3B).
REFERENCE = {
    "llama3.1-8b": (8_030_261_248, "HF meta-llama/Llama-3.1-8B"),
    "llama3.1-70b": (70_553_706_496, "HF meta-llama/Llama-3.1-70B"),
    "llama3.1-405b": (405_853_388_800, "HF meta-llama/Llama-3.1-405B"),
    "mixtral-8x22b": (140_620_634_112, "HF mistral-community/Mixtral-8x22B-v0.1 (vocab 32000)"),
    "qwen3-30b-a3b": (30_532_122_624, "HF Qwen/Qwen3-30B-A3B"),
    "qwen3-235b-a22b": (235_093_634_560, "HF Qwen/Qwen3-235B-A22B"),
    "gpt-oss-20b": (20_914_757_184, "HF openai/gpt-oss-20b (model card: 20.91B)"),
    "gpt-oss-120b": (116_829_156_672, "HF openai/gpt-oss-120b (model card: 116.83B)"),
}
# Rounded published figures: (low, high) bounds of the rounding, source.
ROUNDED = {
    "llama3-70b": ((70.5e9, 70.6e9), "Meta Llama 3 70B: Llama 3.1 70B's architecture"),
    "nemotron4-15b": ((15e9, 16e9), "Nemotron-4 15B report: 15B"),
    "nemotron4-340b": ((340e9, 342e9), "Nemotron-4 340B report: 340B"),
    "llama4-scout": ((107e9, 109e9), "Meta: 109B total with the vision encoder, not built here"),
}


def test_the_hand_counts_match_the_published_totals():
    for model, (reference, source) in REFERENCE.items():
        layers, hand, _ = ARCH[model]
        assert hand(layers) == reference, source
    for model, ((low, high), source) in ROUNDED.items():
        layers, hand, _ = ARCH[model]
        assert low <= hand(layers) < high, source
    # Nemotron-4 15B's report splits it as 12.5B non-embedding parameters (3.1B embedding).
    assert round((_nemotron4(32, 6144, 48, 24576) - 2 * 256000 * 6144) / 1e9, 1) == 12.5


@pytest.mark.parametrize("model", NEW)
def test_parameter_counts_equal_the_hand_count(model):
    layers, hand, omitted = ARCH[model]
    assert MODELS.entry(model).info["options"]["layers"] == layers
    for n in (1, 2):
        left_out = omitted(n) if omitted else 0
        assert parameters(pase.load_graph(model, layers=n)) == hand(n) - left_out, (model, n)


@pytest.mark.parametrize("model", NEW)
def test_options_resize_the_model(model):
    g = pase.load_graph(model, layers=3)
    assert len([op for op in g.ops if op.name.endswith(".attn.scores")]) == 3
    tiny = MODELS.entry(model).info["tiny"]
    t = pase.load_graph(model, **tiny)
    assert parameters(t) < 10**6
    assert (tiny["vocab"], tiny["width"]) in [w.shape for w in t.op("embed_tokens").weights]
    again = Graph.from_json(t.to_json(indent=None))
    assert again == t


def test_options_are_declared_and_typed():
    import inspect
    wanted = {"batch", "seq", "layers", "width", "heads", "kv_heads", "vocab"}
    for model in NEW:
        entry = MODELS.entry(model)
        declared = entry.info["options"]
        assert wanted <= set(declared), model
        assert ({"experts", "shared_experts", "top_k", "moe_ff"} <= set(declared)) == \
            (model in MOE), model
        params = inspect.signature(entry.obj).parameters
        assert {k: p.default for k, p in params.items()} == declared


def test_mixtral_sizes_experts_by_moe_ff_over_ff_and_adds_shared_experts():
    e, one = 4096, {"layers": 1}

    def expert_f(g):
        return {d.name: d.size for d in g.op("layers0.moe.experts.gate").dims}["f"]

    assert expert_f(pase.load_graph("mixtral-8x7b", **one)) == 14336
    assert expert_f(pase.load_graph("mixtral-8x7b", ff=1000, **one)) == 1000
    assert expert_f(pase.load_graph("mixtral-8x7b", moe_ff=512, **one)) == 512
    assert expert_f(pase.load_graph("mixtral-8x7b", ff=1000, moe_ff=512, **one)) == 512
    base = parameters(pase.load_graph("mixtral-8x7b", **one))
    shared = parameters(pase.load_graph("mixtral-8x7b", shared_experts=2, **one))
    assert shared - base == 2 * 3 * e * 14336


def test_gpt_oss_alternates_a_sliding_window_with_full_attention():
    def windows(**options):
        g = pase.load_graph("gpt-oss-20b", layers=4, **options)
        return [op.attrs.get("window", 0) for op in g.ops if op.name.endswith(".attn.softmax")]

    assert windows() == [128, 0, 128, 0]
    assert windows(window=64) == [64, 0, 64, 0]
    assert windows(window=0) == [0, 0, 0, 0]


def test_qwen3_norms_q_and_k_over_the_head_dim():
    g = pase.load_graph("qwen3-30b-a3b", layers=1)
    for name in ("layers0.attn.q_norm", "layers0.attn.k_norm"):
        op = g.op(name)
        assert op.kind == "Norm" and op.attrs["rms"] and [w.shape for w in op.weights] == [(128,)]
    assert g.op("layers0.attn.rotary_q").inputs[0].source[0] == "layers0.attn.q_norm"


def test_nemotron_mlp_is_squared_relu_not_gated():
    g = pase.load_graph("nemotron4-15b", layers=1)
    fc1 = g.op("layers0.mlp.fc1")
    assert fc1.attrs["act"] == "relu2" and fc1.attrs["pw"] == 2
    assert not any(op.name.endswith(".mlp.gate") for op in g.ops)
    assert len(g.op("layers0.attn_norm").weights) == 2  # LayerNorm: scale and shift


def test_softmax_window_needs_causal_and_is_an_integer():
    b = GraphBuilder("w")
    s = b.input((2, 8, 8), names=("b", "l", "m"))
    assert b.softmax(s, axis=2, causal=True, window=4, name="ok") is not None
    assert b.ops[-1].attrs == {"axis": 2, "causal": True, "window": 4}
    with pytest.raises(GraphError, match="window: 4 without causal: true"):
        b.softmax(s, axis=2, window=4, name="bad")
    with pytest.raises(GraphError, match="attribute 'window' is -1; allowed: an integer >= 0"):
        b.softmax(s, axis=2, causal=True, window=-1, name="negative")


def test_the_jax_exporter_masks_the_window():
    if os.environ.get("CI") == "true":  # every extra is installed under CI: jax must be there
        import jax.numpy as jnp
    else:
        jnp = pytest.importorskip("jax.numpy")
    from pase.export.jax_runtime import HEADER, OPS
    scope: dict = {}
    exec(HEADER + OPS, scope)
    p = scope["softmax"](jnp.zeros((4, 4)), axis=1, masked=True, window=2)
    kept = (p > 0).astype(int).tolist()
    assert kept == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    assert scope["ACTS"]["relu2"](jnp.array([-2.0, 3.0])).tolist() == [0.0, 9.0]


@pytest.mark.parametrize("model", NEW)
def test_evaluate_prices_a_layout_of_each(model, capsys):
    layout = "tp=1,dp=8,ep=2" if model in MOE else "tp=2,dp=4"
    assert main(["evaluate", model, "-p", "8", "--cluster", "h100-sxm", "--layout", layout,
                 "--micro-batch", "1", "--global-batch", "8", "--model-option", "layers=2",
                 "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["step_seconds"] > 0 and 0 < got["mfu"] < 1


def test_pase_models_lists_them(capsys):
    assert main(["models"]) == 0
    listed = {line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert set(NEW) <= listed

"""DeepSeek-V3 (and Kimi K2 by options), Nemotron 3 Nano and Super: parameter counts from
hand arithmetic on the published configs, option resizing, one-line errors, the splits
tp and cp make, and `pase evaluate` on each.

Sources of the numbers (the configs' ``config.json`` on Hugging Face):

- DeepSeek-V3 (deepseek-ai/DeepSeek-V3): hidden 7168, 61 layers, 128 heads, q_lora_rank
  1536, kv_lora_rank 512, qk_nope/rope/v head dims 128/64/128, intermediate 18432,
  first_k_dense_replace 3, 256 routed + 1 shared experts of 2048, top 8, vocab 129280.
  Published: 671B main-model parameters (685B with the 14B multi-token-prediction
  module), 37B activated.
- Kimi K2 (moonshotai/Kimi-K2-Instruct): the same with 64 heads, 384 experts,
  first_k_dense_replace 1, vocab 163840; published "1.04T" total, 32B activated.
- Nemotron 3 Nano (nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16): hidden 2688, pattern
  below, mamba 64 heads x 64, ssm_state_size 128, n_groups 8, conv_kernel 4, chunk 128;
  32 heads x 128, 2 kv heads; 128 experts of 1856 top 6, one shared of 3712; vocab
  131072. Its safetensors index's total_parameters: 31,577,937,344; the model card: 3.2B
  active (3.6B with embeddings).
- Nemotron 3 Super (nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16): hidden 4096, pattern
  below, mamba 128 heads x 64 (state 128, 8 groups), 512 experts of 2688 in a latent of
  1024, top 22, one shared of 5376. Its BF16 weights total 123,611,012,096, of which the
  multi-token-prediction block holds 2,942,324,736.

The routers' score-correction biases are buffers (not trained by gradient), left out.
"""
from __future__ import annotations

import json
import math

import pytest

from pase.api import load_graph
from pase.cli import main
from pase.counts import counts
from pase.perf import make_layout
from pase.perf.layout import op_splits

NANO = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
SUPER = "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME"


# -- hand arithmetic -------------------------------------------------------------------------

def _deepseek(layers, e=7168, heads=128, ql=1536, kl=512, nope=128, rope=64, v=128, ff=18432,
              dense=3, mff=2048, experts=256, shared=1, vocab=129280, top_k=None):
    """(total, active): per layer attention + 2 norms, then a dense or an MoE MLP."""
    attn = e * ql + ql + ql * heads * (nope + rope) + e * (kl + rope) + kl \
        + kl * heads * (nope + v) + heads * v * e
    expert = 3 * e * mff
    moe = e * experts + experts * expert + shared * expert
    total = 2 * vocab * e + e + layers * (attn + 2 * e) + dense * 3 * e * ff + (layers - dense) * moe
    active = total - (layers - dense) * (experts - top_k) * expert if top_k else None
    return total, active


def _nemotron(pattern, e, mamba_heads, head_dim=64, groups=8, state=128, kernel=4, heads=32,
              kv=2, d=128, experts=128, mff=1856, sff=3712, latent=None, top_k=6, vocab=131072):
    """(total, active): per letter a norm plus a Mamba-2 mixer, attention or an MoE."""
    inner, conv = mamba_heads * head_dim, mamba_heads * head_dim + 2 * groups * state
    mamba = e * (2 * inner + 2 * groups * state + mamba_heads) + conv * (kernel + 1) \
        + 3 * mamba_heads + inner + inner * e
    attn = e * heads * d + 2 * e * kv * d + heads * d * e
    width = latent or e
    expert = 2 * width * mff
    moe = e * experts + experts * expert + 2 * e * sff + (2 * e * latent if latent else 0)
    size = {"M": mamba, "*": attn, "E": moe}
    total = 2 * vocab * e + e + sum(size[c] + e for c in pattern)
    return total, total - pattern.count("E") * (experts - top_k) * expert


def _active(graph, experts: int, top_k: int) -> float:
    """Parameters a token uses: the routed experts' at top_k / experts."""
    share = top_k / experts
    return sum(o.parameters * (share if ".experts." in o.name else 1.0) for o in counts(graph).ops)


# -- parameter counts ------------------------------------------------------------------------

@pytest.mark.parametrize("layers", [4, 5])
def test_deepseek_v3_layers_count_as_the_config_says(layers):
    g = load_graph("deepseek-v3", layers=layers)
    total, active = _deepseek(layers, top_k=8)
    assert counts(g).parameters == total
    assert _active(g, 256, 8) == pytest.approx(active, rel=1e-12)


def test_deepseek_v3_is_671b_with_37b_active():
    total, active = _deepseek(61, top_k=8)
    assert total == 671_026_404_352  # "671B" main model (no multi-token prediction)
    assert abs(total / 671e9 - 1) < 1e-3
    assert 37e9 <= active < 38e9  # "37B activated"
    # the 61-layer graph is the 4-layer one plus 57 MoE layers, as the 5-layer one adds one
    four, five = (counts(load_graph("deepseek-v3", layers=n)).parameters for n in (4, 5))
    assert four + 57 * (five - four) == total


def test_kimi_k2_is_deepseek_v3_with_other_options():
    k2 = dict(heads=64, experts=384, dense_layers=1, vocab=163840)
    assert counts(load_graph("deepseek-v3", layers=2, **k2)).parameters == \
        _deepseek(2, heads=64, experts=384, dense=1, vocab=163840)[0]
    total, active = _deepseek(61, heads=64, experts=384, dense=1, vocab=163840, top_k=8)
    assert total == 1_026_408_209_408
    assert abs(total / 1.04e12 - 1) < 0.02  # published "1.04T"
    assert 32e9 <= active < 33.5e9  # "32B activated"


@pytest.mark.parametrize("model, layers, pattern, sizes, experts, top_k", [
    ("nemotron-3-nano", 6, "MEMEM*", dict(e=2688, mamba_heads=64), 128, 6),
    ("nemotron-3-super", 8, "MEMEMEM*", dict(e=4096, mamba_heads=128, experts=512, mff=2688,
                                             sff=5376, latent=1024, top_k=22), 512, 22),
])
def test_nemotron_layers_count_as_the_config_says(model, layers, pattern, sizes, experts, top_k):
    g = load_graph(model, layers=layers)
    total, active = _nemotron(pattern, **sizes)
    assert counts(g).parameters == total
    assert _active(g, experts, top_k) == pytest.approx(active, rel=1e-12)


def test_nemotron_3_nano_totals():
    assert (NANO.count("M"), NANO.count("*"), NANO.count("E")) == (23, 6, 23)
    total, active = _nemotron(NANO, e=2688, mamba_heads=64)
    assert total == 31_577_937_344  # the checkpoint index's total_parameters
    assert abs(active - 3.6e9) < 0.05e9  # "3.6B including embeddings"
    assert abs(active - 131072 * 2688 - 3.2e9) < 0.05e9  # "3.2B" without the input embedding


def test_nemotron_3_super_totals():
    assert (len(SUPER), SUPER.count("M"), SUPER.count("*"), SUPER.count("E")) == (88, 40, 8, 40)
    total, active = _nemotron(SUPER, e=4096, mamba_heads=128, experts=512, mff=2688, sff=5376,
                              latent=1024, top_k=22)
    assert total == 123_611_012_096 - 2_942_324_736  # the weights less the MTP block
    assert 12e9 < active < 13e9  # "A12B"


@pytest.mark.slow
@pytest.mark.parametrize("model, total", [("deepseek-v3", 671_026_404_352),
                                          ("nemotron-3-nano", 31_577_937_344),
                                          ("nemotron-3-super", 120_668_687_360)])
def test_the_full_models(model, total):
    assert counts(load_graph(model)).parameters == total


# -- options -----------------------------------------------------------------------------

def _kinds(graph) -> str:
    """The layer letters a graph holds, from its op names."""
    names = {op.name for op in graph.ops}
    out = ""
    for i in range(len(names)):
        p = f"layers{i}"
        if f"{p}.mixer.out_proj" in names:
            out += "M"
        elif f"{p}.attn.out" in names:
            out += "*"
        elif f"{p}.moe.router" in names:
            out += "E"
        else:
            return out
    return out


@pytest.mark.parametrize("layers, want", [(3, "MEM"), (52, NANO), (60, NANO + NANO[:8])])
def test_layers_take_the_published_pattern_repeated(layers, want):
    assert _kinds(load_graph("nemotron-3-nano", layers=layers)) == want


def test_options_resize():
    small = dict(width=1024, heads=16, kv_heads=4, head_dim=64, mamba_heads=32, groups=4,
                 state=64, experts=16, top_k=4, moe_ff=512, shared_ff=1024, vocab=32000)
    g = load_graph("nemotron-3-nano", layers=6, seq=1024, **small)
    assert counts(g).parameters == _nemotron(
        "MEMEM*", e=1024, mamba_heads=32, groups=4, state=64, heads=16, kv=4, d=64, experts=16,
        mff=512, sff=1024, top_k=4, vocab=32000)[0]
    two = load_graph("nemotron-3-nano", layers=2, shared_experts=2)
    assert counts(two).parameters - counts(load_graph("nemotron-3-nano", layers=2)).parameters \
        == 2 * 2688 * 3712  # a second shared expert of shared_ff
    ds = load_graph("deepseek-v3", layers=2, dense_layers=1, q_lora_rank=768, kv_lora_rank=256,
                    shared_experts=2, ff=1024)
    assert counts(ds).parameters == _deepseek(2, ql=768, kl=256, dense=1, shared=2, ff=1024)[0]


# -- what tp and cp split (Megatron-LM's splits) -------------------------------------------

def _splits(graph, layout: str, devices: int) -> dict[str, dict[str, int]]:
    lay = make_layout(layout, devices=devices, micro_batch=1, global_batch=devices)
    return {op.name: {d.name: s for d, s in zip(op.dims, op_splits(op, lay)) if s > 1}
            for op in graph.ops}


def test_tp_splits_mla_heads_and_keeps_the_latents_whole():
    s = _splits(load_graph("deepseek-v3", layers=1, dense_layers=1, batch=1), "tp=2", 2)
    for name in ("q_a_proj", "kv_a_proj", "k_rope_proj", "q_a_norm", "kv_a_norm"):
        assert s[f"layers0.attn.{name}"] == {}, name  # Megatron's duplicated down-projections
    for name in ("q_b_proj", "kv_b_proj.k", "kv_b_proj.v", "k", "scores", "context", "o_proj"):
        assert s[f"layers0.attn.{name}"] == {"h": 2}, name


def test_tp_splits_mamba_groups_and_cp_its_chunks():
    g = load_graph("nemotron-3-nano", layers=1, batch=1)
    s = _splits(g, "tp=2", 2)
    for name in ("in_proj.x", "in_proj.B", "conv_b", "scores", "diag", "chunk_states", "gate"):
        assert s[f"layers0.mixer.{name}"] == {"g": 2}, name
    assert s["layers0.mixer.norm"] == s["layers0.mixer.out_proj"] == {"i": 2}
    s = _splits(g, "cp=2", 2)
    for name in ("in_proj.x", "scores", "diag", "state_passing", "out_proj"):
        assert s[f"layers0.mixer.{name}"] == {"l": 2}, name


# -- the command line ----------------------------------------------------------------------

def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_pase_models_lists_them(capsys):
    code, out, _ = _run(capsys, "models")
    assert code == 0
    for name in ("deepseek-v3", "nemotron-3-nano", "nemotron-3-super"):
        assert name in out


@pytest.mark.parametrize("model, layers", [("deepseek-v3", 4), ("nemotron-3-nano", 6),
                                           ("nemotron-3-super", 8)])
def test_evaluate_prices_a_step(capsys, model, layers):
    code, out, err = _run(capsys, "evaluate", model, "-p", 8, "--cluster", "h100-sxm", "--layout",
                          "tp=2,dp=4,ep=4", "--micro-batch", 1, "--global-batch", 8,
                          "--model-option", f"layers={layers}", "--format", "json")
    assert code == 0, err
    result = json.loads(out)
    assert math.isfinite(result["step_seconds"]) and result["step_seconds"] > 0
    assert 0 < result["mfu"] <= 1


@pytest.mark.parametrize("model, layers, layout, devices, named", [
    ("nemotron-3-nano", 6, "tp=4,dp=2", 8, "op 'layers5.attn.qkv' dim 'g' has size 2"),
    ("nemotron-3-nano", 4, "tp=16", 16, "op 'layers0.mixer.in_proj.z' dim 'g' has size 8"),
])
def test_tp_must_divide_kv_heads_and_mamba_groups(capsys, model, layers, layout, devices, named):
    code, out, err = _run(capsys, "evaluate", model, "-p", devices, "--cluster", "h100-sxm",
                          "--layout", layout, "--micro-batch", 1, "--global-batch", 8,
                          "--model-option", f"layers={layers}")
    assert code == 2 and out == "" and err.count("\n") == 1 and named in err

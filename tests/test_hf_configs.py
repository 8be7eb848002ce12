"""A Hugging Face config.json is a model (graphs/hf_config.py).

Each family's parameter count is checked against what transformers builds from the same
config on the meta device (nothing allocated, nothing downloaded): small configs with
every structural feature on, the published configs at their widths with few layers, and
(``-m slow``) the published configs whole. The published totals are the model cards' /
safetensors' figures, typed in. gpt-oss is short by its attention sinks, one logit per
head and layer, which the graph does not hold (graphs/gpt_oss.py).
"""
from __future__ import annotations

import json
import logging

import pytest

import pase
from pase.api import load_graph
from pase.cli import main
from pase.counts import parameters
from pase.errors import GraphError, OptionError, TooLargeError, UnknownNameError

torch = pytest.importorskip("torch", reason="torch not installed (the models extra)")
transformers = pytest.importorskip("transformers",
                                   reason="transformers not installed (the models extra)")
logging.getLogger("transformers").setLevel(logging.ERROR)  # pad ids past a tiny vocab

BASE = {"num_hidden_layers": 3, "hidden_size": 48, "intermediate_size": 80,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 97,
        "max_position_embeddings": 256, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
# Small configs, every structural feature of the family on (head sizes unlike
# hidden / heads, biases, tied heads, windows, dense layers in an MoE, shared experts).
SMALL = {
    "llama": {"attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True,
              "head_dim": 16},
    "mistral": {"sliding_window": 32, "head_dim": 16},
    "qwen2": {"tie_word_embeddings": True, "use_sliding_window": True, "sliding_window": 32,
              "max_window_layers": 1},
    "qwen3": {"head_dim": 16, "attention_bias": True, "tie_word_embeddings": True},
    "gemma2": {"head_dim": 16, "sliding_window": 32},
    "gemma3_text": {"head_dim": 16, "sliding_window": 32, "sliding_window_pattern": 2},
    "phi3": {"sliding_window": 31},
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2, "head_dim": 16,
                "sliding_window": 32},
    "qwen3_moe": {"head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
                  "moe_intermediate_size": 24, "decoder_sparse_step": 2, "mlp_only_layers": [0]},
    "gpt_oss": {"head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2,
                "sliding_window": 8},
    "deepseek_v3": {"n_routed_experts": 4, "n_shared_experts": 2, "num_experts_per_tok": 2,
                    "moe_intermediate_size": 24, "first_k_dense_replace": 1, "q_lora_rank": 12,
                    "kv_lora_rank": 10, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
                    "v_head_dim": 6, "n_group": 1, "topk_group": 1},
}
REAL = {
    "Llama-3.1-8B": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
        "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
        "max_position_embeddings": 131072, "mlp_bias": False, "num_attention_heads": 32,
        "num_hidden_layers": 32, "num_key_value_heads": 8, "tie_word_embeddings": False,
        "vocab_size": 128256},
    "Mixtral-8x7B-v0.1": {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_act": "silu",
        "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768,
        "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
        "num_key_value_heads": 8, "num_local_experts": 8, "sliding_window": None,
        "tie_word_embeddings": False, "vocab_size": 32000},
    "Qwen3-30B-A3B": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "attention_bias": False, "decoder_sparse_step": 1, "head_dim": 128, "hidden_act": "silu",
        "hidden_size": 2048, "intermediate_size": 6144, "max_position_embeddings": 40960,
        "max_window_layers": 48, "mlp_only_layers": [], "moe_intermediate_size": 768,
        "norm_topk_prob": True, "num_attention_heads": 32, "num_experts": 128,
        "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
        "sliding_window": None, "tie_word_embeddings": False, "use_sliding_window": False,
        "vocab_size": 151936},
    "DeepSeek-V3": {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "attention_bias": False, "first_k_dense_replace": 3, "hidden_act": "silu",
        "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512,
        "max_position_embeddings": 163840, "moe_intermediate_size": 2048, "n_group": 8,
        "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": True,
        "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
        "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "tie_word_embeddings": False,
        "topk_group": 4, "v_head_dim": 128, "vocab_size": 129280},
    "gpt-oss-20b": {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True,
        "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880,
        "intermediate_size": 2880, "layer_types": ["sliding_attention", "full_attention"] * 12,
        "max_position_embeddings": 131072, "num_attention_heads": 64, "num_experts_per_tok": 4,
        "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
        "sliding_window": 128, "tie_word_embeddings": False, "vocab_size": 201088},
    "gemma-2-9b": {
        "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "attention_bias": False,
        "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3584,
        "intermediate_size": 14336, "max_position_embeddings": 8192, "num_attention_heads": 16,
        "num_hidden_layers": 42, "num_key_value_heads": 8, "query_pre_attn_scalar": 256,
        "sliding_window": 4096, "vocab_size": 256000},
    "Phi-3-mini-4k-instruct": {
        "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_act": "silu",
        "hidden_size": 3072, "intermediate_size": 8192, "max_position_embeddings": 4096,
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
        "sliding_window": 2047, "tie_word_embeddings": False, "vocab_size": 32064},
}
# Published totals (safetensors / model cards); gpt-oss-20b's includes its 1,536 sinks.
PUBLISHED = {"Llama-3.1-8B": 8_030_261_248, "Mixtral-8x7B-v0.1": 46_702_792_704,
             "Qwen3-30B-A3B": 30_532_122_624, "DeepSeek-V3": 671_026_404_352,
             "gpt-oss-20b": 20_914_757_184, "gemma-2-9b": 9_241_705_984,
             "Phi-3-mini-4k-instruct": 3_821_079_552}


def sinks(cfg: dict, layers: int | None = None) -> int:
    """gpt-oss's attention sinks (one per head and layer), not in the graph."""
    if cfg["model_type"] != "gpt_oss":
        return 0
    return (layers or cfg["num_hidden_layers"]) * cfg["num_attention_heads"]


def hf_parameters(cfg: dict) -> int:
    """What transformers builds from ``cfg``, on the meta device."""
    fields = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures")}
    config = transformers.CONFIG_MAPPING[cfg["model_type"]](**fields)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def write(folder, cfg: dict, name: str = "config.json"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(cfg))
    return folder / name


def pase_parameters(tmp_path, cfg: dict, **options) -> int:
    return parameters(load_graph(str(write(tmp_path / "model", cfg).parent), **options))


def small(family: str, **more) -> dict:
    return {"model_type": family, **BASE, **SMALL[family], **more}


@pytest.mark.parametrize("family", sorted(SMALL))
def test_a_small_config_counts_as_transformers_builds_it(family, tmp_path):
    cfg = small(family)
    assert pase_parameters(tmp_path, cfg) == hf_parameters(cfg) - sinks(cfg)


# The fields a config may leave out (Hugging Face's defaults): kv heads where one per head,
# head_dim where hidden / heads, tie_word_embeddings and attention_bias (Gemma ties,
# gpt-oss biases).
@pytest.mark.parametrize("family", sorted(SMALL))
def test_left_out_fields_take_the_defaults_transformers_gives(family, tmp_path):
    cfg = small(family)
    for key in ("tie_word_embeddings", "attention_bias", "mlp_bias"):
        cfg.pop(key, None)
    if family in ("llama", "phi3"):  # the others' default kv heads is a constant: required
        cfg.pop("num_key_value_heads")
    if family not in ("gemma2", "gemma3_text", "gpt_oss", "qwen3"):  # a fixed default: required
        cfg.pop("head_dim", None)
    assert pase_parameters(tmp_path, cfg) == hf_parameters(cfg) - sinks(cfg)


def _few_layers(cfg: dict) -> dict:
    """The config at 2 layers (DeepSeek: its dense ones and one MoE layer)."""
    layers = min(cfg["num_hidden_layers"], cfg.get("first_k_dense_replace", 1) + 1)
    out = dict(cfg, num_hidden_layers=layers)
    if "layer_types" in cfg:
        out["layer_types"] = cfg["layer_types"][:layers]
    return out


@pytest.mark.parametrize("name", sorted(REAL))
def test_a_published_config_at_few_layers_counts_as_transformers_builds_it(name, tmp_path):
    cfg = _few_layers(REAL[name])
    assert pase_parameters(tmp_path, cfg) == hf_parameters(cfg) - sinks(cfg)


@pytest.mark.parametrize("name", sorted(REAL))
def test_a_published_config_counts_its_published_total(name, tmp_path):
    assert pase_parameters(tmp_path, REAL[name]) == PUBLISHED[name] - sinks(REAL[name])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REAL))
def test_a_published_config_counts_as_transformers_builds_it_whole(name, tmp_path):
    cfg = REAL[name]
    assert hf_parameters(cfg) == PUBLISHED[name]
    assert pase_parameters(tmp_path, cfg) == PUBLISHED[name] - sinks(cfg)


# Qwen3-30B-A3B has 4 kv heads: tp=8 cannot split them, so tp=4 with 2 data-parallel copies.
LAYOUTS = {"Qwen3-30B-A3B": "tp=4,dp=2"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow)
                                  if n == "DeepSeek-V3" else n for n in sorted(REAL)])
def test_a_published_config_prices_on_eight_h100s(name, tmp_path, capsys):
    folder = write(tmp_path / name, REAL[name]).parent
    assert main(["evaluate", str(folder), "-p", "8", "--cluster", "h100-sxm", "--layout",
                 LAYOUTS.get(name, "tp=8"), "--micro-batch", "1", "--global-batch", "8",
                 "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["step_seconds"] > 0 and data["memory_bytes"] > 0


def test_the_sequence_is_4096_or_the_context_when_shorter(tmp_path):
    def seq(cfg, **options):
        g = load_graph(str(write(tmp_path / "m", cfg).parent), **options)
        return {d.name: d.size for d in g.op("embed_tokens").dims}["b"]  # a b d c: batch seq

    assert seq(REAL["Llama-3.1-8B"] | {"num_hidden_layers": 1}) == 4096  # context 131072
    assert seq(small("llama", max_position_embeddings=256)) == 256
    assert seq(small("llama"), seq=64, batch=2) == 64


def test_a_config_file_its_folder_and_a_renamed_json_are_one_model(tmp_path):
    cfg = small("mixtral")
    folder = write(tmp_path / "Tiny-MoE", cfg).parent
    other = write(tmp_path, cfg, "tiny.json")
    graphs = [load_graph(str(p), seq=16) for p in (folder, folder / "config.json", other)]
    assert graphs[0].name == graphs[1].name == "Tiny-MoE" and graphs[2].name == "tiny"
    assert len({parameters(g) for g in graphs}) == 1


def test_the_api_solves_a_config(tmp_path):
    folder = write(tmp_path / "m", small("qwen3", num_hidden_layers=1)).parent
    strategy = pase.solve(str(folder), devices=4, model_options={"seq": 16})
    assert strategy.total_cost > 0


def test_a_graph_json_file_is_still_a_graph(tmp_path):
    path = tmp_path / "g.json"
    path.write_text(json.dumps(load_graph("mlp").to_dict()))
    assert load_graph(str(path)).name == load_graph("mlp").name


def test_the_ops_a_layer_stay_under_the_bound_the_size_check_uses(tmp_path):
    from pase.graphs.hf_config import OPS_PER_LAYER

    for family in SMALL:
        one, two = (len(load_graph(str(write(tmp_path / family / str(n), small(
            family, num_hidden_layers=n, first_k_dense_replace=0, mlp_only_layers=[])).parent),
            seq=16).ops) for n in (1, 2))
        assert 0 < two - one < OPS_PER_LAYER, family


def _error(tmp_path, capsys, cfg_text: str, *options: str) -> str:
    (tmp_path / "m").mkdir(exist_ok=True)
    (tmp_path / "m" / "config.json").write_text(cfg_text)
    assert main(["inspect", str(tmp_path / "m"), "-p", "8", *options]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_an_unknown_architecture_is_one_line_naming_it_and_the_known(tmp_path, capsys):
    err = _error(tmp_path, capsys, json.dumps({"model_type": "bert",
                                               "architectures": ["BertForMaskedLM"]}))
    assert "BertForMaskedLM" in err and "LlamaForCausalLM" in err and "DeepseekV3" in err
    with pytest.raises(UnknownNameError, match="known: DeepseekV3ForCausalLM"):
        load_graph(str(tmp_path / "m"))


@pytest.mark.parametrize("edit, words", [
    (lambda c: c.pop("hidden_size"), "field 'hidden_size' is missing"),
    (lambda c: c.pop("num_key_value_heads"), "field 'num_key_value_heads' is missing"),
    (lambda c: c.update(num_hidden_layers="3"), "field 'num_hidden_layers' must be an integer"),
    (lambda c: c.update(tie_word_embeddings="no"), "field 'tie_word_embeddings' must be true"),
    (lambda c: c.update(hidden_act="mish"), "field 'hidden_act' is 'mish'"),
    (lambda c: c.update(layer_types=["full_attention"]), "field 'layer_types' must list 3"),
    (lambda c: c.update(num_attention_heads=10), "'num_attention_heads' (10) must divide"),
    (lambda c: c.update(num_key_value_heads=3), "'num_key_value_heads' (3) must divide"),
    (lambda c: c.pop("model_type"), "field 'model_type' is missing"),
])
def test_a_malformed_config_is_one_line_naming_the_file_and_field(edit, words, tmp_path, capsys):
    cfg = small("mistral")
    cfg.pop("head_dim")
    edit(cfg)
    err = _error(tmp_path, capsys, json.dumps(cfg))
    assert words in err and "config.json" in err


def test_a_file_that_is_not_json_is_one_line(tmp_path, capsys):
    err = _error(tmp_path, capsys, '{"model_type": "llama", "hidden_size": 64')
    assert "config.json" in err and "is not valid JSON" in err
    with pytest.raises(GraphError, match="holds no config.json"):
        load_graph(str((tmp_path / "empty").mkdir() or tmp_path / "empty"))


def test_options_are_checked_and_a_huge_config_is_refused(tmp_path, capsys):
    err = _error(tmp_path, capsys, json.dumps(small("llama")), "--model-option", "experts=2")
    assert "no option 'experts'" in err and "allowed: batch, seq" in err
    folder = write(tmp_path / "moe", small("mixtral")).parent
    with pytest.raises(OptionError, match="capacity_factor"):
        load_graph(str(folder), capacity_factor=-1.0)
    write(tmp_path / "huge", small("llama", num_hidden_layers=10**6))
    with pytest.raises(TooLargeError, match="num_hidden_layers 1000000"):
        load_graph(str(tmp_path / "huge"))


def test_a_layout_search_rebuilds_a_config_at_each_micro_batch(tmp_path):
    folder = write(tmp_path / "m", small("llama", num_hidden_layers=1)).parent
    result = pase.api.search_layouts(str(folder), 4, cluster="h100-sxm", global_batch=8,
                                     model_options={"seq": 64})
    assert len({e.layout.micro_batch for e in result.ranked}) > 1  # rebuilt at each size


def test_the_api_routes_a_configs_options_and_a_pipeline_splits_its_batch(tmp_path):
    folder = str(write(tmp_path / "m", small("llama", num_hidden_layers=1)).parent)
    by_keyword = pase.solve(folder, devices=2, seq=16, batch=4)
    by_option = pase.solve(folder, devices=2, model_options={"seq": 16, "batch": 4})
    assert by_keyword.total_cost == by_option.total_cost
    from pase.pipeline import solve_pipeline

    plan = solve_pipeline(folder, 2, batch=4, microbatches=2, model_options={"seq": 16},
                          max_stages=1)
    assert plan.microbatches == 2


def _windows(tmp_path, cfg: dict) -> list[int]:
    g = load_graph(str(write(tmp_path / "w", cfg).parent), seq=16)
    return [op.attrs.get("window", 0) for op in g.ops if op.kind == "Softmax"
            and op.name.endswith("attn.softmax")]


def test_windows_follow_the_config_and_the_familys_defaults(tmp_path):
    mistral = small("mistral")
    assert _windows(tmp_path, mistral) == [32] * 3
    assert _windows(tmp_path, mistral | {"sliding_window": None}) == [0] * 3  # v0.3: none
    del mistral["sliding_window"]  # left out: Hugging Face's 4096
    assert _windows(tmp_path, mistral) == [4096] * 3
    assert _windows(tmp_path, small("gemma2")) == [32, 0, 32]
    assert _windows(tmp_path, small("gemma3_text")) == [32, 0, 32]  # a pattern of 2
    assert _windows(tmp_path, small("qwen2")) == [0, 32, 32]  # from max_window_layers 1
    assert _windows(tmp_path, small("llama")) == [0] * 3
    types = ["full_attention", "sliding_attention", "full_attention"]
    assert _windows(tmp_path, small("gpt_oss", layer_types=types)) == [0, 8, 0]


def test_deepseek_without_a_query_latent_counts_as_transformers_builds_it(tmp_path):
    cfg = small("deepseek_v3", q_lora_rank=None)
    assert pase_parameters(tmp_path, cfg) == hf_parameters(cfg)
    del cfg["q_lora_rank"]  # Hugging Face's default is 1536: a size, so required
    with pytest.raises(GraphError, match="field 'q_lora_rank' is missing"):
        pase_parameters(tmp_path, cfg)


@pytest.mark.parametrize("family", sorted(SMALL))
def test_windows_are_the_layer_types_transformers_derives(family, tmp_path):
    cfg = small(family)
    fields = {k: v for k, v in cfg.items() if k != "model_type"}
    config = transformers.CONFIG_MAPPING[family](**fields)
    types = getattr(config, "layer_types", None)
    window = getattr(config, "sliding_window", None) or 0
    if types is None:  # Mistral, Mixtral, Phi-3: every layer (Llama, DeepSeek: none)
        types = ["sliding_attention"] * cfg["num_hidden_layers"]
    expected = [window if t == "sliding_attention" else 0 for t in types]
    assert _windows(tmp_path, cfg) == expected

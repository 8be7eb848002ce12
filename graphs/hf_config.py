"""A Hugging Face ``config.json`` as a model: ``pase solve path/to/config.json`` (or the
folder holding it) builds the zoo family's graph at the config's sizes. Nothing is
downloaded and transformers is not imported: the file is read as JSON.

The family comes from ``model_type`` (else ``architectures[0]``); :data:`FAMILIES` lists
those read. Every size comes from the config's fields (``hidden_size``,
``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``, ``head_dim``,
``intermediate_size``, ``vocab_size``, the MoE and MLA fields...). A field left out takes
Hugging Face's default where that default follows from the others (``num_key_value_heads``:
one per head for Llama and Phi-3; ``head_dim``: ``hidden_size / num_attention_heads``) or
is the family's switch (``tie_word_embeddings``, ``attention_bias``, ``mlp_bias``); a size
whose default is a constant of the family (Qwen3's ``head_dim`` 128) is required. Windows
per layer come from ``layer_types`` and ``sliding_window``, else the family's rule.

Two sizes are not the model's but the step's, model options as for the zoo: ``batch``
(default 8) and ``seq``, the sequence trained on, by default 4096 or
``max_position_embeddings`` when smaller: a config's context (131072 for Llama 3.1) is
what the model can read, not the length it is pre-trained at. MoE families take
``capacity_factor`` (default 1.0).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from pase.errors import GraphError, TooLargeError, UnknownNameError
from pase.graphs import deepseek, moe
from pase.graphs.llama import check_heads, llama
from pase.graphs.zoo import make_preset
from pase.ir import Graph
from pase.options import coerce_options
from pase.schema import MAX_SIZE
from pase.sizes import MAX_GRAPH_OPS
from pase.strictjson import loads

CONFIG = "config.json"
MAX_CONFIG_BYTES = 2**20  # published configs are a few kB
DEFAULT_BATCH = 8
DEFAULT_SEQ = 4096
# No family here builds more ops a layer (DeepSeek-V3's MLA + MoE: about 34), so a config
# with more than MAX_GRAPH_OPS / OPS_PER_LAYER layers is refused before building.
OPS_PER_LAYER = 64
# Hugging Face activation names -> pase's (the tanh GELU and the erf one cost alike).
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_new": "gelu",
               "gelu_pytorch_tanh": "gelu", "gelu_fast": "gelu", "relu": "relu"}
# Hugging Face's sliding_window where a config leaves it out (null: none).
WINDOWS = {"mistral": 4096, "gemma2": 4096, "gemma3_text": 4096, "gpt_oss": 128}
_MISSING = object()


class Fields:
    """A config's fields, read with one-line errors naming the file and the field."""

    def __init__(self, data: dict, label: str):
        self.data, self.label = data, label

    def error(self, key: str, problem: str) -> GraphError:
        return GraphError(f"{self.label}: field {key!r} {problem}")

    def get(self, key: str, default: Any = _MISSING) -> Any:
        value = self.data.get(key)
        if value is None:  # Hugging Face writes null for "not set"
            if default is _MISSING:
                raise self.error(key, "is missing")
            return default
        return value

    def int(self, key: str, default: Any = _MISSING, low: int = 1) -> int:
        value = self.get(key, default)
        if type(value) is not int or not low <= value <= MAX_SIZE:
            raise self.error(key, f"must be an integer >= {low}, got {value!r:.40}")
        return value

    def nullable(self, key: str, absent: Any = _MISSING) -> int:
        """An integer >= 0 where null means none (0): ``sliding_window``, ``q_lora_rank``;
        a field left out is ``absent`` (Hugging Face's default), or required."""
        if self.data.get(key, 0) is None:
            return 0
        return self.int(key, absent if key not in self.data else _MISSING, low=0)

    def bool(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {value!r:.40}")
        return value

    def ints(self, key: str) -> list[int]:
        value = self.get(key, [])
        if not isinstance(value, list) or any(type(v) is not int or v < 0 for v in value):
            raise self.error(key, f"must be a list of layer numbers, got {value!r:.40}")
        return value

    def act(self) -> str:
        key = "hidden_activation" if "hidden_activation" in self.data else "hidden_act"
        value = self.get(key, "silu")
        if value not in ACTIVATIONS:
            raise self.error(key, f"is {value!r:.40}; pase reads {', '.join(ACTIVATIONS)}")
        return ACTIVATIONS[value]

    def head_dim(self, width: int, heads: int, required: bool = False) -> int:
        """``head_dim``, else ``width / heads`` (Hugging Face's rule) unless ``required``."""
        if required or "head_dim" in self.data and self.data["head_dim"] is not None:
            return self.int("head_dim")
        if width % heads:
            raise self.error("num_attention_heads", f"({heads}) must divide hidden_size "
                             f"({width}) when there is no head_dim")
        return width // heads

    def windows(self, layers: int, rule: Callable[[int], bool]) -> tuple[int, ...]:
        """Per layer, the sliding window's keys (0: full attention): ``layer_types`` where
        given, else the family's ``rule(i)``, both only when ``sliding_window`` is set."""
        window = self.nullable("sliding_window", WINDOWS.get(self.data.get("model_type"), 0))
        types = self.data.get("layer_types")
        if types is None:
            return tuple(window if rule(i) else 0 for i in range(layers))
        known = ("full_attention", "sliding_attention")
        if not isinstance(types, list) or len(types) != layers or any(t not in known
                                                                      for t in types):
            raise self.error("layer_types", f"must list {layers} (num_hidden_layers) entries, "
                             f"each {' or '.join(known)}")
        return tuple(window if t == "sliding_attention" else 0 for t in types)


def _decoder(f: Fields, kv_default: bool = False) -> dict:
    """The sizes every family shares; ``kv_default``: no ``num_key_value_heads`` means one
    per head (Llama, Phi-3; the others' Hugging Face default is a constant: required)."""
    width, heads = f.int("hidden_size"), f.int("num_attention_heads")
    kv_heads = f.int("num_key_value_heads", heads if kv_default else _MISSING)
    if heads % kv_heads:
        raise f.error("num_key_value_heads", f"({kv_heads}) must divide num_attention_heads "
                      f"({heads})")
    return {"layers": f.int("num_hidden_layers"), "width": width, "heads": heads,
            "kv_heads": kv_heads, "vocab": f.int("vocab_size")}


def _dense(attn_bias: str, *, tied: bool = False, head_dim_required: bool = False,
           qk_norm: bool = False, sandwich: bool = False, mlp_bias: bool = False,
           kv_default: bool = False,
           window_rule: Callable[[Fields, int], bool] = lambda f, i: True) -> Callable:
    """A reader of a dense Llama-style family. ``attn_bias``: ``"none"`` (never),
    ``"qkv"`` (always, not the output: Qwen2), ``"field"`` (``attention_bias``)."""

    def read(f: Fields) -> tuple[Callable[..., Graph], dict]:
        o = _decoder(f, kv_default)
        biased = attn_bias == "qkv" or attn_bias == "field" and f.bool("attention_bias", False)
        o.update(ff=f.int("intermediate_size"), act=f.act(), qk_norm=qk_norm, sandwich=sandwich,
                 head_dim=f.head_dim(o["width"], o["heads"], head_dim_required),
                 qkv_bias=biased, out_bias=biased and attn_bias == "field",
                 mlp_bias=mlp_bias and f.bool("mlp_bias", False),
                 tied=f.bool("tie_word_embeddings", tied),
                 windows=f.windows(o["layers"], lambda i: window_rule(f, i)))
        return llama, o

    return read


def _qwen_window(f: Fields, i: int) -> bool:
    """Qwen2/3: windows only with ``use_sliding_window``, from layer ``max_window_layers``."""
    return f.bool("use_sliding_window", False) and i >= f.int("max_window_layers", low=0)


def _moe_decoder(f: Fields, o: dict, d_k: int) -> tuple[Callable[..., Graph], dict]:
    check_heads(f.label, o["width"], o["heads"], o["kv_heads"], d_k)
    moe.check_moe(f.label, o["experts"], o["top_k"])
    o.update(d_k=d_k, shared_experts=0)
    return moe.moe_decoder, o


def _mixtral(f: Fields) -> tuple[Callable[..., Graph], dict]:
    o = _decoder(f)
    o.update(experts=f.int("num_local_experts"), top_k=f.int("num_experts_per_tok"),
             moe_ff=f.int("intermediate_size"), tied=f.bool("tie_word_embeddings", False),
             windows=f.windows(o["layers"], lambda i: True))
    return _moe_decoder(f, o, f.head_dim(o["width"], o["heads"]))


def _qwen3_moe(f: Fields) -> tuple[Callable[..., Graph], dict]:
    o = _decoder(f)
    step = f.int("decoder_sparse_step", 1)
    only = set(f.ints("mlp_only_layers"))
    dense = frozenset(i for i in range(o["layers"]) if i in only or (i + 1) % step)
    o.update(experts=f.int("num_experts"), top_k=f.int("num_experts_per_tok"),
             moe_ff=f.int("moe_intermediate_size"), tied=f.bool("tie_word_embeddings", False),
             bias=f.bool("attention_bias", False), qk_norm=True, dense=dense,
             ff=f.int("intermediate_size") if dense else 0,
             windows=f.windows(o["layers"], lambda i: _qwen_window(f, i)))
    if o["bias"]:  # moe_decoder's bias is gpt-oss's: on the router and experts as well
        raise f.error("attention_bias", "true is not modelled for Qwen3-MoE")
    return _moe_decoder(f, o, f.head_dim(o["width"], o["heads"]))


def _gpt_oss(f: Fields) -> tuple[Callable[..., Graph], dict]:
    o = _decoder(f)
    if not f.bool("attention_bias", True):
        raise f.error("attention_bias", "false is not modelled for gpt-oss")
    o.update(experts=f.int("num_local_experts"), top_k=f.int("num_experts_per_tok"),
             moe_ff=f.int("intermediate_size"), tied=f.bool("tie_word_embeddings", False),
             bias=True, windows=f.windows(o["layers"], lambda i: i % 2 == 0))
    return _moe_decoder(f, o, f.head_dim(o["width"], o["heads"], required=True))


def _deepseek_v3(f: Fields) -> tuple[Callable[..., Graph], dict]:
    if f.bool("attention_bias", False):
        raise f.error("attention_bias", "true is not modelled for DeepSeek-V3")
    layers = f.int("num_hidden_layers")
    experts = f.int("n_routed_experts")
    o = {"layers": layers, "width": f.int("hidden_size"), "heads": f.int("num_attention_heads"),
         "q_lora_rank": f.nullable("q_lora_rank"), "kv_lora_rank": f.int("kv_lora_rank"),
         "qk_nope_head_dim": f.int("qk_nope_head_dim"),
         "qk_rope_head_dim": f.int("qk_rope_head_dim"), "v_head_dim": f.int("v_head_dim"),
         "ff": f.int("intermediate_size"), "moe_ff": f.int("moe_intermediate_size"),
         "dense_layers": min(layers, f.int("first_k_dense_replace", low=0)),
         "experts": experts, "shared_experts": f.int("n_shared_experts", low=0),
         "top_k": f.int("num_experts_per_tok"), "vocab": f.int("vocab_size"),
         "tied": f.bool("tie_word_embeddings", False)}
    return deepseek.deepseek, o


# model_type -> (the architecture's class, its reader, whether it is an MoE).
FAMILIES: dict[str, tuple[str, Callable[[Fields], tuple[Callable[..., Graph], dict]], bool]] = {
    "llama": ("LlamaForCausalLM", _dense("field", mlp_bias=True, kv_default=True,
                                         window_rule=lambda f, i: False), False),
    "mistral": ("MistralForCausalLM", _dense("none"), False),
    "qwen2": ("Qwen2ForCausalLM", _dense("qkv", window_rule=_qwen_window), False),
    "qwen3": ("Qwen3ForCausalLM", _dense("field", head_dim_required=True, qk_norm=True,
                                         window_rule=_qwen_window), False),
    "gemma2": ("Gemma2ForCausalLM", _dense("field", tied=True, head_dim_required=True,
                                           sandwich=True, window_rule=lambda f, i: i % 2 == 0),
               False),
    "gemma3_text": ("Gemma3ForCausalLM", _dense(
        "field", tied=True, head_dim_required=True, qk_norm=True, sandwich=True,
        window_rule=lambda f, i: (i + 1) % f.int("sliding_window_pattern", 6) != 0), False),
    "phi3": ("Phi3ForCausalLM", _dense("none", kv_default=True), False),
    "mixtral": ("MixtralForCausalLM", _mixtral, True),
    "qwen3_moe": ("Qwen3MoeForCausalLM", _qwen3_moe, True),
    "gpt_oss": ("GptOssForCausalLM", _gpt_oss, True),
    "deepseek_v3": ("DeepseekV3ForCausalLM", _deepseek_v3, True),
}
_BY_ARCHITECTURE = {arch: key for key, (arch, _, _) in FAMILIES.items()}


def is_hf_config(name: str) -> bool:
    """Whether ``name`` is a folder (not named ``*.json``, unless it holds a config), a file
    named ``config.json``, or a small JSON file with a ``"model_type"`` field (a graph JSON
    file has none)."""
    path = Path(name)
    if path.is_dir():
        return not name.endswith(".json") or (path / CONFIG).is_file()
    if path.name == CONFIG:
        return True
    if not name.endswith(".json") or not path.is_file():
        return False
    try:
        if os.path.getsize(path) > MAX_CONFIG_BYTES:
            return False
        data = loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError, RecursionError):
        return False  # the graph-file reader says what is wrong with it
    return isinstance(data, dict) and "model_type" in data and "ops" not in data


def read_config(name: str) -> tuple[dict, str]:
    """The config's JSON object and the label errors name it by."""
    path = Path(name)
    if path.is_dir():
        if not (path / CONFIG).is_file():
            raise GraphError(f"folder {name!r} holds no {CONFIG} (a Hugging Face model folder "
                             f"does)")
        path = path / CONFIG
    label = f"config {str(path)!r}"
    try:
        if not path.is_file():
            raise GraphError(f"{label} is not a regular file")
        if os.path.getsize(path) > MAX_CONFIG_BYTES:
            raise GraphError(f"{label} is larger than {MAX_CONFIG_BYTES // 2**20} MiB; "
                             f"a model config is a few kB")
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise GraphError(f"cannot read {label}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise GraphError(f"{label} is not UTF-8 text (offset {exc.start})") from None
    try:
        data = loads(text)
    except (ValueError, RecursionError) as exc:
        raise GraphError(f"{label} is not valid JSON: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise GraphError(f"{label} must hold a JSON object, got {type(data).__name__}")
    return data, label


def family(data: dict, label: str) -> str:
    """The key of :data:`FAMILIES` the config is, or a one-line UnknownNameError."""
    kind = data.get("model_type")
    archs = data.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    if kind in FAMILIES:
        return kind
    if arch in _BY_ARCHITECTURE:
        return _BY_ARCHITECTURE[arch]
    if kind is None and arch is None:
        raise GraphError(f"{label}: field 'model_type' is missing (and no 'architectures')")
    shown = f"architecture {arch!r:.60}" if arch is not None else ""
    if kind is not None:
        shown = f"{shown} (model_type {kind!r:.60})" if shown else f"model_type {kind!r:.60}"
    known = ", ".join(f"{a} ({k})" for k, (a, _, _) in sorted(FAMILIES.items()))
    raise UnknownNameError(f"{label}: {shown} is not an architecture pase reads; known: {known}")


def model_function(name: str) -> Callable[..., Graph]:
    """The config at ``name`` as a zoo-style model function: typed keyword options
    ``batch``, ``seq`` (and ``capacity_factor`` for an MoE) and the config's sizes."""
    data, label = read_config(name)
    key = family(data, label)
    arch, reader, is_moe = FAMILIES[key]
    f = Fields(data, label)
    builder, sizes = reader(f)
    if sizes["layers"] * OPS_PER_LAYER > MAX_GRAPH_OPS:
        raise TooLargeError(f"{label}: num_hidden_layers {sizes['layers']} would build about "
                            f"{sizes['layers'] * OPS_PER_LAYER:,} ops; pase builds models of at "
                            f"most {MAX_GRAPH_OPS:,} ops (pase.sizes.MAX_GRAPH_OPS)")
    seq = min(DEFAULT_SEQ, f.int("max_position_embeddings", DEFAULT_SEQ))
    defaults: dict[str, Any] = {"batch": DEFAULT_BATCH, "seq": seq}
    if is_moe:
        defaults["capacity_factor"] = 1.0
    title = _title(Path(name))

    def build(model: str, **step: Any) -> Graph:
        return builder(model, **step, **sizes)

    return make_preset(title, build, defaults, f"{arch} from {label}")


def _title(path: Path) -> str:
    """The graph's name: the model's folder (``Llama-3.1-8B``), else the file's stem."""
    path = path.resolve() if not path.is_absolute() else path
    if path.is_dir():
        return path.name or "model"
    return path.parent.name if path.name == CONFIG and path.parent.name else path.stem


def load(name: str, **model_options: Any) -> Graph:
    """The graph of the Hugging Face config at ``name`` (a file or its folder)."""
    fn = model_function(name)
    return fn(**coerce_options(fn, model_options, f"model {name!r}"))

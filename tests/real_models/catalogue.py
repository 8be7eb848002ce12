"""Real models as their libraries write them, with random weights and small configs.

Each builder returns ``(module, example_args)``. Nothing is downloaded: every
model comes from its library's config class or constructor. Configs are reduced
(two layers, narrower widths, small images) where the full model is slow to
export; the code paths (embeddings, attention, routing, convolutions) are the
library's own. Position tables keep their library's default length, longer than
the example sequence, as real checkpoints have them.

:data:`MODELS` maps a name to its builder; :data:`LIBRARY` to its library.
"""
from __future__ import annotations

import contextlib
import os

import torch

# Every model is built from its config: nothing may reach the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
from torch import nn

# The example inputs' sizes, read when a builder runs (benchmarks/real_models.py sets
# larger ones).
BATCH, SEQ = 2, 32


def _ids(vocab: int, batch: int | None = None, seq: int | None = None) -> torch.Tensor:
    shape = (batch or BATCH, seq or SEQ)
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(0))


class Call(nn.Module):
    """A Hugging Face model called with keyword inputs; returns its first output."""

    def __init__(self, model: nn.Module, *names: str):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *args):
        out = self.model(**dict(zip(self.names, args)), use_cache=False, return_dict=True)
        return out[0]


def _hf(config_cls: str, model_cls: str, *names: str, **config):
    import transformers

    torch.manual_seed(0)
    cfg = getattr(transformers, config_cls)(**config)
    model = getattr(transformers, model_cls)(cfg).eval()
    return Call(model, *(names or ("input_ids",)))


SMALL = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4)


def gpt2():
    m = _hf("GPT2Config", "GPT2LMHeadModel", n_layer=2, n_embd=128, n_head=4)
    return m, (_ids(50257),)


def bert():
    m = _hf("BertConfig", "BertModel", num_hidden_layers=2, **SMALL)
    return m, (_ids(30522),)


def distilbert():
    m = _hf("DistilBertConfig", "DistilBertModel", n_layers=2, dim=128, hidden_dim=256, n_heads=4)
    return m, (_ids(30522),)


def opt():
    m = _hf("OPTConfig", "OPTForCausalLM", num_hidden_layers=2, hidden_size=128, ffn_dim=256,
            num_attention_heads=4, word_embed_proj_dim=128)
    return m, (_ids(50272),)


def llama():
    m = _hf("LlamaConfig", "LlamaForCausalLM", num_hidden_layers=2, num_key_value_heads=2,
            vocab_size=1000, **SMALL)
    return m, (_ids(1000),)


def mistral():
    m = _hf("MistralConfig", "MistralForCausalLM", num_hidden_layers=2, num_key_value_heads=2,
            vocab_size=1000, **SMALL)
    return m, (_ids(1000),)


def qwen2():
    m = _hf("Qwen2Config", "Qwen2ForCausalLM", num_hidden_layers=2, num_key_value_heads=2,
            vocab_size=1000, **SMALL)
    return m, (_ids(1000),)


def gemma():
    m = _hf("GemmaConfig", "GemmaForCausalLM", num_hidden_layers=2, num_key_value_heads=1,
            head_dim=32, vocab_size=1000, **SMALL)
    return m, (_ids(1000),)


def phi():
    m = _hf("PhiConfig", "PhiForCausalLM", num_hidden_layers=2, vocab_size=1000, **SMALL)
    return m, (_ids(1000),)


def mixtral():
    m = _hf("MixtralConfig", "MixtralForCausalLM", num_hidden_layers=2, num_key_value_heads=2,
            num_local_experts=4, num_experts_per_tok=2, vocab_size=1000, **SMALL)
    return m, (_ids(1000),)


def t5():
    m = _hf("T5Config", "T5Model", "input_ids", "decoder_input_ids", num_layers=2, d_model=128,
            d_ff=256, d_kv=32, num_heads=4, vocab_size=1000)
    return m, (_ids(1000), _ids(1000, seq=SEQ // 2))


def whisper():
    m = _hf("WhisperConfig", "WhisperModel", "input_features", "decoder_input_ids",
            encoder_layers=2, decoder_layers=2, d_model=128, encoder_ffn_dim=256,
            decoder_ffn_dim=256, encoder_attention_heads=4, decoder_attention_heads=4,
            num_mel_bins=80, max_source_positions=32)
    features = torch.randn(BATCH, 80, 64, generator=torch.Generator().manual_seed(0))
    return m, (features, _ids(51865, seq=SEQ // 2))


def hf_vit():
    m = _hf("ViTConfig", "ViTModel", "pixel_values", num_hidden_layers=2, image_size=64,
            patch_size=16, **SMALL)
    return m, (torch.randn(BATCH, 3, 64, 64),)


def deberta():
    # relative_attention: DeBERTa's disentangled attention (a projected position table,
    # its scores gathered per query, c2p plus the transposed p2c)
    m = _hf("DebertaV2Config", "DebertaV2Model", hidden_size=64, num_hidden_layers=1,
            num_attention_heads=2, intermediate_size=128, vocab_size=100,
            max_position_embeddings=64, relative_attention=True, position_buckets=8,
            pos_att_type=["p2c", "c2p"])
    return m, (_ids(100),)


def _image(size: int = 64) -> tuple:
    return (torch.randn(BATCH, 3, size, size, generator=torch.Generator().manual_seed(0)),)



def _tv(name: str, size: int = 64, **kwargs):
    import torchvision

    torch.manual_seed(0)
    return getattr(torchvision.models, name)(**kwargs).eval(), _image(size)


def resnet50():
    return _tv("resnet50")


def tv_vit_b_16():
    return _tv("vit_b_16", 64, image_size=64)


def densenet121():
    return _tv("densenet121")


def mobilenet_v3():
    return _tv("mobilenet_v3_small")


def efficientnet_b0():
    return _tv("efficientnet_b0")


def convnext_tiny():
    return _tv("convnext_tiny")


def swin_t():
    return _tv("swin_t", 224)


def fcn_resnet50():
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.segmentation.fcn_resnet50(weights=None, weights_backbone=None,
                                                         aux_loss=False).eval()
    return _Out(model), _image()


class _Out(nn.Module):
    """A model whose forward returns a dict: its ``out`` entry."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def _timm(name: str, size: int = 64):
    import timm

    torch.manual_seed(0)
    return timm.create_model(name, pretrained=False).eval(), _image(size)


def regnety():
    return _timm("regnety_002")


def mlp_mixer():
    import timm

    torch.manual_seed(0)
    return timm.create_model("mixer_s16_224", pretrained=False, img_size=64).eval(), _image()


def unet():
    from real_models.written import UNet

    torch.manual_seed(0)
    return UNet().eval(), _image()


def dlrm():
    from real_models.written import DLRM

    torch.manual_seed(0)
    model = DLRM()
    dense = torch.randn(BATCH * 4, 13, generator=torch.Generator().manual_seed(0))
    rows = torch.tensor([t.num_embeddings for t in model.tables]).view(1, -1, 1)
    sparse = torch.randint(0, 10**6, (BATCH * 4, len(model.tables), 3),
                           generator=torch.Generator().manual_seed(1)) % rows
    return model.eval(), (dense, sparse)


@contextlib.contextmanager
def eager_experts(model: nn.Module):
    """Hugging Face experts run one ``linear`` per expert inside: torch's FlopCounterMode
    counts 0 for the grouped custom op transformers runs by default."""
    configs = [m.config for m in model.modules()
               if hasattr(getattr(m, "config", None), "_experts_implementation")]
    was = [c._experts_implementation for c in configs]
    for c in configs:
        c._experts_implementation = "eager"
    try:
        yield
    finally:
        for c, w in zip(configs, was):
            c._experts_implementation = w


MODELS = {
    "gpt2": gpt2, "bert": bert, "distilbert": distilbert, "opt": opt, "llama": llama,
    "mistral": mistral, "qwen2": qwen2, "gemma": gemma, "phi": phi, "mixtral": mixtral,
    "t5": t5, "whisper": whisper, "vit": hf_vit, "deberta": deberta,
    "resnet50": resnet50, "vit_b_16": tv_vit_b_16, "densenet121": densenet121,
    "mobilenet_v3": mobilenet_v3, "efficientnet_b0": efficientnet_b0,
    "convnext_tiny": convnext_tiny, "swin_t": swin_t, "fcn_resnet50": fcn_resnet50,
    "regnety": regnety, "mlp_mixer": mlp_mixer,
    "unet": unet, "dlrm": dlrm,
}

LIBRARY = {name: "transformers" for name in list(MODELS)[:14]}
LIBRARY |= {name: "torchvision" for name in list(MODELS)[14:22]}
LIBRARY |= {"regnety": "timm", "mlp_mixer": "timm", "unet": "written here",
            "dlrm": "written here"}

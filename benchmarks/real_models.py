"""Real models from transformers, torchvision and timm imported as users write them.

Per model of tests/real_models/catalogue.py (random weights, small configs; nothing is
downloaded): the CPU seconds of ``import_torch`` (``torch.export`` included), the
parameters (pase's count next to the sum of ``numel()`` over the module's unique
parameters), pase's matrix-product FLOP over ``FlopCounterMode``'s, the dp's CPU
seconds at p devices under alpha-beta on h100-sxm, and the dp optimum's speed-up over
the two expert baselines priced by the same model: pure data parallelism
(``data-parallel``) and Megatron-style data x tensor parallelism (``megatron``, its
best split of p). ``--extra`` also tries models outside the test set and prints
each one's outcome: ok with its counts, or the one-line error.

    python benchmarks/real_models.py [--devices 8] [--batch 32] [--seq 256] [--extra]
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

from provenance import stamp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def _hf(config_cls, model_cls, *names, **config):
    from real_models.catalogue import _hf as build
    return build(config_cls, model_cls, *names, **config)


def extra_models() -> dict:
    """Models outside the test set: other families of the same libraries."""
    from real_models.catalogue import _ids, _image, _timm, _tv

    small = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4)
    return {
        "roberta": lambda: (_hf("RobertaConfig", "RobertaModel", num_hidden_layers=2, **small),
                            (_ids(50265),)),
        "albert": lambda: (_hf("AlbertConfig", "AlbertModel", num_hidden_layers=2,
                               embedding_size=64, **small), (_ids(30000),)),
        "electra": lambda: (_hf("ElectraConfig", "ElectraModel", num_hidden_layers=2,
                                embedding_size=64, **small), (_ids(30522),)),
        "gpt_neox": lambda: (_hf("GPTNeoXConfig", "GPTNeoXForCausalLM", num_hidden_layers=2,
                                 vocab_size=1000, **small), (_ids(1000),)),
        "falcon": lambda: (_hf("FalconConfig", "FalconForCausalLM", num_hidden_layers=2,
                               hidden_size=128, num_attention_heads=4, vocab_size=1000),
                           (_ids(1000),)),
        "bloom": lambda: (_hf("BloomConfig", "BloomForCausalLM", n_layer=2, hidden_size=128,
                              n_head=4, vocab_size=1000), (_ids(1000),)),
        "qwen3": lambda: (_hf("Qwen3Config", "Qwen3ForCausalLM", num_hidden_layers=2,
                              num_key_value_heads=2, head_dim=32, vocab_size=1000, **small),
                          (_ids(1000),)),
        "bart": lambda: (_hf("BartConfig", "BartModel", "input_ids", "decoder_input_ids",
                             encoder_layers=2, decoder_layers=2, d_model=128,
                             encoder_ffn_dim=256, decoder_ffn_dim=256,
                             encoder_attention_heads=4, decoder_attention_heads=4),
                         (_ids(50265), _ids(50265, seq=16))),
        "resnet18": lambda: _tv("resnet18"),
        "vgg11": lambda: _tv("vgg11", 224),  # its classifier's pooling needs 224 x 224
        "mobilenet_v2": lambda: _tv("mobilenet_v2"),
        "squeezenet": lambda: _tv("squeezenet1_1"),
        "shufflenet_v2": lambda: _tv("shufflenet_v2_x0_5"),
        "regnet_x_400mf": lambda: _tv("regnet_x_400mf"),
        "timm_deit_tiny": lambda: (_timm("deit_tiny_patch16_224")[0], _image(224)),
        "timm_efficientnet_b0": lambda: _timm("efficientnet_b0"),
        "timm_convnext_atto": lambda: _timm("convnext_atto"),
        "timm_resnet26d": lambda: _timm("resnet26d"),
    }


def measure(name: str, build, devices: int) -> tuple[str, bool]:
    """The model's table row, and whether its counts match torch's."""
    import torch
    from real_models.catalogue import eager_experts
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    import pase
    from pase.counts import counts
    from pase.frontends.torch import import_torch

    model, args = build()
    with sdpa_kernel(SDPBackend.MATH), eager_experts(model), \
            FlopCounterMode(display=False) as counter:
        model(*args)
    theirs = counter.get_total_flops()
    unique = sum({id(p): p.numel() for p in model.parameters()}.values())
    start = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        imp = import_torch(model, args, name=name)
    imported = time.process_time() - start
    c = counts(imp.graph)
    ours = sum(c.by_op()[op.name].matmul_flops for op in imp.graph.ops
               if imp.ops[op.name].counted)
    opts = dict(devices=devices, cost_model="alpha-beta", cluster="h100-sxm",
                cost_options={"compute": "roofline"})
    start = time.process_time()
    best = pase.solve(imp.graph, **opts)
    solved = time.process_time() - start
    dp = pase.solve(imp.graph, solver="data-parallel", **opts)
    megatron = pase.solve(imp.graph, solver="megatron", **opts)
    del torch
    exact = c.parameters == unique and abs(ours / theirs - 1) <= 0.01
    return (f"| {name} | {len(imp.graph.ops)} | {c.parameters:,} / {unique:,} | "
            f"{ours / theirs:.4f} | {imported:.2f} | {solved:.2f} | "
            f"{best.total_cost * 1e3:.3f} | {dp.total_cost / best.total_cost:.2f}x | "
            f"{megatron.total_cost / best.total_cost:.2f}x |"), exact


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--extra", action="store_true", help="also try models outside the set")
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--batch", type=int, default=32, help="examples per step (tests: 2)")
    parser.add_argument("--seq", type=int, default=256, help="tokens per example (tests: 32)")
    args = parser.parse_args()
    print(f"# {stamp()}")
    from real_models import catalogue
    from real_models.catalogue import LIBRARY, MODELS

    catalogue.BATCH, catalogue.SEQ = args.batch, args.seq

    models = dict(MODELS)
    if args.extra:
        models |= extra_models()
    if args.only:
        models = {k: v for k, v in models.items() if k in args.only.split(",")}
    print(f"p = {args.devices}, alpha-beta with roofline compute on h100-sxm; batch {args.batch}, {args.seq} tokens "
          f"(images 64x64, Swin 224x224; DLRM {4 * args.batch} samples); seconds are CPU seconds")
    print()
    print("| model | ops | parameters (pase / torch) | FLOP pase / torch | import s | dp s "
          "| dp step ms | over data parallel | over Megatron |")
    print("|---|---|---|---|---|---|---|---|---|")
    exact = dict.fromkeys(models, False)
    for name, build in models.items():
        try:
            row, exact[name] = measure(name, build, args.devices)
            print(row, flush=True)
        except Exception as exc:  # a model that fails is a row, not the end of the run
            text = " ".join(str(exc).split())
            print(f"| {name} | failed: {type(exc).__name__}: {text[:300]} |||||||", flush=True)
    inset = [n for n in models if n in LIBRARY]
    exact_in = sum(exact[n] for n in inset)
    print()
    print(f"exact parameters and FLOP within 1%: {exact_in} of {len(inset)} models of the test "
          f"set, {sum(exact.values()) - exact_in} of {len(models) - len(inset)} outside it")


if __name__ == "__main__":
    main()

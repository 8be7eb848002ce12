"""A layout as Megatron-LM command-line flags (``pretrain_gpt.py``), one flag per line
after ``#`` comment lines.

The names are Megatron-LM's own (:mod:`pase.export.megatron_flags`, read from its
argument parser). The model's sizes come from the registered model (``pase models``),
for the families whose Megatron-Core spelling is written here (:data:`SHAPES`).
"""
from __future__ import annotations

from typing import Any, Mapping

from pase.errors import OptionError
from pase.export.launch import check_plain, model_sizes
from pase.perf.layout import Layout

# Megatron-Core's names for pase's precisions (the fp8 recipes of Transformer Engine)
PRECISION_FLAGS = {
    "bf16": [("--bf16", None)],
    "fp16": [("--fp16", None)],
    "fp32": [],
    "fp8": [("--bf16", None), ("--fp8-format", "hybrid"), ("--fp8-recipe", "tensorwise")],
    "mxfp8": [("--bf16", None), ("--fp8-format", "e4m3"), ("--fp8-recipe", "mxfp8")],
    "nvfp4": [("--bf16", None), ("--fp4-format", "e2m1"), ("--fp4-recipe", "nvfp4")],
}

# ZeRO stage: Megatron's distributed optimizer (stage 1) or Megatron-FSDP's strategy
ZERO_FLAGS = {
    0: [],
    1: [("--use-distributed-optimizer", None)],
    2: [("--use-distributed-optimizer", None), ("--use-megatron-fsdp", None),
        ("--data-parallel-sharding-strategy", "optim_grads")],
    3: [("--use-distributed-optimizer", None), ("--use-megatron-fsdp", None),
        ("--data-parallel-sharding-strategy", "optim_grads_params")],
}

# Per model family: each size flag and the model option it holds (None: a switch that
# says how the family is built). A registered model's family is its name's prefix.
_LLAMA = {"--num-layers": "layers", "--hidden-size": "width", "--num-attention-heads": "heads",
          "--num-query-groups": "kv_heads", "--ffn-hidden-size": "ff", "--seq-length": "seq",
          "--max-position-embeddings": "seq", "--vocab-size": "vocab",
          "--group-query-attention": None, "--position-embedding-type rope": None,
          "--normalization RMSNorm": None, "--swiglu": None, "--disable-bias-linear": None,
          "--untie-embeddings-and-output-weights": None}
_MOE = {"--num-experts": "experts", "--moe-router-topk": "top_k",
        "--moe-ffn-hidden-size": "moe_ff", "--moe-expert-capacity-factor": "capacity_factor"}
SHAPES: dict[str, dict[str, str | None]] = {
    "gpt": {"--num-layers": "layers", "--hidden-size": "width", "--num-attention-heads": "heads",
            "--ffn-hidden-size": "ff", "--seq-length": "seq",
            "--max-position-embeddings": "positions", "--vocab-size": "vocab"},
    "llama": _LLAMA,
    "mixtral": {**_LLAMA, **_MOE},
    "qwen3": {**{k: v for k, v in _LLAMA.items() if k != "--ffn-hidden-size"}, **_MOE,
              "--kv-channels": "head_dim", "--qk-layernorm": None},
}
PREFIXES = {"gpt2": "gpt", "gpt3": "gpt", "llama2-": "llama", "llama3": "llama",
            "mixtral-": "mixtral", "qwen3-": "qwen3"}


def family(model: str) -> str:
    """The family whose Megatron spelling ``model`` has; an OptionError for the others."""
    for prefix, name in PREFIXES.items():
        if model.startswith(prefix):
            return name
    raise OptionError(f"--engine megatron writes the model sizes of the gpt2/gpt3, llama2/llama3, "
                      f"mixtral and qwen3 models; {model!r} is not one of them")


def shape_flags(model: str, model_options: Mapping[str, Any] | None = None
                ) -> list[tuple[str, Any]]:
    """The model's size flags and switches, as (flag, value or None)."""
    sizes = model_sizes(model, model_options)
    out: list[tuple[str, Any]] = []
    for flag, option in SHAPES[family(model)].items():
        if option is None:
            name, _, value = flag.partition(" ")
            out.append((name, value or None))
        elif option == "moe_ff" and not sizes.get("moe_ff"):
            out.append((flag, sizes["ff"]))  # Mixtral: moe_ff 0 is the dense ff
        elif option == "capacity_factor":
            if sizes[option] != 1.0:  # 1.0 is the balanced load of dropless routing
                out.append((flag, sizes[option]))
        else:
            out.append((flag, sizes[option]))
    shared = sizes.get("shared_experts") or 0
    if shared:
        out.append(("--moe-shared-expert-intermediate-size", shared * (sizes.get("moe_ff")
                                                                       or sizes["ff"])))
    return out


def megatron_flags(model: str, lay: Layout, model_options: Mapping[str, Any] | None = None
                   ) -> list[tuple[str, Any]]:
    """Every flag of ``lay`` on ``model``, as (flag, value or None)."""
    check_plain(lay, "megatron")
    sizes = model_sizes(model, model_options)
    out: list[tuple[str, Any]] = [("--tensor-model-parallel-size", lay.tp),
                                  ("--pipeline-model-parallel-size", lay.pp)]
    if lay.schedule in ("gpipe", "zb-h1", "dualpipe") and lay.pp > 1:
        raise OptionError("--engine megatron: Megatron-LM runs 1f1b or interleaved:V pipelines, "
                          f"not {lay.schedule}")
    if lay.schedule == "interleaved":
        per_rank = lay.pp * lay.virtual
        if sizes["layers"] % per_rank:
            raise OptionError(f"--engine megatron: interleaved:{lay.virtual} on pp={lay.pp} needs "
                              f"the layers ({sizes['layers']}) to be a multiple of pp x V "
                              f"({per_rank})")
        out.append(("--num-layers-per-virtual-pipeline-stage", sizes["layers"] // per_rank))
    out += [("--context-parallel-size", lay.cp)]
    if sizes.get("experts"):
        out += [("--expert-model-parallel-size", lay.ep),
                ("--expert-tensor-parallel-size", lay.expert_tp)]
    elif lay.ep > 1:
        raise OptionError(f"--engine megatron: ep={lay.ep} but model {model!r} has no experts")
    if lay.sequence_parallel:
        out.append(("--sequence-parallel", None))
    if lay.tp_overlap:
        out.append(("--tp-comm-overlap", None))
    if lay.ep_overlap:
        out.append(("--overlap-moe-expert-parallel-comm", None))
    out += [("--micro-batch-size", lay.micro_batch), ("--global-batch-size", lay.global_batch)]
    if lay.recompute == "selective":
        out.append(("--recompute-granularity", "selective"))
    elif lay.recompute == "full":
        out += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                ("--recompute-num-layers", 1)]
    out += ZERO_FLAGS[lay.zero] + PRECISION_FLAGS[lay.precision]
    if lay.attention == "unfused":
        out.append(("--attention-backend", "unfused"))
    dropout = 0.1 if lay.dropout else 0.0  # Megatron's default is 0.1; pase's is none
    out += [("--attention-dropout", dropout), ("--hidden-dropout", dropout)]
    return out + shape_flags(model, model_options)


def to_megatron(model: str, lay: Layout, model_options: Mapping[str, Any] | None = None,
                header: list[str] | None = None) -> str:
    """The flags as text: ``# `` comment lines (``header``), then one flag per line (run as
    ``torchrun ... pretrain_gpt.py $(grep -v '^#' FILE)``)."""
    lines = [f"# {line}" for line in header or []]
    for flag, value in megatron_flags(model, lay, model_options):
        lines.append(flag if value is None else f"{flag} {_value(value)}")
    return "\n".join(lines) + "\n"


def _value(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)

"""Megatron-LM command-line flags read back as a layout (``pase evaluate --from megatron FILE``).

The text is what a launch script passes to ``pretrain_gpt.py``: ``#`` comments, ``\\``
line continuations and ``--flag value`` / ``--flag=value``; anything up to a ``*.py``
token (the launcher and the script) is skipped. Each flag is one of:

- read: the parallel sizes, batch sizes, recomputation, the distributed optimizer or
  Megatron-FSDP, precision, overlaps, dropout, attention backend, the model's sizes;
- ignored: flags that do not change a step's time or memory (:data:`NEUTRAL`);
- refused: any other Megatron-LM flag (pase does not price it) or a name that is not a
  Megatron-LM flag at all, all named in one line.
"""
from __future__ import annotations

import re
import shlex
from typing import Any

from pase.errors import OptionError
from pase.export import megatron
from pase.export.launch import Launch, changed_sizes, model_sizes
from pase.export.megatron_flags import ARITY, CHOICES, SOURCE_COMMIT
from pase.perf.layout import make_layout

# Flags that change no step's time or memory: optimiser values, data, tokenizer,
# checkpoints, logging, evaluation, initialisation, kernels' fusions; and prefixes of such.
NEUTRAL = {"--lr", "--min-lr", "--weight-decay", "--clip-grad", "--seed", "--split",
           "--train-iters", "--train-samples", "--init-method-std", "--vocab-file", "--merge-file",
           "--distributed-backend", "--distributed-timeout-minutes", "--use-mcore-models",
           "--transformer-impl", "--attention-softmax-in-fp32", "--make-vocab-size-divisible-by",
           "--norm-epsilon", "--overlap-grad-reduce", "--overlap-param-gather", "--use-flash-attn",
           "--no-gradient-accumulation-fusion", "--manual-gc", "--manual-gc-interval",
           "--tokenizer-model", "--tokenizer-type", "--exit-duration-in-mins", "--exit-interval",
           "--ckpt-format", "--async-save",
           "--rotary-base", "--rotary-percent", "--rotary-interleaved", "--no-rope-fusion",
           "--bias-dropout-fusion", "--no-bias-dropout-fusion", "--no-bias-gelu-fusion",
           "--no-bias-swiglu-fusion", "--no-masked-softmax-fusion", "--cross-entropy-loss-fusion",
           "--moe-router-load-balancing-type", "--moe-aux-loss-coeff", "--moe-grouped-gemm",
           "--moe-token-dispatcher-type", "--moe-router-dtype", "--moe-z-loss-coeff",
           "--moe-router-score-function", "--moe-router-pre-softmax", "--moe-permute-fusion",
           "--num-workers", "--mock-data", "--no-create-attention-mask-in-dataloader"}
NEUTRAL_PREFIXES = ("--adam-", "--lr-", "--data-", "--eval-", "--save", "--load", "--log-",
                    "--tensorboard", "--wandb-", "--tokenizer-", "--ckpt-", "--no-load-",
                    "--no-save-", "--timing-", "--profile")
# ... except these, which start like a neutral flag but are read
READ_ANYWAY = {"--data-parallel-sharding-strategy"}
# Per family, size flags no layer uses (Qwen3's MoE models have no dense MLP layer)
UNUSED = {"qwen3": {"--ffn-hidden-size"}}

SUPPORTED = ("the parallel sizes (tensor, pipeline, virtual pipeline, context, expert, expert "
             "tensor), --sequence-parallel, the batch sizes, --recompute-granularity/-method/"
             "-num-layers, --use-distributed-optimizer, --use-megatron-fsdp, --use-torch-fsdp2, "
             "--bf16/--fp16/--fp8-*/--fp4-*, --tp-comm-overlap, "
             "--overlap-moe-expert-parallel-comm, the dropouts, --attention-backend and the "
             "model's size flags")


def tokens(text: str) -> list[str]:
    """The flags of a launch script's text: comments and continuations dropped, the
    launcher and script (everything up to a ``*.py`` token) skipped."""
    text = re.sub(r"\\\r?\n", " ", text)
    try:
        words = shlex.split(text, comments=True)
    except ValueError as exc:
        raise OptionError(f"--from megatron: the flags do not split into words: {exc}") from None
    script = [i for i, w in enumerate(words) if w.endswith(".py")]
    return words[script[-1] + 1:] if script else words


def parse(words: list[str]) -> dict[str, Any]:
    """``{flag: value}`` (a switch's value is True; a flag given twice keeps the last, as
    argparse does); an OptionError names every word that is not a Megatron-LM flag."""
    out: dict[str, Any] = {}
    unknown, i = [], 0
    while i < len(words):
        word = words[i]
        name, eq, inline = word.partition("=")
        if not name.startswith("--"):
            raise OptionError(f"--from megatron: {word!r} is not a flag (expected --name "
                              f"[value]); the script, if any, must end in .py")
        arity = ARITY.get(name)
        if arity is None:
            unknown.append(name)
            arity = "*"
        if arity == 0:
            out[name], i = True, i + 1
            continue
        if eq:
            values, i = [inline], i + 1
        else:
            j = i + 1
            while j < len(words) and not words[j].startswith("--") and (arity != 1 or j == i + 1):
                j += 1
            values, i = words[i + 1:j], j
        if not values and arity in (1, "+"):
            raise OptionError(f"--from megatron: {name} needs a value")
        out[name] = values[0] if arity == 1 else values
    if unknown:
        raise OptionError(f"--from megatron: not Megatron-LM flags (commit {SOURCE_COMMIT[:7]}): "
                          f"{', '.join(unknown)}")
    for name, value in out.items():
        if name in CHOICES and isinstance(value, str) and value not in CHOICES[name]:
            raise OptionError(f"--from megatron: {name} {value!r}; allowed: "
                              f"{', '.join(CHOICES[name])}")
    return out


def _int(flags: dict, name: str, default: int | None = None) -> int:
    value = flags.get(name, default)
    if value is None:
        raise OptionError(f"--from megatron: {name} is needed")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise OptionError(f"--from megatron: {name} must be an integer, got {value!r}") from None


def _number(flags: dict, name: str, default: float) -> float:
    try:
        return float(flags.get(name, default))
    except (TypeError, ValueError):
        raise OptionError(f"--from megatron: {name} must be a number, "
                          f"got {flags[name]!r}") from None


def read_megatron(text: str, model: str, devices: int) -> Launch:
    """The :class:`Launch` of Megatron-LM flags for ``model`` on ``devices`` devices."""
    flags = parse(tokens(text))
    fam = megatron.family(model)
    shape = megatron.SHAPES[fam]
    switches = {f.partition(" ")[0] for f, option in shape.items() if option is None}
    used = {"--tensor-model-parallel-size", "--pipeline-model-parallel-size",
            "--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
            "--context-parallel-size", "--expert-model-parallel-size",
            "--expert-tensor-parallel-size", "--sequence-parallel", "--micro-batch-size",
            "--global-batch-size", "--recompute-granularity", "--recompute-method",
            "--recompute-num-layers", "--recompute-activations", "--recompute-modules",
            "--use-distributed-optimizer", "--use-megatron-fsdp",
            "--data-parallel-sharding-strategy", "--use-torch-fsdp2",
            "--torch-fsdp2-no-reshard-after-forward", "--bf16", "--fp16", "--fp8-format",
            "--fp8-recipe", "--fp4-format", "--fp4-recipe", "--tp-comm-overlap",
            "--overlap-moe-expert-parallel-comm", "--attention-dropout", "--hidden-dropout",
            "--attention-backend", "--moe-shared-expert-intermediate-size"} \
        | set(shape) | switches | UNUSED.get(fam, set())
    refused = [f for f in flags if f not in used and f not in NEUTRAL
               and (f in READ_ANYWAY or not f.startswith(NEUTRAL_PREFIXES))]
    sized = ("--num-experts", "--moe-router-topk", "--num-query-groups", "--kv-channels",
             "--moe-ffn-hidden-size")
    other = [f for f in sized if f in flags and f not in shape]
    if other:
        raise OptionError(f"--from megatron: {', '.join(other)} set sizes model {model!r} "
                          f"({fam} family) does not have")
    if refused:
        raise OptionError(f"--from megatron: pase does not price {', '.join(refused)}; it reads "
                          f"{SUPPORTED}, and ignores flags that change no step (learning rate, "
                          f"data, checkpoints, logging)")
    sizes = _sizes(flags, model, shape)
    tp = _int(flags, "--tensor-model-parallel-size", 1)
    pp = _int(flags, "--pipeline-model-parallel-size", 1)
    cp = _int(flags, "--context-parallel-size", 1)
    if devices % (tp * pp * cp):
        raise OptionError(f"--from megatron: -p {devices} is not a multiple of tp x pp x cp "
                          f"({tp} x {pp} x {cp}); Megatron's data-parallel size is the rest")
    dp = devices // (tp * pp * cp)
    degrees = {"tp": tp, "pp": pp, "dp": dp, "cp": cp,
               "ep": _int(flags, "--expert-model-parallel-size", 1),
               "etp": _int(flags, "--expert-tensor-parallel-size", tp)}  # Megatron's default: tp
    micro = _int(flags, "--micro-batch-size")
    layout = make_layout(
        degrees, devices=devices, micro_batch=micro,
        global_batch=_int(flags, "--global-batch-size", micro * dp),
        schedule=_schedule(flags, pp, sizes["layers"]), zero=_zero(flags),
        recompute=_recompute(flags), sequence_parallel=bool(flags.get("--sequence-parallel")),
        precision=_precision(flags), attention=_attention(flags),
        dropout=bool(_number(flags, "--attention-dropout", 0.1) or
                     _number(flags, "--hidden-dropout", 0.1)),
        tp_overlap="on" if flags.get("--tp-comm-overlap") else "off",
        ep_overlap="on" if flags.get("--overlap-moe-expert-parallel-comm") else "off")
    return Launch(layout, changed_sizes(model, sizes))


def _sizes(flags: dict, model: str, shape: dict) -> dict[str, Any]:
    """The model's sizes with the size flags given applied (a flag that two options share,
    such as Llama's --seq-length and --max-position-embeddings, sets the first)."""
    sizes = model_sizes(model)
    if "--num-query-groups" in flags and "--group-query-attention" not in flags:
        raise OptionError("--from megatron: --num-query-groups without --group-query-attention, "
                          "which Megatron-LM then ignores (every head its own key and value)")
    seen: set[str] = set()
    for flag, option in shape.items():
        if option is None or flag not in flags or option in seen:
            continue
        seen.add(option)
        if option == "capacity_factor":
            sizes[option] = _number(flags, flag, 1.0)
        elif option == "moe_ff" and not sizes.get("moe_ff"):  # Mixtral: the dense ff
            if _int(flags, flag) != sizes["ff"]:
                raise OptionError(f"--from megatron: {flag} ({flags[flag]}) must equal "
                                  f"--ffn-hidden-size for model {model!r} (its experts are its "
                                  f"MLP)")
        else:
            sizes[option] = _int(flags, flag)
    if "--moe-shared-expert-intermediate-size" in flags:
        each = sizes.get("moe_ff") or sizes.get("ff", 0)
        total = _int(flags, "--moe-shared-expert-intermediate-size")
        if "shared_experts" not in sizes or total % each:
            raise OptionError(f"--from megatron: --moe-shared-expert-intermediate-size {total} is "
                              f"not a whole number of experts of model {model!r}")
        sizes["shared_experts"] = total // each
    elif sizes.get("shared_experts"):
        sizes["shared_experts"] = 0  # Megatron's default: no shared expert
    return sizes


def _schedule(flags: dict, pp: int, layers: int) -> str:
    if "--num-virtual-stages-per-pipeline-rank" in flags:
        virtual = _int(flags, "--num-virtual-stages-per-pipeline-rank")
    elif "--num-layers-per-virtual-pipeline-stage" in flags:
        per = _int(flags, "--num-layers-per-virtual-pipeline-stage")
        if layers % (per * pp):
            raise OptionError(f"--from megatron: --num-layers-per-virtual-pipeline-stage {per} "
                              f"x pp {pp} does not divide the layers ({layers})")
        virtual = layers // (per * pp)
    else:
        return "1f1b"
    return f"interleaved:{virtual}" if virtual > 1 else "1f1b"


def _zero(flags: dict) -> int:
    if flags.get("--use-torch-fsdp2"):
        return 2 if flags.get("--torch-fsdp2-no-reshard-after-forward") else 3
    if flags.get("--use-megatron-fsdp"):
        strategy = flags.get("--data-parallel-sharding-strategy", "optim_grads_params")
        return {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}[strategy]
    return 1 if flags.get("--use-distributed-optimizer") else 0


def _recompute(flags: dict) -> str:
    granularity = flags.get("--recompute-granularity")
    if flags.get("--recompute-activations"):
        granularity = "selective"
    if granularity == "selective":
        modules = flags.get("--recompute-modules", ["core_attn"])
        if list(modules) != ["core_attn"]:
            raise OptionError(f"--from megatron: pase prices selective recomputation of the "
                              f"attention core (--recompute-modules core_attn), not "
                              f"{' '.join(modules)}")
        return "selective"
    if granularity == "full":
        method, layers = flags.get("--recompute-method"), _int(flags, "--recompute-num-layers", 1)
        if method != "uniform" or layers != 1:
            raise OptionError(f"--from megatron: pase prices full recomputation of every layer "
                              f"(--recompute-method uniform --recompute-num-layers 1), not "
                              f"{method} with {layers}")
        return "full"
    return "none"


def _precision(flags: dict) -> str:
    if flags.get("--fp4-format") or flags.get("--fp4-recipe"):
        if flags.get("--fp4-recipe", "nvfp4") != "nvfp4":
            raise OptionError("--from megatron: pase prices --fp4-recipe nvfp4 only")
        return "nvfp4"
    if flags.get("--fp8-format"):
        recipe = flags.get("--fp8-recipe", "delayed")  # Megatron's default recipe
        if recipe == "mxfp8":
            return "mxfp8"
        if recipe == "custom":
            raise OptionError("--from megatron: pase does not price --fp8-recipe custom; it reads "
                              "delayed, tensorwise, blockwise (fp8) and mxfp8")
        return "fp8"
    if flags.get("--bf16"):
        return "bf16"
    return "fp16" if flags.get("--fp16") else "fp32"


def _attention(flags: dict) -> str:
    return "unfused" if flags.get("--attention-backend") in ("unfused", "local") else "fused"


__all__ = ["parse", "read_megatron", "tokens"]

"""A layout as a torchtitan job file (TOML: ``[model]``, ``[training]``, ``[parallelism]``,
``[activation_checkpoint]``, float8 / MX), for ``torchrun -m torchtitan.train
--job.config_file FILE``.

The keys are those of torchtitan's ``JobConfig`` (:mod:`pase.export.torchtitan_fields`,
torchtitan 0.2, the last release that reads a TOML job). torchtitan names a model by
its family and flavor, so only the registered models with a torchtitan flavor
(:data:`FLAVORS`) are written, at their own sizes (the sequence length aside).

What torchtitan cannot run is refused, one line each: ZeRO-1 (FSDP2 shards the
parameters too: ZeRO 0, 2 or 3), tensor parallelism without sequence parallelism
(torchtitan's always splits the norms over the sequence), pase's selective
recomputation (torchtitan's selective checkpointing keeps other tensors), fp16 and
nvfp4, unfused attention and dropout (its models have none).
"""
from __future__ import annotations

from typing import Any, Mapping

from pase.errors import OptionError
from pase.export.launch import check_plain, model_sizes
from pase.perf.layout import Layout

FLAVORS = {"llama3-8b": ("llama3", "8B"), "llama3.1-8b": ("llama3", "8B"),
           "llama3-70b": ("llama3", "70B"), "llama3.1-70b": ("llama3", "70B"),
           "llama3.1-405b": ("llama3", "405B"), "deepseek-v3": ("deepseek_v3", "671B"),
           "qwen3-30b-a3b": ("qwen3", "30B-A3B"), "qwen3-235b-a22b": ("qwen3", "235B-A22B"),
           "llama4-scout": ("llama4", "17bx16e"), "gpt-oss-20b": ("gpt_oss", "20b"),
           "gpt-oss-120b": ("gpt_oss", "120b")}
SCHEDULES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B"}
PRECISIONS = {"bf16": "bfloat16", "fp8": "bfloat16", "mxfp8": "bfloat16", "fp32": "float32"}
CONVERTERS = {"fp8": ("quantize.linear.float8", "tensorwise"),
              "mxfp8": ("quantize.linear.mx", "mxfp8_cublas")}


def flavor(model: str) -> tuple[str, str]:
    """torchtitan's (model name, flavor) of a registered model; an OptionError for others."""
    if model not in FLAVORS:
        raise OptionError(f"--engine torchtitan: torchtitan has no flavor of {model!r}; models "
                          f"with one: {', '.join(FLAVORS)}")
    return FLAVORS[model]


def job(model: str, lay: Layout, model_options: Mapping[str, Any] | None = None,
        description: str = "") -> dict[str, dict[str, Any]]:
    """The job as ``{section: {key: value}}`` (a dotted section is a TOML sub-table)."""
    check_plain(lay, "torchtitan")
    name, flav = flavor(model)
    other = sorted(set(model_options or {}) - {"seq"})
    if other:
        raise OptionError(f"--engine torchtitan: a flavor fixes the model's sizes; only the "
                          f"sequence (seq) may change, not {', '.join(other)}")
    sizes = model_sizes(model, model_options)
    _refuse(lay)
    par: dict[str, Any] = {
        "data_parallel_replicate_degree": lay.dp if lay.zero == 0 else 1,
        "data_parallel_shard_degree": lay.dp if lay.zero else 1,
        "fsdp_reshard_after_forward": "never" if lay.zero == 2 else "default",
        "tensor_parallel_degree": lay.tp, "enable_async_tensor_parallel": lay.tp_overlap,
        "pipeline_parallel_degree": lay.pp, "context_parallel_degree": lay.cp}
    if sizes.get("experts"):
        par.update(expert_parallel_degree=lay.ep, expert_tensor_parallel_degree=lay.expert_tp)
    elif lay.ep > 1:
        raise OptionError(f"--engine torchtitan: ep={lay.ep} but model {model!r} has no experts")
    local = lay.micro_batch
    if lay.pp > 1:  # one step's micro-batches are one local batch, split by the pipeline
        if lay.schedule not in SCHEDULES:
            raise OptionError(f"--engine torchtitan: pase exports the schedules "
                              f"{', '.join(SCHEDULES)}, not {lay.schedule}")
        local = lay.global_batch // lay.dp
        stages = lay.pp * lay.virtual
        if sizes["layers"] % stages:
            raise OptionError(f"--engine torchtitan: {stages} pipeline stages must divide the "
                              f"layers ({sizes['layers']}); pase cuts equal stages")
        par.update(pipeline_parallel_schedule=SCHEDULES[lay.schedule],
                   pipeline_parallel_microbatch_size=lay.micro_batch,
                   pipeline_parallel_layers_per_stage=sizes["layers"] // stages,
                   pipeline_parallel_first_stage_less_layers=0,
                   pipeline_parallel_last_stage_less_layers=0)
    if lay.ep > 1:
        par["pipeline_parallel_expert_parallel_overlap"] = lay.ep_overlap
    out: dict[str, dict[str, Any]] = {
        "job": {"description": description or f"pase: {model}"},
        "model": {"name": name, "flavor": flav,
                  "converters": [CONVERTERS[lay.precision][0]]
                  if lay.precision in CONVERTERS else []},
        "training": {"local_batch_size": local, "global_batch_size": lay.global_batch,
                     "seq_len": sizes["seq"], "mixed_precision_param": PRECISIONS[lay.precision]},
        "parallelism": par,
        "activation_checkpoint": {"mode": lay.recompute}}
    if lay.precision in CONVERTERS:
        key, recipe = CONVERTERS[lay.precision]
        out[key] = {"recipe_name": recipe}
    return out


def _refuse(lay: Layout) -> None:
    why = []
    if lay.zero == 1:
        why.append("ZeRO-1 (FSDP2 shards the parameters too: zero 0, 2 or 3)")
    if lay.tp > 1 and not lay.sequence_parallel:
        why.append("tp without --sequence-parallel (torchtitan's tensor parallelism splits the "
                   "norms over the sequence)")
    if lay.recompute == "selective":
        why.append("recompute selective (torchtitan's selective checkpointing keeps matmul and "
                   "attention outputs, not what pase's selective keeps: use none or full)")
    if lay.precision not in PRECISIONS:
        why.append(f"precision {lay.precision} (torchtitan trains in bf16, fp32, fp8 or mxfp8)")
    if lay.attention == "unfused":
        why.append("unfused attention (torchtitan runs fused SDPA)")
    if lay.dropout:
        why.append("dropout (torchtitan's models have none)")
    if why:
        raise OptionError(f"--engine torchtitan cannot run {'; '.join(why)}")


def to_torchtitan(model: str, lay: Layout, model_options: Mapping[str, Any] | None = None,
                  header: list[str] | None = None) -> str:
    """The job as TOML text, ``header`` as ``#`` comment lines above it."""
    lines = [f"# {line}" for line in header or []]
    for section, values in job(model, lay, model_options, (header or [""])[0]).items():
        lines += ["", f"[{section}]"] + [f"{key} = {_toml(value)}" for key, value in values.items()]
    return "\n".join(lines).lstrip("\n") + "\n"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'

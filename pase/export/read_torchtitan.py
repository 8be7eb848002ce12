"""A torchtitan job file (TOML) read back as a layout (``pase evaluate --from torchtitan FILE``).

Every key must be one of torchtitan's (:mod:`pase.export.torchtitan_fields`), as its
own parser demands. The keys that set a step are read: ``[model]`` name and flavor
(which must be the model's, :data:`pase.export.torchtitan.FLAVORS`) and converters,
``[training]`` batch sizes, sequence and precision, ``[parallelism]`` degrees and
pipeline, ``[activation_checkpoint]`` mode, the float8 / MX recipes. Keys that change no
step (optimiser, data, checkpoints, logging, compile) are ignored, and those pase
cannot price (:data:`REFUSED`) are named in one line. A key left out takes torchtitan's
default, as torchtitan would.
"""
from __future__ import annotations

from typing import Any

from pase.errors import OptionError
from pase.export import torchtitan
from pase.export.launch import Launch, changed_sizes, model_sizes
from pase.export.torchtitan_fields import FIELDS, TORCHTITAN_VERSION
from pase.perf.layout import make_layout

# key: the value(s) pase prices (torchtitan's default among them); any other is refused
REFUSED = {"training.enable_cpu_offload": (False,), "training.dtype": ("float32",),
           "fault_tolerance.enable": (False,), "parallelism.module_fqns_per_model_part": (None,),
           "parallelism.pipeline_parallel_schedule_csv": ("", None),
           "parallelism.context_parallel_load_balancer": ("headtail", None),
           "activation_checkpoint.mode": ("none", "full")}
SCHEDULES = {v: k for k, v in torchtitan.SCHEDULES.items()}
CONVERTERS = {c: p for p, (c, _) in torchtitan.CONVERTERS.items()}


def load(text: str) -> dict[str, Any]:
    """``{"section.key": value}`` of a TOML text; an OptionError for bad TOML or keys
    torchtitan does not have (all named in one line)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise OptionError(f"--from torchtitan: not TOML: {exc}") from None
    flat: dict[str, Any] = {}

    def walk(table: dict, prefix: str) -> None:
        for key, value in table.items():
            if isinstance(value, dict) and f"{prefix}{key}" not in FIELDS:
                walk(value, f"{prefix}{key}.")
            else:
                flat[f"{prefix}{key}"] = value
    walk(data, "")
    unknown = sorted(k for k in flat if k not in FIELDS)
    if unknown:
        raise OptionError(f"--from torchtitan: not torchtitan {TORCHTITAN_VERSION} job keys: "
                          f"{', '.join(unknown)}")
    for key, value in flat.items():
        _check(key, value)
    return flat


def _check(key: str, value: Any) -> None:
    kind = FIELDS[key]
    ok = {"int": lambda v: isinstance(v, int) and not isinstance(v, bool),
          "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          "bool": lambda v: isinstance(v, bool), "str": lambda v: isinstance(v, str),
          "list": lambda v: isinstance(v, list)}.get(kind, lambda v: True) \
        if isinstance(kind, str) else (lambda v: v in kind)
    if not ok(value):
        want = f"one of {', '.join(kind)}" if isinstance(kind, tuple) else f"a {kind}"
        raise OptionError(f"--from torchtitan: {key} must be {want}, got {value!r}")


def read_torchtitan(text: str, model: str, devices: int) -> Launch:
    """The :class:`Launch` of a torchtitan job for ``model`` on ``devices`` devices."""
    flat = load(text)
    refused = [f"{k} = {flat[k]!r}" for k, allowed in REFUSED.items()
               if k in flat and flat[k] not in allowed]
    want = torchtitan.flavor(model)
    got = (flat.get("model.name", "llama3"), flat.get("model.flavor", "debugmodel"))
    if got != want:
        raise OptionError(f"--from torchtitan: the job runs {got[0]} {got[1]}, not {model!r} "
                          f"({want[0]} {want[1]} in torchtitan)")
    converters = flat.get("model.converters", [])
    precision = "bf16" if flat.get("training.mixed_precision_param", "bfloat16") == "bfloat16" \
        else "fp32"
    for converter in converters:
        if converter not in CONVERTERS:
            refused.append(f"model.converters {converter!r}")
        else:
            precision = CONVERTERS[converter]
    if precision == "fp32" and converters:
        refused.append("a float8 / MX converter with float32 parameters")
    mode = flat.get("activation_checkpoint.mode", "selective")  # torchtitan's default
    if "activation_checkpoint.mode" not in flat:
        refused.append("activation_checkpoint.mode (torchtitan's default, selective)")
    if refused:
        raise OptionError(f"--from torchtitan: pase does not price {', '.join(refused)}; it "
                          f"prices activation_checkpoint.mode none or full, float8 / MX linear "
                          f"converters, bfloat16 or float32 parameters with float32 masters, "
                          f"and even pipeline stages")
    sizes = model_sizes(model)
    sizes["seq"] = flat.get("training.seq_len", 2048)  # torchtitan's default
    par = {k.partition(".")[2]: v for k, v in flat.items() if k.startswith("parallelism.")}
    tp, pp, cp = (par.get(f"{k}_parallel_degree", 1) for k in ("tensor", "pipeline", "context"))
    replicate = par.get("data_parallel_replicate_degree", 1)
    shard = par.get("data_parallel_shard_degree", -1)
    if shard == -1:  # torchtitan's default: the devices left
        if devices % (tp * pp * cp * replicate):
            raise OptionError(f"--from torchtitan: -p {devices} is not a multiple of tp x pp x "
                              f"cp x data_parallel_replicate_degree ({tp * pp * cp * replicate})")
        shard = devices // (tp * pp * cp * replicate)
    if replicate > 1 and shard > 1:
        raise OptionError("--from torchtitan: pase prices FSDP over every data-parallel rank or "
                          "plain replication, not HSDP (data_parallel_replicate_degree and "
                          "data_parallel_shard_degree both > 1)")
    reshard = par.get("fsdp_reshard_after_forward", "default")
    zero = 0 if shard == 1 else (2 if reshard == "never" else 3)
    dp = replicate * shard
    degrees = {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": par.get("expert_parallel_degree", 1)}
    if sizes.get("experts"):  # torchtitan's default: experts not split by tp
        degrees["etp"] = par.get("expert_tensor_parallel_degree", 1)
    local = flat.get("training.local_batch_size", 8)
    global_batch = flat.get("training.global_batch_size", -1)
    if pp > 1:
        micro = par.get("pipeline_parallel_microbatch_size", 1)
        global_batch = local * dp if global_batch == -1 else global_batch
        schedule = _schedule(par, pp, sizes["layers"])
    else:
        micro, schedule = local, "1f1b"
        global_batch = local * dp if global_batch == -1 else global_batch
    layout = make_layout(
        degrees, devices=devices, micro_batch=micro, global_batch=global_batch,
        schedule=schedule, zero=zero, recompute=mode, sequence_parallel=tp > 1,
        precision=precision, attention="fused", dropout=False,
        tp_overlap="on" if par.get("enable_async_tensor_parallel") else "off",
        ep_overlap="on" if degrees["ep"] > 1 and par.get(
            "pipeline_parallel_expert_parallel_overlap", True) else "off")
    return Launch(layout, changed_sizes(model, {"seq": sizes["seq"]}))


def _schedule(par: dict, pp: int, layers: int) -> str:
    name = par.get("pipeline_parallel_schedule", "1F1B")
    if name not in SCHEDULES:
        raise OptionError(f"--from torchtitan: pase prices pipeline_parallel_schedule "
                          f"{', '.join(SCHEDULES)}, not {name!r}")
    first = par.get("pipeline_parallel_first_stage_less_layers", 1)
    last = par.get("pipeline_parallel_last_stage_less_layers", 1)
    per = par.get("pipeline_parallel_layers_per_stage")
    if first or last:
        raise OptionError("--from torchtitan: pase cuts equal pipeline stages (the embedding with "
                          "the first, the head with the last): set pipeline_parallel_first_stage_"
                          "less_layers and pipeline_parallel_last_stage_less_layers to 0")
    if per is None:  # torchtitan: one stage per rank, two for a looped schedule
        virtual = 2 if name == "Interleaved1F1B" else 1
    elif layers % (per * pp):
        raise OptionError(f"--from torchtitan: pipeline_parallel_layers_per_stage {per} x pp {pp} "
                          f"does not divide the layers ({layers}): pase cuts equal stages")
    else:
        virtual = layers // (per * pp)
    if SCHEDULES[name] == "interleaved":
        return f"interleaved:{virtual}"
    if virtual != 1:
        raise OptionError(f"--from torchtitan: {name} runs one stage per rank, but "
                          f"pipeline_parallel_layers_per_stage gives {virtual}")
    return SCHEDULES[name]

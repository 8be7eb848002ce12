"""Published runs of 2024-2026 as the `pase evaluate` command lines that price them.

``row_argv(row)`` turns one row of ``benchmarks/data/runs-2024-2026.json`` into the
command a user types, the way the project's fidelity check states it:

    pase evaluate MODEL -p GPUS --cluster PRESET --layout tp=T,pp=P,dp=D[,cp=C][,ep=E]
        --micro-batch M --global-batch B [--schedule interleaved:V] --precision P
        --zero Z --recompute auto|selective|full [--sequence-parallel]
        --model-option seq=S [--model-option KEY=VALUE ...] --format json

ZeRO is 3 for FSDP rows and 1 (the distributed optimizer) otherwise; the
recomputation is the row's where it is published, else ``auto``;
``--sequence-parallel`` whenever tp > 1. A row that lacks what the command needs
(its layout, its batch or its device) gets the reason instead of a command.
"""
from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

from pase.cli import main as pase_main

DATA = Path(__file__).resolve().parent / "data" / "runs-2024-2026.json"

# The rows' device names -> pase cluster presets (a preset grows to -p devices).
PRESETS = {"A100-80GB": "dgx-a100-80gb", "H100-80GB": "h100-sxm", "H100": "h100-sxm",
           "H200": "dgx-h200", "B200": "dgx-b200", "B300": "dgx-b300",
           "GB200": "gb200-nvl72", "GB300": "gb300-nvl72"}
OPTION_KEYS = ("layers", "width", "heads", "kv_heads", "ff", "moe_ff", "experts",
               "shared_experts", "top_k", "vocab")


def preset(device: str | None) -> str | None:
    if device is None:
        return None
    if device.startswith("H100"):  # Meta's 96 GB Grand Teton H100s are priced as H100 SXM
        return "h100-sxm"
    return PRESETS.get(device)


def model_name(row: dict) -> str:
    """The zoo name: a GPT of Megatron's scaling series (or GPT-3, BLOOM) is ``gpt3`` by options."""
    name = row["model"].split()[0]
    if re.fullmatch(r"gpt3?-[\d.]+b", name) or name in ("bloom-176b",):
        return "gpt3"
    return name


def recompute(row: dict) -> str:
    text = str(row.get("recompute") or "auto")
    return text.split()[0] if text.split()[0] in ("none", "selective", "full") else "auto"


def row_spec(row: dict) -> dict | str:
    """What the command states for a row (model, devices, cluster, layout and its
    options, model options), or why the row cannot be priced."""
    if row.get("layout_complete") is False:
        return "layout not published"
    cluster = preset(row.get("device"))
    if cluster is None:
        return f"device {row.get('device')!r} has no preset"
    tp, pp, cp, ep = (int(row.get(k) or 1) for k in ("tp", "pp", "cp", "ep"))
    dp = row["gpus"] // (tp * pp * cp)
    # torchtitan's local batch is per data-parallel rank, cut into micro-batches of 1 under
    # pipelining; an unpublished micro-batch is 1
    micro = row.get("micro_batch") or (row.get("local_batch") if pp == 1 else None) or 1
    if row.get("grad_accum") and row.get("global_batch") and not row.get("micro_batch"):
        micro = max(1, row["global_batch"] // (dp * row["grad_accum"]))
    batch, seq = batch_and_sequence(row)
    if not batch or not seq:
        return "global batch or sequence not published"
    degrees = f"tp={tp},pp={pp},dp={dp}" + (f",cp={cp}" if cp > 1 else "") + \
        (f",ep={ep}" if ep > 1 else "")
    options = {"seq": int(seq)}
    options.update({k: row["options"][k] for k in OPTION_KEYS if k in (row.get("options") or {})})
    layout = {"schedule": f"interleaved:{row['vp']}" if int(row.get("vp") or 1) > 1 else "1f1b",
              "precision": row.get("precision") or "bf16",
              "zero": 3 if row.get("fsdp") or row.get("zero") == 3 else 1,
              "recompute": recompute(row), "sequence_parallel": tp > 1}
    return {"model": model_name(row), "devices": row["gpus"], "cluster": cluster,
            "layout": degrees, "micro_batch": micro, "global_batch": batch,
            "options": options, **layout}


def row_argv(row: dict) -> list[str] | str:
    """The command's arguments after ``pase``, or why the row cannot be priced."""
    spec = row_spec(row)
    if isinstance(spec, str):
        return spec
    argv = ["evaluate", spec["model"], "-p", str(spec["devices"]), "--cluster", spec["cluster"],
            "--layout", spec["layout"], "--micro-batch", str(spec["micro_batch"]),
            "--global-batch", str(spec["global_batch"])]
    if spec["schedule"] != "1f1b":
        argv += ["--schedule", spec["schedule"]]
    argv += ["--precision", spec["precision"], "--zero", str(spec["zero"]),
             "--recompute", spec["recompute"]]
    if spec["sequence_parallel"]:
        argv.append("--sequence-parallel")
    for key, value in spec["options"].items():
        argv += ["--model-option", f"{key}={value}"]
    return argv + ["--format", "json"]


def row_case(spec: dict):
    """The row's graph (at its micro-batch), cluster and layout, as the command builds them:
    for pricing one row many times (calibration)."""
    from pase.api import load_graph
    from pase.cluster import get_cluster
    from pase.perf import make_layout

    lay = make_layout(spec["layout"], devices=spec["devices"], micro_batch=spec["micro_batch"],
                      global_batch=spec["global_batch"], schedule=spec["schedule"],
                      zero=spec["zero"], recompute=spec["recompute"],
                      sequence_parallel=spec["sequence_parallel"], precision=spec["precision"])
    graph = load_graph(spec["model"], batch=spec["micro_batch"], **spec["options"])
    return graph, get_cluster(spec["cluster"], spec["devices"]), lay


def batch_and_sequence(row: dict) -> tuple[int, int | None]:
    """Sequences per step (torchtitan publishes a local batch per data-parallel rank) and
    the sequence length (torchtitan's config default where the table omits it); 0 or None
    where not published."""
    tp, pp, cp = (int(row.get(k) or 1) for k in ("tp", "pp", "cp"))
    dp = row["gpus"] // (tp * pp * cp)
    return (row.get("global_batch") or (row.get("local_batch") or 0) * dp,
            row.get("seq") or row.get("seq_config_default"))


def measured_step(row: dict) -> float | None:
    """Seconds per step: published, or global tokens over the published throughput."""
    if row.get("step_seconds"):
        return float(row["step_seconds"])
    tps = row.get("tokens_per_second_per_gpu")
    batch, seq = batch_and_sequence(row)
    if tps and batch and seq:
        return batch * seq / (tps * row["gpus"])
    return None


def run(argv: list[str]) -> tuple[dict | None, str]:
    """Run ``pase`` in this process: its JSON answer, or None and its one-line error."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = pase_main(argv)
    if status != 0:
        return None, err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {status}"
    return json.loads(out.getvalue()), ""


def main(argv: list[str] | None = None) -> int:
    """``python benchmarks/published_runs.py ID...``: each row's `pase` command line."""
    import argparse
    import shlex
    import sys

    from provenance import stamp

    ap = argparse.ArgumentParser(description="the pase command that prices a published run")
    ap.add_argument("ids", nargs="+", type=int, help="row ids of runs-2024-2026.json")
    args = ap.parse_args(argv)
    print(stamp())
    rows = {r["id"]: r for r in json.loads(DATA.read_text())["rows"]}
    for i in args.ids:
        if i not in rows:
            print(f"no row {i}", file=sys.stderr)
            return 2
        argv_ = row_argv(rows[i])
        print(f"{i}: " + (argv_ if isinstance(argv_, str) else "pase " + shlex.join(argv_)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

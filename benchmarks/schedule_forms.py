"""How far are the zero-bubble schedules' closed forms from their replay, on real layouts?

    python benchmarks/schedule_forms.py

A ZB-H1 or DualPipe layout (and its pipeline plan) is priced by a closed form over each
stage's forward, backward and weight-gradient seconds (pase.perf.schedule.forms), which is
exact for equal stages. This script prices a few published-scale layouts with
`pase evaluate --layout`, runs the same stages' programs through the event replay
(pase.perf.schedule.replay: each device's tasks in the schedule's order, every
dependency waited for), and prints both pipeline times (the step less its once-a-step
tail), their ratio and how unequal the stages are.
"""
from __future__ import annotations

from provenance import stamp

from pase import api
from pase.perf import evaluate_layout, make_layout
from pase.perf.schedule import Work, build, replay

RUNS = [  # model, options, devices, layout, cluster, global batch, schedule, other options
    ("gpt2", {"layers": 4, "vocab": 50304}, 8, "tp=1,pp=4,dp=2", "dgx-a100-80gb", 32, "zb-h1", {}),
    ("gpt2", {"layers": 4, "vocab": 50304}, 8, "tp=1,pp=4,dp=2", "dgx-a100-80gb", 32, "dualpipe", {}),
    ("deepseek-v3", {"seq": 4096}, 1024, "tp=2,pp=16,dp=32,ep=8,etp=1", "h100-sxm", 8192,
     "zb-h1", {"zero": 2, "recompute": "full"}),
    ("llama3.1-405b", {"seq": 8192}, 16384, "tp=4,pp=8,dp=128,cp=4", "h100-sxm", 2048, "zb-h1",
     {"zero": 1}),
    ("llama3.1-405b", {"seq": 8192}, 16384, "tp=4,pp=8,dp=128,cp=4", "h100-sxm", 2048,
     "dualpipe", {"zero": 1}),
    ("gpt3-175b", {}, 1024, "tp=8,pp=8,dp=16", "h100-sxm", 1536, "zb-h1", {"zero": 1}),
    ("gpt3-175b", {}, 1024, "tp=8,pp=8,dp=16", "h100-sxm", 1536, "dualpipe", {"zero": 1}),
]


def row(model, options, devices, degrees, cluster, global_batch, schedule, other) -> str:
    micro = 2 if model == "gpt2" else 1
    lay = make_layout(degrees, devices=devices, micro_batch=micro, global_batch=global_batch,
                      schedule=schedule, **other)
    est = evaluate_layout(api.load_graph(model, batch=micro, **options), cluster, lay)
    d = est.details
    work = [Work(f + s, b + s, w) for f, b, w, s in
            zip(d["stage_forward_seconds"], d["stage_backward_seconds"],
                d["stage_weight_seconds"], d["send_seconds"])]
    pipe = build(schedule, lay.pp, lay.microbatches)
    chunks = work * pipe.lines  # DualPipe's second direction runs the same stages
    ran = max(replay(pipe, chunks, [0.0] * len(chunks)).ends)
    form = est.step_seconds - d["once_seconds"]
    times = [w.forward + w.backward for w in work]
    return (f"| {model} | {devices:,} | {degrees} | {schedule} | {lay.microbatches} | "
            f"{min(times) / max(times):.3f} | {form:.4f} | {ran:.4f} | {ran / form:.4f} |")


def main() -> None:
    print(stamp())
    print()
    print("| model | GPUs | layout | schedule | m | fastest stage over slowest | closed form s "
          "| replay s | replay / form |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run in RUNS:
        print(row(*run), flush=True)


if __name__ == "__main__":
    main()

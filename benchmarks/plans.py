"""Whole training plans: pase's pipeline search against published Megatron-LM layouts.

Run: ``python benchmarks/plans.py`` (``--quick`` for a smaller search). Writes
``benchmarks/results/plans.md`` and prints it.

Two models, each with its reference layout from the Megatron-LM work of
Narayanan et al. (SC'21, "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM") and the repository that accompanies it:

- **GPT-3 175B on 1,024 H100-SXM** (`gpt3-175b`: 96 layers, width 12288,
  sequence 2048). Reference, taken from the Megatron-LM repository's 175B
  example (``examples/pretrain_gpt3_175B.sh`` as first committed, and the
  README paragraph describing it, which reports about 32 s per iteration and
  138 TFLOP/s per A100, 44% of peak, on 1,024 A100s): tensor 8 x pipeline 16 x
  data 8, micro-batch 1, global batch 1536 (so m = 1536 / (8 x 1) = 192
  micro-batches per pipeline), the default non-interleaved 1F1B schedule, and
  full activation recomputation (``--checkpoint-activations``). It ran on
  1,024 GPUs, the device count used here, so nothing is scaled.
- **Llama 2 70B on 256 H100-SXM** (`llama2-70b`: 80 layers, width 8192,
  sequence 4096). The paper's weak-scaling table (Table 1) has no 70B row; the
  nearest is the 76.1B model (80 heads, width 10240, 60 layers), run with
  tensor 8 x pipeline 4 on 1,024 GPUs (data 32) at global batch 1792, the
  1F1B schedule, micro-batch 1 and activation recomputation. The table's
  numbers are as recalled from the paper: the table is an image in the
  repository's README and could not be read as text here, so treat this row as
  a cited-from-memory reference. Scaled to 256 GPUs: tensor 8 x pipeline 4 x
  data 8, and the global batch scaled with the data degree, 1792 x 8 / 32 = 448,
  keeping m = 448 / (8 x 1) = 56 micro-batches per pipeline.

Both sides are priced by the same alpha-beta model and simulated by the same
simulator: fp16 elements (``bytes_per_element=2``), Adam state (4 copies of the
weights, at 2 bytes: 8 bytes per parameter; real mixed-precision training keeps
about 16, so memory here is an underestimate of states), and
``efficiency=0.25``: pase counts a multiply-add as one FLOP while the H100's
989 TFLOP/s counts it as two, so 0.25 is half of the device's dense fp16 peak,
near what Megatron-LM reports on A100s (44-52%).

The reference layout is evaluated through the pipeline machinery with its
pipeline degree, micro-batch count, schedule and recomputation fixed, and the
stages' per-layer splits left to pase's exact dp on the stage's 64 devices
(Megatron's tensor 8 x data 8 split is one point of that space, so this is the
reference's layout at its best under pase's cost model). pase's own plan is
searched over the space stated in the results (stage boundaries, stage sizes,
m, with recomputation fixed as the reference's, because searching it per op
over 96 layers took more than the few minutes this benchmark gets).

MFU: model FLOP (6 x forward multiply-adds ... as 2 FLOP each x 3 for forward
and backward, recomputation not counted) per step over step time x devices x
peak.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pase import api
from pase.cluster import get_cluster
from pase.counts import counts
from pase.pipeline import solve_pipeline
from pase.sim.pipeline import simulate_pipeline

RESULTS = Path(__file__).parent / "results" / "plans.md"
# Shared by both sides (see the module docstring).
COSTS = {"bytes_per_element": 2, "efficiency": 0.25, "optimizer": "adam"}
# pase's plan may also shard the optimizer state over each op's data-parallel group
# (ZeRO stage 1, Megatron-LM's later "distributed optimizer"; the 2021 runs did not).
PASE_EXTRA = {"zero": "1"}


@dataclass
class Reference:
    tensor: int
    pipeline: int
    data: int
    micro_batch: int
    global_batch: int
    schedule: str
    recompute: str
    source: str

    @property
    def microbatches(self) -> int:
        return self.global_batch // (self.data * self.micro_batch)


@dataclass
class Case:
    name: str
    model: str
    devices: int
    cluster: str
    reference: Reference
    reference_every: int  # blocks per unit that pin the reference's equal stages
    stage_counts: tuple[int, ...]  # pase: pipeline depths searched (equal blocks per stage)
    microbatches: tuple[int, ...]  # pase: m searched


CASES = [
    Case("GPT-3 175B", "gpt3-175b", 1024, "h100-sxm",
         Reference(8, 16, 8, 1, 1536, "1f1b", "all",
                   "Megatron-LM examples/pretrain_gpt3_175B.sh and its README paragraph "
                   "(the SC'21 paper's 175B setup; 1,024 GPUs, not scaled)"),
         reference_every=6, stage_counts=(8, 16), microbatches=(192, 384)),
    Case("Llama 2 70B", "llama2-70b", 256, "h100-sxm",
         Reference(8, 4, 8, 1, 448, "1f1b", "all",
                   "SC'21 Table 1, row 76.1B (t=8, p=4, 1,024 GPUs, batch 1792; recalled), "
                   "data degree and batch scaled by 256/1024"),
         reference_every=20, stage_counts=(4, 8, 16), microbatches=(28, 56, 112)),
]


def run_case(case: Case, quick: bool, log) -> dict[str, Any]:
    ref = case.reference
    costs = {**COSTS, "recompute": ref.recompute}
    t0 = time.perf_counter()
    reference = solve_pipeline(case.model, case.devices, batch=ref.global_batch,
                               microbatches=ref.microbatches, schedule=ref.schedule,
                               cluster=case.cluster, cost_options=costs,
                               stage_sizes=[ref.tensor * ref.data], uniform=True,
                               every=case.reference_every, progress=log)
    log(f"{case.name}: reference priced in {time.perf_counter() - t0:.0f} s")
    layers = _count_blocks(case.model)
    found, searched, t0 = None, [], time.perf_counter()
    counts_ = (ref.pipeline,) if quick else case.stage_counts
    for s in counts_:
        plan = solve_pipeline(case.model, case.devices, batch=ref.global_batch,
                              microbatches=list(case.microbatches if not quick else
                                                (ref.microbatches,)),
                              schedule=ref.schedule, cluster=case.cluster,
                              cost_options={**costs, **PASE_EXTRA},
                              stage_sizes=[case.devices // s], uniform=True,
                              every=layers // s, progress=log)
        searched.append(plan.search)
        log(f"{case.name}: {s} stages: {plan.step_time:.4g} s")
        if found is None or plan.step_time < found.step_time:
            found = plan
    search_seconds = time.perf_counter() - t0
    log(f"{case.name}: pase searched in {search_seconds:.0f} s")
    rows = []
    for label, plan in (("reference", reference), ("pase", found)):
        t0 = time.perf_counter()
        sim = simulate_pipeline(plan, timeline=False)
        log(f"{case.name} {label}: simulated in {time.perf_counter() - t0:.0f} s")
        rows.append(_row(case, label, plan, sim))
    return {"case": case, "rows": rows, "stage_counts": counts_,
            "stage_solves": sum(x.get("stage_solves", 0) for x in searched),
            "microbatches": case.microbatches if not quick else (ref.microbatches,),
            "search_seconds": search_seconds}


def _count_blocks(model: str) -> int:
    from pase.pipeline.cuts import cut_points

    return len(cut_points(api.load_graph(model, batch=1))) - 1


def _row(case: Case, label: str, plan, sim) -> dict[str, Any]:
    graph = api.load_graph(case.model, batch=plan.batch)
    model_flop = 6 * counts(graph).forward_flops  # 2 FLOP per multiply-add, x3 fwd+bwd
    peak = get_cluster(case.cluster, case.devices).device.peak_tflops * 1e12
    middle = plan.stages[len(plan.stages) // 2]
    return {"label": label, "plan": plan.one_line(), "splits": _splits(middle),
            "priced": plan.step_time, "simulated": sim.step_time, "bubble": sim.bubble,
            "memory": max(sim.peak_memory), "mfu": model_flop / (sim.step_time * case.devices * peak),
            "status": plan.status}


def _splits(stage) -> str:
    """The split of a middle stage's big GEMMs (tensor x data degrees inside the stage)."""
    picks = []
    for op, config in stage.configs.items():
        if op.endswith(("attn.qkv", "mlp.fc1", "mlp.gate", "attn.q")):
            picks.append(f"{op.split('.', 1)[1]} " + "·".join(f"{d}{f}" for d, f in config.items() if f > 1))
        if len(picks) == 2:
            break
    return ", ".join(picks) or "-"


def report(results: list[dict[str, Any]], command: str) -> str:
    lines = ["# Whole training plans: pase's pipeline search vs published Megatron-LM layouts", "",
             f"Produced by `{command}` (see `benchmarks/plans.py` for the sources of every "
             "reference number, the cost options and what is fixed).", ""]
    for res in results:
        case, ref = res["case"], res["case"].reference
        lines += [f"## {case.name} on {case.devices} x {case.cluster}", "",
                  f"Reference: tensor {ref.tensor} x pipeline {ref.pipeline} x data {ref.data}, "
                  f"micro-batch {ref.micro_batch}, global batch {ref.global_batch} "
                  f"(m = {ref.microbatches}), {ref.schedule}, recomputation {ref.recompute}. "
                  f"Source: {ref.source}.", "",
                  f"pase searched: {' / '.join(map(str, res['stage_counts']))} stages of equal "
                  f"layer counts on equal sub-meshes (devices / stages each), m in "
                  f"{list(res['microbatches'])}, recomputation {ref.recompute}, ZeRO stage "
                  f"{PASE_EXTRA['zero']}, per-layer splits by the dp inside each stage; "
                  f"{res['stage_solves']} stage solves, {res['search_seconds']:.0f} s.", "",
                  "| plan | priced step (s) | simulated step (s) | bubble | memory / device (GiB) "
                  "| MFU | status | layout |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in res["rows"]:
            lines.append(f"| {r['label']} | {r['priced']:.3f} | {r['simulated']:.3f} | "
                         f"{r['bubble']:.1%} | {r['memory'] / 2**30:.1f} | {r['mfu']:.1%} | "
                         f"{r['status']} | {r['plan']}; middle stage: {r['splits']} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="search only the reference's m")
    parser.add_argument("--only", help="run one case (a model name)")
    args = parser.parse_args(argv)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    results = [run_case(c, args.quick, log) for c in CASES if args.only in (None, c.model)]
    command = "python benchmarks/plans.py" + (" --quick" if args.quick else "") + \
        (f" --only {args.only}" if args.only else "")
    text = report(results, command)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    if args.only is None:
        RESULTS.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()

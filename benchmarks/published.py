"""How close does pase's performance model come to published training runs?

    python benchmarks/published.py [--data benchmarks/data/calibration.json] [--json FILE]
    python benchmarks/published.py --runs [benchmarks/data/runs-2024-2026.json]
    python benchmarks/published.py --search

``--runs`` prices the published runs of 2024-2026 (NeMo / Megatron-Bridge,
Megatron-LM, torchtitan, NeMo AutoModel: dense and MoE, H100 to GB300, bf16 to
NVFP4) each by the `pase evaluate` command its row states
(``published_runs.row_argv``, run in this process), and prints every row
(measured and predicted step, error, MFU, memory against the published peak,
whether it fits, the recomputation ``auto`` chose), then the coverage (rows
priced / rows), the median |error|, the share within 10% and 20%, the worst, and
the median |memory error| where a peak is published.

For each published run (``benchmarks/data/calibration.json``: Megatron-LM on A100
with tensor and pipeline parallelism, PyTorch FSDP runs by MosaicML on A100 and
H100, each with its source) it prices the run's exact layout with
:func:`pase.perf.evaluate_layout` (what ``pase evaluate --layout`` runs) and
prints the measured and predicted step time, the error, the predicted MFU,
memory per device and whether it fits; then the median and worst |error|.

A row gives ``step_seconds`` or ``tokens_per_second``; the step time of a
throughput row is ``global_batch * seq / tokens_per_second``.

``--search`` also searches every layout of the row's model, devices, cluster and
global batch under the same model (``pase solve --layouts``) and prints the
published layout's MFU and the best one's, and the step of both replayed by the
event simulation of :mod:`pase.perf.simulate` against the analytic price.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import published_runs
from provenance import stamp

from pase.api import load_graph
from pase.perf import evaluate_layout, make_layout

DATA = Path(__file__).resolve().parent / "data" / "calibration.json"
RUNS = published_runs.DATA
# The rows' device names -> pase cluster presets (nodes of 8 GPUs; presets grow to -p).
CLUSTERS = {"A100-80GB": "dgx-a100-80gb", "a100_80gb": "dgx-a100-80gb",
            "a100_40gb": "dgx-a100", "h100_80gb": "h100-sxm"}


def row_model(row: dict) -> tuple[str, dict]:
    """The zoo model and its options for a row (``gpt3 (MPT)`` is pase's gpt3)."""
    name = row["model"].split()[0]
    options = dict(row.get("options", {}))
    options["batch"] = row["micro_batch"]
    if "seq" in options:
        options.setdefault("positions", options["seq"])
    return name, options


# Megatron-LM before 2023 (SC'21, Korthikanti et al.) ran unfused attention (a fused
# scale-mask-softmax kernel, the scores stored) with dropout 0.1: facts of those runs.
UNFUSED_SOURCES = ("Korthikanti", "Megatron-LM")


def row_layout(row: dict):
    schedule = f"interleaved:{row['interleave']}" if row.get("interleave", 1) > 1 else "1f1b"
    degrees = {k: row[k] for k in ("tp", "pp", "dp", "cp", "ep") if k in row}
    precision = "fp32" if row.get("precision") == "fp32" else "bf16"
    megatron = row["source"].startswith(UNFUSED_SOURCES)
    return make_layout(degrees, devices=row["gpus"], micro_batch=row["micro_batch"],
                       global_batch=row["global_batch"], schedule=schedule,
                       zero=row.get("zero", 0), recompute=row.get("recompute", "none"),
                       sequence_parallel=row.get("sequence_parallel", False), precision=precision,
                       attention=row.get("attention", "unfused" if megatron else "fused"),
                       dropout=row.get("dropout", megatron))


def measured_step(row: dict, seq: int) -> float:
    if "step_seconds" in row:
        return float(row["step_seconds"])
    return row["global_batch"] * seq / float(row["tokens_per_second"])


def evaluate_row(row: dict) -> dict:
    name, options = row_model(row)
    graph = load_graph(name, **options)
    estimate = evaluate_layout(graph, CLUSTERS[row["device"]], row_layout(row))
    seq = estimate.tokens_per_second * estimate.step_seconds / row["global_batch"]
    measured = measured_step(row, round(seq))
    return {"row": row, "measured": measured, "predicted": estimate.step_seconds,
            "error": estimate.step_seconds / measured - 1, "estimate": estimate.to_dict()}


def describe(row: dict) -> str:
    o = row.get("options", {})
    size = f"{o['layers']}x{o['width']}" if "layers" in o else row["model"]
    lay = f"tp{row['tp']} pp{row['pp']} dp{row['dp']}" + (f" cp{row['cp']}" if row.get("cp") else "")
    return f"{size} s{o.get('seq', 2048)} {row['device']} x{row['gpus']} {lay} z{row.get('zero', 0)} " \
           f"mb{row['micro_batch']} {row.get('recompute', 'none')}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA, help="published runs (JSON with 'rows')")
    ap.add_argument("--json", type=Path, help="also write every row's estimate here")
    ap.add_argument("--runs", type=Path, nargs="?", const=RUNS, default=None,
                    help="price the 2024-2026 runs (default file: %(const)s)")
    ap.add_argument("--search", action="store_true",
                    help="also search the layouts of each row (minutes) and simulate both")
    args = ap.parse_args(argv)
    print(stamp())
    if args.runs is not None:
        return report_runs(args.runs, args.json)
    rows = json.loads(args.data.read_text())["rows"]
    if args.search:
        return search(rows)
    print("| run | source | measured s | predicted s | error | MFU measured | MFU predicted | "
          "memory GiB | fits | seconds to price |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    results = []
    for row in rows:
        start = time.process_time()
        r = evaluate_row(row)
        took = time.process_time() - start
        est = r["estimate"]
        mfu = f"{row['mfu']:.1%}" if "mfu" in row else "-"
        print(f"| {describe(row)} | {row['source'].split(':')[0]} | {r['measured']:.3f} | "
              f"{r['predicted']:.3f} | {r['error']:+.1%} | {mfu} | {est['mfu']:.1%} | "
              f"{est['memory_bytes'] / 2**30:.1f} | {'yes' if est['fits_memory'] else 'NO'} | "
              f"{took:.2f} |", flush=True)
        results.append(r)
    errors = [abs(r["error"]) for r in results]
    print(f"\nrows: {len(results)}; median |error| {statistics.median(errors):.1%}; worst "
          f"{max(errors):.1%}; within 10%: {sum(e <= 0.10 for e in errors)}; fit in memory: "
          f"{sum(r['estimate']['fits_memory'] for r in results)} of {len(results)}")
    if args.json:
        args.json.write_text(json.dumps([{k: v for k, v in r.items()} for r in results], indent=1))
    return 0


def price_run(row: dict) -> dict:
    """One 2024-2026 row: its command, measurement and answer (or why it is not priced)."""
    argv = published_runs.row_argv(row)
    measured = published_runs.measured_step(row)
    if isinstance(argv, str):
        return {"row": row, "unpriced": argv}
    if measured is None:
        return {"row": row, "unpriced": "no step time or throughput published"}
    answer, error = published_runs.run(argv)
    if answer is None:
        return {"row": row, "unpriced": error}
    out = {"row": row, "argv": argv, "measured": measured, "answer": answer,
           "error": answer["step_seconds"] / measured - 1}
    if row.get("peak_memory_gib"):
        out["memory_error"] = answer["memory_bytes"] / (row["peak_memory_gib"] * 2**30) - 1
    return out


def summary(results: list[dict]) -> dict:
    """Coverage, median, shares within 10% and 20%, the worst, memory and fits."""
    priced = [r for r in results if "error" in r]
    errors = sorted(abs(r["error"]) for r in priced)
    memory = [abs(r["memory_error"]) for r in priced if "memory_error" in r]
    worst = max(priced, key=lambda r: abs(r["error"]), default=None)
    return {"rows": len(results), "priced": len(priced),
            "median": statistics.median(errors) if errors else None,
            "within_10": sum(e <= 0.10 for e in errors), "within_20": sum(e <= 0.20 for e in errors),
            "worst": worst, "memory_median": statistics.median(memory) if memory else None,
            "memory_rows": len(memory),
            "not_fitting": [r for r in priced if not r["answer"]["fits_memory"]]}


def report_runs(path: Path, json_out: Path | None) -> int:
    print("| id | model | device x GPUs | layout | precision | measured s | predicted s | error | "
          "MFU | memory GiB (published) | fits | recompute |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    results = []
    for row in json.loads(path.read_text())["rows"]:
        r = price_run(row)
        results.append(r)
        where = f"{row.get('device') or '?'} x{row['gpus']}"
        if "unpriced" in r:
            print(f"| {row['id']} | {row['model'][:24]} | {where} | - | {row.get('precision')} | - | - | "
                  f"not priced: {r['unpriced'][:80]} | | | | |", flush=True)
            continue
        a, lay = r["answer"], r["answer"]["layout"]
        degrees = " ".join(f"{k}{lay[k]}" for k in ("tp", "pp", "dp", "cp", "ep") if lay[k] > 1)
        rc = lay["recompute"] + (f":{lay['recompute_layers']}" if lay["recompute_layers"] else "")
        peak = f" ({row['peak_memory_gib']})" if row.get("peak_memory_gib") else ""
        print(f"| {row['id']} | {row['model'][:24]} | {where} | {degrees} mb{lay['micro_batch']} | "
              f"{lay['precision']} | {r['measured']:.3f} | {a['step_seconds']:.3f} | "
              f"{r['error']:+.1%} | {a['mfu']:.1%} | {a['memory_bytes'] / 2**30:.1f}{peak} | "
              f"{'yes' if a['fits_memory'] else 'NO'} | {rc} |", flush=True)
    s = summary(results)
    w = s["worst"]
    stated = sum("unpriced" not in r or "published" not in r["unpriced"] for r in results)
    print(f"\npriced: {s['priced']} of {s['rows']} rows ({s['priced'] / s['rows']:.0%}); of the "
          f"{stated} whose layout, batch and measurement are published: {s['priced']} "
          f"({s['priced'] / max(1, stated):.0%})")
    if s["priced"]:
        print(f"median |step error|: {s['median']:.1%}; within 10%: {s['within_10']} "
              f"({s['within_10'] / s['priced']:.0%}); within 20%: {s['within_20']} "
              f"({s['within_20'] / s['priced']:.0%}); worst: {w['error']:+.1%} (row {w['row']['id']}, "
              f"{w['row']['model']})")
        print(f"runs called 'does not fit': {len(s['not_fitting'])}"
              + "".join(f" {r['row']['id']}" for r in s["not_fitting"]))
    if s["memory_rows"]:
        print(f"median |memory error| over the {s['memory_rows']} rows with a published peak: "
              f"{s['memory_median']:.1%}")
    if json_out:
        json_out.write_text(json.dumps([{k: v for k, v in r.items() if k != "row"} | {"id": r["row"]["id"]}
                                        for r in results], indent=1, default=str))
    return 0


def search(rows: list[dict]) -> int:
    """Per row: the published layout and the best searched one, analytic and simulated."""
    from pase.perf.search import search_layouts
    from pase.perf.simulate import simulate_step

    print("| run | published MFU (pase) | best MFU | best layout | layouts priced | CPU s | "
          "simulated / analytic, published | simulated / analytic, best |")
    print("|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for row in rows:
        name, options = row_model(row)
        lay = row_layout(row)
        graph = load_graph(name, **options)
        cluster = CLUSTERS[row["device"]]
        own = evaluate_layout(graph, cluster, lay)
        options.pop("batch")
        found = search_layouts(lambda m, name=name, o=options: load_graph(name, batch=m, **o),
                               row["gpus"], cluster,
                               row["global_batch"], attention=lay.attention, dropout=lay.dropout)
        best = found.best
        sims = [simulate_step(e) / e.step_seconds - 1 for e in (own, best)]
        worst = max(worst, *map(abs, sims))
        b = best.layout
        text = (f"tp{b.tp} pp{b.pp} dp{b.dp}" + (f" cp{b.cp}" if b.cp > 1 else "") +
                f" mb{b.micro_batch} {b.schedule}{':' + str(b.virtual) if b.virtual > 1 else ''} "
                f"z{b.zero} {b.recompute}")
        print(f"| {describe(row)} | {own.mfu:.1%} | {best.mfu:.1%} | {text} | {found.priced} | "
              f"{found.seconds:.0f} | {sims[0]:+.2%} | {sims[1]:+.2%} |", flush=True)
        assert best.step_seconds <= own.step_seconds * (1 + 1e-9), "the search missed the published layout"
    print(f"\nworst |simulated / analytic - 1|: {worst:.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

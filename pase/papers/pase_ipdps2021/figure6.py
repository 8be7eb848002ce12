"""Figure 6: speedup over data parallelism on the paper's two (simulated) GPU systems.

For each model and device count the paper-cost-model Problem (default machine,
the paper's batch sizes) is solved by the dp (optimal under that model), the
expert layout (:mod:`.experts`) and mcmc (seeded, time-limited). Each strategy
and data parallelism are simulated (:func:`pase.sim.simulate`) on each cluster
preset, which grows to the needed number of 8-GPU nodes. A point's speedup is
``step_time(data-parallel) / step_time(strategy)``; its *predicted* speedup is
the same ratio of paper-model costs.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from pase.api import build_problem, run_solver, to_strategy
from pase.cluster import get_cluster
from pase.errors import SolverUnavailableError
from pase.papers.pase_ipdps2021.experts import expert_solution
from pase.papers.pase_ipdps2021.report import md_table, write_json
from pase.papers.pase_ipdps2021.settings import (
    EXPERTS,
    FIGURE6_BATCH,
    TITLES,
    Settings,
    machine_line,
)
from pase.sim import simulate

STRATEGIES = ("dp", "expert", "mcmc")
BASELINE = "data-parallel"
EXPERT_LABELS = {"owt": "OWT", "gnmt": "GNMT", "megatron": "Mesh-TF"}
LABELS = {"dp": "PaSE (dp)", "expert": "expert", "mcmc": "mcmc (FlexFlow-style)"}
COLORS = {"dp": "tab:green", "expert": "tab:orange", "mcmc": "tab:blue"}


def run(settings: Settings, progress: Callable[[str], Any]) -> list[dict[str, Any]]:
    points = []
    for model in settings.figure6_models:
        for p in settings.figure6_devices:
            progress(f"figure 6: {model} p={p}")
            points.append(_point(model, p, settings))
    return points


def _point(model: str, p: int, settings: Settings) -> dict[str, Any]:
    batch = FIGURE6_BATCH[model]
    built = build_problem(model, p, batch=batch)
    solutions = {
        BASELINE: run_solver(BASELINE, built.problem),
        "dp": run_solver("dp", built.problem),
        "expert": expert_solution(EXPERTS[model], built.problem),
        "mcmc": run_solver("mcmc", built.problem, time_limit=settings.time_limit,
                           seed=settings.seed),
    }
    configs = {name: to_strategy(built, sol).configs for name, sol in solutions.items()}
    costs = {name: sol.cost for name, sol in solutions.items()}
    point: dict[str, Any] = {
        "model": model, "devices": p, "batch": batch, "expert": EXPERTS[model],
        "cost": costs,
        "predicted_speedup": {s: costs[BASELINE] / costs[s] for s in STRATEGIES},
        "dp_seconds": solutions["dp"].wall_time, "mcmc_seconds": solutions["mcmc"].wall_time,
        "mcmc_stop": solutions["mcmc"].stats.get("stop"),
        "mcmc_best_iteration": solutions["mcmc"].stats.get("best_iteration"),
        "expert_stats": {k: v for k, v in solutions["expert"].stats.items()
                         if isinstance(v, (int, float, str))},
        "sim": {}}
    for cluster in settings.clusters:
        steps, memory = {}, {}
        for name, cfg in configs.items():
            result = simulate(built.graph, cfg, cluster, p, timeline=False)
            steps[name] = result.step_time
            memory[name] = float(result.peak_memory.max()) / 2**30
        cl = get_cluster(cluster, p)
        point["sim"][cluster] = {
            "nodes": cl.nodes, "device_memory_gib": cl.device.memory_gib,
            "step_time": steps, "peak_memory_gib": memory,
            "speedup": {s: steps[BASELINE] / steps[s] for s in STRATEGIES}}
    return point


# -- output --------------------------------------------------------------------------

def write(points: list[dict[str, Any]], settings: Settings, info: dict[str, Any], elapsed: float,
          out_dir: Path) -> dict[str, Path]:
    files = {"figure6.json": write_json(out_dir / "figure6.json", {
        "title": "Figure 6: speedup over data parallelism (simulated)", "quick": settings.quick,
        "machine": info, "settings": settings.to_dict(), "elapsed_seconds": elapsed,
        "points": points})}
    md = out_dir / "figure6.md"
    md.write_text(markdown(points, settings, info))
    files["figure6.md"] = md
    for cluster in settings.clusters:
        path = out_dir / f"figure6_{cluster}.png"
        plot(points, cluster, settings, path)
        files[path.name] = path
    return files


def markdown(points: list[dict[str, Any]], settings: Settings, info: dict[str, Any]) -> str:
    quick = " (quick run)" if settings.quick else ""
    out = [f"# Figure 6: speedup over data parallelism{quick}", "",
           "Simulated step time of data parallelism divided by the strategy's "
           "(`pase.sim.simulate`, fp32, 50% of peak FLOP/s); in brackets the paper cost "
           "model's prediction (cost ratio). Strategies are solved once per (model, p) under "
           "the paper cost model at its default machine (10 TFLOP/s, 16 GB/s); mcmc with seed "
           f"{settings.seed} and a {settings.time_limit:g} s limit. `peak GiB` is the largest "
           "per-device memory in the simulation (dp / data-parallel); each GPU has 11 GiB. "
           f"Machine: {machine_line(info)}.", ""]
    for cluster in settings.clusters:
        out += [f"## {cluster}", ""]
        header = ["model", "p", "nodes", "PaSE (dp)", "expert", "mcmc", "peak GiB dp / DP"]
        body = []
        for pt in points:
            sim = pt["sim"][cluster]
            cells = [f"{sim['speedup'][s]:.3f} ({pt['predicted_speedup'][s]:.2f})"
                     for s in STRATEGIES]
            cells[1] = f"{_expert_name(pt)} {cells[1]}"
            mem = sim["peak_memory_gib"]
            body.append([TITLES[pt["model"]], pt["devices"], sim["nodes"]] + cells +
                        [f"{mem['dp']:.2f} / {mem[BASELINE]:.2f}"])
        out += [md_table(header, body), "", _summary(points, cluster), ""]
    return "\n".join(out)


def _expert_name(pt: dict[str, Any]) -> str:
    stats = pt.get("expert_stats", {})
    name = EXPERT_LABELS[pt["expert"]]
    if "data_parallel" in stats and "tensor_parallel" in stats:
        name += f" {stats['data_parallel']}x{stats['tensor_parallel']}"
    return name


def _summary(points: list[dict[str, Any]], cluster: str) -> str:
    """Where dp is slower than data parallelism, and how far the prediction is off."""
    slower = [f"{TITLES[pt['model']]} p={pt['devices']} ({pt['sim'][cluster]['speedup']['dp']:.3f})"
              for pt in points if pt["sim"][cluster]["speedup"]["dp"] < 1]
    ratios = sorted(pt["sim"][cluster]["speedup"]["dp"] / pt["predicted_speedup"]["dp"]
                    for pt in points)
    median = ratios[len(ratios) // 2] if len(ratios) % 2 else \
        (ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2]) / 2
    where = "; slower at " + ", ".join(slower) if slower else ""
    return (f"PaSE (dp) simulates at least as fast as data parallelism at "
            f"{len(points) - len(slower)} of {len(points)} points{where}. Simulated / "
            f"predicted dp speedup: median {median:.2f}, range {ratios[0]:.2f}-{ratios[-1]:.2f}.")


def plot(points: list[dict[str, Any]], cluster: str, settings: Settings, path: Path) -> None:
    """Four panels (one per model) of grouped bars per device count, like the paper's Figure 6."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise SolverUnavailableError('figure 6 needs matplotlib: pip install "pase[plot]"') from exc
    models = [m for m in settings.figure6_models if any(pt["model"] == m for pt in points)]
    cols = 2
    rows = (len(models) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(11, 3.6 * rows), squeeze=False)
    width = 0.26
    handles = None
    for ax, model in zip(axes.flat, models):
        pts = [pt for pt in points if pt["model"] == model]
        xs = range(len(pts))
        top = 1.0
        for k, s in enumerate(STRATEGIES):
            label = LABELS[s] if s != "expert" else "expert (OWT / GNMT / Mesh-TF)"
            values = [pt["sim"][cluster]["speedup"][s] for pt in pts]
            bars = ax.bar([x + (k - 1) * width for x in xs], values, width, label=label,
                          color=COLORS[s])
            ax.bar_label(bars, [f"{v:.3f}" for v in values], fontsize=6, rotation=90,
                         label_type="center")
            top = max(top, *values)
        predicted = [pt["predicted_speedup"]["dp"] for pt in pts]
        ax.plot([x - width for x in xs], predicted, "kx", markersize=7,
                label="PaSE (dp): paper-model prediction")
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_ylim(0, 1.2 * max(top, *predicted))
        ax.set_xticks(list(xs), [str(pt["devices"]) for pt in pts])
        ax.set_xlabel("GPUs")
        ax.set_ylabel("speedup over data parallelism")
        expert = EXPERT_LABELS[pts[0]["expert"]]
        ax.set_title(f"{TITLES[model]} (batch {pts[0]['batch']}; expert: {expert})", fontsize=10)
        handles = ax.get_legend_handles_labels()
    for ax in list(axes.flat)[len(models):]:
        ax.axis("off")
    if handles:
        fig.legend(*handles, loc="lower center", ncol=4, fontsize=8, frameon=False)
    cl = get_cluster(cluster)
    quick = ", QUICK RUN" if settings.quick else ""
    fig.suptitle(f"Figure 6 (simulated): {cl.device.name}, {cl.devices_per_node} per node, "
                 f"preset {cluster!r}{quick}")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def timed_run(settings: Settings, progress: Callable[[str], Any]) -> tuple[list[dict[str, Any]], float]:
    start = time.perf_counter()
    points = run(settings, progress)
    return points, time.perf_counter() - start

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

from pathlib import Path
from typing import Any, Callable

from pase.api import build_problem, load_graph, to_strategy
from pase.cluster import get_cluster
from pase.errors import SolverUnavailableError
from pase.files import save_figure
from pase.papers.pase_ipdps2021.experts import GNMT, expert_solution
from pase.papers.pase_ipdps2021.report import md_table, write_json, write_text
from pase.papers.pase_ipdps2021.runs import Runs
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


def run(settings: Settings, progress: Callable[[str], Any], runs: Runs) -> list[dict[str, Any]]:
    """Two sweeps (data parallelism, the dp and the solver experts without a limit; mcmc
    under the time limit), then per point the GNMT expert and the simulations."""
    models = list(settings.figure6_models)
    batches = sorted({FIGURE6_BATCH[m] for m in models})
    experts = sorted({EXPERTS[m] for m in models} - {GNMT})
    pairing = [{"model": m, "batch": [b for b in batches if b != FIGURE6_BATCH[m]]}
               for m in models if len(batches) > 1]
    grid = {"model": models, "devices": list(settings.figure6_devices), "batch": batches}
    progress(f"figure 6: {BASELINE}, dp and experts on {len(models)} models")
    exact = runs.sweep({"grid": {**grid, "solver": [BASELINE, "dp", *experts]},
                        "exclude": pairing + [{"model": m, "solver": [e for e in experts
                                                                      if e != EXPERTS[m]]}
                                              for m in models]})
    progress(f"figure 6: mcmc (limit {settings.time_limit:g} s)")
    mcmc = runs.sweep({"grid": {**grid, "solver": ["mcmc"]}, "exclude": pairing,
                       "run": {"time_limit": settings.time_limit, "seed": settings.seed}})
    found: dict[tuple, dict[str, Any]] = {}
    for r in exact + mcmc:
        name = "expert" if r["solver"] == EXPERTS[r["model"]] else r["solver"]
        found[r["model"], r["devices"], name] = r
    points = []
    for model in models:
        for p in settings.figure6_devices:
            progress(f"figure 6: {model} p={p}: simulate")
            points.append(_point(model, p, settings, found))
    return points


def _point(model: str, p: int, settings: Settings, found: dict[tuple, dict[str, Any]]) -> dict[str, Any]:
    batch = FIGURE6_BATCH[model]
    rows = {name: found.get((model, p, name)) for name in (BASELINE, "dp", "expert", "mcmc")}
    configs: dict[str, Any] = {}
    costs: dict[str, float] = {}
    stats: dict[str, dict[str, Any]] = {}
    for name, r in rows.items():
        if r is None:
            continue
        if r["cost"] is None:
            raise RuntimeError(f"figure 6: {r['solver']} gave no strategy for {model} at p={p}: "
                               f"{r['status']}: {r['error']}")
        configs[name], costs[name], stats[name] = r["strategy"], r["cost"], r["stats"]
    graph = load_graph(model, batch=batch)
    if rows["expert"] is None:  # GNMT: a layout built from the Problem, not a solver
        built = build_problem(model, p, batch=batch)
        solution = expert_solution(EXPERTS[model], built.problem)
        configs["expert"] = to_strategy(built, solution).configs
        costs["expert"], stats["expert"] = solution.cost, solution.stats
    point: dict[str, Any] = {
        "model": model, "devices": p, "batch": batch, "expert": EXPERTS[model],
        "cost": {name: costs[name] for name in (BASELINE, *STRATEGIES)},
        "predicted_speedup": {s: costs[BASELINE] / costs[s] for s in STRATEGIES},
        "dp_seconds": rows["dp"]["solve_seconds"], "mcmc_seconds": rows["mcmc"]["solve_seconds"],
        "mcmc_stop": stats["mcmc"].get("stop"),
        "mcmc_best_iteration": stats["mcmc"].get("best_iteration"),
        "expert_stats": {k: v for k, v in stats["expert"].items()
                         if isinstance(v, (int, float, str))},
        "sim": {}}
    for cluster in settings.clusters:
        steps, memory = {}, {}
        for name in (BASELINE, "dp", "expert", "mcmc"):
            result = simulate(graph, configs[name], cluster, p, timeline=False)
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
    files["figure6.md"] = write_text(out_dir / "figure6.md", markdown(points, settings, info))
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
    try:
        save_figure(fig, path, what="figure", dpi=110)
    finally:
        plt.close(fig)

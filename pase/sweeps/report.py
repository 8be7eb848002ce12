"""``pase report``: a sweep store as a markdown table, three plots, or one CSV.

- ``report.md``: one row per run (model, p, solver, options, status, cost,
  cost relative to the best of its (model, p, cost model, cluster, batch, memory
  cap), gap, seconds, peak memory);
- ``cost_ratio.png``: cost relative to the best per (model, p), by solver;
- ``solve_time.png``: solve seconds against p, log scale, one line per solver
  and model;
- ``gap.png``: the optimality gap of the runs that stopped at their time
  limit (status ``time_limit``, or ``feasible`` with a time limit set).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pase.errors import OptionError, SolverUnavailableError
from pase.files import save_figure, write_text_atomic
from pase.sweeps.store import load_results
from pase.text import markdown_table

# The columns that define "the same Problem": runs sharing them are compared.
PROBLEM = ["model", "devices", "cost_model", "cluster", "memory_cap", "batch", "model_options",
           "cost_options"]
TABLE = ["model", "devices", "solver", "solver_options", "cost_model", "status", "cost",
         "ratio_to_best", "gap", "build_seconds", "solve_seconds", "peak_memory_bytes"]


def with_ratios(frame: Any) -> Any:
    """``frame`` plus ``ratio_to_best``: each run's cost over the least cost of its Problem."""
    frame = frame.copy()
    keys = ["|".join(_text(v) for v in row) for row in frame[PROBLEM].itertuples(index=False)]
    best = frame.groupby(keys)["cost"].transform("min")
    frame["ratio_to_best"] = frame["cost"] / best.where(best > 0)
    return frame


def _text(value: Any) -> str:
    return "" if value is None or value != value else str(value)  # NaN != NaN


def label(row: Any) -> str:
    """A solver with its options: ``dp (ordering=min-fill)``."""
    options = json.loads(row["solver_options"] or "{}")
    if not options:
        return str(row["solver"])
    return f"{row['solver']} ({', '.join(f'{k}={v}' for k, v in sorted(options.items()))})"


def write_report(db: str | Path, out_dir: str | Path, fmt: str = "md",
                 views: dict[str, str] | None = None) -> dict[str, Path]:
    """Write the report of store ``db`` into ``out_dir``; ``{name: path}`` of the files.

    ``views`` (``{run key: relative path}``, from :mod:`pase.viewer.runs`) adds a column
    linking each run to its page."""
    frame = load_results(db)
    if frame.empty:
        raise OptionError(f"sweep store {db} has no runs yet")
    frame = with_ratios(frame)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        path = out / "results.csv"
        write_text_atomic(path, frame.drop(columns=["strategy"]).to_csv(index=False),
                          what="report file")
        return {"results.csv": path}
    if fmt != "md":
        raise OptionError(f"unknown report format {fmt!r}; choose from md, csv")
    files = {"report.md": out / "report.md"}
    write_text_atomic(files["report.md"], markdown(frame, Path(db).name, views),
                      what="report file")
    plt = _pyplot()
    files["cost_ratio.png"] = plot_cost_ratio(frame, out / "cost_ratio.png", plt)
    files["solve_time.png"] = plot_solve_time(frame, out / "solve_time.png", plt)
    files["gap.png"] = plot_gap(frame, out / "gap.png", plt)
    return files


def markdown(frame: Any, name: str, views: dict[str, str] | None = None) -> str:
    counts = frame["status"].value_counts()
    lines = [f"# Sweep report: {name}", "",
             f"{len(frame)} runs: " + ", ".join(f"{n} {s}" for s, n in counts.items()) + ". "
             "`ratio` is the cost over the least cost any run found for the same model, p, "
             "cost model, cluster, batch, memory cap and options.", ""]
    ordered = frame.sort_values(["model", "devices", "solver"], kind="stable")
    rows = [(r["model"], r["devices"], label(r), r["cost_model"], r["status"], _num(r["cost"], ".6g"),
             _num(r["ratio_to_best"], ".4f"), _pct(r["gap"]), _num(r["build_seconds"], ".3f"),
             _num(r["solve_seconds"], ".3f"), _num(_mib(r["peak_memory_bytes"]), ".0f"))
            + ((f"[view]({views[r['key']]})" if r["key"] in views else "-",) if views is not None else ())
            for _, r in ordered.iterrows()]
    lines.append(markdown_table(rows, ("model", "p", "solver", "cost model", "status", "cost", "ratio",
                                       "gap", "build s", "solve s", "peak MiB")
                                + (("view",) if views is not None else ())))
    failed = frame[frame["error"].notna()]
    if len(failed):
        lines += ["", "## Runs without an answer", ""]
        for _, r in failed.iterrows():
            lines.append(f"- {r['model']} p={r['devices']} {label(r)}: {r['status']}: {r['error']}")
    return "\n".join(lines) + "\n"


def _num(value: Any, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else format(value, spec)


def _pct(value: Any) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else f"{100 * value:.2f}%"


def _mib(value: Any) -> Any:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) \
        else value / 2**20


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise SolverUnavailableError('pase report draws with matplotlib: pip install '
                                     '"pase[plot]"') from exc
    return plt


def problem_labels(frame: Any) -> list[str]:
    """Each row's Problem as a short label: model and p, plus the Problem axes that vary
    in ``frame`` (cost model, cluster, batch, memory cap, options)."""
    varying = [c for c in PROBLEM[2:] if frame[c].map(_text).nunique() > 1]
    labels = []
    for _, r in frame.iterrows():
        extra = [_text(r[c]) for c in varying if _text(r[c]) not in ("", "{}")]
        labels.append("\n".join([f"{r['model']}", f"p={int(r['devices'])}"] + extra))
    return labels


def plot_cost_ratio(frame: Any, path: Path, plt: Any) -> Path:
    """Grouped bars: per Problem (model, p and any other Problem axis the sweep varies),
    each solver's cost over the best."""
    done = frame[frame["ratio_to_best"].notna()].copy()
    done["label"] = [label(r) for _, r in done.iterrows()]
    done["problem"] = problem_labels(done) if len(done) else []
    groups = sorted(set(done["problem"]), key=lambda g: (g.split("\n")[0],
                                                         int(g.split("\n")[1][2:]), g))
    solvers = sorted(set(done["label"]))
    fig, ax = plt.subplots(figsize=(min(12, max(6, 0.25 * len(groups) * max(1, len(solvers)))),
                                    4.5))
    width = 0.8 / max(1, len(solvers))
    for k, solver in enumerate(solvers):
        xs, ys = [], []
        for x, group in enumerate(groups):
            sel = done[(done["problem"] == group) & (done["label"] == solver)]
            if len(sel):
                xs.append(x + (k - (len(solvers) - 1) / 2) * width)
                ys.append(float(sel["ratio_to_best"].max()))
        ax.bar(xs, ys, width, label=solver)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(groups)), groups, fontsize=8)
    ax.set_ylabel("cost / best cost of its Problem")
    ax.set_title("cost relative to the best, by solver")
    if solvers:
        ax.legend(fontsize=8)
    top = max([1.0] + [float(v) for v in done["ratio_to_best"]])
    ax.set_ylim(0.9 if top < 1.5 else 0, top * 1.05)
    return _save(fig, path, plt)


def plot_solve_time(frame: Any, path: Path, plt: Any) -> Path:
    """Solve seconds against p on log scales, one line per solver and model (with the
    other Problem axes the sweep varies)."""
    timed = frame[frame["solve_seconds"].notna() & (frame["solve_seconds"] > 0)].copy()
    timed["label"] = [label(r) for _, r in timed.iterrows()]
    timed["line"] = [", ".join(part for i, part in enumerate(g.split("\n")) if i != 1)
                     for g in problem_labels(timed)] if len(timed) else []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (solver, model), sel in sorted(timed.groupby(["label", "line"]), key=lambda g: g[0]):
        sel = sel.groupby("devices")["solve_seconds"].min().sort_index()
        ax.plot(sel.index, sel.values, marker="o", label=f"{solver}, {model}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ps = sorted({int(p) for p in timed["devices"]})
    if ps:
        ax.set_xticks(ps, [str(p) for p in ps])
        ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.set_xlabel("devices p")
    ax.set_ylabel("solve seconds (log scale)")
    ax.set_title("solve time against p")
    if len(timed):
        ax.legend(fontsize=7, ncol=2)
    return _save(fig, path, plt)


def plot_gap(frame: Any, path: Path, plt: Any) -> Path:
    """The relative gap of time-limited runs (status time_limit, or feasible under a limit)."""
    limited = frame[(frame["status"] == "time_limit") |
                    ((frame["status"] == "feasible") & frame["time_limit"].notna() &
                     frame["lower_bound"].notna())].copy()
    fig, ax = plt.subplots(figsize=(7, 4))
    if len(limited):
        limited["label"] = [f"{r['model']} p={r['devices']}\n{label(r)}"
                            for _, r in limited.iterrows()]
        gaps = [100 * g if g == g and g is not None else 0.0 for g in limited["gap"]]
        bars = ax.bar(range(len(limited)), gaps, color="tab:red")
        ax.bar_label(bars, ["no bound" if g != g or g is None else f"{100 * g:.2g}%"
                            for g in limited["gap"]], fontsize=7)
        ax.set_xticks(range(len(limited)), list(limited["label"]), fontsize=7, rotation=30,
                      ha="right")
        ax.set_ylim(0, 1.15 * max([1.0] + gaps))
    else:
        ax.text(0.5, 0.5, "no run stopped at its time limit", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_xticks([])
    ax.set_ylabel("optimality gap (%)")
    ax.set_title("gap of time-limited runs")
    return _save(fig, path, plt)


def _save(fig: Any, path: Path, plt: Any) -> Path:
    fig.tight_layout()
    try:
        return save_figure(fig, path, what="report plot", dpi=110)
    finally:
        plt.close(fig)

"""Gantt chart of a simulated step: one row per device and per link port."""
from __future__ import annotations

from pathlib import Path

from pase.errors import SolverUnavailableError
from pase.files import save_figure
from pase.sim.result import SimResult

COLOURS = {"forward": "#4c72b0", "backward": "#dd8452", "communication": "#55a868",
           "gradient-sync": "#c44e52", "optimizer": "#8172b3"}
_MAX_ROWS = 80  # beyond this the chart is unreadable; extra link rows are dropped


def _row_key(name: str) -> tuple[int, int, str]:
    """gpu0, gpu1, ... first, then their ports."""
    base, _, port = name.partition(".")
    return (0 if not port else 1, int(base[3:]) if base[3:].isdigit() else 0, port)


def _pyplot():
    """matplotlib's pyplot on the file-only Agg backend; SolverUnavailableError if missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise SolverUnavailableError('plotting needs matplotlib: pip install "pase[plot]"') from exc
    return plt


def _save(plt, fig, ax, kinds: list[str], path: str | Path) -> Path:
    """Add the legend of bar ``kinds``, write the figure to ``path`` and close it."""
    from matplotlib.patches import Patch

    # beside the axes: inside, it hid the step's last bars (a stage's gradient sync)
    ax.legend(handles=[Patch(color=COLOURS[k], label=k) for k in kinds], loc="upper left",
              bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=7)
    fig.tight_layout()
    try:
        return save_figure(fig, path, what="plot", dpi=120)
    finally:
        plt.close(fig)


def plot_timeline(result: SimResult, path: str | Path, *, title: str | None = None) -> Path:
    """Draw ``result.timeline`` to ``path`` (PNG, SVG or PDF by extension).

    Rows: every device, then every link port that carried traffic; bars are
    coloured by kind (forward, backward, communication, gradient sync, optimizer step).
    Raises SolverUnavailableError if matplotlib is missing.
    """
    plt = _pyplot()
    rows = sorted({ev.resource for ev in result.timeline}, key=_row_key)
    devices = [r for r in rows if "." not in r]
    rows = devices + [r for r in rows if "." in r][:max(0, _MAX_ROWS - len(devices))]
    index = {r: i for i, r in enumerate(rows)}
    bars: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for ev in result.timeline:
        if ev.resource in index:
            bars.setdefault((index[ev.resource], ev.kind), []).append(
                (ev.start * 1e3, (ev.end - ev.start) * 1e3))
    fig, ax = plt.subplots(figsize=(12, 1.0 + 0.22 * len(rows)))
    for (row, kind), spans in sorted(bars.items()):
        ax.broken_barh(spans, (row - 0.4, 0.8), facecolors=COLOURS.get(kind, "#8c8c8c"),
                       edgecolor="white", linewidth=0.3)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_xlim(0, max(result.step_time * 1e3, 1e-9))
    ax.set_title(title or f"{result.model}, p = {result.devices} on {result.cluster}: "
                          f"step {result.step_time * 1e3:.2f} ms")
    kinds = sorted({k for _, k in bars}, key=list(COLOURS).index)
    return _save(plt, fig, ax, kinds, path)


def plot_pipeline(result, path: str | Path, *, title: str | None = None) -> Path:
    """Draw a :class:`~pase.sim.pipeline.PipelineSimResult`'s timeline to ``path``: one row
    per stage (forwards and backwards labelled with their micro-batch) and per busy link
    direction. Raises SolverUnavailableError if matplotlib is missing."""
    plt = _pyplot()
    stages = sorted({ev.resource for ev in result.timeline if ev.resource.startswith("stage")},
                    key=lambda r: int(r[5:]))
    links = sorted({ev.resource for ev in result.timeline if not ev.resource.startswith("stage")})
    rows = stages + links
    index = {r: i for i, r in enumerate(rows)}
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.4 * len(rows)))
    scale = 1e3  # milliseconds
    label_bars = result.microbatches <= 32  # beyond this the labels overlap
    for ev in result.timeline:
        row = index[ev.resource]
        ax.broken_barh([(ev.start * scale, (ev.end - ev.start) * scale)], (row - 0.4, 0.8),
                       facecolors=COLOURS.get(ev.kind, "#8c8c8c"), edgecolor="white",
                       linewidth=0.3)
        if label_bars and ev.kind in ("forward", "backward"):
            ax.text((ev.start + ev.end) / 2 * scale, row, ev.label[1:], ha="center",
                    va="center", fontsize=6, color="white")
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_xlim(0, max(result.step_time * scale, 1e-9))
    ax.set_title(title or f"{result.model}: {len(stages)} stage{'s' * (len(stages) != 1)}, m = {result.microbatches} "
                          f"({result.schedule}), step {result.step_time * scale:.3g} ms, "
                          f"bubble {result.bubble:.1%}")
    kinds = [k for k in COLOURS if any(ev.kind == k for ev in result.timeline)]
    return _save(plt, fig, ax, kinds, path)

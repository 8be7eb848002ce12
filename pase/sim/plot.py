"""Gantt chart of a simulated step: one row per device and per link port."""
from __future__ import annotations

from pathlib import Path

from pase.errors import SolverUnavailableError
from pase.sim.result import SimResult

COLOURS = {"forward": "#4c72b0", "backward": "#dd8452", "communication": "#55a868",
           "gradient-sync": "#c44e52"}
_MAX_ROWS = 80  # beyond this the chart is unreadable; extra link rows are dropped


def _row_key(name: str) -> tuple[int, int, str]:
    """gpu0, gpu1, ... first, then their ports."""
    base, _, port = name.partition(".")
    return (0 if not port else 1, int(base[3:]) if base[3:].isdigit() else 0, port)


def plot_timeline(result: SimResult, path: str | Path, *, title: str | None = None) -> Path:
    """Draw ``result.timeline`` to ``path`` (PNG, SVG or PDF by extension).

    Rows: every device, then every link port that carried traffic; bars are
    coloured by kind (forward, backward, communication, gradient sync).
    Raises SolverUnavailableError if matplotlib is missing.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError as exc:
        raise SolverUnavailableError('plotting needs matplotlib: pip install "pase[plot]"') from exc
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
    ax.legend(handles=[Patch(color=COLOURS[k], label=k) for k in kinds], loc="upper right",
              fontsize=7)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path

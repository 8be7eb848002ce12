"""Small helpers shared by the tables: markdown, number formatting, JSON files."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

from pase.files import write_text_atomic


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table (cells converted with str; '|' escaped)."""
    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |",
             "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def seconds(value: float | None) -> str:
    """3 significant digits, never scientific for the ranges we see."""
    if value is None or not math.isfinite(value):
        return "-"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 0.01:
        return f"{value:.3g}"
    return f"{value:.4f}"


def gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.3g} GiB"


def write_json(path: Path, data: Any) -> Path:
    write_text_atomic(path, json.dumps(data, indent=1, default=_default) + "\n",
                      what="result file")
    return path


def write_text(path: Path, text: str) -> Path:
    write_text_atomic(path, text, what="result file")
    return path


def _default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")

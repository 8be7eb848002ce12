"""Plain-text tables: the one renderer behind strategies, the ``pase`` command and reports.

Columns are two spaces apart, a dashed rule sits under the header, and no line
ends in spaces, so output diffs cleanly and reads the same in every command.
"""
from __future__ import annotations

import textwrap
from typing import Any, Collection, Sequence

# Narrowest last column :func:`table` wraps into; a narrower one would read worse than long lines.
MIN_WRAP = 24


def table(rows: Sequence[Sequence[Any]], header: Sequence[str], right: Collection[int] = (),
          width: int | None = None) -> str:
    """A plain text table; the columns whose indices are in ``right`` (numbers) align right.
    With ``width``, a last column that would overrun it wraps onto lines of its own.

        >>> print(table([("dp", "exact", 3), ("greedy", "heuristic", 12)],
        ...             ("name", "kind", "n"), right=(2,)))
        name    kind        n
        ------  ---------  --
        dp      exact       3
        greedy  heuristic  12
        >>> print(table([("dp", "the PaSE dynamic program, exact")], ("name", "about"), width=30))
        name  about
        ----  ----------------
        dp    the PaSE dynamic
              program, exact
    """
    cells = [tuple(header)] + [tuple(str(c) for c in r) for r in rows]
    if width is not None:
        cells = _wrap_last(cells, width)
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) if i in right else c.ljust(w)
                       for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _wrap_last(cells: list[tuple[str, ...]], width: int) -> list[tuple[str, ...]]:
    """Rows whose last cell overruns ``width`` split into continuation rows (other cells empty)."""
    lead = sum(max(len(r[i]) for r in cells) + 2 for i in range(len(cells[0]) - 1))
    room = max(width - lead, MIN_WRAP)
    out = [cells[0]]
    for row in cells[1:]:
        parts = textwrap.wrap(row[-1], room, break_on_hyphens=False) or [""]
        out.append(row[:-1] + (parts[0],))
        out += [("",) * (len(row) - 1) + (part,) for part in parts[1:]]
    return out


def markdown_table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    """The same rows as a markdown table (for reports written as ``.md`` files).

        >>> print(markdown_table([("dp", 3)], ("name", "n")))
        | name | n |
        |---|---|
        | dp | 3 |
    """
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)

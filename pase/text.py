"""Plain-text tables: the one renderer behind strategies, the ``pase`` command and reports.

Columns are two spaces apart, a dashed rule sits under the header, and no line
ends in spaces, so output diffs cleanly and reads the same in every command.
"""
from __future__ import annotations

from typing import Any, Collection, Sequence


def table(rows: Sequence[Sequence[Any]], header: Sequence[str], right: Collection[int] = ()) -> str:
    """A plain text table; the columns whose indices are in ``right`` (numbers) align right.

        >>> print(table([("dp", "exact", 3), ("greedy", "heuristic", 12)],
        ...             ("name", "kind", "n"), right=(2,)))
        name    kind        n
        ------  ---------  --
        dp      exact       3
        greedy  heuristic  12
    """
    cells = [tuple(header)] + [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) if i in right else c.ljust(w)
                       for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


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

"""The files CBC reads and writes: the model (CPLEX LP format), a MIP start, its solution.

Written by hand rather than through PuLP's objects: PuLP built the Transformer
at p = 16 (1.5 million columns) for over 30 s before CBC even started, and wrote
150-350 MB of temporary files outside any directory the caller controls.

The LP file lists each row by column names (coefficients +-1 need no digits);
only the objective and the memory row carry numbers, written with ``repr``, which
reads back to the same float. The ``y`` columns get no explicit upper bound: the
linearisation rows already force them to ``[0, 1]``. Lines hold at most
:data:`TERMS_PER_LINE` terms: CBC 2.10.3's LP reader failed on a 3,070-character
objective line ("Unable to read objective function").
"""
from __future__ import annotations

import decimal
import re
from typing import TextIO

import numpy as np

from pase.solvers.ilp.formulation import Formulation
from pase.solvers.ilp.limits import Deadline
from pase.solvers.ilp.scaling import FloatModel

# Rows (or objective terms) written between two looks at the deadline.
CHUNK = 4096
# Terms per line of the LP file (lines stay well under 200 characters).
TERMS_PER_LINE = 6
_LOWER_BOUND = re.compile(r"^Lower bound:\s+(\S+)", re.MULTILINE)


def write_lp(path: str, form: Formulation, model: FloatModel, deadline: Deadline) -> None:
    """Write the scaled model to ``path``; raises OutOfTime when the deadline passes."""
    names = [f"z{c}" for c in range(form.num_cols)]
    with open(path, "w") as out:
        out.write("Minimize\nobj:")
        used = np.flatnonzero(model.cost).tolist()
        if not used:
            out.write(" 0 z0\n")
        costs = model.cost.tolist()
        for lo in range(0, len(used), CHUNK):
            deadline.check("writing the CBC model")
            out.write(_lines([f" + {costs[c]!r} {names[c]}" for c in used[lo:lo + CHUNK]]) + "\n")
        out.write("Subject To\n")
        _rows(out, form, names, deadline)
        if model.memory is not None:
            out.write("mem:")
            out.write(_lines([f" {'-' if a < 0 else '+'} {abs(a)!r} {names[c]}"
                              for c, a in enumerate(model.memory.tolist()) if a != 0]) or " 0 z0")
            out.write(f"\n <= {model.memory_rhs!r}\n")
        out.write("Binaries\n")
        for lo in range(0, form.num_x, CHUNK):
            out.write(" ".join(names[lo:lo + CHUNK]) + "\n")
        out.write("End\n")


def _rows(out: TextIO, form: Formulation, names: list[str], deadline: Deadline) -> None:
    """One-hot rows (= 1) and linearisation rows (= 0); see formulation.py."""
    order = np.argsort(form.row, kind="stable")
    ends = np.cumsum(np.bincount(form.row, minlength=form.num_rows)).tolist()
    cols = form.col[order].tolist()
    signs = np.where(form.val[order] > 0, " + ", " - ").tolist()
    rhs = form.rhs.tolist()
    lo = 0
    for r, hi in enumerate(ends):
        if r % CHUNK == 0:
            deadline.check("writing the CBC model")
        terms = _lines([s + names[c] for s, c in zip(signs[lo:hi], cols[lo:hi])])
        out.write(f"r{r}:{terms}\n = {rhs[r]!r}\n")
        lo = hi


def _lines(terms: list[str]) -> str:
    """``terms`` joined, a line break after every :data:`TERMS_PER_LINE` of them."""
    return "\n".join(["".join(terms[i:i + TERMS_PER_LINE])
                      for i in range(0, len(terms), TERMS_PER_LINE)])


def write_start(path: str, form: Formulation, start: np.ndarray) -> None:
    """A MIP start in the solution-file format CBC's ``-mips`` reads (x columns only;
    CBC completes the continuous ``y`` columns itself)."""
    lines = ["Stopped on time - objective value 0\n"]
    lines += [f"{c:>7} z{c} {v:>15g} {0:>23}\n" for c, v in enumerate(start[:form.num_x].tolist())]
    with open(path, "w") as f:
        f.writelines(lines)


def read_solution(path: str, num_cols: int) -> tuple[str, np.ndarray | None]:
    """CBC's solution file: its first line and the column values (None without a solution)."""
    try:
        with open(path) as f:
            head = f.readline().strip()
            rest = f.readlines()
    except FileNotFoundError:
        return "no solution file", None
    if "objective value" not in head or head.startswith(("Infeasible", "Integer infeasible")):
        return head, None
    values = np.zeros(num_cols)
    for line in rest:
        parts = line.split()
        if parts and parts[0] == "**":  # CBC marks infeasible entries
            parts = parts[1:]
        if len(parts) >= 3 and parts[1].startswith("z"):
            values[int(parts[1][1:])] = float(parts[2])
    return head, values


def reported_objective(head: str) -> float | None:
    """The objective on the solution file's first line ("Optimal - objective value 2.5")."""
    try:
        return float(head.rsplit("objective value", 1)[1].split()[0])
    except (IndexError, ValueError):
        return None


def logged_bound(log: str) -> float | None:
    """The "Lower bound" CBC prints when it stops early, less half a unit of its last digit."""
    match = _LOWER_BOUND.search(log)
    if not match:
        return None
    try:
        printed = decimal.Decimal(match.group(1))
    except decimal.InvalidOperation:
        return None
    if not printed.is_finite():
        return None
    exponent = printed.as_tuple().exponent
    return float(printed) - 0.5 * 10.0 ** int(exponent)

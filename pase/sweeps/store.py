"""The result store: one SQLite file, table ``runs``, one row per run.

WAL mode, so a reader (``pase report``, :func:`load_results`) never blocks the
sweep writing; each row is committed the moment its run finishes, so a sweep
stopped at any point keeps every finished run. ``key`` (the point's axis
values as canonical JSON, :func:`pase.sweeps.spec.point_key`) is unique: a
re-run of a spec skips the points already stored.
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, Iterable, Mapping

from pase.errors import OptionError, SolverUnavailableError
from pase.files import regular_file

# Columns after ``key``: name and SQL type. Options are JSON text; so are
# strategy and stats, in the order the run gave them (ops in graph order).
COLUMNS = (
    ("model", "TEXT"), ("devices", "INTEGER"), ("solver", "TEXT"), ("cost_model", "TEXT"),
    ("cluster", "TEXT"), ("memory_cap", "TEXT"), ("batch", "INTEGER"),
    ("model_options", "TEXT"), ("solver_options", "TEXT"), ("cost_options", "TEXT"),
    ("status", "TEXT"), ("cost", "REAL"), ("compute_cost", "REAL"),
    ("communication_cost", "REAL"), ("unit", "TEXT"), ("lower_bound", "REAL"), ("gap", "REAL"),
    ("build_seconds", "REAL"), ("solve_seconds", "REAL"), ("wall_seconds", "REAL"),
    ("peak_memory_bytes", "REAL"), ("memory_bytes", "REAL"), ("strategy", "TEXT"),
    ("stats", "TEXT"), ("error", "TEXT"), ("time_limit", "REAL"), ("memory_limit", "REAL"),
    ("seed", "INTEGER"), ("repeats", "INTEGER"), ("pase_version", "TEXT"),
    ("git_commit", "TEXT"), ("host", "TEXT"), ("finished_at", "TEXT"),
)
NAMES = ("key",) + tuple(name for name, _ in COLUMNS)
JSON_COLUMNS = ("model_options", "solver_options", "cost_options", "strategy", "stats")
# Seconds a writer waits for another's lock before sqlite3 gives up.
BUSY_TIMEOUT = 30.0


class Store:
    """An open result store; use as a context manager or call :meth:`close`."""

    def __init__(self, path: str | Path):
        self.path = regular_file(path, "sweep store")  # or missing: a new store
        try:
            self.db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT)
        except sqlite3.DatabaseError as exc:
            raise OptionError(f"cannot use {path} as a sweep store: {exc}") from None
        try:
            _check_schema(self.db, path)  # before WAL mode, which would change a foreign file
            self.db.execute("PRAGMA journal_mode=WAL")
            columns = ", ".join(f"{name} {kind}" for name, kind in COLUMNS)
            self.db.execute(f"CREATE TABLE IF NOT EXISTS runs (key TEXT PRIMARY KEY, {columns})")
            self.db.commit()
        except (sqlite3.DatabaseError, OptionError) as exc:
            self.db.close()
            if isinstance(exc, OptionError):
                raise
            raise OptionError(f"cannot use {path} as a sweep store: {exc}") from None

    def keys(self) -> set[str]:
        return {k for (k,) in self.db.execute("SELECT key FROM runs")}

    def write(self, row: Mapping[str, Any]) -> None:
        """Insert one finished run and commit it (a key already stored is left as it is)."""
        values = [_cell(name, row.get(name)) for name in NAMES]
        marks = ", ".join("?" for _ in NAMES)
        self.db.execute(f"INSERT OR IGNORE INTO runs ({', '.join(NAMES)}) VALUES ({marks})", values)
        self.db.commit()

    def rows(self, keys: Iterable[str] | None = None) -> list[dict[str, Any]]:
        cur = self.db.execute(f"SELECT {', '.join(NAMES)} FROM runs ORDER BY rowid")
        wanted = None if keys is None else set(keys)
        return [dict(zip(NAMES, r)) for r in cur if wanted is None or r[0] in wanted]

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _check_schema(db: sqlite3.Connection, path: str | Path) -> None:
    """OptionError unless the file is empty or its ``runs`` table has every store column:
    a SQLite file of another program is refused, never written into."""
    tables = [name for (name,) in db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    if not tables:
        return
    if "runs" not in tables:
        raise OptionError(f"{path} is not a pase results store (it has tables "
                          f"{', '.join(tables[:10])}{' ...' if len(tables) > 10 else ''} "
                          f"and no runs table)")
    columns = [row[1] for row in db.execute("PRAGMA table_info(runs)")]
    missing = [name for name in NAMES if name not in columns]
    if missing:
        shown = ", ".join(columns[:10]) + (" ..." if len(columns) > 10 else "")
        raise OptionError(f"{path} is not a pase results store (its runs table has columns "
                          f"{shown}; a store's also has {', '.join(missing[:5])}"
                          f"{' ...' if len(missing) > 5 else ''})")


def _cell(name: str, value: Any) -> Any:
    if name in JSON_COLUMNS:
        return None if value is None else json.dumps(value, allow_nan=False)
    if name in ("cluster", "memory_cap") and value is not None:
        return str(value)
    return value


def load_results(path: str | Path, *, decode: bool = False) -> Any:
    """A sweep store's ``runs`` table as a pandas DataFrame, in the order runs finished.

    Option, strategy and stats columns are JSON text; ``decode=True`` turns them
    into Python objects.
    """
    try:
        import pandas as pd
    except ImportError as exc:
        raise SolverUnavailableError('sweep results load into pandas: pip install '
                                     '"pase[sweep]"') from exc
    path = regular_file(path, "sweep store")
    if not path.is_file():
        raise OptionError(f"no sweep store at {path}")
    with Store(path) as store:
        frame = pd.DataFrame(store.rows(), columns=list(NAMES))
    if decode:
        for name in JSON_COLUMNS:
            frame[name] = [None if v is None else json.loads(v) for v in frame[name]]
    return frame

"""Every file pase writes goes through pase.files (written whole, never over a device).

The source of pase/, solvers/, cost_models/, graphs/ and papers/ is read with ``ast``
and every call that writes a file is listed: ``open`` with a writing mode,
``Path.write_text``, ``savefig``, ``to_csv(path)``, ``json.dump``, ``os.replace``...
Each must be in pase/files.py or in :data:`ALLOWED` with the reason it is not an
output of pase's; a new plain write fails this test, naming the file and line.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("pase", "solvers", "cost_models", "graphs", "papers")
HELPER = "pase/files.py"

# Module functions (as imported: ``import os``, ``from os import replace``) that write.
WRITING_FUNCTIONS = {
    "os.open", "os.fdopen", "os.replace", "os.rename", "os.renames", "os.link", "os.symlink",
    "os.truncate", "os.mknod", "os.mkfifo", "io.open", "codecs.open",
    "shutil.copy", "shutil.copy2", "shutil.copyfile", "shutil.copytree", "shutil.move",
    "json.dump", "pickle.dump", "marshal.dump",
    "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt",
    "tempfile.mkstemp", "tempfile.NamedTemporaryFile", "tempfile.TemporaryFile",
    "sqlite3.connect",
}
# Methods that write whatever the object is (a Path, a figure, a data frame, an array).
WRITING_METHODS = {"write_text", "write_bytes", "savefig", "tofile", "touch", "symlink_to",
                   "hardlink_to", "to_parquet", "to_excel", "to_pickle", "to_hdf", "to_feather"}
# Methods that write only when given a path (``frame.to_csv()`` returns the text).
WRITING_WITH_PATH = {"to_csv"}

# Files whose writes are another change's work -> why they are left alone here.
IN_CONVERSION: dict[str, str] = {}
# (file, function or *, what it calls) -> why it is not one of pase's outputs.
ALLOWED = {
    ("pase/frontends/cache_store.py", "opened_regular", "os.open"):
        "opens a cache entry for reading, non-blocking, after the regular-file guard",
    ("pase/frontends/cache_store.py", "opened_regular", "os.fdopen"):
        "wraps that read-only descriptor",
    ("pase/frontends/cache.py", "_read", "touch"):
        "marks a cache entry recently used (its time stamp; no content is written)",
    ("pase/forked.py", "Forked.result", "os.fdopen"):
        "reads the forked child's answer from the read end of a pipe; writes no file",
    ("pase/cli/__init__.py", "_main", "open"):
        "opens the null device as stdout once the reader has left; writes no file",
    ("solvers/ilp/highs.py", "*", "open"):
        "opens the null device to silence HiGHS; writes no file",
    ("solvers/ilp/limits.py", "run_process", "open"):
        "the CBC child's log, in the solver's temporary folder",
    ("solvers/ilp/lpfile.py", "write_lp", "open"):
        "the model file CBC reads, streamed into the solver's temporary folder",
    ("solvers/ilp/lpfile.py", "write_start", "open"):
        "the MIP start CBC reads, in the solver's temporary folder",
    ("pase/sweeps/store.py", "Store.__init__", "sqlite3.connect"):
        "the sweep store is a SQLite database; SQLite journals its own writes",
}


def _imports(tree: ast.AST) -> dict[str, str]:
    """Local name -> dotted name, from the module's imports (``np`` -> ``numpy``)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else \
                    a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _dotted(node: ast.AST, names: dict[str, str]) -> str | None:
    if isinstance(node, ast.Name):
        return names.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, names)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _mode(call: ast.Call, position: int) -> str | None:
    """The mode argument of an ``open``; "?" when it is not a literal (assumed to write)."""
    arg = call.args[position] if len(call.args) > position else \
        next((k.value for k in call.keywords if k.arg == "mode"), None)
    if arg is None:
        return "r"
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else "?"


def _writes(call: ast.Call, names: dict[str, str]) -> str | None:
    """What ``call`` writes with, or None when it writes no file."""
    func = call.func
    dotted = _dotted(func, names)
    if dotted == "open" or dotted in ("io.open", "codecs.open"):
        mode = _mode(call, 1)
        return dotted if mode == "?" or set(mode) & set("wax+") else None
    if dotted in WRITING_FUNCTIONS:
        return dotted
    if isinstance(func, ast.Attribute):
        if func.attr in WRITING_METHODS:
            return func.attr
        if func.attr in WRITING_WITH_PATH and (call.args or any(
                k.arg == "path_or_buf" for k in call.keywords)):
            return func.attr
        if func.attr == "open" and (dotted is None or not dotted.startswith("os.")):
            mode = _mode(call, 0)  # Path.open(mode)
            return "open" if mode == "?" or set(mode) & set("wax+") else None
    return None


def write_sites(source: str) -> list[tuple[int, str, str]]:
    """``(line, function, what)`` of every file write in ``source``."""
    tree = ast.parse(source)
    names = _imports(tree)
    found: list[tuple[int, str, str]] = []

    def visit(node: ast.AST, where: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = [*where, child.name]
            if isinstance(child, ast.Call):
                what = _writes(child, names)
                if what is not None:
                    found.append((child.lineno, ".".join(where) or "<module>", what))
            visit(child, inner)

    visit(tree, [])
    return found


def _sources() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def test_every_write_goes_through_the_helper():
    unexplained, used = [], set()
    for path in _sources():
        rel = path.relative_to(ROOT).as_posix()
        if rel == HELPER or rel in IN_CONVERSION:
            continue
        for line, function, what in write_sites(path.read_text(encoding="utf-8")):
            key = next((k for k in ((rel, function, what), (rel, "*", what)) if k in ALLOWED), None)
            if key is None:
                unexplained.append(f"{rel}:{line} ({function}) writes with {what}")
            else:
                used.add(key)
    assert not unexplained, ("write through pase.files.write_text_atomic (or add the reason "
                             "to ALLOWED):\n" + "\n".join(unexplained))
    assert used == set(ALLOWED), f"ALLOWED entries no code needs: {set(ALLOWED) - used}"


def test_the_helper_is_where_the_writing_is():
    whats = {what for _, _, what in write_sites((ROOT / HELPER).read_text(encoding="utf-8"))}
    assert {"os.open", "os.fdopen", "os.replace", "savefig"} <= whats


def test_the_walk_finds_each_kind_of_write():
    """The detector itself: each plain write below is found, each harmless call is not."""
    source = '''
import json, os, shutil
import numpy as np
from os import replace as swap
from pathlib import Path

def f(path, fig, frame, mode):
    open(path, "w")
    open(path, mode="ab")
    open(path, mode)
    Path(path).write_text("x")
    Path(path).open("w")
    fig.savefig(path)
    frame.to_csv(path, index=False)
    json.dump({}, path)
    os.replace(path, path)
    swap(path, path)
    shutil.move(path, path)
    np.save(path, 1)

def harmless(path, frame):
    open(path)
    open(path, "rb")
    Path(path).open()
    frame.to_csv(index=False)
    json.dumps({})
    "a".replace("a", "b")
    os.path.join(path)
'''
    found = [(line, what) for line, _, what in write_sites(source)]
    assert [line for line, _ in found] == list(range(8, 20)), found
    assert {what for _, what in found} == {"open", "write_text", "savefig", "to_csv",
                                           "json.dump", "os.replace", "shutil.move",
                                           "numpy.save"}

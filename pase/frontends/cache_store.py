"""The import cache's entry files: their names, layout, seal, reads, writes and pruning.

An entry is ``pase-import-<key>.json`` in the cache folder: one JSON object with
``format``, ``key``, ``depends``, ``warnings``, ``graph`` and ``digest``, the
SHA-256 of the other fields as canonical JSON (sorted keys, no spaces). Nothing in
one is trusted: :func:`load` gives None (a miss) for a file that is not a regular
file, is past :data:`MAX_ENTRY_BYTES`, is not UTF-8 JSON, is nested past the
parser's recursion limit, lacks a field or has one of another type, names a warning
class outside :data:`WARNINGS`, or whose digest or key is not this one's. Writes
are atomic (a temporary file, fsync, ``os.replace``); pruning deletes only regular
files named as entries are.
"""
from __future__ import annotations

import builtins
import contextlib
import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import Any, Iterator

from pase.errors import PaseError
from pase.files import regular_file, write_bytes_atomic

FORMAT = 2  # the entry layout; a change makes every old entry a miss
MAX_ENTRIES = 256  # least recently used entries past this are deleted when one is written
MAX_ENTRY_BYTES = 64 << 20  # a larger entry is neither written nor read (GPT-2's: 0.2 MB)
_NAME = re.compile(r"pase-import-[0-9a-f]{32}\.json")  # the only files pruning touches
_FIELDS = {"format", "key", "depends", "warnings", "graph", "digest"}
# Warning classes an entry may name, by "builtins.Name": Python's own (pase has none of its
# own). Never imported by a name read from an entry.
WARNINGS = {f"builtins.{name}": cls for name, cls in vars(builtins).items()
            if isinstance(cls, type) and issubclass(cls, Warning)}


class NotRegular(Exception):
    """A path that names a FIFO, socket, device or folder: never read, never hashed."""


@contextlib.contextmanager
def opened_regular(path: str | Path) -> Iterator[Any]:
    """``path`` open for binary reading when it is a regular file (links followed);
    :class:`NotRegular` when it is not. Checked before the open (pase.files' guard) and
    again on the open descriptor, non-blocking, so a FIFO put there meanwhile never blocks."""
    try:
        regular_file(path, "file")
    except PaseError as exc:
        raise NotRegular(str(path)) from exc
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegular(str(path))
        yield f


def digest(path: str | Path) -> str | None:
    """SHA-256 of a regular file's bytes; None when it is missing or unreadable;
    :class:`NotRegular` when it is something else."""
    try:
        with opened_regular(path) as f:
            h = hashlib.sha256()
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
            return h.hexdigest()
    except OSError:
        return None


def entry_path(folder: Path, key: str) -> Path:
    return folder / f"pase-import-{key}.json"


def seal(entry: dict[str, Any]) -> str:
    """The entry's digest: SHA-256 of every field but ``digest`` as canonical JSON."""
    rest = {k: v for k, v in entry.items() if k != "digest"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode()
                          ).hexdigest()


def load(path: Path, key: str) -> dict[str, Any] | None:
    """The entry at ``path`` when it is well formed, sealed and for ``key``; else None."""
    try:
        with opened_regular(path) as f:
            raw = f.read(MAX_ENTRY_BYTES + 1)
        if len(raw) > MAX_ENTRY_BYTES:
            return None
        entry = json.loads(raw.decode("utf-8"))
        return entry if _well_formed(entry, key) else None
    except (OSError, ValueError, RecursionError, NotRegular):  # a cycle of links, not UTF-8..
        return None


def _well_formed(entry: Any, key: str) -> bool:
    """Every field of the layout, of its type, sealed by its digest, for this key."""
    if not (isinstance(entry, dict) and set(entry) == _FIELDS
            and type(entry["format"]) is int and entry["format"] == FORMAT
            and entry["key"] == key and isinstance(entry["graph"], dict)
            and entry["digest"] == seal(entry)):
        return False
    deps, warned = entry["depends"], entry["warnings"]
    if not (isinstance(deps, dict) and set(deps) == {"files", "packages"}
            and isinstance(deps["files"], dict) and isinstance(deps["packages"], dict)
            and all(os.path.isabs(f) and (d is None or isinstance(d, str))
                    for f, d in deps["files"].items())
            and all(isinstance(v, str) for v in deps["packages"].values())):
        return False
    return isinstance(warned, list) and all(
        isinstance(w, list) and len(w) == 4 and w[0] in WARNINGS and isinstance(w[1], str)
        and isinstance(w[2], str) and type(w[3]) is int for w in warned)


def touch(path: Path) -> None:
    """Mark the entry recently used (pruning keeps the most recently used)."""
    with contextlib.suppress(OSError, NotImplementedError):
        os.utime(path, follow_symlinks=False)


def save(path: Path, entry: dict[str, Any]) -> None:
    """Seal ``entry`` and write it to ``path`` atomically, then prune the folder; skipped
    past the size cap. A folder that cannot be written is no error: the cache is optional."""
    entry = {**entry, "digest": seal(entry)}
    text = json.dumps(entry).encode("utf-8")
    if len(text) > MAX_ENTRY_BYTES:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or (path.exists() and not path.is_file()):
            path.unlink()  # a FIFO or link under the entry's own name: the cache's to replace
        write_bytes_atomic(path, text, what="import cache entry")  # whole or not at all
        prune(path.parent)
    except (OSError, PaseError):
        pass


def prune(folder: Path) -> None:
    """Delete the least recently used entries past :data:`MAX_ENTRIES`: regular files named
    as entries are, nothing else the folder holds."""
    entries = []
    with os.scandir(folder) as found:
        for item in found:
            with contextlib.suppress(OSError):
                if _NAME.fullmatch(item.name) and item.is_file(follow_symlinks=False):
                    entries.append((item.stat(follow_symlinks=False).st_mtime, item.path))
    entries.sort(reverse=True)
    for _, old in entries[MAX_ENTRIES:]:
        with contextlib.suppress(OSError):
            os.unlink(old)

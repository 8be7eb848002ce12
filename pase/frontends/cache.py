"""An on-disk cache of the graphs ``FILE.py:FUNCTION`` references import to.

Importing a PyTorch model costs seconds before any planning starts: importing
torch, building the module, ``torch.export`` and the walk. The second ``pase
solve model.py:build`` of the same reference reads the graph back instead, and
does not import torch at all.

An entry is found by a key computed before anything is built: the reference
(its resolved path and function) and the bytes of its file, the model and
importer options, pase's version and the bytes of the importer's sources, the
versions of Python and torch, the working folder and ``sys.path``. It then holds
what the build read besides: every module file loaded and every file opened
outside the standard library and site-packages (each by its SHA-256), and the
version of each installed distribution whose modules were loaded (transformers,
torchvision, timm...). A hit needs every one of them unchanged, so editing a
helper module the model file imports is a miss too. An entry is only written
when the graph reads back from its JSON equal to the one imported; warnings the
import gave are stored and given again on a hit.

Nothing in an entry is trusted. Entries are named ``pase-import-<key>.json`` and
pruning touches no other file (nor anything but a regular file). An entry carries
the SHA-256 of its own content; one that is damaged, sealed for another content or
key, past :data:`MAX_ENTRY_BYTES`, nested past the parser's recursion limit, or not
a regular file (a FIFO, a link to a device) is a miss: the graph is built again.
Only regular files are ever read or hashed, so nothing blocks on a FIFO or reads a
device forever; a build that read a FIFO, socket or device is not cached, since
what it read cannot be checked. A stored warning names its class, which must be one
of Python's built-in warning classes: nothing is imported by a name from an entry.

Only the command line uses the cache (:func:`enabled`); ``--no-cache`` or
``PASE_NO_CACHE=1`` bypasses it. It lives in ``$PASE_CACHE_DIR``, else
``$XDG_CACHE_HOME/pase``, else ``~/.cache/pase``; deleting the folder is safe.
"""
from __future__ import annotations

import builtins
import contextlib
import contextvars
import hashlib
import importlib.util
import json
import os
import re
import site
import stat
import sys
import sysconfig
import tempfile
import warnings
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterator

from pase.errors import PaseError
from pase.files import regular_file

__all__ = ["FORMAT", "MAX_ENTRIES", "MAX_ENTRY_BYTES", "active", "cache_dir", "cached_graph",
           "enabled"]

FORMAT = 2  # the entry layout; a change makes every old entry a miss
MAX_ENTRIES = 256  # oldest-used entries past this are deleted when one is written
MAX_ENTRY_BYTES = 64 << 20  # a larger entry is neither written nor read (GPT-2's: 0.2 MB)
_NAME = re.compile(r"pase-import-[0-9a-f]{32}\.json")  # the only files pruning touches
# Warning classes an entry may name: Python's own (pase defines none of its own).
_WARNINGS = {f"builtins.{name}": cls for name, cls in vars(builtins).items()
             if isinstance(cls, type) and issubclass(cls, Warning)}
_ON: contextvars.ContextVar[bool] = contextvars.ContextVar("pase_import_cache", default=False)
_PLAIN = (str, int, float, bool, type(None))
_SKIP_PREFIXES = ("/proc/", "/sys/", "/dev/")
_opened: list[set[str]] = []  # one set per build in progress: the paths it opened


@contextlib.contextmanager
def enabled(on: bool = True) -> Iterator[None]:
    """Within the block, :func:`cached_graph` uses the cache (unless ``PASE_NO_CACHE=1``)."""
    token = _ON.set(on)
    try:
        yield
    finally:
        _ON.reset(token)


def active() -> bool:
    return _ON.get() and os.environ.get("PASE_NO_CACHE", "").strip() in ("", "0")


def cache_dir() -> Path:
    if os.environ.get("PASE_CACHE_DIR"):
        return Path(os.environ["PASE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pase"


def cached_graph(path: Path, function: str, options: dict[str, Any],
                 build: Callable[[], Any]) -> Any:
    """The graph ``build()`` returns for the reference ``path:function`` with ``options``,
    read from the cache when a valid entry exists, else built (and stored)."""
    key = _key(path, function, options)
    if key is None:  # not cacheable (torch missing, an option JSON cannot hold...)
        return build()
    entry_path = cache_dir() / f"pase-import-{key}.json"
    graph = _read(entry_path, key)
    if graph is not None:
        return graph
    graph, deps, caught = _recorded(build)
    _write(entry_path, key, graph, deps, caught)
    return graph


# -- the key ----------------------------------------------------------------------------

def _key(path: Path, function: str, options: dict[str, Any]) -> str | None:
    try:
        if importlib.util.find_spec("torch") is None:
            return None  # the build says torch is missing, one line
        torch_version = metadata.version("torch")
        source, cwd = _digest(path.resolve()), os.getcwd()
    except (OSError, ValueError, metadata.PackageNotFoundError,  # a vanished working folder
            _NotRegular):  # a FIFO named like a model file: the build refuses it
        return None
    if source is None or not all(isinstance(v, _PLAIN) for v in options.values()):
        return None
    from pase import __version__

    parts = [FORMAT, str(path.resolve()), function, source,
             sorted((k, type(v).__name__, repr(v)) for k, v in options.items()),
             __version__, _pase_sources(), sys.version, torch_version, cwd, [str(p) for p in sys.path]]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


_PASE_SOURCES: str | None = None


def _pase_sources() -> str:
    """One digest of every source file of pase: the importer, the schema that checks what
    it emits and the cost rules its FLOP check reads (any change to pase: a miss)."""
    global _PASE_SOURCES
    if _PASE_SOURCES is None:
        root = Path(__file__).resolve().parents[1]
        files = sorted(root.rglob("*.py"))
        h = hashlib.sha256()
        for f in files:
            h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
        _PASE_SOURCES = h.hexdigest()
    return _PASE_SOURCES


class _NotRegular(Exception):
    """A path that names a FIFO, socket, device or folder: never opened, never hashed."""


@contextlib.contextmanager
def _opened_regular(path: str | Path) -> Iterator[Any]:
    """``path`` open for binary reading when it is a regular file (links followed);
    :class:`_NotRegular` when it is not. Checked before the open (pase.files' guard) and
    again on the open descriptor, so a FIFO put in its place meanwhile never blocks."""
    try:
        regular_file(path, "file")
    except PaseError as exc:
        raise _NotRegular(str(path)) from exc
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _NotRegular(str(path))
        yield f


def _digest(path: str | Path) -> str | None:
    """SHA-256 of a regular file's bytes; None when it is missing or unreadable;
    :class:`_NotRegular` when it is something else."""
    try:
        with _opened_regular(path) as f:
            h = hashlib.sha256()
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
            return h.hexdigest()
    except OSError:
        return None


# -- what a build read ------------------------------------------------------------------

def _audit(event: str, args: tuple) -> None:
    if not (_opened and event == "open"):
        return
    try:  # a hook that raises would fail the open itself
        path, mode, flags = args
        reads = "r" in mode if isinstance(mode, str) else not flags & (os.O_WRONLY | os.O_RDWR)
        if isinstance(path, os.PathLike):
            path = os.fspath(path)
        if isinstance(path, str) and reads:
            _opened[-1].add(os.path.abspath(path))
    except Exception:
        pass


_hooked = False


def _recorded(build: Callable[[], Any]) -> tuple[Any, dict[str, Any] | None, list]:
    """``build()``'s graph, what it read (files and distributions; None when that could
    not be told) and its warnings."""
    global _hooked
    if not _hooked:  # an audit hook stays for the process; it is idle outside builds
        sys.addaudithook(_audit)
        _hooked = True
    _opened.append(set())
    caught: list = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # every one is stored; the caller's filters apply below
            graph = build()
    finally:
        opened = _opened.pop()
        for w in caught:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    try:
        deps = _dependencies(opened)
    except _NotRegular:  # it read a FIFO or a device: what it read cannot be checked
        deps = None
    except Exception:  # unreadable package metadata...: this graph is not cached, not an error
        deps = None
    return graph, deps, caught


def _roots() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(site-packages folders, standard-library folders), each ending in a separator."""
    paths = sysconfig.get_paths()
    sites = {paths["purelib"], paths["platlib"], *site.getsitepackages(), site.getusersitepackages()}
    std = {paths["stdlib"], paths["platstdlib"], sys.base_prefix, sys.base_exec_prefix}
    tail = lambda s: tuple(sorted(os.path.join(os.path.abspath(p), "") for p in s))  # noqa: E731
    return tail(sites), tail(std)


def _dependencies(opened: set[str]) -> dict[str, Any]:
    """``{"files": {path: sha256 or None}, "packages": {distribution: version}}``."""
    sites, std = _roots()
    files = {os.path.abspath(f) for f in opened}
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if isinstance(f, str) and os.path.isabs(f):  # torch.ops says "_ops.py"
            files.add(f)
    cache = os.path.join(os.path.abspath(cache_dir()), "")
    tops: set[str] = set()
    out: dict[str, Any] = {}
    for f in sorted(files):
        if f.startswith(sites):
            rest = f[next(len(s) for s in sites if f.startswith(s)):]
            tops.add(rest.split(os.sep)[0].split(".")[0])
        elif not f.startswith(std + (cache,) + _SKIP_PREFIXES) and not os.path.isdir(f) \
                and f"{os.sep}__pycache__{os.sep}" not in f:  # bytecode: its source counts
            out[f] = _digest(f)
    owners = _owners()
    packages = {}
    for top in sorted(tops):
        for dist in owners.get(top, []):
            with contextlib.suppress(metadata.PackageNotFoundError):
                packages[dist] = metadata.version(dist)
    return {"files": out, "packages": packages}


_OWNERS: tuple[tuple[str, ...], dict[str, list[str]]] | None = None


def _owners() -> dict[str, list[str]]:
    """Top-level module name -> the distributions that install it: 0.3 CPU s to find (every
    distribution's file list), so found once per process for one ``sys.path``."""
    global _OWNERS
    if _OWNERS is None or _OWNERS[0] != tuple(sys.path):
        _OWNERS = (tuple(sys.path), metadata.packages_distributions())
    return _OWNERS[1]


def _unchanged(deps: dict[str, Any]) -> bool:
    for f, digest in deps["files"].items():
        try:
            if _digest(f) != digest:
                return False
        except _NotRegular:  # never opened: a FIFO would block, /dev/zero never ends
            return False
    for dist, version in deps["packages"].items():
        try:
            if metadata.version(dist) != version:
                return False
        except metadata.PackageNotFoundError:
            return False
    return True


# -- entries ----------------------------------------------------------------------------

def _seal(entry: dict[str, Any]) -> str:
    """The entry's digest: SHA-256 of every field but ``digest`` as canonical JSON."""
    rest = {k: v for k, v in entry.items() if k != "digest"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode()
                          ).hexdigest()


def _read(entry_path: Path, key: str) -> Any:
    """The entry's graph when it is valid and nothing it read changed, else None (a miss:
    never an error, whatever the file holds)."""
    from pase.ir import Graph

    try:
        with _opened_regular(entry_path) as f:
            raw = f.read(MAX_ENTRY_BYTES + 1)
        entry = json.loads(raw.decode("utf-8")) if len(raw) <= MAX_ENTRY_BYTES else None
    except (OSError, ValueError, RecursionError, _NotRegular):  # a cycle of links, not UTF-8..
        return None
    try:
        if not _well_formed(entry, key) or not _unchanged(entry["depends"]):
            return None
    except RecursionError:  # nested deeper than the digest's encoder goes
        return None
    try:
        graph = Graph.from_dict(entry["graph"])
    except Exception:  # sealed but not a graph (a forged entry): rebuilt, never an error
        return None
    with contextlib.suppress(OSError, NotImplementedError):  # recently used: kept by pruning
        os.utime(entry_path, follow_symlinks=False)
    for name, message, filename, lineno in entry["warnings"]:
        warnings.warn_explicit(message, _WARNINGS[name], filename, lineno)
    return graph


def _well_formed(entry: Any, key: str) -> bool:
    """Every field of the layout, of its type, sealed by its digest, for this key."""
    if not (isinstance(entry, dict) and set(entry) == {"format", "key", "depends", "warnings",
                                                       "graph", "digest"}
            and type(entry["format"]) is int and entry["format"] == FORMAT
            and entry["key"] == key and isinstance(entry["graph"], dict)
            and entry["digest"] == _seal(entry)):
        return False
    deps, warned = entry["depends"], entry["warnings"]
    if not (isinstance(deps, dict) and set(deps) == {"files", "packages"}
            and isinstance(deps["files"], dict) and isinstance(deps["packages"], dict)
            and all(os.path.isabs(f) and (d is None or isinstance(d, str))
                    for f, d in deps["files"].items())
            and all(isinstance(v, str) for v in deps["packages"].values())):
        return False
    return isinstance(warned, list) and all(
        isinstance(w, list) and len(w) == 4 and w[0] in _WARNINGS and isinstance(w[1], str)
        and isinstance(w[2], str) and type(w[3]) is int for w in warned)


def _write(entry_path: Path, key: str, graph: Any, deps: dict[str, Any] | None,
           caught: list) -> None:
    """Store the entry, atomically; skipped when the graph would not read back equal, a
    warning's class is not a built-in one or the entry would pass the size cap. A cache
    that cannot be written is no error."""
    from pase.ir import Graph

    if deps is None:
        return
    data = graph.to_dict()
    warned = [[f"{w.category.__module__}.{w.category.__qualname__}", str(w.message),
               w.filename, w.lineno] for w in caught]
    if not all(_WARNINGS.get(name) is w.category and isinstance(filename, str)
               and type(lineno) is int for w, (name, _, filename, lineno) in zip(caught, warned)):
        return  # given again on a hit only as the class it was: not cached
    try:
        if Graph.from_dict(json.loads(json.dumps(data))) != graph:
            return
    except (ValueError, TypeError):
        return
    entry = {"format": FORMAT, "key": key, "depends": deps, "warnings": warned, "graph": data}
    entry["digest"] = _seal(entry)
    text = json.dumps(entry).encode("utf-8")
    if len(text) > MAX_ENTRY_BYTES:
        return
    tmp = None
    try:
        entry_path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{entry_path.name}.", suffix=".tmp",
                                   dir=entry_path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())  # whole on disk before it takes the entry's name
        os.replace(tmp, entry_path)
        tmp = None
        _prune(entry_path.parent)
    except OSError:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _prune(folder: Path) -> None:
    """Delete the least recently used entries past :data:`MAX_ENTRIES`: regular files named
    as pase names its entries, nothing else the folder holds."""
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

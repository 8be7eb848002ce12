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

Only the command line uses the cache (:func:`enabled`); ``--no-cache`` or
``PASE_NO_CACHE=1`` bypasses it. It lives in ``$PASE_CACHE_DIR``, else
``$XDG_CACHE_HOME/pase``, else ``~/.cache/pase``; deleting the folder is safe.
"""
from __future__ import annotations

import contextlib
import contextvars
import hashlib
import importlib.util
import json
import os
import site
import sys
import sysconfig
import warnings
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterator

__all__ = ["FORMAT", "MAX_ENTRIES", "active", "cache_dir", "cached_graph", "enabled"]

FORMAT = 1  # the entry layout; a change makes every old entry a miss
MAX_ENTRIES = 256  # oldest-used entries past this are deleted when one is written
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
    entry_path = cache_dir() / f"{key}.json"
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
    except (OSError, ValueError, metadata.PackageNotFoundError):  # a vanished working folder
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


def _digest(path: str | Path) -> str | None:
    """SHA-256 of a file's bytes; None when it is not a readable regular file."""
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest() if hasattr(hashlib, "file_digest") \
                else hashlib.sha256(f.read()).hexdigest()
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
    owners = metadata.packages_distributions()
    packages = {}
    for top in sorted(tops):
        for dist in owners.get(top, []):
            with contextlib.suppress(metadata.PackageNotFoundError):
                packages[dist] = metadata.version(dist)
    return {"files": out, "packages": packages}


def _unchanged(deps: dict[str, Any]) -> bool:
    for f, digest in deps["files"].items():
        if _digest(f) != digest:
            return False
    for dist, version in deps["packages"].items():
        try:
            if metadata.version(dist) != version:
                return False
        except metadata.PackageNotFoundError:
            return False
    return True


# -- entries ----------------------------------------------------------------------------

def _read(entry_path: Path, key: str) -> Any:
    """The entry's graph when it is valid and nothing it read changed, else None."""
    from pase.ir import Graph

    try:
        entry = json.loads(entry_path.read_text(encoding="utf-8"))
        if entry.get("format") != FORMAT or entry.get("key") != key \
                or not _unchanged(entry["depends"]):
            return None
        graph = Graph.from_dict(entry["graph"])
        categories = [_category(name) for name, *_ in entry["warnings"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ImportError):
        return None  # unreadable or half-written: a miss, overwritten below
    with contextlib.suppress(OSError):
        os.utime(entry_path)  # recently used: kept when old entries are pruned
    for cat, (_, message, filename, lineno) in zip(categories, entry["warnings"]):
        warnings.warn_explicit(message, cat, filename, lineno)
    return graph


def _category(name: str) -> type[Warning]:
    """A warning class by name: a built-in one, or one of pase's (never another package's,
    which could import torch)."""
    import builtins
    import importlib

    module, _, qual = name.rpartition(".")
    obj = getattr(builtins, qual, None) if module == "builtins" else \
        getattr(importlib.import_module(module), qual, None) \
        if module == "pase" or module.startswith("pase.") else None
    if not (isinstance(obj, type) and issubclass(obj, Warning)):
        raise ValueError(f"warning class {name!r} cannot be given again")
    return obj


def _write(entry_path: Path, key: str, graph: Any, deps: dict[str, Any] | None,
           caught: list) -> None:
    """Store the entry, atomically; skipped when the graph would not read back equal or a
    warning's class is not a built-in or pase's. A cache that cannot be written is no error."""
    from pase.ir import Graph

    if deps is None:
        return
    data = graph.to_dict()
    warned = [[f"{w.category.__module__}.{w.category.__qualname__}", str(w.message),
               w.filename, w.lineno] for w in caught]
    try:
        for name, *_ in warned:
            _category(name)
        if Graph.from_dict(json.loads(json.dumps(data))) != graph:
            return
    except (ValueError, TypeError, ImportError):
        return
    entry = {"format": FORMAT, "key": key, "depends": deps, "warnings": warned, "graph": data}
    tmp = entry_path.with_name(f".{entry_path.name}.{os.getpid()}.tmp")
    try:
        entry_path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(entry), encoding="utf-8")
        os.replace(tmp, entry_path)
        _prune(entry_path.parent)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _prune(folder: Path) -> None:
    entries = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[MAX_ENTRIES:]:
        with contextlib.suppress(OSError):
            old.unlink()

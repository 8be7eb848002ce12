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

Nothing in an entry is trusted (:mod:`pase.frontends.cache_store` reads and
writes them): a damaged, foreign, oversized or non-regular entry is a miss, and the
graph is built again. Only regular files are ever read or hashed, so nothing blocks
on a FIFO or reads a device forever; a build that read a FIFO, socket or device
outside ``/dev`` is not cached, since what it read cannot be checked without reading
it again. A stored warning is given again only as one of Python's built-in warning
classes: nothing is imported by a name read from an entry.

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

from pase.frontends import cache_store as store
from pase.frontends.cache_store import FORMAT, MAX_ENTRIES, MAX_ENTRY_BYTES

__all__ = ["FORMAT", "MAX_ENTRIES", "MAX_ENTRY_BYTES", "active", "cache_dir", "cached_graph",
           "enabled"]

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
    entry_path = store.entry_path(cache_dir(), key)
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
        source, cwd = store.digest(path.resolve()), os.getcwd()
    except (OSError, ValueError, metadata.PackageNotFoundError,  # a vanished working folder
            store.NotRegular):  # a FIFO named like a model file: the build refuses it
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
    except store.NotRegular:  # it read a FIFO or a device: what it read cannot be checked
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
            out[f] = store.digest(f)
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
    for f, sha in deps["files"].items():
        try:
            if store.digest(f) != sha:
                return False
        except store.NotRegular:  # never opened: a FIFO would block, /dev/zero never ends
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
    """The entry's graph when it is valid and nothing it read changed, else None (a miss:
    never an error, whatever the file holds)."""
    from pase.ir import Graph

    entry = store.load(entry_path, key)
    if entry is None or not _unchanged(entry["depends"]):
        return None
    try:
        graph = Graph.from_dict(entry["graph"])
    except Exception:  # sealed but not a graph (a forged entry): rebuilt, never an error
        return None
    store.touch(entry_path)
    for name, message, filename, lineno in entry["warnings"]:
        warnings.warn_explicit(message, store.WARNINGS[name], filename, lineno)
    return graph


def _write(entry_path: Path, key: str, graph: Any, deps: dict[str, Any] | None,
           caught: list) -> None:
    """Store the entry; skipped when what the build read cannot be checked, the graph
    would not read back equal or a warning's class is not a built-in one."""
    from pase.ir import Graph

    if deps is None:
        return
    data = graph.to_dict()
    warned = [[f"{w.category.__module__}.{w.category.__qualname__}", str(w.message),
               w.filename, w.lineno] for w in caught]
    if not all(store.WARNINGS.get(name) is w.category and isinstance(filename, str)
               and type(lineno) is int for w, (name, _, filename, lineno) in zip(caught, warned)):
        return  # given again on a hit only as the class it was: not cached
    try:
        if Graph.from_dict(json.loads(json.dumps(data))) != graph:
            return
    except (ValueError, TypeError):
        return
    store.save(entry_path, {"format": FORMAT, "key": key, "depends": deps,
                            "warnings": warned, "graph": data})

"""Name -> plug-in registries for solvers, cost models and graphs.

Built-in plug-ins register themselves with a decorator when their package is
imported; third-party packages add more through entry points. Both are loaded
lazily on the first lookup, so ``import pase`` stays cheap and never fails
because an optional backend is missing.

Each entry point loads on its own: one that fails to import (or does not
provide the right kind of object) is recorded as *broken* with a one-line
error, listed by ``pase solvers`` / ``pase cost-models`` / ``pase models``,
and refused with a :class:`PluginError` when asked for by name; every other
plug-in keeps working.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Callable

from pase.errors import PaseError, UnknownNameError


class PluginError(PaseError, ImportError):
    """A third-party plug-in failed to load; the message names it and its error."""


@dataclass(frozen=True)
class Entry:
    """One registered plug-in: the object plus what listings show about it."""

    name: str
    obj: Any
    description: str = ""
    info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Broken:
    """An entry point that failed to load: its name, target and one-line error."""

    name: str
    target: str
    error: str


class Registry:
    """A dict of plug-ins that refuses duplicates and explains unknown names.

    ``check`` (optional) returns an error text when a loaded entry-point
    object is not the right kind of plug-in (e.g. a cost model that is not a
    CostModel subclass), or None when it is.
    """

    def __init__(self, kind: str, builtin_package: str, entry_point_group: str,
                 check: Callable[[Any], str | None] | None = None):
        self.kind = kind
        self._builtin_package = builtin_package
        self._group = entry_point_group
        self._check = check
        self._entries: dict[str, Entry] = {}
        self._broken: dict[str, Broken] = {}
        self._loaded = False
        self._loading = False

    def register(self, name: str, description: str = "", **info: Any) -> Callable[[Any], Any]:
        """Decorator: ``@SOLVERS.register("dp", "PaSE dynamic program")``."""

        def decorate(obj: Any) -> Any:
            self.add(name, obj, description, **info)
            return obj

        return decorate

    def add(self, name: str, obj: Any, description: str = "", **info: Any) -> None:
        if name in self._entries:
            raise PaseError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = Entry(name, obj, description or _first_line(obj), dict(info))

    def remove(self, name: str) -> None:
        """Unregister a plug-in (tests and notebooks that re-define one)."""
        self._entries.pop(name, None)
        self._broken.pop(name, None)

    # -- loading -------------------------------------------------------------
    def _load(self) -> None:
        """Import the built-ins, then each entry point on its own.

        ``_loaded`` is set only when loading finished, so a failure in the
        built-ins (a bug in pase) is raised again on the next lookup instead of
        leaving a half-filled registry behind; lookups made while loading (a
        plug-in module that asks the registry) see what is loaded so far.
        """
        if self._loaded or self._loading:
            return
        self._loading = True
        try:
            importlib.import_module(self._builtin_package)
            for ep in _entry_points(self._group):
                self._load_entry_point(ep)
            self._loaded = True
        finally:
            self._loading = False

    def _load_entry_point(self, ep: Any) -> None:
        before = set(self._entries)
        try:
            obj = ep.load()  # importing may register it through the decorator already
            problem = self._check(obj) if self._check else None
            if problem:
                raise PluginError(problem)
            if ep.name in before and self._entries[ep.name].obj is not obj:
                raise PluginError(f"the name {ep.name!r} is taken by another {self.kind}")
            if ep.name not in self._entries:
                self.add(ep.name, obj)
        except (Exception, SystemExit) as exc:  # a broken third-party plug-in must not break pase
            for name in set(self._entries) - before:  # nothing half-registered stays
                del self._entries[name]
            self._broken[ep.name] = Broken(ep.name, getattr(ep, "value", "?"), _one_line(exc))

    # -- lookups -------------------------------------------------------------
    def entry(self, name: str) -> Entry:
        if not isinstance(name, str):  # a list would be unhashable, a number a confusing miss
            raise UnknownNameError(f"a {self.kind} name must be a string, got "
                                   f"{type(name).__name__} {name!r:.60}")
        self._load()
        if name in self._entries:
            return self._entries[name]
        if name in self._broken:
            b = self._broken[name]
            raise PluginError(f"{self.kind} plug-in {name!r} ({b.target}) failed to load: {b.error}")
        known = ", ".join(sorted(self._entries))
        raise UnknownNameError(f"unknown {self.kind} {name!r}; known: {known}")

    def get(self, name: str) -> Any:
        return self.entry(name).obj

    def names(self) -> list[str]:
        """Names of the plug-ins that loaded, sorted (broken ones: :meth:`broken`)."""
        self._load()
        return sorted(self._entries)

    def entries(self) -> list[Entry]:
        return [self._entries[n] for n in self.names()]

    def broken(self) -> list[Broken]:
        """Entry points that failed to load, sorted by name."""
        self._load()
        return [self._broken[n] for n in sorted(self._broken)]

    def __contains__(self, name: str) -> bool:
        """True for loaded and broken names alike (looking up a broken one explains why)."""
        self._load()
        return name in self._entries or name in self._broken


def _entry_points(group: str) -> list[Any]:
    try:
        return list(entry_points(group=group))
    except Exception:  # unreadable package metadata: no third-party plug-ins, not a crash
        return []


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _first_line(obj: Any) -> str:
    doc = getattr(obj, "__doc__", None) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _callable(obj: Any) -> str | None:
    return None if callable(obj) else f"{obj!r} is not callable"


def _cost_model_class(obj: Any) -> str | None:
    from pase.costing import CostModel

    if isinstance(obj, type) and issubclass(obj, CostModel):
        return None
    return f"{obj!r} is not a subclass of pase.costing.CostModel"


SOLVERS = Registry("solver", "pase.solvers", "pase.solvers", check=_callable)
COST_MODELS = Registry("cost model", "pase.cost_models", "pase.cost_models", check=_cost_model_class)
MODELS = Registry("model", "pase.graphs", "pase.graphs", check=_callable)

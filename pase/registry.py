"""Name -> plug-in registries for solvers, cost models and graphs.

Built-in plug-ins register themselves with a decorator when their package is
imported; third-party packages add more through entry points. Both are loaded
lazily on the first lookup, so ``import pase`` stays cheap and never fails
because an optional backend is missing.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Callable

from pase.errors import PaseError, UnknownNameError


@dataclass(frozen=True)
class Entry:
    """One registered plug-in: the object plus what listings show about it."""

    name: str
    obj: Any
    description: str = ""
    info: dict = field(default_factory=dict)


class Registry:
    """A dict of plug-ins that refuses duplicates and explains unknown names."""

    def __init__(self, kind: str, builtin_package: str, entry_point_group: str):
        self.kind = kind
        self._builtin_package = builtin_package
        self._group = entry_point_group
        self._entries: dict[str, Entry] = {}
        self._loaded = False

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

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        importlib.import_module(self._builtin_package)
        for ep in entry_points(group=self._group):
            obj = ep.load()  # importing may register it through the decorator already
            if ep.name not in self._entries:
                self.add(ep.name, obj)

    def entry(self, name: str) -> Entry:
        self._load()
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(sorted(self._entries))
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def get(self, name: str) -> Any:
        return self.entry(name).obj

    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def entries(self) -> list[Entry]:
        return [self._entries[n] for n in self.names()]

    def __contains__(self, name: str) -> bool:
        self._load()
        return name in self._entries


def _first_line(obj: Any) -> str:
    doc = getattr(obj, "__doc__", None) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


SOLVERS = Registry("solver", "pase.solvers", "pase.solvers")
COST_MODELS = Registry("cost model", "pase.cost_models", "pase.cost_models")
MODELS = Registry("model", "pase.graphs", "pase.graphs")

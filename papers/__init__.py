"""Reproductions of published results, by name.

Each entry maps a name to a ``reproduce(out_dir, quick=False, progress=print)``
function that runs the experiments and writes tables and figures into
``out_dir``, returning ``{label: path}`` of the files written. Modules are
imported only when a reproduction is asked for, so ``import pase`` stays cheap.

    >>> from pase.papers import names
    >>> "pase-ipdps2021" in names()
    True
"""
from __future__ import annotations

import importlib
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping, NamedTuple

from pase.errors import UnknownNameError


class Paper(NamedTuple):
    """A registered reproduction: where its code lives and what it produces."""

    name: str
    module: str
    title: str

    @property
    def default_out(self) -> Path:
        """``pase-reproduce-<name>`` under the current directory: a run writes into the
        repository (say, the committed results) only when told to."""
        return Path(f"pase-reproduce-{self.name}")


# Read-only: reproductions are added here, not at run time.
PAPERS: Mapping[str, Paper] = MappingProxyType({
    "pase-ipdps2021": Paper(
        "pase-ipdps2021", "pase.papers.pase_ipdps2021",
        "V. Elango, PaSE: Parallelization Strategies for Efficient DNN Training, IPDPS 2021 "
        "(Table I search time, Table II strategies, Figure 6 speedups)"),
})


def names() -> list[str]:
    """Registered reproduction names, sorted."""
    return sorted(PAPERS)


def entry(name: str) -> Paper:
    """The registered :class:`Paper`; an unknown name raises UnknownNameError listing the known."""
    try:
        return PAPERS[name]
    except KeyError:
        raise UnknownNameError(f"unknown paper {name!r}; known: {', '.join(names())}") from None


def get(name: str) -> Callable[..., dict[str, Path]]:
    """The ``reproduce`` function of reproduction ``name``."""
    return importlib.import_module(entry(name).module).reproduce


def reproduce(name: str, out_dir: str | Path | None = None, *, quick: bool = False,
              progress: Callable[[str], Any] | None = print) -> dict[str, Path]:
    """Run reproduction ``name`` into ``out_dir`` (default: :attr:`Paper.default_out`)."""
    paper = entry(name)
    return get(name)(Path(out_dir) if out_dir is not None else paper.default_out,
                     quick=quick, progress=progress)

"""See a strategy: one self-contained HTML page (and a notebook view).

``pase.view(strategy, "plan.html")`` writes the page; ``pase view MODEL -p N`` is the
command. ``pase.view`` is this package and, called, :func:`pase.view.write.view`:

- :mod:`~pase.view.build` collects the page model (JSON-able) from
  :mod:`~pase.view.summary`, :mod:`~pase.view.plan` (rows), :mod:`~pase.view.blocks`
  (folding repeated blocks), :mod:`~pase.view.devices` (tiles per device),
  :mod:`~pase.view.timeline` (the simulator's), :mod:`~pase.view.compare`;
- :mod:`~pase.view.pipeline` does the same for a pipeline plan;
- :mod:`~pase.view.page` inlines it with ``static/`` (template, style, script);
- :mod:`~pase.view.notebook` is ``Strategy._repr_html_``; :mod:`~pase.view.runs`
  writes a page per sweep run for ``pase report --views``.
"""
from __future__ import annotations

import sys
import types
from typing import Any


class _ViewModule(types.ModuleType):
    """The package, callable as :func:`pase.view.write.view` (``pase.view(s, path)``): the
    import system sets ``pase.view`` to the package once a submodule is imported, so the
    function and the package must be one object."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from pase.view.write import view

        return view(*args, **kwargs)


sys.modules[__name__].__class__ = _ViewModule


def view(*args: Any, **kwargs: Any) -> Any:
    """:func:`pase.view.write.view`."""
    from pase.view.write import view as write_view

    return write_view(*args, **kwargs)


__all__ = ["view"]

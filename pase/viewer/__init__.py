"""See a strategy: one self-contained HTML page (and a notebook view).

``pase.view(strategy, "plan.html")`` (:func:`pase.viewer.write.view`) writes the page;
``pase view MODEL -p N`` is the command.

- :mod:`~pase.viewer.build` collects the page model (JSON-able) from
  :mod:`~pase.viewer.summary`, :mod:`~pase.viewer.plan` (rows), :mod:`~pase.viewer.blocks`
  (folding repeated blocks), :mod:`~pase.viewer.devices` (tiles per device),
  :mod:`~pase.viewer.timeline` (the simulator's), :mod:`~pase.viewer.comms` (each op's
  kernels and communication), :mod:`~pase.viewer.layout` (the plan in one line),
  :mod:`~pase.viewer.compare`;
- :mod:`~pase.viewer.pipeline` does the same for a pipeline plan;
- :mod:`~pase.viewer.page` inlines it with ``static/`` (template, style, script);
- :mod:`~pase.viewer.notebook` is ``Strategy._repr_html_``; :mod:`~pase.viewer.runs`
  writes a page per sweep run for ``pase report --views``.

The package is ``viewer``, not ``view``, so that ``pase.view`` stays the function:
importing a submodule ``pase.view.X`` would rebind ``pase.view`` to the package.
This ``__init__`` imports nothing, so ``pase.strategy`` can draw itself through
:mod:`~pase.viewer.notebook` without an import cycle.
"""

"""Importers into pase's graph IR (they only produce a Graph).

- :func:`from_torch`: a PyTorch module through ``torch.export`` (needs the ``torch`` extra);
- :func:`pase.frontends.reference.load_reference`: ``FILE.py:FUNCTION`` returning a
  module and its example inputs, for the command line.

torch is imported only when an importer runs.
"""
from __future__ import annotations

from typing import Any

__all__ = ["from_torch", "import_torch"]


def from_torch(module: Any, example_args: Any, **options: Any) -> Any:
    """See :func:`pase.frontends.torch.from_torch`."""
    from pase.frontends.torch import from_torch as _from_torch

    return _from_torch(module, example_args, **options)


def import_torch(module: Any, example_args: Any, **options: Any) -> Any:
    """See :func:`pase.frontends.torch.import_torch`."""
    from pase.frontends.torch import import_torch as _import_torch

    return _import_torch(module, example_args, **options)

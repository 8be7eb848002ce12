"""torch's own log records held back while the command line imports a model.

``torch.export`` of a module whose example inputs do not fit it logs a full
traceback (torch._subclasses.fake_tensor, torch._dynamo, torch.export...) through
the ``logging`` module before it raises; pase then says the same in one line. The
command line (``pase import``) silences every logger for the import unless
``--debug`` is given; the Python API leaves logging alone.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Iterator

__all__ = ["quiet_logs"]


@contextlib.contextmanager
def quiet_logs(on: bool = True) -> Iterator[None]:
    """Within the block no logger emits anything (``logging.disable``), when ``on``;
    the previous level is restored after. torch's loggers have handlers of their own and
    do not propagate, so one switch for all is the one that reaches each of them."""
    if not on:
        yield
        return
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(previous)

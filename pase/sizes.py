"""Sizes refused before any work: a model too large to build, more sweep workers than the
machine holds.

A registered model's op count is predicted from two cheap builds per grown option
(its default and twice it, the other options at their defaults), so
``layers=1000000`` is a one-line :class:`~pase.errors.TooLargeError` in well under a
second instead of an hour of building. The prediction is linear in each option,
which every built-in family is (a layer, block or op adds a fixed number of ops).
"""
from __future__ import annotations

import inspect
import os
from functools import lru_cache
from typing import Any, Callable, Mapping

from pase.errors import OptionError, PaseError, TooLargeError

# The most ops a built model may have. The largest built-in model (gpt3-175b) has
# about 1,200 and building runs at roughly 5,000 to 10,000 ops a second, so this
# is tens of seconds of building before any cost is computed.
MAX_GRAPH_OPS = 100_000
# Integer options up to this value are never probed: even at 40 ops a unit (the
# most any built-in family adds) they stay far below MAX_GRAPH_OPS.
PROBE_FROM = 256
# A local sweep worker is a Python process with pase, numpy and Dask loaded, plus
# the run it starts; about this much memory each, at least.
WORKER_BYTES = 256 * 2**20
# Local workers per CPU core beyond which more only queue for the cores.
WORKERS_PER_CPU = 4


def check_model_size(name: str, builder: Callable[..., Any], options: Mapping[str, Any]) -> None:
    """TooLargeError when ``builder(**options)`` would have more than MAX_GRAPH_OPS ops."""
    defaults = _size_defaults(builder)
    grown = {k: _measure(v) for k, v in options.items() if k in defaults}
    grown = {k: n for k, n in grown.items()
             if n is not None and n > max(_measure(defaults[k]) or 0, PROBE_FROM)}
    if not grown:
        return
    base = _ops_at(builder, ())
    if base is None:
        return
    slopes = {k: _slope(builder, k, defaults[k], base) for k in grown}
    predicted = base + sum(slopes[k] * (n - (_measure(defaults[k]) or 0))
                           for k, n in grown.items())
    if predicted <= MAX_GRAPH_OPS:
        return
    given = ", ".join(f"{k}={_shown(options[k])}" for k in grown)
    each = ", ".join(f"{k} adds about {slopes[k]:.3g}" for k in grown if slopes[k] > 0)
    raise TooLargeError(
        f"model {name!r} with {given} would have about {int(predicted):,} ops ({each} each); "
        f"pase builds models of at most {MAX_GRAPH_OPS:,} ops (pase.sizes.MAX_GRAPH_OPS)")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _measure(value: Any) -> int | None:
    """The size of an option value: an integer, or the sum of a list of them (resnet's
    blocks per stage); None for anything else."""
    if _is_int(value):
        return value
    if isinstance(value, (list, tuple)) and value and all(_is_int(v) for v in value):
        return sum(value)
    return None


def _shown(value: Any) -> str:
    text = str(list(value)) if isinstance(value, (list, tuple)) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _size_defaults(builder: Callable[..., Any]) -> dict[str, Any]:
    try:
        params = inspect.signature(builder).parameters
    except (TypeError, ValueError):
        return {}
    return {n: p.default for n, p in params.items() if (_measure(p.default) or 0) >= 1}


# Keyed on the builder: a registered function lives as long as the process.
@lru_cache(maxsize=256)
def _ops_at(builder: Callable[..., Any], options: tuple[tuple[str, Any], ...]) -> int | None:
    try:
        return len(builder(**dict(options)).ops)
    except (PaseError, TypeError, ValueError):  # an invalid probe predicts nothing
        return None


def _slope(builder: Callable[..., Any], option: str, default: Any, base: int) -> float:
    """Ops each unit of ``option`` adds, from its default to twice it (0 if unknown)."""
    doubled = 2 * default if _is_int(default) else tuple(2 * v for v in default)
    ops = _ops_at(builder, ((option, doubled),))
    units = _measure(default) or 1
    return 0.0 if ops is None else max(0.0, (ops - base) / units)


def check_workers(workers: int | None, flag: str = "--workers") -> None:
    """OptionError when more local workers are asked for than this machine can run."""
    if workers is None:
        return
    cpus = os.cpu_count() or 1
    memory = _memory_bytes()
    by_cpu = WORKERS_PER_CPU * cpus
    by_memory = None if memory is None else max(1, int(memory // WORKER_BYTES))
    allowed = by_cpu if by_memory is None else min(by_cpu, by_memory)
    if workers <= allowed:
        return
    held = f"{cpus} CPU{'s' if cpus != 1 else ''}"
    if memory is not None:
        held += f" and {memory / 2**30:.3g} GiB of memory"
    raise OptionError(
        f"{flag} {workers}: this machine has {held}, enough for at most {allowed} local "
        f"workers ({WORKERS_PER_CPU} per CPU, about {WORKER_BYTES // 2**20} MiB each); "
        f"give a smaller number, or --scheduler for a cluster")


def _memory_bytes() -> float | None:
    """Physical memory of this machine, or None where it cannot be asked."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return None

"""Validate and coerce plug-in options by their type annotations.

Solvers, cost models and model builders declare their options as keyword
arguments with defaults and annotations (``int``, ``float``, ``bool``, ``str``,
or ``X | None`` of those). :func:`coerce_options` checks a mapping of options
against such a signature: unknown names are refused with the allowed ones
listed, and each value is converted to its annotated type, so the same rules
hold for ``pase solve --option KEY=VALUE`` (text) and for Python callers:

- ``int`` takes an integer, an integral float (``1e17``) or their text;
- ``float`` takes any finite number or its text; options whose name ends in
  ``_budget`` or ``_bytes`` also take a memory size such as ``1GiB``;
- ``bool`` takes ``True``/``False``, 1/0 or the text ``true``/``false``/``yes``/``no``/``1``/``0``;
- ``str`` takes text;
- ``X | None`` also takes ``None`` or the text ``none``/``null``.

Options with other annotations (say ``tuple[int, ...] | None``) are passed
through; their text is read as JSON when it parses.

    >>> def solve(problem, *, iterations: int = 10, beta: float = 1.0, time_limit=None, seed=None):
    ...     pass
    >>> coerce_options(solve, {"iterations": "1e3", "beta": "2"}, "solver 'x'")
    {'iterations': 1000, 'beta': 2.0}
"""
from __future__ import annotations

import inspect
import json
import math
import re
from typing import Any, Callable, Mapping

import numpy as np

from pase.errors import OptionError

SIMPLE_TYPES = ("None", "bool", "int", "float", "str")
_TRUE, _FALSE = ("true", "yes", "1"), ("false", "no", "0")
_UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def coerce_options(func: Any, options: Mapping[str, Any], what: str,
                   reserved: tuple[str, ...] = ()) -> dict[str, Any]:
    """``options`` checked against ``func``'s keyword parameters and coerced to their types.

    ``what`` names the plug-in in messages (``"solver 'dp'"``); ``reserved``
    names parameters that are not options (``time_limit``, ``seed``).
    """
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return dict(options)
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return dict(options)
    allowed = {n: p for n, p in params.items()
               if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
               and n not in ("problem", "self") + reserved}
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise OptionError(f"{what} has no option {', '.join(map(repr, unknown))}; "
                          f"allowed: {', '.join(allowed) or '(none)'}")
    return {name: coerce(value, _types(allowed[name].annotation), f"{what} option {name}")
            for name, value in options.items()}


def _types(annotation: Any) -> tuple[str, ...]:
    """The type names of an annotation's union (``()`` when there is none)."""
    if annotation is inspect.Parameter.empty:
        return ()
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", None)
    if text is None:  # a typing object such as int | None at run time
        text = str(annotation).replace("NoneType", "None")
    return tuple(part.strip() for part in str(text).split("|"))


def coerce(value: Any, types: tuple[str, ...], what: str) -> Any:
    """``value`` as the first of ``types`` that takes it; OptionError naming ``what``.

    Types outside ``SIMPLE_TYPES`` are not checked: text stays text when ``str``
    is allowed, else it is read as JSON when it parses.
    """
    if not types or not all(t in SIMPLE_TYPES for t in types):
        if isinstance(value, str) and "str" not in types:
            try:
                return json.loads(value)
            except ValueError:
                return value
        return value
    if "None" in types and (value is None or _is_text(value, ("none", "null"))):
        return None
    for kind in types:
        converted = _CONVERTERS.get(kind, _never)(value, what)
        if converted is not _NO:
            return converted
    raise OptionError(f"{what} expects {_describe(types, what)}, got {value!r}")


_NO = object()  # "this converter does not take the value"


def _never(value: Any, what: str) -> Any:
    return _NO


def _is_text(value: Any, words: tuple[str, ...]) -> bool:
    return isinstance(value, str) and value.strip().lower() in words


def _to_bool(value: Any, what: str) -> Any:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and value in (0, 1):
        return bool(value)
    if _is_text(value, _TRUE) or _is_text(value, _FALSE):
        return _is_text(value, _TRUE)
    return _NO


def _to_number(value: Any) -> float | int | None:
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            pass
        try:
            return float(text)
        except ValueError:
            return None
    return None


def _to_int(value: Any, what: str) -> Any:
    number = _to_number(value)
    if isinstance(number, int):
        return number
    if isinstance(number, float) and math.isfinite(number) and number.is_integer():
        return int(number)
    return _NO


def _to_float(value: Any, what: str) -> Any:
    number = _to_number(value)
    if number is None and isinstance(value, str) and _takes_bytes(what):
        try:
            number = parse_bytes(value)
        except OptionError:
            return _NO
    if number is None:
        return _NO
    if not math.isfinite(number):
        raise OptionError(f"{what} must be a finite number, got {value!r}")
    return float(number)


def _to_str(value: Any, what: str) -> Any:
    return value if isinstance(value, str) else _NO


_CONVERTERS: dict[str, Callable[[Any, str], Any]] = {
    "bool": _to_bool, "int": _to_int, "float": _to_float, "str": _to_str}


def _takes_bytes(what: str) -> bool:
    return what.endswith("_budget") or what.endswith("_bytes")


def _describe(types: tuple[str, ...], what: str) -> str:
    words = {"int": "an integer", "bool": "true or false", "str": "text", "None": "none",
             "float": "a number of bytes (e.g. 1e9 or 1GiB)" if _takes_bytes(what) else "a number"}
    return " or ".join(words[t] for t in types)


def parse_bytes(text: float | str) -> float:
    """``16GiB``, ``40GB``, ``512 MiB`` or a plain number of bytes: a finite positive float."""
    if isinstance(text, (int, float, np.integer, np.floating)) and not isinstance(text, bool):
        value = float(text)
    else:
        match = re.fullmatch(r"\s*(-?[0-9.eE+-]+)\s*([A-Za-z]*)\s*", str(text))
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise OptionError(f"cannot read {text!r} as a memory size; use e.g. 16GiB, 40GB, "
                              f"512MiB or a number of bytes")
        try:
            value = float(match.group(1)) * _UNITS[unit]
        except ValueError:
            raise OptionError(f"cannot read {text!r} as a memory size") from None
    if not math.isfinite(value):
        raise OptionError(f"a memory size must be finite, got {text!r}")
    if not value > 0:
        raise OptionError(f"a memory size must be positive, got {text!r}")
    return value


def check_seed(seed: Any) -> int | None:
    """A seed is None or an integer >= 0 (numpy integers too)."""
    if seed is None:
        return None
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise OptionError(f"seed must be an integer >= 0 or None, got {seed!r}")
    return int(seed)


def check_time_limit(time_limit: Any) -> float | None:
    """A time limit is None or a finite number of seconds > 0."""
    if time_limit is None:
        return None
    number = None if isinstance(time_limit, str) else _to_number(time_limit)
    if number is None or not math.isfinite(number) or not number > 0:
        raise OptionError(f"time_limit must be a finite number of seconds > 0 or None, "
                          f"got {time_limit!r}")
    return float(number)

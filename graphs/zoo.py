"""Model-zoo plumbing: declared, typed model options and size presets.

Each zoo family (``bert``, ``gpt``, ``llama``, ``nemotron``, ``vit``, ``moe``,
``qwen3``, ``gpt_oss``, ``llama4``, ``densenet``...) has one builder taking
keyword options, and registers one model name per size preset with
:func:`register_presets`. A preset's options are declared: name,
type (``int``, ``float`` or ``bool``) and default, listed in the registry entry's
``info["options"]`` (``{name: default}``) and ``info["option_types"]``, and set
as the registered function's signature, so the API's option coercion
(``pase.load_graph("gpt2", layers=2)``) and the CLI see them. Calling a
registered function directly checks the same things:

- an unknown option is an OptionError listing the allowed ones;
- a value of the wrong type (``layers=2.5``) or out of range (below 1; below 0
  for the options a family lists in ``zero_ok``, such as ``shared_experts``) is
  an OptionError naming the option;
- sizes that do not fit together (heads not dividing the width...) are checked
  by the family with :func:`require` and raise a one-line OptionError.
"""
from __future__ import annotations

import inspect
import math
from typing import Any, Callable, Mapping

from pase.errors import OptionError
from pase.ir import Graph
from pase.registry import MODELS

# FLOP weight (pase's ``pw``: point-wise ops per element) of each activation.
# relu: one max; silu: x / (1 + exp(-x)), 4 ops; tanh: 4; gelu (the tanh
# approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))): 8.
# relu2 (squared ReLU, Nemotron-4): a max and a square, 2.
ACT_PW = {"relu": 1, "relu2": 2, "silu": 4, "tanh": 4, "gelu": 8}

# Roles of the einsum letters every zoo transformer uses.
ROLES = {"b": "batch", "l": "sequence", "m": "sequence", "e": "channel", "h": "heads",
         "g": "heads", "r": "heads", "k": "channel", "f": "parameter", "v": "vocabulary",
         "s": "other", "x": "expert", "c": "sequence", "i": "channel", "n": "vocabulary"}

_TYPES = {int: "int", float: "float", bool: "bool"}


def _check(model: str, name: str, kind: type, value: Any, low: int = 1) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise OptionError(f"model {model!r} option {name} must be true or false, got {value!r}")
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value <= 0:
            raise OptionError(f"model {model!r} option {name} must be a number > 0, got {value!r}")
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise OptionError(f"model {model!r} option {name} must be an integer >= {low}, "
                          f"got {value!r}")
    return value


def require(model: str, ok: bool, message: str) -> None:
    """OptionError ``model 'x': message`` unless ``ok`` (sizes that do not fit together)."""
    if not ok:
        raise OptionError(f"model {model!r}: {message}")


def make_preset(name: str, build: Callable[..., Graph], defaults: Mapping[str, Any],
                doc: str, zero_ok: frozenset[str] = frozenset()) -> Callable[..., Graph]:
    """A model function with ``defaults`` as its declared, typed keyword options
    (the integers in ``zero_ok`` may be 0: none, or "use the default rule")."""
    kinds = {key: type(value) for key, value in defaults.items()}

    def model(**options: Any) -> Graph:
        unknown = sorted(set(options) - set(defaults))
        if unknown:
            raise OptionError(f"model {name!r} has no option {', '.join(map(repr, unknown))}; "
                              f"allowed: {', '.join(defaults)}")
        values = {key: _check(name, key, kinds[key], options.get(key, default),
                              0 if key in zero_ok else 1)
                  for key, default in defaults.items()}
        return build(name, **values)

    model.__name__ = name.replace("-", "_").replace(".", "_")
    model.__doc__ = doc
    model.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=value,
                          annotation=_TYPES[kinds[key]])
        for key, value in defaults.items()])
    return model


def register_presets(build: Callable[..., Graph], presets: Mapping[str, tuple[str, Mapping[str, Any]]],
                     tiny: Mapping[str, Any], zero_ok: tuple[str, ...] = ()) -> None:
    """Register one model per preset: ``{name: (description, {option: default})}``.

    ``tiny`` overrides the sizes for a small variant of the family (``info["tiny"]``:
    a few layers of width 32, for tests, exporters and teaching); ``zero_ok`` names
    the integer options that may be 0 (``shared_experts``, a sliding ``window``).
    """
    for name, (description, defaults) in presets.items():
        fn = make_preset(name, build, defaults, description, frozenset(zero_ok))
        MODELS.add(name, fn, description, options=dict(defaults),
                   option_types={k: _TYPES[type(v)] for k, v in defaults.items()},
                   tiny={k: v for k, v in tiny.items() if k in defaults})

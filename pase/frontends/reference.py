"""``FILE.py:FUNCTION``: a Python file whose function returns a PyTorch module and its inputs.

Every command that takes a MODEL takes such a reference (``pase solve
model.py:build -p 8``); ``pase.load_graph`` sends it here. ``FUNCTION`` returns
``(module, example_args)``; model options (``--model-option batch=8``) are its
keyword arguments, coerced by its annotations or, lacking one, by the type of
its default. Three options belong to the importer unless the function declares
them itself: ``fuse_elementwise`` (true/false), ``unsupported`` (error or
elementwise) and ``strict`` (``torch.export``'s strict mode).

Every failure is one line, a :class:`ModelReferenceError` (exit status 2 on the
command line): a missing file, a missing function (the file's functions are
listed), a function that raises (its message is passed on), a return value that
is not ``(module, example_args)``, torch missing, or ``torch.export`` failing.
"""
from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any

from pase.errors import OptionError, PaseError
from pase.frontends.torch import TorchMissingError, import_torch, need_torch
from pase.options import SIMPLE_TYPES, coerce, coerce_options

__all__ = ["IMPORT_OPTIONS", "ModelReferenceError", "load_module", "load_reference", "split_reference"]

# Options of the importer itself, with their types.
IMPORT_OPTIONS = {"fuse_elementwise": "bool", "unsupported": "str", "strict": "bool"}


class ModelReferenceError(PaseError, ValueError):
    """A ``FILE.py:FUNCTION`` that does not give a module and its example inputs."""


def split_reference(text: str) -> tuple[Path, str]:
    path, sep, function = str(text).rpartition(":")
    if not sep or not path.endswith(".py") or not function.isidentifier():
        raise ModelReferenceError(f"{text!r} is not FILE.py:FUNCTION (a Python file and the name of "
                              f"a function in it)")
    return Path(path), function


def _load_file(path: Path) -> Any:
    if not path.is_file():
        raise ModelReferenceError(f"no such file: {path}")
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    name = f"pase_reference_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelReferenceError(f"cannot load {path} as Python")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == "torch" or (exc.name or "").startswith("torch."):
            raise TorchMissingError(f"{path} imports torch, which is not installed: "
                                    f'pip install "pase[torch]"') from exc
        raise ModelReferenceError(f"{path} could not be imported: {_line(exc)}") from exc
    except Exception as exc:
        raise ModelReferenceError(f"{path} could not be imported: {_line(exc)}") from exc
    except SystemExit as exc:  # the file's own exit must not end pase quietly with its status
        raise ModelReferenceError(f"{path} called {_exit(exc)} while being imported") from exc
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)
    return module


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    text = text if len(text) <= 300 else text[:297] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _exit(exc: SystemExit) -> str:
    code = repr(exc.code) if exc.code is not None else ""
    return f"sys.exit({code if len(code) <= 60 else code[:57] + '...'})"


def _functions(module: Any) -> list[str]:
    return sorted(n for n, f in vars(module).items()
                  if inspect.isfunction(f) and f.__module__ == module.__name__
                  and not n.startswith("_"))


def _coerce(fn: Any, options: dict[str, Any], where: str) -> dict[str, Any]:
    """Options coerced by ``fn``'s annotations, or by the type of their default."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return dict(options)
    out = coerce_options(fn, options, where)
    for key, value in options.items():
        p = params.get(key)
        if p is None or p.annotation is not inspect.Parameter.empty:
            continue
        kind = type(p.default).__name__
        if p.default is not inspect.Parameter.empty and kind in SIMPLE_TYPES:
            out[key] = coerce(value, (kind,), f"{where} option {key}")
    return out


def load_module(text: str, **model_options: Any) -> tuple[Any, tuple, dict[str, Any], str]:
    """``(module, example_args, importer options, function name)`` from ``FILE.py:FUNCTION``."""
    path, function = split_reference(text)
    need_torch()
    module = _load_file(path)
    fn = getattr(module, function, None)
    if not callable(fn):
        names = _functions(module)
        listed = ", ".join(names) if names else "none"
        raise ModelReferenceError(f"{path} has no function {function!r}; its functions: {listed}")
    try:
        declared = set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        declared = set()
    importer = {}
    for key, kind in IMPORT_OPTIONS.items():
        if key in model_options and key not in declared:
            importer[key] = coerce(model_options.pop(key), (kind,), f"import option {key}")
    where = f"function {function!r} of {path}"
    options = _coerce(fn, model_options, where)
    try:
        result = fn(**options)
    except PaseError:
        raise
    except Exception as exc:
        raise ModelReferenceError(f"{function}() in {path} raised {_line(exc)}") from exc
    except SystemExit as exc:  # sys.exit(0) would end pase with status 0, no output, no file
        raise ModelReferenceError(f"{function}() in {path} called {_exit(exc)}; it must return "
                                  f"(module, example_args)") from exc
    torch = sys.modules.get("torch") or need_torch()
    if not (isinstance(result, tuple) and len(result) == 2):
        raise ModelReferenceError(f"{function}() in {path} returned a {type(result).__name__}; it "
                              f"must return (module, example_args)")
    model, args = result
    if not isinstance(model, torch.nn.Module):
        raise ModelReferenceError(f"{function}() in {path} returned a {type(model).__name__} as its "
                              f"module; it must return (torch.nn.Module, example_args)")
    if isinstance(args, torch.Tensor):
        args = (args,)
    if isinstance(args, list):
        args = tuple(args)
    if not isinstance(args, tuple) or not args or not all(
            isinstance(a, (torch.Tensor, int, float, bool)) for a in args) \
            or not any(isinstance(a, torch.Tensor) for a in args):
        got = type(args).__name__ if not isinstance(args, tuple) else \
            "(" + ", ".join(type(a).__name__ for a in args) + ")"
        raise ModelReferenceError(f"{function}() in {path} returned example_args {got}; they must be "
                              f"a tuple of tensors (or one tensor)")
    return model, args, importer, function


def load_reference(text: str, **model_options: Any) -> Any:
    """The pase Graph of the module ``FILE.py:FUNCTION`` returns; read from the import cache
    (:mod:`pase.frontends.cache`) when the command line turned it on."""
    from pase.frontends import cache

    if not cache.active():
        return _import(text, model_options)
    path, function = split_reference(text)
    return cache.cached_graph(path, function, model_options,
                              lambda: _import(text, dict(model_options)))


def _import(text: str, model_options: dict[str, Any]) -> Any:
    model, args, importer, function = load_module(text, **model_options)
    unsupported = importer.get("unsupported", "error")
    if unsupported not in ("error", "elementwise"):
        raise OptionError(f"import option unsupported must be error or elementwise, got "
                          f"{unsupported!r}")
    return import_torch(model, args, name=f"{split_reference(text)[0].stem}.{function}",
                        **importer).graph

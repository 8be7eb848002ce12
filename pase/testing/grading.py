"""Autograder support: load the file a grader grades, chosen by an environment variable.

    submission = load_submission(Path(__file__).with_name("chain_tree_dp.py"),
                                 replaces=["student-chain-dp", "student-tree-dp"])

grades the student's file next to the grader, or the file ``PASE_SUBMISSION``
names (``PASE_SUBMISSION=teaching/dp/solution/chain_tree_dp.py pytest teaching/dp``).
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Sequence

ENV = "PASE_SUBMISSION"


def submission_path(default: str | Path, env: str = ENV) -> Path:
    """The file to grade: ``$PASE_SUBMISSION`` if set (relative to the working
    directory), else ``default``."""
    chosen = os.environ.get(env)
    path = Path(chosen) if chosen else Path(default)
    if not path.is_file():
        raise FileNotFoundError(f"no submission at {path} (set {env} to the file to grade)")
    return path.resolve()


def load_submission(default: str | Path, *, replaces: Sequence[str] = (),
                    env: str = ENV) -> ModuleType:
    """Import the submission as a fresh module.

    ``replaces`` names solvers the submission registers: any earlier registration
    under those names (an earlier load in this process) is dropped first, so the
    submission's decorators do not collide with it.
    """
    from pase.registry import SOLVERS

    path = submission_path(default, env)
    SOLVERS.names()  # load the built-ins first, so their names are taken before the student's
    for name in replaces:
        SOLVERS.remove(name)
    module_name = f"pase_submission_{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module

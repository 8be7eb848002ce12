"""Shared fixtures. (No conftest at the repo root: it would shadow the installed package.)"""
import pytest

from pase.problem import Problem


@pytest.fixture
def tiny_problem():
    """Three vertices in a chain, solved by hand in test_exhaustive.py."""
    import numpy as np

    return Problem(
        [np.array([1.0, 0.0]), np.array([0.0, 5.0]), np.array([4.0, 0.0])],
        [(0, 1), (1, 2)],
        [np.array([[0.0, 0.0], [10.0, 0.0]]), np.array([[0.0, 3.0], [0.0, 0.0]])],
        names=["a", "b", "c"],
    )

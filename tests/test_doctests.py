"""Run the docstring examples of every pase module (imported as pase.*, never by path)."""
import doctest
import importlib
import pkgutil

import pytest

import pase


def modules():
    names = []
    for info in pkgutil.walk_packages(pase.__path__, "pase."):
        if info.name == "pase.__main__" or info.name.startswith("pase.sim.plot"):
            continue
        names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("name", modules())
def test_docstring_examples(name):
    module = importlib.import_module(name)
    failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert failures == 0

"""What the importer knows about each torch value while it walks an exported program.

A :class:`TV` is one tensor: its *view* (per torch axis, the atoms whose sizes
multiply to the axis's extent) and its *data* (the atoms of the IR tensor that
carries it, in its producer's layout). Views change under reshapes and
permutes; data only when an op makes a new tensor. Kinds:

- ``act``: made from the model's inputs (an IR tensor, or a graph input), or a
  product of parameters (an op of two weights: DeBERTa's projected position table);
- ``param``: a parameter, or a view of one, or a part picked by constants (a
  transposed weight, the rows of a position table);
- ``const``: buffers and constants (masks, ``arange``, rotary tables): not in the
  graph; an op that reads one reads only its other operands.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pase.frontends.torch_ir import Atoms, Pending


@dataclass
class TV:
    view: list[list[int]]
    data: list[int]
    kind: str = "act"
    source: tuple[Pending, int] | None = None
    param: str | None = None
    integer: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def shape(self, atoms: Atoms) -> tuple[int, ...]:
        return tuple(math.prod(atoms.size[a] for a in axis) for axis in self.view)

    def leaves(self, atoms: Atoms) -> list[int]:
        return atoms.leaf_list(self.data)

    def axis(self, i: int) -> list[int]:
        return self.view[i % len(self.view)] if self.view else []

    def with_view(self, view: list[list[int]], **changes: Any) -> "TV":
        values = dict(self.__dict__)
        values.update(changes, view=view)
        values["extra"] = dict(values["extra"])
        return TV(**values)

    @property
    def rank(self) -> int:
        return len(self.view)


def view_leaves(atoms: Atoms, tv: TV) -> list[int]:
    return atoms.leaf_list([a for axis in tv.view for a in axis])

"""Fast constructors of the syntax nodes a huge explicit-cost program is made of.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``,
looked up and called once per field; the fast parser makes some 40 nodes a task
line (a span, a number and a cost entry per device), and that init took about a
third of its time. These build the same objects (equal, same hash and repr) by
creating the instance and filling its slots through the slots' own descriptors;
like :mod:`dataclasses`, the constructor's source is generated for the fields.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from mapper.errors import SourceSpan
from mapper.frontend import syntax as S

T = TypeVar("T")


def builder(cls: type[T]) -> Callable[..., T]:
    """A positional constructor of the frozen, slotted dataclass ``cls`` (all fields, in order)."""
    slots: tuple[str, ...] = cls.__slots__  # type: ignore[attr-defined]
    env: dict[str, Any] = {"new": object.__new__, "cls": cls}
    env.update((f"set{i}", getattr(cls, field).__set__) for i, field in enumerate(slots))
    args = ", ".join(f"a{i}" for i in range(len(slots)))
    body = "".join(f"    set{i}(obj, a{i})\n" for i in range(len(slots)))
    exec(f"def make({args}):\n    obj = new(cls)\n{body}    return obj\n", env)
    make: Callable[..., T] = env["make"]
    return make


span = builder(SourceSpan)
num = builder(S.Num)
measure = builder(S.Measure)
name = builder(S.Name)

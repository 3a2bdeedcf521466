"""Keep the cyclic garbage collector off a huge graph's long-lived objects.

CPython's collector walks every tracked object of the oldest generation on each
full collection, and a full collection is due each time the survivors grow by a
quarter; with the millions of objects of a 10^5-10^6-task graph those walks take
a large share of a compile. :func:`settle` moves the objects alive after a stage
to the permanent generation (:func:`gc.freeze`, the remedy the CPython docs give
for large long-lived heaps, ``gc`` module documentation): later collections walk
only what the later stages allocate. The frozen objects are still freed by
reference counting; only cycles among them outlive their use, so only a
one-shot process freezes: the command line turns it on (:func:`one_shot`); the
Python API leaves its caller's heap to the collector.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: Graphs of at least this many tasks freeze their heap after each stage.
SETTLE_TASKS = 10_000
_one_shot = [False]


@contextmanager
def collection_paused() -> Iterator[None]:
    """No cyclic collection inside the block (restored as it was after): reading and lowering
    allocate many acyclic objects, and collection passes over them only cost time."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def settle_paused() -> None:
    """At the end of a :func:`collection_paused` block of a one-shot process, freeze what it
    allocated: else the first collections after it walk every object it made, all at once."""
    if _one_shot[0]:
        gc.freeze()


def one_shot() -> None:
    """Let :func:`settle` freeze: this process runs one command and exits (the command line)."""
    _one_shot[0] = True


def settle(n_tasks: int) -> None:
    """Freeze the heap when a graph of ``n_tasks`` is large and the process is one-shot (module
    docstring)."""
    if _one_shot[0] and n_tasks >= SETTLE_TASKS:
        gc.freeze()

"""A bound on the memory one step may take, for work whose size an input decides.

:func:`memory_budget` caps the process's address space (``RLIMIT_AS``, POSIX
``setrlimit``) at its current size plus a budget for the time of a
``with`` block, so that a library asked to materialise a tensor a few bytes
of input declare to be terabytes (ONNX shape inference with data
propagation, constant folding) fails at once with ``MemoryError`` or
``std::bad_alloc`` instead of growing until the system kills the process.
Where the platform has no such limit, or it is already lower, nothing changes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

#: The memory one input-sized step may add to the process (bytes).
STEP_BUDGET = 2**29


def _address_space() -> int | None:
    """The process's virtual size in bytes (Linux), or None."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            pages = int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    import resource

    return pages * resource.getpagesize()


@contextlib.contextmanager
def memory_budget(extra: int = STEP_BUDGET) -> Iterator[None]:
    """Inside the block, allocations past the current size plus ``extra`` bytes fail."""
    try:
        import resource
    except ImportError:  # not POSIX
        yield
        return
    size = _address_space()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = None if size is None else size + extra
    if cap is None or (soft != resource.RLIM_INFINITY and soft <= cap) or \
            (hard != resource.RLIM_INFINITY and hard < cap):
        yield
        return
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))

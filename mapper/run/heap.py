"""A steady heap while kernels are timed: recycled buffers, no page faults per call.

Every kernel call allocates its output. With glibc's default policy a buffer
above the mmap threshold (128 KiB at start, raised on the fly up to 32 MiB as
mapped buffers are freed) gets fresh pages from the kernel, and each page
faults on first touch; freed memory at the top of the heap is trimmed back to
the system. Whether a given call pays those faults then depends on what ran
before it: on the development VM, glibc's defaults put 7.7 s of system time
into a 28 s prediction benchmark against 1.4 s with the policy below, and a
one-sweep stencil ran 1.8x slower per byte than an eight-sweep one only
because of the faults on its fresh output.

:func:`steady_heap` fixes the policy while the executor and the calibration
time kernels: buffers up to :data:`MMAP_THRESHOLD` come from the heap, and
freed memory is kept (up to :data:`TRIM_THRESHOLD`) for the next allocation,
as a runtime's caching allocator does (PyTorch's, for one). It uses glibc's
``mallopt`` (``M_MMAP_THRESHOLD``, ``M_TRIM_THRESHOLD``) through ctypes; on
another C library it does nothing. On exit it sets glibc's documented start
values back (128 KiB each); glibc's own adjustment of them stays off for the
rest of the process, since setting either turns it off.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import threading
from collections.abc import Iterator

#: ``mallopt`` parameter numbers (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

#: Buffers up to this size come from the heap (glibc's upper limit for the
#: mmap threshold on 64-bit systems, ``DEFAULT_MMAP_THRESHOLD_MAX``).
MMAP_THRESHOLD = 32 * 2**20

#: Free memory at the top of the heap kept for reuse, not given back.
TRIM_THRESHOLD = 2**30

#: glibc's start values of both thresholds, set back on exit.
GLIBC_DEFAULT = 128 * 2**10

_LOCK = threading.Lock()
_DEPTH = 0


def _mallopt() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """glibc's ``mallopt``, or None on another C library."""
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        if not hasattr(libc, "gnu_get_libc_version"):
            return None
        fn = libc.mallopt
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int)
    fn.restype = ctypes.c_int
    return fn


@contextlib.contextmanager
def steady_heap() -> Iterator[bool]:
    """Keep buffers up to 32 MiB on the heap and freed memory for reuse, for
    the ``with`` block (nested blocks share one setting). Yields True when
    the policy is in force (glibc), False otherwise."""
    global _DEPTH
    fn = _mallopt()
    if fn is None:
        yield False
        return
    with _LOCK:
        if _DEPTH == 0:
            fn(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
            fn(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
        _DEPTH += 1
    try:
        yield True
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0:
                fn(M_MMAP_THRESHOLD, GLIBC_DEFAULT)
                fn(M_TRIM_THRESHOLD, GLIBC_DEFAULT)

"""The one place Numba is imported: cache location and the ``jit`` decorator.

``NUMBA_CACHE_DIR`` is set (unless the user set it) to a user-writable
directory, ``$XDG_CACHE_HOME/mapper/numba`` or ``~/.cache/mapper/numba``,
before Numba is imported, so ``cache=True`` works for read-only installs too;
``OMP_WAIT_POLICY`` defaults to ``PASSIVE`` (see below).
Kernels compile lazily on their first call; nothing is compiled at import.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext


def _cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mapper", "numba")


os.environ.setdefault("NUMBA_CACHE_DIR", _cache_dir())
# Idle OpenMP workers sleep instead of spinning, so the BLAS calls the
# executor makes between kernels get the cores (measured: a conv layer
# alternating im2col and GEMM ran 3x slower with spinning workers).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numba  # noqa: E402  (the cache directory must be set first)
from numba.core import types  # noqa: E402  (re-exported for kernel modules)
from numba.extending import overload  # noqa: E402

prange = numba.prange

#: Fast-math flags for reductions: reassociation lets LLVM vectorise sums;
#: NaN and infinity semantics are kept.
REASSOC = frozenset({"reassoc", "contract"})


def jit(*, parallel: bool = False, fastmath: bool | frozenset = False, inline: bool = False):
    """``numba.njit`` with the project's settings.

    ``nogil=True`` (the executor runs tasks on threads), ``cache=True`` (on-disk
    cache), ``error_model="numpy"`` (float division by zero gives inf/nan as
    in NumPy instead of raising). No signatures: compilation is lazy.
    ``inline``: inlined into its callers in Numba's IR, so that a constant
    argument specialises the loop (LLVM then vectorises it).
    """
    fm = set(fastmath) if isinstance(fastmath, frozenset) else fastmath
    return numba.njit(nogil=True, cache=True, parallel=parallel, fastmath=fm, error_model="numpy",
                      inline="always" if inline else "never")


def quotient(x, y):
    """``x / y`` for floats and complex; floor division with ``x // 0 = 0``
    for integers (usable inside kernels)."""
    raise NotImplementedError("quotient is only callable inside Numba kernels")


@overload(quotient)
def _quotient(x, y):
    if isinstance(x, types.Integer):
        return lambda x, y: x // y if y != 0 else x - x
    return lambda x, y: x / y


@jit()
def split_index(t, nchunk, n1, n2):
    """Flat work item ``t`` of a ``(n0, n1, n2, nchunk)`` grid as ``(i, j, k, chunk)``."""
    c = t % nchunk
    r = t // nchunk
    k = r % n2
    r //= n2
    return r // n1, r % n1, k, c


@jit(inline=True)
def span(c, n, nchunk):
    """``(lo, hi)`` of the ``c``-th of ``nchunk`` near-equal pieces of
    ``range(n)`` (a piece past the end is empty): the work item of a
    ``prange`` over pieces (:func:`chunks`)."""
    clen = (n + nchunk - 1) // nchunk
    lo = min(c * clen, n)
    return lo, min(lo + clen, n)


def num_threads() -> int:
    """Threads Numba's parallel loops use."""
    return int(numba.get_num_threads())


#: Below this much work (roughly element operations) a kernel runs on the
#: calling thread: waking the worker threads costs more than it saves.
PARALLEL_MIN_WORK = 1 << 16


_LAUNCH_LOCK = threading.RLock()  # re-entrant: kernels nest threads_for


def _threadsafe_layer() -> bool:
    """Whether Numba's threading layer takes concurrent launches from several
    Python threads (tbb, omp); ``workqueue`` does not, and before the first
    parallel launch the layer is not chosen yet."""
    try:
        return numba.threading_layer() != "workqueue"
    except ValueError:
        return False


@contextmanager
def threads_for(work: int) -> Iterator[None]:
    """Run the enclosed kernels on one thread if ``work`` is small (thread-local),
    one caller at a time unless the threading layer is thread-safe (the
    executor calls kernels from several threads)."""
    lock = nullcontext() if _threadsafe_layer() else _LAUNCH_LOCK
    with lock:
        if work >= PARALLEL_MIN_WORK:
            yield
            return
        before = numba.get_num_threads()
        numba.set_num_threads(1)
        try:
            yield
        finally:
            numba.set_num_threads(before)


def chunks(outer: int, inner: int, min_len: int = 2048) -> int:
    """How many pieces to cut each of ``outer`` rows of ``inner`` elements
    into, so that a ``prange`` has work for every thread (at least
    ``4 * threads`` pieces when the data allows) without pieces shorter than
    ``min_len``."""
    want = 4 * num_threads()
    if outer >= want or inner < 2 * min_len:
        return 1
    return max(1, min(inner // min_len, -(-want // max(outer, 1))))


def readonly(x, dtype=None):
    """``x`` as a C-contiguous, read-only array (a view when it already is one).

    Kernels take their inputs through this so every caller's array has the
    same Numba type (layout ``C``, read-only): one compiled version per dtype.
    """
    import numpy as np

    arr = np.ascontiguousarray(x, dtype=dtype).view()
    arr.flags.writeable = False
    return arr

"""The one place ``threadpoolctl`` is used: the size of the BLAS library's
thread pool (NumPy's GEMM, which ``matmul``, ``conv2d`` and ``attention``
call).

``threadpoolctl`` changes the pool at run time, whatever was imported
first; environment variables would only work before NumPy loads. Without
it installed (it is a dependency) the pools are left as they are.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

_CACHED: Any = None
_LOCK = threading.Lock()


def _controller(refresh: bool) -> Any:
    """A ``threadpoolctl.ThreadpoolController`` (None without threadpoolctl):
    a new one, which sees every library loaded so far, when ``refresh``, else
    the one made last (about 1 ms to make, 10 us to use: a kernel's calls
    reuse it, at the cost of missing a BLAS library loaded since)."""
    global _CACHED
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    with _LOCK:
        if refresh or _CACHED is None:
            _CACHED = ThreadpoolController()
        return _CACHED


@contextlib.contextmanager
def blas_pool(threads: int) -> Iterator[int | None]:
    """Limit the BLAS pools to ``threads`` threads for the ``with`` block
    (every BLAS library loaded so far). Yields ``threads``, or None when
    threadpoolctl is missing (the pools are then left as they are)."""
    ctl = _controller(refresh=True)
    if ctl is None:
        yield None
        return
    with ctl.limit(limits=threads, user_api="blas"):
        yield threads


def blas_threads() -> int | None:
    """The largest BLAS pool's size as BLAS calls see it now (about 6 us a
    call), or None without threadpoolctl."""
    ctl = _controller(refresh=False)
    if ctl is None:
        return None
    sizes = [lib.num_threads for lib in ctl.lib_controllers if lib.user_api == "blas"]
    return max(sizes) if sizes else None

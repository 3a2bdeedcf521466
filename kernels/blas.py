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
from typing import Any, Iterator

_CACHED: Any = None
_LOCK = threading.Lock()


def _controller(refresh: bool) -> Any:
    """A ``threadpoolctl.ThreadpoolController`` (None without threadpoolctl):
    a new one, which sees every library loaded so far, when ``refresh``, else
    the one made last (about 1 ms to make, 10 us to use)."""
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
def blas_pool(threads: int, *, refresh: bool = True) -> Iterator[int | None]:
    """Limit the BLAS pools to ``threads`` threads for the ``with`` block.
    Yields ``threads``, or None when threadpoolctl is missing (the pools are
    then left as they are). ``refresh=False`` reuses the controller of the
    last call, for calls made often (a kernel's), at the cost of missing a
    BLAS library loaded since."""
    ctl = _controller(refresh)
    if ctl is None:
        yield None
        return
    with ctl.limit(limits=threads, user_api="blas"):
        yield threads

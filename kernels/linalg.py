"""Dense linear algebra: matmul (batched), dot, axpy.

matmul has two paths: for float and complex operands of useful size, the
BLAS GEMM NumPy links against (``np.matmul``, called from Python: Numba's own
``np.dot`` needs SciPy, which the project does not depend on); for integers
and tiny products, a direct Numba loop nest (parallel over output rows, i-k-j
order so the inner loop is contiguous and vectorises). dot and axpy are
parallel Numba loops.
"""

from __future__ import annotations

import numpy as np

from mapper.kernels._jit import REASSOC, chunks, jit, prange, readonly, span

#: Below this many multiply-adds the direct loop beats a BLAS call.
BLAS_MIN_MACS = 32 * 32 * 32


@jit(parallel=True)
def _matmul_direct(a, b, out):
    nbatch, m, kk = a.shape
    nb = b.shape[0]
    n = b.shape[2]
    for t in prange(nbatch * m):
        bi = t // m
        i = t % m
        bj = bi if nb > 1 else 0
        for j in range(n):
            out[bi, i, j] = 0
        for k in range(kk):
            aik = a[bi, i, k]
            for j in range(n):
                out[bi, i, j] += aik * b[bj, k, j]


def matmul(a: np.ndarray, b: np.ndarray, *, method: str | None = None) -> np.ndarray:
    """``a @ b`` with NumPy's batch broadcasting; ``method`` "blas" or "direct" forces a path."""
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    dtype = np.result_type(a, b)
    if method is None:
        method = "blas" if dtype.kind in "fc" and m * n * k >= BLAS_MIN_MACS else "direct"
    if b.ndim == 2 or all(d == 1 for d in b.shape[:-2]):
        # one shared right operand: fold the batch into the rows of a
        a3 = readonly(np.broadcast_to(a, batch + (m, k)), dtype).reshape(1, -1, k)
        b3 = readonly(b, dtype).reshape(1, k, n)
    else:
        a3 = readonly(np.broadcast_to(a, batch + (m, k)), dtype).reshape(-1, m, k)
        b3 = readonly(np.broadcast_to(b, batch + (k, n)), dtype).reshape(-1, k, n)
    out = np.empty((a3.shape[0], a3.shape[1], n), dtype=dtype)
    if out.size:
        if k == 0:
            out[...] = 0
        elif method == "blas":
            np.matmul(a3, b3, out=out)
        else:
            _matmul_direct(a3, b3, out)
    return out.reshape(batch + (m, n))


@jit(parallel=True, fastmath=REASSOC)
def _dot_partials(a, b, part):
    nchunk = part.shape[0]
    for c in prange(nchunk):
        acc = part[c]
        lo, hi = span(c, a.shape[0], nchunk)
        for i in range(lo, hi):
            acc += a[i] * b[i]
        part[c] = acc


def dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The inner product ``sum(a * b)`` (no conjugation, as ``np.dot``), a 0-d array."""
    part = np.zeros(chunks(1, a.shape[0], 4096), dtype=a.dtype)
    if a.size:
        _dot_partials(readonly(a), readonly(b), part)
    return np.asarray(part.sum(dtype=a.dtype), dtype=a.dtype)


@jit(parallel=True)
def _axpy(alpha, x, y, out, nchunk):
    for c in prange(nchunk):
        lo, hi = span(c, x.shape[0], nchunk)
        for i in range(lo, hi):
            out[i] = alpha * x[i] + y[i]


def axpy(*xs: np.ndarray, alpha) -> np.ndarray:
    """``alpha * x + y``; the 3-operand form's scalar tensor arrives as ``alpha``."""
    x, y = (readonly(v) for v in xs[-2:])
    out = np.empty(y.shape, dtype=y.dtype)
    if y.size:
        _axpy(alpha, x, y, out, chunks(1, y.shape[0], 8192))
    return out

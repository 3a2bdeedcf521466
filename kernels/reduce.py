"""Reductions: sum, max, mean over one axis or all (Numba).

The tensor is viewed, without copying, as ``[outer, n, inner]`` with the
``n`` reduced elements in the middle. With ``inner == 1`` (reducing the last
axis, or everything) each row is cut into blocks of at most 4096 elements
reduced in parallel, then the block results are combined; otherwise each
(outer, inner slice) accumulates over ``n`` with a contiguous, vectorisable
inner loop. Float and complex sums run in the tensor's dtype, integer sums in
int64. max propagates NaN. Integer ``mean`` is the floor of the mean.
"""

from __future__ import annotations

import numpy as np

from mapper.kernels._jit import REASSOC, chunks, jit, prange, readonly

BLOCK = 4096


@jit()
def _better(v, m):
    """Whether ``v`` replaces the running maximum ``m`` (NaN wins and stays)."""
    return (v > m or v != v) and m == m


@jit(parallel=True, fastmath=REASSOC)
def _sum_blocks(x, part):
    rows, n = x.shape
    nblk = part.shape[1]
    for t in prange(rows * nblk):
        r = t // nblk
        c = t % nblk
        acc = part[r, c]
        for j in range(c * 4096, min(c * 4096 + 4096, n)):
            acc += x[r, j]
        part[r, c] = acc


@jit(parallel=True)
def _max_blocks(x, part):
    rows, n = x.shape
    nblk = part.shape[1]
    for t in prange(rows * nblk):
        r = t // nblk
        lo = (t % nblk) * 4096
        m = x[r, lo]
        for j in range(lo + 1, min(lo + 4096, n)):
            if _better(x[r, j], m):
                m = x[r, j]
        part[r, t % nblk] = m


@jit(parallel=True, fastmath=REASSOC)
def _sum_middle(x, out, nchunk):
    outer, n, inner = x.shape
    clen = (inner + nchunk - 1) // nchunk
    for t in prange(outer * nchunk):
        o = t // nchunk
        lo = (t % nchunk) * clen
        for j in range(n):
            for i in range(lo, min(lo + clen, inner)):
                out[o, i] += x[o, j, i]


@jit(parallel=True)
def _max_middle(x, out, nchunk):
    outer, n, inner = x.shape
    clen = (inner + nchunk - 1) // nchunk
    for t in prange(outer * nchunk):
        o = t // nchunk
        lo = (t % nchunk) * clen
        hi = min(lo + clen, inner)
        for i in range(lo, hi):
            out[o, i] = x[o, 0, i]
        for j in range(1, n):
            for i in range(lo, hi):  # branch-free select: vectorises; NaN sticks
                v = x[o, j, i]
                m = out[o, i]
                out[o, i] = v if (v > m) | (v != v) else m


def _combine_max(part: np.ndarray) -> np.ndarray:
    """Row maxima of the block maxima, NaN-propagating (NumPy's ``max``)."""
    return part.max(axis=1)


def reduce(x: np.ndarray, *, kind: str, axis: int | None) -> np.ndarray:
    if axis is None:
        outer, n, inner, shape = 1, x.size, 1, ()
    else:
        outer = int(np.prod(x.shape[:axis], dtype=np.int64))
        n, inner = x.shape[axis], int(np.prod(x.shape[axis + 1:], dtype=np.int64))
        shape = x.shape[:axis] + x.shape[axis + 1:]
    x3 = readonly(x).reshape(outer, n, inner)
    acc = x.dtype if kind == "max" or x.dtype.kind not in "iu" else np.dtype(np.int64)
    if inner == 1:
        rows = x3.reshape(outer, n)
        part = np.zeros((outer, max(1, -(-n // BLOCK))), dtype=acc)
        if kind == "max":
            _max_blocks(rows, part)
            total = _combine_max(part)
        else:
            if n:
                _sum_blocks(rows, part)
            total = part.sum(axis=1, dtype=acc)
    else:
        total = np.zeros((outer, inner), dtype=acc)
        if n and total.size:
            nchunk = chunks(outer, inner, 1024)
            if kind == "max":
                _max_middle(x3, total, nchunk)
            else:
                _sum_middle(x3 if acc == x.dtype else readonly(x3, acc), total, nchunk)
    if kind == "mean":
        total = total // n if x.dtype.kind in "iu" else total / x.dtype.type(n)
    return np.asarray(total).astype(x.dtype).reshape(shape)

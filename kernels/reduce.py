"""Reductions: sum, max, mean over one axis or all (Numba).

The reduced axis is moved last (a Numba strided copy when it is not already
last), giving rows; each row is cut into blocks of at most 4096 elements that
are reduced in parallel (float and complex sums in the tensor's dtype,
integer sums in int64), then the block results are combined. max propagates
NaN. Integer ``mean`` is the floor of the mean, in the input dtype.
"""

from __future__ import annotations

import numpy as np

from mapper.kernels._jit import REASSOC, jit, prange, readonly
from mapper.kernels.strided import copy_into

BLOCK = 4096


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
        c = t % nblk
        lo = c * 4096
        m = x[r, lo]
        for j in range(lo + 1, min(lo + 4096, n)):
            v = x[r, j]
            if v > m or v != v:
                m = v
                if m != m:
                    break
        part[r, c] = m


@jit()
def _max_rows(part, out):
    for r in range(part.shape[0]):
        m = part[r, 0]
        for c in range(1, part.shape[1]):
            v = part[r, c]
            if v > m or v != v:
                m = v
                if m != m:
                    break
        out[r] = m


def _rows(x: np.ndarray, axis: int | None) -> tuple[np.ndarray, tuple[int, ...]]:
    """``x`` as ``[rows, n]`` with the reduced elements in each row, and the output shape."""
    if axis is None:
        return readonly(x).reshape(1, -1), ()
    shape = x.shape[:axis] + x.shape[axis + 1:]
    moved = np.moveaxis(x, axis, -1)
    if not moved.flags.c_contiguous:
        dense = np.empty(moved.shape, dtype=x.dtype)
        copy_into(dense, moved)
        moved = dense
    return readonly(moved).reshape(-1, x.shape[axis]), shape


def reduce(x: np.ndarray, *, kind: str, axis: int | None) -> np.ndarray:
    rows, shape = _rows(x, axis)
    n = rows.shape[1]
    nblk = max(1, -(-n // BLOCK))
    if kind == "max":
        part = np.empty((rows.shape[0], nblk), dtype=x.dtype)
        _max_blocks(rows, part)
        out = np.empty(rows.shape[0], dtype=x.dtype)
        _max_rows(part, out)
        return out.reshape(shape)
    acc = np.int64 if x.dtype.kind in "iu" else x.dtype
    part = np.zeros((rows.shape[0], nblk), dtype=acc)
    if n:
        _sum_blocks(rows, part)
    total = part.sum(axis=1, dtype=acc)
    if kind == "mean":
        total = total // n if x.dtype.kind in "iu" else total / x.dtype.type(n)
    return total.astype(x.dtype).reshape(shape)

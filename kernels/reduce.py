"""Reductions: sum, max, mean over one axis or all, and running sums (Numba).

The tensor is viewed, without copying, as ``[outer, n, inner]`` with the
``n`` reduced elements in the middle. With ``inner == 1`` (reducing the last
axis, or everything) each row is cut into blocks of at most 4096 elements
reduced in parallel, then the block results are combined; otherwise each
(outer, inner slice) accumulates over ``n`` with a contiguous, vectorisable
inner loop over 1-D row slices.
Float and complex sums run in the tensor's dtype, integer sums in int64.
Integer ``mean`` is the floor of the mean.

max propagates NaN exactly like NumPy's (any NaN in the reduced slice gives
NaN) without testing for it per element: the inner loops are a branch-free
``v if v > m else m`` (a block keeps 64 independent running maxima, so it
vectorises without reassociating anything) plus a NaN flag accumulated as
``nan |= v != v``; only a block or column slice whose flag is set is scanned
again for its first NaN.
"""

from __future__ import annotations

import numpy as np

from mapper.kernels._jit import REASSOC, chunks, jit, prange, readonly, span

BLOCK = 4096


#: Running maxima per block in ``_lanes_max``: independent lanes, so the
#: compare-select loop vectorises without reassociating anything.
LANES = 64


@jit()
def _lanes_max(x, r, lo, hi):
    """``x[r, lo:j0]``'s maximum (not NaN-aware), whether it holds a NaN, and
    ``j0``: the end of the last whole group of ``LANES`` elements."""
    lanes = np.full(LANES, x[r, lo])
    nan = False
    j0 = lo
    while j0 + LANES <= hi:  # branch-free: a select per lane, NaN only flagged
        for k in range(LANES):
            v = x[r, j0 + k]
            a = lanes[k]
            lanes[k] = v if v > a else a
            nan |= v != v
        j0 += LANES
    m = lanes[0]
    for k in range(1, LANES):
        m = lanes[k] if lanes[k] > m else m
    return m, nan, j0


@jit()
def _first_nan(x, r, lo, hi):
    """The first NaN of ``x[r, lo:hi]`` (there is one)."""
    j = lo
    while j < hi - 1 and x[r, j] == x[r, j]:
        j += 1
    return x[r, j]


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
        hi = min(lo + 4096, n)
        m = x[r, lo]
        nan = m != m
        j0 = lo + 1
        if hi - lo >= 2 * LANES:
            m, nan, j0 = _lanes_max(x, r, lo, hi)
        for j in range(j0, hi):
            v = x[r, j]
            m = v if v > m else m
            nan |= v != v
        part[r, t % nblk] = _first_nan(x, r, lo, hi) if nan else m


@jit()
def _column_chunk(t, nchunk, inner):
    """Work item ``t`` of the middle kernels: ``(outer index, lo, hi)``, the
    ``t % nchunk``-th of ``nchunk`` equal column ranges of ``inner`` columns."""
    lo, hi = span(t % nchunk, inner, nchunk)
    return t // nchunk, lo, hi


# The middle kernels read each reduced row as a contiguous 1-D slice: with
# 3-D indexing LLVM did not vectorise the inner loop (measured 3-5x slower).
@jit(parallel=True, fastmath=REASSOC)
def _sum_middle(x, out, nchunk):
    outer, n, inner = x.shape
    for t in prange(outer * nchunk):
        o, lo, hi = _column_chunk(t, nchunk, inner)
        dst = out[o, lo:hi]
        for j in range(n):
            row = x[o, j, lo:hi]
            for i in range(hi - lo):
                dst[i] += row[i]


@jit(parallel=True)
def _max_middle(x, out, nchunk):
    outer, n, inner = x.shape
    for t in prange(outer * nchunk):
        o, lo, hi = _column_chunk(t, nchunk, inner)
        dst = out[o, lo:hi]
        first = x[o, 0, lo:hi]
        for i in range(hi - lo):
            dst[i] = first[i]
        nan = False  # a NaN in row 0 sticks by itself: v > NaN is false
        for j in range(1, n):
            row = x[o, j, lo:hi]
            for i in range(hi - lo):  # branch-free select; NaN only flagged
                v = row[i]
                m = dst[i]
                dst[i] = v if v > m else m
                nan |= v != v
        if nan:  # rare: the first NaN of each column that has one
            for i in range(lo, hi):
                for j in range(n):
                    if x[o, j, i] != x[o, j, i]:
                        out[o, i] = x[o, j, i]
                        break


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


@jit(parallel=True)
def _scan_rows(x, out, exclusive, reverse):
    """Running sums of each row of ``x[rows, n]`` (from the end with ``reverse``; each
    element's own value left out with ``exclusive``), one row per worker."""
    n = x.shape[1]
    for r in prange(x.shape[0]):
        acc = out.dtype.type(0)
        for t in range(n):
            j = n - 1 - t if reverse else t
            if exclusive:
                out[r, j] = acc
                acc += x[r, j]
            else:
                acc += x[r, j]
                out[r, j] = acc


def cumsum(x: np.ndarray, *, axis: int, exclusive: int, reverse: int) -> np.ndarray:
    """Running sum along ``axis`` in ``x``'s dtype (the axis moved last, rows scanned in parallel)."""
    if x.size == 0:
        return np.empty_like(x)
    moved = np.ascontiguousarray(np.moveaxis(readonly(x), axis, -1))
    rows = moved.reshape(-1, moved.shape[-1])
    out = np.empty(rows.shape, dtype=x.dtype)
    _scan_rows(rows, out, bool(exclusive), bool(reverse))
    return np.ascontiguousarray(np.moveaxis(out.reshape(moved.shape), -1, axis))

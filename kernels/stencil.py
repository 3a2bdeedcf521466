"""Jacobi stencil sweeps with a fixed boundary (Numba, parallel over rows).

One step replaces every interior point by the plain average of its
neighbourhood, the point itself included; points on the boundary (first or
last index along any axis) keep their values. Exact coefficients:

- 2-D, ``points = 5``: ``(c + n + s + w + e) / 5`` (c centre, n = [i-1, j],
  s = [i+1, j], w = [i, j-1], e = [i, j+1]);
- 2-D, ``points = 9``: the 3x3 block summed row by row, ``/ 9``;
- 3-D, ``points = 7``: ``(c + [d-1] + [d+1] + [h-1] + [h+1] + [w-1] + [w+1]) / 7``.

Sums run in the order written, in the tensor's dtype, like the NumPy
reference (results are bit-identical to it).

Nothing is copied whole: the output is allocated empty, plus one scratch
buffer when ``steps >= 2``, and only the boundary (first/last row and
column; in 3-D the six faces) is copied into them, since sweeps never write
it. The first sweep reads the input directly (it may be read-only); the
remaining sweeps ping-pong between the two buffers, and the first sweep's
destination is chosen by the parity of ``steps`` so that the last sweep
writes the buffer returned. ``steps == 0`` or a grid with fewer than three
points along some axis returns a copy of the input.
"""

from __future__ import annotations

import numpy as np

from mapper.kernels._jit import jit, prange, readonly


@jit()
def _row2d(a, b, i, nine, div):
    """Interior of row ``i`` of ``b`` from ``a`` (one sweep)."""
    w = b.shape[1]
    if nine:
        for j in range(1, w - 1):
            b[i, j] = (a[i - 1, j - 1] + a[i - 1, j] + a[i - 1, j + 1] + a[i, j - 1] + a[i, j]
                       + a[i, j + 1] + a[i + 1, j - 1] + a[i + 1, j] + a[i + 1, j + 1]) / div
    else:
        for j in range(1, w - 1):
            b[i, j] = (a[i, j] + a[i - 1, j] + a[i + 1, j] + a[i, j - 1] + a[i, j + 1]) / div


@jit()
def _row3d(a, b, t, div):
    """Interior of row ``t`` (flat over the interior (depth, height) pairs) of ``b`` from ``a``."""
    h, w = b.shape[1], b.shape[2]
    z = t // (h - 2) + 1
    y = t % (h - 2) + 1
    for x in range(1, w - 1):
        b[z, y, x] = (a[z, y, x] + a[z - 1, y, x] + a[z + 1, y, x] + a[z, y - 1, x]
                      + a[z, y + 1, x] + a[z, y, x - 1] + a[z, y, x + 1]) / div


@jit(parallel=True)
def _first2d(x, b, nine, div):
    """One sweep from the input ``x`` (read-only or not) into ``b``."""
    for i in prange(1, b.shape[0] - 1):
        _row2d(x, b, i, nine, div)


@jit(parallel=True)
def _rest2d(a, b, steps, nine, div):
    """``steps`` sweeps ping-ponging ``a -> b -> a ...`` (both mutable)."""
    for _ in range(steps):
        for i in prange(1, b.shape[0] - 1):
            _row2d(a, b, i, nine, div)
        a, b = b, a


@jit(parallel=True)
def _first3d(x, b, div):
    """One sweep from the input ``x`` (read-only or not) into ``b``."""
    for t in prange((b.shape[0] - 2) * (b.shape[1] - 2)):
        _row3d(x, b, t, div)


@jit(parallel=True)
def _rest3d(a, b, steps, div):
    """``steps`` sweeps ping-ponging ``a -> b -> a ...`` (both mutable)."""
    for _ in range(steps):
        for t in prange((b.shape[0] - 2) * (b.shape[1] - 2)):
            _row3d(a, b, t, div)
        a, b = b, a


def _with_boundary(x: np.ndarray) -> np.ndarray:
    """An uninitialised buffer shaped like ``x`` holding ``x``'s boundary."""
    b = np.empty(x.shape, dtype=x.dtype)
    for ax in range(x.ndim):
        lo = (slice(None),) * ax + (0,)
        hi = (slice(None),) * ax + (-1,)
        b[lo] = x[lo]
        b[hi] = x[hi]
    return b


def stencil(x: np.ndarray, *, points: int, steps: int) -> np.ndarray:
    x = readonly(x)
    if steps == 0 or min(x.shape) < 3:
        return np.array(x, order="C", copy=True)
    div = x.dtype.type(points)
    out = _with_boundary(x)
    if steps == 1:
        first, other = out, out
    else:  # sweep k writes `first` for odd k, so the last one lands in `out`
        scratch = _with_boundary(x)
        first, other = (out, scratch) if steps % 2 else (scratch, out)
    if x.ndim == 2:
        _first2d(x, first, points == 9, div)
        if steps > 1:
            _rest2d(first, other, steps - 1, points == 9, div)
    else:
        _first3d(x, first, div)
        if steps > 1:
            _rest3d(first, other, steps - 1, div)
    return out

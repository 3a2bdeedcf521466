"""Jacobi stencil sweeps with a fixed boundary (Numba, parallel over rows).

One step replaces every interior point by the plain average of its
neighbourhood, the point itself included; points on the boundary (first or
last index along any axis) keep their values. Exact coefficients:

- 2-D, ``points = 5``: ``(c + n + s + w + e) / 5`` (c centre, n = [i-1, j],
  s = [i+1, j], w = [i, j-1], e = [i, j+1]);
- 2-D, ``points = 9``: the 3x3 block summed row by row, ``/ 9``;
- 3-D, ``points = 7``: ``(c + [d-1] + [d+1] + [h-1] + [h+1] + [w-1] + [w+1]) / 7``.

Sums run in the order written, in the tensor's dtype, like the NumPy
reference. ``steps`` sweeps ping-pong between two buffers.
"""

from __future__ import annotations

import numpy as np

from mapper.kernels._jit import jit, prange


@jit(parallel=True)
def _sweep2d(a, b, steps, nine, div):
    h, w = a.shape
    for _ in range(steps):
        for i in prange(1, h - 1):
            if nine:
                for j in range(1, w - 1):
                    b[i, j] = (a[i - 1, j - 1] + a[i - 1, j] + a[i - 1, j + 1] + a[i, j - 1] + a[i, j]
                               + a[i, j + 1] + a[i + 1, j - 1] + a[i + 1, j] + a[i + 1, j + 1]) / div
            else:
                for j in range(1, w - 1):
                    b[i, j] = (a[i, j] + a[i - 1, j] + a[i + 1, j] + a[i, j - 1] + a[i, j + 1]) / div
        a, b = b, a
    return a


@jit(parallel=True)
def _sweep3d(a, b, steps, div):
    d, h, w = a.shape
    for _ in range(steps):
        for t in prange((d - 2) * (h - 2)):
            z = t // (h - 2) + 1
            y = t % (h - 2) + 1
            for x in range(1, w - 1):
                b[z, y, x] = (a[z, y, x] + a[z - 1, y, x] + a[z + 1, y, x] + a[z, y - 1, x]
                              + a[z, y + 1, x] + a[z, y, x - 1] + a[z, y, x + 1]) / div
        a, b = b, a
    return a


def stencil(x: np.ndarray, *, points: int, steps: int) -> np.ndarray:
    a = np.array(x, order="C", copy=True)
    if steps == 0 or min(x.shape) < 3:
        return a
    b = a.copy()
    div = x.dtype.type(points)
    if x.ndim == 2:
        return _sweep2d(a, b, steps, points == 9, div)
    return _sweep3d(a, b, steps, div)

"""add, sub, mul, div with NumPy broadcasting: one parallel strided Numba loop.

Integer ``div`` is floor division with ``x // 0 = 0`` (the output keeps the
operands' dtype, as the DSL declares); float and complex ``div`` is true
division (IEEE: ``x / 0`` is inf or nan).
"""

from __future__ import annotations

import numpy as np

from mapper.kernels._jit import jit, prange, quotient, span, split_index
from mapper.kernels.strided import walk

OPS = {"add": 0, "sub": 1, "mul": 2, "div": 3}


@jit(parallel=True)
def _binary4(shape, nchunk, out, oo, os, a, ao, as_, b, bo, bs, op):
    n0, n1, n2, n3 = shape
    unit = os[3] == 1 and as_[3] == 1 and bs[3] == 1
    for t in prange(n0 * n1 * n2 * nchunk):
        i, j, k, c = split_index(t, nchunk, n1, n2)
        lo, hi = span(c, n3, nchunk)
        ob = oo + i * os[0] + j * os[1] + k * os[2]
        ab = ao + i * as_[0] + j * as_[1] + k * as_[2]
        bb = bo + i * bs[0] + j * bs[1] + k * bs[2]
        if unit:
            if op == 0:
                for m in range(lo, hi):
                    out[ob + m] = a[ab + m] + b[bb + m]
            elif op == 1:
                for m in range(lo, hi):
                    out[ob + m] = a[ab + m] - b[bb + m]
            elif op == 2:
                for m in range(lo, hi):
                    out[ob + m] = a[ab + m] * b[bb + m]
            else:
                for m in range(lo, hi):
                    out[ob + m] = quotient(a[ab + m], b[bb + m])
        else:
            for m in range(lo, hi):
                x = a[ab + m * as_[3]]
                y = b[bb + m * bs[3]]
                if op == 0:
                    v = x + y
                elif op == 1:
                    v = x - y
                elif op == 2:
                    v = x * y
                else:
                    v = quotient(x, y)
                out[ob + m * os[3]] = v


def binary(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a op b`` broadcast; ``op`` one of add, sub, mul, div."""
    shape = np.broadcast_shapes(a.shape, b.shape)
    out = np.empty(shape, dtype=np.result_type(a, b))
    for args in walk(out, np.broadcast_to(a, shape), np.broadcast_to(b, shape)):
        _binary4(*args, OPS[op])
    return out

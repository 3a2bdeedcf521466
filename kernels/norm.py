"""Row and channel normalisations: softmax, layernorm, instancenorm, batchnorm (Numba,
parallel over rows or channels; statistics accumulated in float64).
layernorm's and batchnorm's sums may be reassociated (``REASSOC``), so that
LLVM vectorises them: in order, each add waited on the one before, and both
kernels ran 1.6-1.8x slower (1 x 256 x 56 x 56 batchnorm: 1.53 -> 0.86 ms
on one thread).

batchnorm is the identity-affine batch normalisation: each channel ``c`` of
``x[N, C, ...]`` becomes ``(x - mean_c) / sqrt(var_c + eps)`` with the mean
and biased variance of that channel over the batch and spatial axes (the
DSL gives no running statistics, so the batch's own are used)
(Ioffe and Szegedy, "Batch Normalization", ICML 2015, Algorithm 1 with
gamma = 1, beta = 0).
"""

from __future__ import annotations

import math

import numpy as np

from mapper.kernels._jit import REASSOC, jit, prange, readonly
from mapper.kernels.approx import row_max, scaled_exp_sum

#: Rows per work item of softmax's parallel loop: each item allocates the
#: exponent scratch of :func:`scaled_exp_sum` once for its rows.
SOFTMAX_ROW_BLOCK = 16


@jit(parallel=True)
def _softmax_rows(x, out):
    rows, n = x.shape
    for blk in prange((rows + SOFTMAX_ROW_BLOCK - 1) // SOFTMAX_ROW_BLOCK):
        bits = np.empty(n, dtype=np.int32)
        for r in range(blk * SOFTMAX_ROW_BLOCK, min(rows, (blk + 1) * SOFTMAX_ROW_BLOCK)):
            m = row_max(x[r], n)
            row = out[r]
            s = scaled_exp_sum(x[r], row, n, m, 1.0, bits)
            inv = 1.0 / s
            for j in range(n):
                row[j] = row[j] * inv


@jit(parallel=True, fastmath=REASSOC)
def _layernorm_rows(x, out, eps):
    n = x.shape[1]
    for r in prange(x.shape[0]):
        s = 0.0
        for j in range(n):
            s += x[r, j]
        mean = s / n
        v = 0.0
        for j in range(n):
            d = x[r, j] - mean
            v += d * d
        inv = 1.0 / math.sqrt(v / n + eps)
        for j in range(n):
            out[r, j] = (x[r, j] - mean) * inv


@jit(parallel=True, fastmath=REASSOC)
def _batchnorm_channels(x, out, eps):
    nb, nc, nl = x.shape
    count = nb * nl
    for c in prange(nc):
        s = 0.0
        for b in range(nb):
            for j in range(nl):
                s += x[b, c, j]
        mean = s / count
        v = 0.0
        for b in range(nb):
            for j in range(nl):
                d = x[b, c, j] - mean
                v += d * d
        inv = 1.0 / math.sqrt(v / count + eps)
        for b in range(nb):
            for j in range(nl):
                out[b, c, j] = (x[b, c, j] - mean) * inv


def softmax(x: np.ndarray, *, axis: int) -> np.ndarray:
    moved = readonly(np.moveaxis(x, axis, -1))
    if moved.size == 0:
        return np.empty_like(x)
    rows = moved.reshape(-1, moved.shape[-1])
    out = np.empty(rows.shape, dtype=x.dtype)
    _softmax_rows(rows, out)
    return np.ascontiguousarray(np.moveaxis(out.reshape(moved.shape), -1, axis))


def over_rows(kernel, x: np.ndarray, eps: float) -> np.ndarray:
    """``kernel(rows, out, eps)`` over the rows of ``x``'s last axis (a row-wise norm)."""
    if x.size == 0:
        return np.empty_like(x)
    rows = readonly(x).reshape(-1, x.shape[-1])
    out = np.empty(rows.shape, dtype=x.dtype)
    kernel(rows, out, eps)
    return out.reshape(x.shape)


def layernorm(x: np.ndarray, *, eps: float) -> np.ndarray:
    return over_rows(_layernorm_rows, x, eps)


def instancenorm(x: np.ndarray, *, eps: float) -> np.ndarray:
    """Each ``(n, c)`` plane of ``x[N, C, ...]`` normalised over its own elements: layernorm's
    row kernel over the planes as rows (identity affine, as layernorm's)."""
    if x.size == 0:
        return np.empty_like(x)
    return over_rows(_layernorm_rows, readonly(x).reshape(x.shape[0] * x.shape[1], -1), eps).reshape(x.shape)


def batchnorm(x: np.ndarray, *, eps: float) -> np.ndarray:
    if x.size == 0:
        return np.empty_like(x)
    x3 = readonly(x).reshape(x.shape[0], x.shape[1], -1)
    out = np.empty(x3.shape, dtype=x.dtype)
    _batchnorm_channels(x3, out, eps)
    return out.reshape(x.shape)

"""Max and average pooling over ``x[N, C, H, W]`` (Numba, parallel over
blocks of output rows). Padding never enters a window: maxpool takes the maximum
of the valid elements (NaN propagates), avgpool divides the sum of the valid
elements by their count (``count_include_pad=False`` in PyTorch's terms)."""

from __future__ import annotations

import numpy as np

from mapper.kernels._jit import jit, prange, readonly


@jit(inline=True)
def _fold(m, v, is_max):
    """``v`` folded into the accumulator ``m``: the maximum (NaN propagates:
    once ``m`` is NaN nothing replaces it) or the sum; a select, no branch."""
    return (v if (v > m or v != v) else m) if is_max else m + v


@jit(inline=True)
def _tap_row(x, n, c, i, j, sw, pw, lo, hi, acc, is_max):
    """One window tap ``(i, j)`` folded into the row accumulator ``acc[lo:hi]``.
    Branch-free, so LLVM vectorises it for a constant ``sw``."""
    for ow in range(lo, hi):
        acc[ow] = _fold(acc[ow], x[n, c, i, ow * sw - pw + j], is_max)


#: Output rows shorter than this are pooled window by window (global pooling).
SHORT_ROW = 8


@jit(parallel=True)
def _pool(x, out, kh, kw, sh, sw, ph, pw, is_max, start):
    """Parallel over blocks of output rows (image, channel, row), one
    accumulator per block (global pooling has rows of one element); per row,
    every window tap runs over the output columns whose input lies inside
    the image (bounds worked out once per tap, as conv2d's direct kernel),
    strides 1 and 2 with a loop of their own. ``start`` is the accumulator's
    first value (and dtype)."""
    rows = out.shape[0] * out.shape[1] * out.shape[2]
    nblk = min(rows, 64)
    for b in prange(nblk):
        acc = np.full(out.shape[3], start)  # the input's dtype for max, float64 sums
        for t in range(b * rows // nblk, (b + 1) * rows // nblk):
            _pool_row(x, out, kh, kw, sh, sw, ph, pw, is_max, start, t, acc)


@jit(inline=True)
def _pool_row(x, out, kh, kw, sh, sw, ph, pw, is_max, start, t, acc):
    """Output row ``t`` (over image, channel, row) of :func:`_pool`."""
    cc, h, w = x.shape[1], x.shape[2], x.shape[3]
    ho, wo = out.shape[2], out.shape[3]
    oh = t % ho
    c = (t // ho) % cc
    n = t // ho // cc
    h0 = max(oh * sh - ph, 0)
    h1 = min(oh * sh - ph + kh, h)
    if wo < SHORT_ROW:  # per window: per-tap loops over a few columns cost more than they save
        for ow in range(wo):
            w0 = max(ow * sw - pw, 0)
            w1 = min(ow * sw - pw + kw, w)
            m = start
            for i in range(h0, h1):
                for j in range(w0, w1):
                    m = _fold(m, x[n, c, i, j], is_max)
            out[n, c, oh, ow] = m if is_max else m / ((h1 - h0) * (w1 - w0))
        return
    for ow in range(wo):
        acc[ow] = start
    for i in range(h0, h1):
        for j in range(kw):
            lo = min(wo, max(0, (pw - j + sw - 1) // sw))
            hi = max(lo, min(wo, (w - 1 + pw - j) // sw + 1))
            if sw == 1:
                _tap_row(x, n, c, i, j, 1, pw, lo, hi, acc, is_max)
            elif sw == 2:
                _tap_row(x, n, c, i, j, 2, pw, lo, hi, acc, is_max)
            else:
                _tap_row(x, n, c, i, j, sw, pw, lo, hi, acc, is_max)
    for ow in range(wo):
        if is_max:
            out[n, c, oh, ow] = acc[ow]
        else:
            w0 = max(ow * sw - pw, 0)
            w1 = min(ow * sw - pw + kw, w)
            out[n, c, oh, ow] = acc[ow] / ((h1 - h0) * (w1 - w0))


def _run(x, kernel, stride, padding, is_max):
    ho = (x.shape[2] + 2 * padding[0] - kernel[0]) // stride[0] + 1
    wo = (x.shape[3] + 2 * padding[1] - kernel[1]) // stride[1] + 1
    out = np.empty((x.shape[0], x.shape[1], ho, wo), dtype=x.dtype)
    if out.size:
        if is_max:  # the accumulator's start: the dtype's lowest value, or a float64 zero for sums
            start = x.dtype.type(-np.inf) if x.dtype.kind == "f" else x.dtype.type(np.iinfo(x.dtype).min)
        else:
            start = np.float64(0.0)
        _pool(readonly(x), out, kernel[0], kernel[1], stride[0], stride[1],
              padding[0], padding[1], is_max, start)
    return out


def maxpool(x: np.ndarray, *, kernel, stride, padding) -> np.ndarray:
    return _run(x, kernel, stride, padding, True)


def avgpool(x: np.ndarray, *, kernel, stride, padding) -> np.ndarray:
    return _run(x, kernel, stride, padding, False)

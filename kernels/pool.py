"""Max and average pooling over ``x[N, C, H, W]`` (Numba, parallel over
(image, channel)). Padding never enters a window: maxpool takes the maximum
of the valid elements (NaN propagates), avgpool divides the sum of the valid
elements by their count (``count_include_pad=False`` in PyTorch's terms)."""

from __future__ import annotations

import numpy as np

from mapper.kernels._jit import jit, prange, readonly


@jit(parallel=True)
def _pool(x, out, kh, kw, sh, sw, ph, pw, is_max):
    nn, cc, h, w = x.shape
    ho, wo = out.shape[2], out.shape[3]
    for t in prange(nn * cc):
        n = t // cc
        c = t % cc
        for oh in range(ho):
            h0 = max(oh * sh - ph, 0)
            h1 = min(oh * sh - ph + kh, h)
            for ow in range(wo):
                w0 = max(ow * sw - pw, 0)
                w1 = min(ow * sw - pw + kw, w)
                if is_max:
                    m = x[n, c, h0, w0]
                    for i in range(h0, h1):
                        for j in range(w0, w1):
                            v = x[n, c, i, j]
                            if v > m or v != v:
                                m = v
                            if m != m:
                                break
                    out[n, c, oh, ow] = m
                else:
                    s = 0.0
                    for i in range(h0, h1):
                        for j in range(w0, w1):
                            s += x[n, c, i, j]
                    out[n, c, oh, ow] = s / ((h1 - h0) * (w1 - w0))


def _run(x, kernel, stride, padding, is_max):
    ho = (x.shape[2] + 2 * padding[0] - kernel[0]) // stride[0] + 1
    wo = (x.shape[3] + 2 * padding[1] - kernel[1]) // stride[1] + 1
    out = np.empty((x.shape[0], x.shape[1], ho, wo), dtype=x.dtype)
    if out.size:
        _pool(readonly(x), out, kernel[0], kernel[1], stride[0], stride[1],
              padding[0], padding[1], is_max)
    return out


def maxpool(x: np.ndarray, *, kernel, stride, padding) -> np.ndarray:
    return _run(x, kernel, stride, padding, True)


def avgpool(x: np.ndarray, *, kernel, stride, padding) -> np.ndarray:
    return _run(x, kernel, stride, padding, False)

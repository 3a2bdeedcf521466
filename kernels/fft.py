"""FFT and inverse FFT along the last axis.

Power-of-two lengths use a Numba iterative radix-2 decimation-in-time FFT
(Cooley and Tukey, "An Algorithm for the Machine Calculation of Complex
Fourier Series", Math. Comp. 1965): a bit-reversal permutation, then
``log2 N`` butterfly stages with precomputed twiddles (one contiguous table
per stage, computed in float64 and rounded to the tensor's precision). Many
rows run in parallel one per thread; few long rows run each stage's
butterflies in parallel. Other lengths fall back to ``numpy.fft``
(pocketfft). ``ifft`` scales by ``1 / N`` like NumPy.
"""

from __future__ import annotations

import numpy as np

from mapper.kernels._jit import jit, num_threads, prange, readonly


def _tables(n: int, dtype: np.dtype, inverse: bool) -> tuple[np.ndarray, np.ndarray]:
    """Bit-reversal permutation and stage twiddles: stage with half-size ``h``
    uses entries ``h - 1 .. 2h - 2``, ``exp(-+2 pi i j / (2h))``."""
    bits = n.bit_length() - 1
    idx = np.arange(n, dtype=np.int64)
    rev = np.zeros(n, dtype=np.int64)
    for b in range(bits):
        rev |= ((idx >> b) & 1) << (bits - 1 - b)
    halves = [1 << s for s in range(bits)]
    sign = 1.0 if inverse else -1.0
    tw = np.concatenate([np.exp(sign * 2j * np.pi * np.arange(h) / (2 * h)) for h in halves]) if bits else \
        np.zeros(0, dtype=np.complex128)
    return rev, tw.astype(dtype)


@jit(parallel=True)
def _fft_rows(x, out, rev, tw, scale):
    rows, n = x.shape
    for r in prange(rows):
        for i in range(n):
            out[r, i] = x[r, rev[i]]
        h = 1
        while h < n:
            for start in range(0, n, 2 * h):
                for j in range(h):
                    w = tw[h - 1 + j]
                    u = out[r, start + j]
                    v = out[r, start + j + h] * w
                    out[r, start + j] = u + v
                    out[r, start + j + h] = u - v
            h *= 2
        if scale != 1.0:
            for i in range(n):
                out[r, i] = out[r, i] * scale


@jit(parallel=True)
def _fft_wide(x, out, rev, tw, scale):
    n = x.shape[0]
    for i in prange(n):
        out[i] = x[rev[i]]
    h = 1
    while h < n:
        for b in prange(n // 2):
            j = b % h
            k = (b // h) * 2 * h + j
            w = tw[h - 1 + j]
            u = out[k]
            v = out[k + h] * w
            out[k] = u + v
            out[k + h] = u - v
        h *= 2
    if scale != 1.0:
        for i in prange(n):
            out[i] = out[i] * scale


def _transform(x: np.ndarray, inverse: bool, method: str | None) -> np.ndarray:
    n = x.shape[-1]
    if n & (n - 1) or n == 0:  # not a power of two: pocketfft
        fn = np.fft.ifft if inverse else np.fft.fft
        return fn(x, axis=-1).astype(x.dtype, copy=False)
    rows = readonly(x).reshape(-1, n)
    out = np.empty(rows.shape, dtype=x.dtype)
    if rows.size == 0:
        return out.reshape(x.shape)
    rev, tw = (readonly(t) for t in _tables(n, x.dtype, inverse))
    scale = 1.0 / n if inverse else 1.0
    if method is None:
        method = "rows" if rows.shape[0] >= num_threads() or n < 4096 else "wide"
    if method == "rows":
        _fft_rows(rows, out, rev, tw, scale)
    else:
        for r in range(rows.shape[0]):
            _fft_wide(rows[r], out[r], rev, tw, scale)
    return out.reshape(x.shape)


def fft(x: np.ndarray, *, method: str | None = None) -> np.ndarray:
    """Forward DFT along the last axis; ``method`` "rows" or "wide" forces a radix-2 path."""
    return _transform(x, False, method)


def ifft(x: np.ndarray, *, method: str | None = None) -> np.ndarray:
    """Inverse DFT along the last axis, scaled by ``1/N``."""
    return _transform(x, True, method)

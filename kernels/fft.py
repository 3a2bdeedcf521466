"""FFT and inverse FFT along the last axis.

Power-of-two lengths use a Numba iterative radix-2 decimation-in-time FFT
(Cooley and Tukey, "An Algorithm for the Machine Calculation of Complex
Fourier Series", Math. Comp. 1965): a bit-reversal permutation, then
``log2 N`` butterfly stages with precomputed twiddles (one contiguous table
per stage, computed in float64 and rounded to the tensor's precision). Many
rows run in parallel one per thread; a few long rows run the first stages
in cache-sized blocks in parallel and each later stage's butterfly groups in
parallel. Other lengths fall back to ``numpy.fft``
(pocketfft). ``ifft`` scales by ``1 / N`` like NumPy. The radix-2 kernels
use fast-math without NaN/inf semantics: for non-finite inputs their output
is unspecified.
"""

from __future__ import annotations

import functools

import numpy as np

from mapper.kernels._jit import jit, num_threads, prange, readonly

#: Butterflies may contract into FMAs and skip C99 inf/nan complex-product
#: fix-ups (finite data give the same results to rounding).
FFT_MATH = frozenset({"nnan", "ninf", "nsz", "contract"})

#: Twiddle and bit-reversal tables kept (one per length, dtype and direction).
TABLES_CACHED = 32

#: Points per cache-resident block in the one-long-row FFT (64 KiB of complex128).
WIDE_BLOCK = 4096


@functools.lru_cache(maxsize=TABLES_CACHED)
def _tables(n: int, dtype: np.dtype, inverse: bool) -> tuple[np.ndarray, np.ndarray]:
    """Bit-reversal permutation and stage twiddles: stage with half-size ``h``
    uses entries ``h - 1 .. 2h - 2``, ``exp(-+2 pi i j / (2h))``. Kept per
    ``(n, dtype, direction)`` (read-only), as FFT libraries keep their plans:
    computing them took about 0.5 ms per call at n = 16384, more than the
    transform of a short batch."""
    bits = n.bit_length() - 1
    idx = np.arange(n, dtype=np.int64)
    rev = np.zeros(n, dtype=np.int64)
    for b in range(bits):
        rev |= ((idx >> b) & 1) << (bits - 1 - b)
    halves = [1 << s for s in range(bits)]
    sign = 1.0 if inverse else -1.0
    tw = np.concatenate([np.exp(sign * 2j * np.pi * np.arange(h) / (2 * h)) for h in halves]) if bits else \
        np.zeros(0, dtype=np.complex128)
    tw = tw.astype(dtype)
    rev.flags.writeable = False
    tw.flags.writeable = False
    return rev, tw


@jit(fastmath=FFT_MATH)
def _butterflies(row, start, h, tw):
    """The ``h`` butterflies of the group at ``start`` (span ``2h``)."""
    for j in range(h):
        w = tw[h - 1 + j]
        u = row[start + j]
        v = row[start + j + h] * w
        row[start + j] = u + v
        row[start + j + h] = u - v


@jit(parallel=True, fastmath=FFT_MATH)
def _fft_rows(x, out, rev, tw, scale):
    rows, n = x.shape
    for r in prange(rows):
        row = out[r]
        for i in range(n):
            row[i] = x[r, rev[i]]
        h = 1
        while h < n:
            for start in range(0, n, 2 * h):
                _butterflies(row, start, h, tw)
            h *= 2
        if scale != 1.0:
            for i in range(n):
                row[i] = row[i] * scale


@jit(parallel=True, fastmath=FFT_MATH)
def _fft_wide(x, out, rev, tw, scale, block):
    """One long row: bit reversal in parallel; the stages whose butterflies stay
    inside ``block`` consecutive points run block by block (in cache, blocks
    in parallel); each later stage runs its butterfly groups in parallel."""
    n = x.shape[0]
    for i in prange(n):
        out[i] = x[rev[i]]
    for blk in prange(n // block):
        h = 1
        while h < block:
            for start in range(blk * block, (blk + 1) * block, 2 * h):
                _butterflies(out, start, h, tw)
            h *= 2
    h = block
    while h < n:
        for g in prange(n // (2 * h)):
            _butterflies(out, g * 2 * h, h, tw)
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
    rev, tw = (readonly(t) for t in _tables(n, np.dtype(x.dtype), inverse))
    scale = 1.0 / n if inverse else 1.0
    if method is None:
        method = "rows" if rows.shape[0] >= num_threads() or n < 4096 else "wide"
    if method == "rows":
        _fft_rows(rows, out, rev, tw, scale)
    else:
        for r in range(rows.shape[0]):
            _fft_wide(rows[r], out[r], rev, tw, scale, min(n, WIDE_BLOCK))
    return out.reshape(x.shape)


def fft(x: np.ndarray, *, method: str | None = None) -> np.ndarray:
    """Forward DFT along the last axis; ``method`` "rows" or "wide" forces a radix-2 path."""
    return _transform(x, False, method)


def ifft(x: np.ndarray, *, method: str | None = None) -> np.ndarray:
    """Inverse DFT along the last axis, scaled by ``1/N``."""
    return _transform(x, True, method)

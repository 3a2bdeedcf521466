"""Scaled dot-product multi-head attention (Vaswani et al., "Attention Is
All You Need", NeurIPS 2017), Numba, parallel over (sequence, head).

Rows of ``q``, ``k``, ``v`` ``[T, D]`` are ``T = batch * seq`` tokens, batch
major; head ``h`` owns columns ``h*D/heads .. (h+1)*D/heads``. ``qkv[T, 3D]``
holds q, k, v side by side. ``causal`` masks keys after the query. Each
(sequence, head) works on contiguous copies of its slices (K transposed):
each query's scores accumulate over the head dimension with a contiguous,
vectorisable loop over keys; a stable softmax (float64 normaliser; float32
exponentials without a libm call, :mod:`mapper.kernels.approx`); then the
weighted sum of value rows, also contiguous; no BLAS.
"""

from __future__ import annotations

import math

import numpy as np

from mapper.kernels._jit import jit, prange, readonly
from mapper.kernels.approx import scaled_exp_sum


@jit(parallel=True)
def _attention(q, k, v, out, heads, seq, causal):
    t, d = q.shape
    dh = d // heads
    nb = t // seq
    scale = 1.0 / math.sqrt(dh)
    for u in prange(nb * heads):
        r0 = (u // heads) * seq
        c0 = (u % heads) * dh
        kt = np.ascontiguousarray(k[r0:r0 + seq, c0:c0 + dh].T)  # [dh, seq]: score rows vectorise
        vb = np.ascontiguousarray(v[r0:r0 + seq, c0:c0 + dh])
        p = np.empty(seq, dtype=q.dtype)  # scores
        e = np.empty(seq, dtype=q.dtype)  # their exponentials
        bits = np.empty(seq, dtype=np.int32)  # scratch of the float32 exponentials
        acc = np.empty(dh, dtype=q.dtype)
        for i in range(seq):
            end = i + 1 if causal else seq
            p[:end] = 0
            for c in range(dh):
                qc = q[r0 + i, c0 + c]
                for j in range(end):
                    p[j] += qc * kt[c, j]
            m = p[0]
            for j in range(1, end):
                m = p[j] if p[j] > m else m
            total = scaled_exp_sum(p, e, end, m, scale, bits)
            acc[:] = 0
            for j in range(end):
                w = e[j]
                for c in range(dh):
                    acc[c] += w * vb[j, c]
            inv = 1.0 / total
            for c in range(dh):
                out[r0 + i, c0 + c] = acc[c] * inv


def attention(*xs: np.ndarray, heads: int, seq: int, causal: bool) -> np.ndarray:
    if len(xs) == 1:
        d = xs[0].shape[1] // 3
        q, k, v = (xs[0][:, i * d:(i + 1) * d] for i in range(3))
    else:
        q, k, v = xs
    q, k, v = (readonly(m) for m in (q, k, v))
    out = np.empty(q.shape, dtype=q.dtype)
    if out.size:
        _attention(q, k, v, out, heads, seq, causal)
    return out

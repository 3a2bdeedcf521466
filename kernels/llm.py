"""Kernels of the ops decoder LLMs add: RMSNorm (Zhang and Sennrich, NeurIPS 2019), SwiGLU
(Shazeer, arXiv:2002.05202) and rotary position embeddings (Su et al., arXiv:2104.09864), each
one parallel Numba loop over rows; and grouped-query attention's key and value heads spread
over the query heads they serve (:func:`expand_kv`)."""

from __future__ import annotations

import math

import numpy as np

from mapper.kernels._jit import jit, prange, readonly
from mapper.kernels.norm import over_rows


@jit(parallel=True)
def _rmsnorm_rows(x, out, eps):
    n = x.shape[1]
    for r in prange(x.shape[0]):
        s = 0.0
        for j in range(n):
            s += float(x[r, j]) * float(x[r, j])
        inv = 1.0 / math.sqrt(s / n + eps)
        for j in range(n):
            out[r, j] = x[r, j] * inv


def rmsnorm(x: np.ndarray, *, eps: float) -> np.ndarray:
    """``x / sqrt(mean(x^2) + eps)`` over the last axis (no gain: the DSL's norms have no weights)."""
    return over_rows(_rmsnorm_rows, x, eps)


@jit(parallel=True)
def _swiglu_rows(x, out):
    f = out.shape[1]
    for r in prange(x.shape[0]):
        for j in range(f):
            g = float(x[r, j])
            out[r, j] = g / (1.0 + math.exp(-g)) * x[r, f + j]


def swiglu(x: np.ndarray) -> np.ndarray:
    """``silu(x[..., :F]) * x[..., F:]``."""
    f = x.shape[-1] // 2
    out = np.empty((*x.shape[:-1], f), dtype=x.dtype)
    if out.size:
        _swiglu_rows(readonly(x).reshape(-1, 2 * f), out.reshape(-1, f))
    return out


def head_columns(heads: int, kv: int, dh: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """First columns of each q, k and v head in a fused qkv: ``[q | k | v]`` when ``kv = heads``,
    else ``kv`` groups of ``heads / kv`` query heads followed by their key and value head."""
    if kv == heads:
        q = np.arange(heads) * dh
        return q, heads * dh + np.arange(kv) * dh, 2 * heads * dh + np.arange(kv) * dh
    g = heads // kv
    group = (g + 2) * dh
    q = np.array([(j // g) * group + (j % g) * dh for j in range(heads)])
    k = np.arange(kv) * group + g * dh
    return q, k, k + dh


@jit(parallel=True)
def _rotary(x, out, cols, seq, half, base):
    t = x.shape[0]
    for r in prange(t):
        pos = r % seq
        for j in range(x.shape[1]):
            out[r, j] = x[r, j]
        for c in cols:
            for i in range(half):
                theta = pos * base ** (-2.0 * i / (2 * half))
                cs, sn = math.cos(theta), math.sin(theta)
                a = float(x[r, c + i])
                b = float(x[r, c + half + i])
                out[r, c + i] = a * cs - b * sn
                out[r, c + half + i] = b * cs + a * sn


def rotary(x: np.ndarray, *, heads: int, seq: int, kv_heads: int | None, base: float) -> np.ndarray:
    """The q and k heads of ``x`` rotated by position (the half-split pairing of GPT-NeoX and
    Llama: element ``i`` with ``i + dh/2``, angle ``pos * base^(-2i/dh)``); v unchanged."""
    kv = kv_heads or heads
    dh = x.shape[1] // (heads + 2 * kv)
    q, k, _ = head_columns(heads, kv, dh)
    out = np.empty_like(x)
    if x.size:
        _rotary(readonly(x), out, np.concatenate([q, k]).astype(np.int64), seq, dh // 2, float(base))
    return out


def expand_kv(xs: tuple[np.ndarray, ...], heads: int, kv: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``q, k, v [T, heads dh]`` from grouped-query operands: each key and value head repeated
    for the ``heads / kv`` query heads that share it."""
    if len(xs) == 1:
        dh = xs[0].shape[1] // (heads + 2 * kv)
        qc, kc, vc = head_columns(heads, kv, dh)
        x = xs[0]
        q = np.concatenate([x[:, c:c + dh] for c in qc], axis=1)
        k = np.concatenate([x[:, c:c + dh] for c in kc], axis=1)
        v = np.concatenate([x[:, c:c + dh] for c in vc], axis=1)
    else:
        q, k, v = xs
        dh = q.shape[1] // heads
    g = heads // kv
    k = np.repeat(k.reshape(k.shape[0], kv, dh), g, axis=1).reshape(k.shape[0], heads * dh)
    v = np.repeat(v.reshape(v.shape[0], kv, dh), g, axis=1).reshape(v.shape[0], heads * dh)
    return np.ascontiguousarray(q), k, v

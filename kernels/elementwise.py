"""Per-element functions: relu, gelu (tanh approximation) and ``elementwise``
(exp, log, sqrt, tanh, neg, abs, square, sigmoid, scale), as one parallel
Numba loop over the flattened tensor. Complex tensors have no order, so no
relu or gelu; ``abs`` of a complex tensor keeps the complex dtype."""

from __future__ import annotations

import numpy as np

from mapper.kernels._jit import chunks, jit, overload, prange, readonly, types
from mapper.kernels.reference import GELU_C, GELU_K

FNS = {"relu": 0, "gelu": 1, "exp": 2, "log": 3, "sqrt": 4, "tanh": 5, "neg": 6, "abs": 7,
       "square": 8, "sigmoid": 9, "scale": 10}


@jit()
def _common(fn, v, k):
    """The functions real and complex values share (k: constants in v's dtype)."""
    if fn == 2:
        return np.exp(v)
    if fn == 3:
        return np.log(v)
    if fn == 4:
        return np.sqrt(v)
    if fn == 5:
        return np.tanh(v)
    if fn == 6:
        return -v
    if fn == 8:
        return v * v
    return k[3] * v


@jit()
def _real(fn, v, k):
    zero, one = k[0], k[1]
    if fn == 0:
        return v if v > zero else zero
    if fn == 1:
        return k[2] * v * (one + np.tanh(k[4] * (v + k[5] * v * v * v)))
    if fn == 7:
        return abs(v)
    if fn == 9:
        e = np.exp(-abs(v))
        return one / (one + e) if v >= zero else e / (one + e)
    return _common(fn, v, k)


@jit()
def _complex(fn, v, k):
    if fn == 7:
        return abs(v) + k[0]
    if fn == 9:
        return k[1] / (k[1] + np.exp(-v))
    return _common(fn, v, k)


def apply(fn, v, k):
    """Function ``fn`` (a :data:`FNS` code) of one value (inside kernels only)."""
    raise NotImplementedError("apply is only callable inside Numba kernels")


@overload(apply)
def _apply(fn, v, k):
    if isinstance(v, types.Complex):
        return lambda fn, v, k: _complex(fn, v, k)
    if isinstance(v, types.Integer):  # integers only take relu: stay exact
        return lambda fn, v, k: v if v > k[0] else k[0]
    return lambda fn, v, k: _real(fn, v, k)


@jit(parallel=True)
def _unary(x, out, fn, k, nchunk):
    n = x.shape[0]
    clen = (n + nchunk - 1) // nchunk
    for c in prange(nchunk):
        for i in range(c * clen, min(c * clen + clen, n)):
            out[i] = apply(fn, x[i], k)


def unary(fn: str, x: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """``fn`` applied to every element of ``x``; same shape and dtype."""
    out = np.empty(x.shape, dtype=x.dtype)
    if x.size == 0:
        return out
    flat = readonly(x).reshape(-1)
    consts = readonly(np.array([0, 1, 0.5, alpha, GELU_C, GELU_K]).astype(x.dtype))  # in x's dtype
    _unary(flat, out.reshape(-1), FNS[fn], consts, chunks(1, flat.shape[0], 8192))
    return out


def relu(x: np.ndarray) -> np.ndarray:
    return unary("relu", x)


def gelu(x: np.ndarray) -> np.ndarray:
    return unary("gelu", x)


def elementwise(x: np.ndarray, *, fn: str, alpha: float) -> np.ndarray:
    return unary(fn, x, alpha)

"""NumPy-only reference implementations of every op (no Numba).

Each takes checked operands and canonical attributes from
:func:`mapper.kernels.spec.prepare` and returns a new array. They define the
semantics the Numba kernels must reproduce; docs/ops.md is the catalogue.
Conventions fixed here (and documented in :mod:`mapper.kernels.registry`):
avgpool divides by the number of valid (non-padding) elements; batchnorm
normalises each channel with the batch's own mean and biased variance
(identity affine); integer ``div`` is floor division with ``x // 0 = 0``;
integer ``mean`` is the floor of the mean; ``elementwise(fn="abs")`` of a
complex tensor keeps the complex dtype (``|z| + 0j``).
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from mapper.kernels.csr import Csr

GELU_C = 0.7978845608028654  # sqrt(2 / pi)
GELU_K = 0.044715


def matmul(a, b):
    return np.matmul(a, b)


def _windows(x, kernel, stride):
    """Sliding windows over the last two axes: [..., Ho, Wo, kh, kw]."""
    w = sliding_window_view(x, kernel, axis=(-2, -1))
    return w[..., :: stride[0], :: stride[1], :, :]


def conv2d(x, w, *, stride, padding, groups):
    (ph, pw) = padding
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    k, cg, r, s = w.shape
    kg = k // groups
    win = _windows(xp, (r, s), stride)  # [N, C, Ho, Wo, R, S]
    outs = [np.einsum("nchwrs,kcrs->nkhw", win[:, g * cg:(g + 1) * cg], w[g * kg:(g + 1) * kg], optimize=True)
            for g in range(groups)]
    return np.ascontiguousarray(np.concatenate(outs, axis=1), dtype=x.dtype)


def conv_transpose2d(x, w, *, stride, padding, output_padding, groups):
    """Each input pixel's contribution ``x[n, c, i, j] * w[c, k]`` added at ``(i sh + r, j sw + s)``
    of the unpadded output, which is then cropped by ``padding``."""
    n, c, h, wd = x.shape
    _, kg, r, s = w.shape
    (sh, sw), (ph, pw), (oh, ow) = stride, padding, output_padding
    full = np.zeros((n, kg * groups, (h - 1) * sh + r + oh, (wd - 1) * sw + s + ow), dtype=np.float64)
    cg = c // groups
    for g in range(groups):
        xg, wg = x[:, g * cg:(g + 1) * cg].astype(np.float64), w[g * cg:(g + 1) * cg].astype(np.float64)
        for i in range(r):
            for j in range(s):
                full[:, g * kg:(g + 1) * kg, i:i + (h - 1) * sh + 1:sh, j:j + (wd - 1) * sw + 1:sw] += \
                    np.einsum("nchw,ck->nkhw", xg, wg[:, :, i, j])
    ho, wo = full.shape[2] - 2 * ph, full.shape[3] - 2 * pw
    return np.ascontiguousarray(full[:, :, ph:ph + ho, pw:pw + wo], dtype=x.dtype)


def maxpool(x, *, kernel, stride, padding):
    (ph, pw) = padding
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=low)
    return np.ascontiguousarray(_windows(xp, kernel, stride).max(axis=(-2, -1)))


def avgpool(x, *, kernel, stride, padding):
    (ph, pw) = padding
    pad = ((0, 0), (0, 0), (ph, ph), (pw, pw))
    sums = _windows(np.pad(x.astype(np.float64), pad), kernel, stride).sum(axis=(-2, -1))
    valid = np.pad(np.ones(x.shape[2:], dtype=np.float64), pad[2:])
    counts = _windows(valid, kernel, stride).sum(axis=(-2, -1))
    return (sums / counts).astype(x.dtype)


def batchnorm(x, *, eps):
    axes = (0,) + tuple(range(2, x.ndim))
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=axes, keepdims=True)
    return ((x64 - mean) / np.sqrt(var + eps)).astype(x.dtype)


def relu(x):
    return np.maximum(x, x.dtype.type(0))


def gelu(x):
    return (0.5 * x * (1 + np.tanh(GELU_C * (x + GELU_K * x * x * x)))).astype(x.dtype)


def softmax(x, *, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def layernorm(x, *, eps):
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=-1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=-1, keepdims=True)
    return ((x64 - mean) / np.sqrt(var + eps)).astype(x.dtype)


def instancenorm(x, *, eps):
    axes = tuple(range(2, x.ndim))
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=axes, keepdims=True)
    return ((x64 - mean) / np.sqrt(var + eps)).astype(x.dtype)


def add(a, b):
    return np.add(a, b)


def sub(a, b):
    return np.subtract(a, b)


def mul(a, b):
    return np.multiply(a, b)


def div(a, b):
    if a.dtype.kind in "iu":
        out = np.zeros(np.broadcast_shapes(a.shape, b.shape), dtype=a.dtype)
        np.floor_divide(a, b, out=out, where=np.broadcast_to(b != 0, out.shape))
        return out
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.divide(a, b)


def _grouped(xs, heads, kv):
    """q [T, heads, dh] and k, v [T, kv, dh] of attention's operands (docs/ops.md, attention)."""
    if len(xs) == 3:
        t = xs[0].shape[0]
        dh = xs[0].shape[1] // heads
        return xs[0].reshape(t, heads, dh), xs[1].reshape(t, kv, dh), xs[2].reshape(t, kv, dh)
    x = xs[0]
    t = x.shape[0]
    dh = x.shape[1] // (heads + 2 * kv)
    if kv == heads:
        q, k, v = np.split(x, 3, axis=1)
        return q.reshape(t, heads, dh), k.reshape(t, kv, dh), v.reshape(t, kv, dh)
    g = x.reshape(t, kv, heads // kv + 2, dh)
    return g[:, :, :-2, :].reshape(t, heads, dh), g[:, :, -2, :], g[:, :, -1, :]


def attention(*xs, heads, seq, causal, kv_heads=None, fused=True):
    kv = kv_heads or heads
    q3, k3, v3 = _grouped(xs, heads, kv)
    k3, v3 = np.repeat(k3, heads // kv, axis=1), np.repeat(v3, heads // kv, axis=1)
    t, dh = q3.shape[0], q3.shape[2]
    d = heads * dh
    q, k, v = (m.reshape(t, d) for m in (q3, k3, v3))

    def split(m):  # [T, D] -> [B, heads, S, dh]
        return m.reshape(t // seq, seq, heads, dh).transpose(0, 2, 1, 3)

    scores = split(q) @ split(k).transpose(0, 1, 3, 2) / q.dtype.type(np.sqrt(dh))
    if causal:
        scores = np.where(np.triu(np.ones((seq, seq), dtype=bool), 1), -np.inf, scores)
    p = softmax(scores, axis=-1)
    return np.ascontiguousarray((p @ split(v)).transpose(0, 2, 1, 3).reshape(t, d), dtype=q.dtype)


def rmsnorm(x, *, eps):
    x64 = x.astype(np.float64)
    return (x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)).astype(x.dtype)


def swiglu(x):
    gate, up = np.split(x.astype(np.float64), 2, axis=-1)
    return (gate / (1.0 + np.exp(-gate)) * up).astype(x.dtype)


def rotary(x, *, heads, seq, kv_heads=None, base=10000.0):
    kv = kv_heads or heads
    q, k, _ = _grouped((x,), heads, kv)
    t, dh = x.shape[0], q.shape[2]
    pos = (np.arange(t) % seq)[:, None]
    theta = pos * base ** (-2.0 * np.arange(dh // 2) / dh)  # [T, dh/2]
    cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]

    def turn(m):
        a, b = m[..., :dh // 2].astype(np.float64), m[..., dh // 2:].astype(np.float64)
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)

    qr, kr = turn(q), turn(k)
    out = x.astype(np.float64).copy()
    if kv == heads:
        out[:, :heads * dh] = qr.reshape(t, -1)
        out[:, heads * dh:2 * heads * dh] = kr.reshape(t, -1)
    else:
        g = out.reshape(t, kv, heads // kv + 2, dh)
        g[:, :, :-2, :] = qr.reshape(t, kv, heads // kv, dh)
        g[:, :, -2, :] = kr
    return out.astype(x.dtype)


def embedding(ids, table):
    return table[ids]


def embedding_bag(ids, table, *, pooling, mode, cache_hit):
    del cache_hit
    rows = table[ids.reshape(-1, pooling)]
    return {"sum": rows.sum, "mean": rows.mean, "max": rows.max}[mode](axis=1).astype(table.dtype)


def gather_nd(data, indices, *, batch_dims):
    k = indices.shape[-1]
    lead, picked = data.shape[:batch_dims], data.shape[batch_dims:batch_dims + k]
    nb = int(np.prod(lead, dtype=np.int64))
    d = data.reshape((nb,) + picked + data.shape[batch_dims + k:])
    idx = indices.reshape(nb, -1, k).astype(np.int64) % np.asarray(picked, dtype=np.int64)
    out = d[(np.arange(nb)[:, None], *(idx[..., j] for j in range(k)))]
    return np.ascontiguousarray(out.reshape(indices.shape[:-1] + data.shape[batch_dims + k:]))


def scatter_elements(data, indices, updates, *, axis, reduction):
    out = np.array(data, copy=True)
    where = list(np.indices(indices.shape, sparse=True))
    where[axis] = indices.astype(np.int64) % data.shape[axis]
    at = tuple(np.broadcast_arrays(*where))
    if reduction == "none":  # repeated positions: the last update in row-major order wins
        flat = np.ravel_multi_index(tuple(a.reshape(-1) for a in at), data.shape)
        keep = len(flat) - 1 - np.unique(flat[::-1], return_index=True)[1]
        out.reshape(-1)[flat[keep]] = updates.reshape(-1)[keep]
    else:
        ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[reduction]
        ufunc.at(out, at, updates)
    return out


def allreduce(*xs):
    out = xs[0]
    for x in xs[1:]:
        out = np.add(out, x)
    return np.array(out, dtype=xs[0].dtype)


def concat(*xs, axis):
    return np.concatenate(xs, axis=axis)


def split(x, *, parts, index, axis):
    return np.ascontiguousarray(np.split(x, parts, axis=axis)[index])


def reshape(x, *, shape):
    return np.reshape(x, shape)


def transpose(x, *, perm):
    return np.ascontiguousarray(np.transpose(x, perm))


def stencil(x, *, points, steps):
    """Jacobi sweeps: each interior point becomes the plain average of its
    ``points``-point neighbourhood (itself included); boundary points stay."""
    cur = x.copy()
    div = x.dtype.type(points)
    for _ in range(steps):
        nxt = cur.copy()
        if points == 5:
            c = cur
            nxt[1:-1, 1:-1] = (c[1:-1, 1:-1] + c[:-2, 1:-1] + c[2:, 1:-1] + c[1:-1, :-2] + c[1:-1, 2:]) / div
        elif points == 9:
            h, w = cur.shape
            acc = cur[0:h - 2, 0:w - 2].copy()
            for di in range(3):
                for dj in range(3):
                    if di or dj:
                        acc += cur[di:h - 2 + di, dj:w - 2 + dj]
            nxt[1:-1, 1:-1] = acc / div
        else:
            c = cur
            nxt[1:-1, 1:-1, 1:-1] = (c[1:-1, 1:-1, 1:-1] + c[:-2, 1:-1, 1:-1] + c[2:, 1:-1, 1:-1]
                                     + c[1:-1, :-2, 1:-1] + c[1:-1, 2:, 1:-1]
                                     + c[1:-1, 1:-1, :-2] + c[1:-1, 1:-1, 2:]) / div
        cur = nxt
    return cur


def spmv(a: Csr, x):
    m = a.shape[0]
    nnz = a.data.shape[0]
    if nnz == 0:
        return np.zeros(m, dtype=x.dtype)
    prod = a.data * x[a.indices]
    out = np.add.reduceat(prod, np.minimum(a.indptr[:-1], nnz - 1))
    out[a.indptr[:-1] == a.indptr[1:]] = 0
    return out.astype(x.dtype, copy=False)


def fft(x):
    return np.fft.fft(x, axis=-1).astype(x.dtype, copy=False)


def ifft(x):
    return np.fft.ifft(x, axis=-1).astype(x.dtype, copy=False)


def dot(a, b):
    return np.asarray(np.dot(a, b), dtype=a.dtype)


def axpy(*xs, alpha):
    x, y = xs[-2:]
    return alpha * x + y


def reduce(x, *, kind, axis):
    if kind == "max":
        return np.asarray(np.max(x, axis=axis))
    if kind == "sum" or x.dtype.kind in "fc":
        fn = np.sum if kind == "sum" else np.mean
        return np.asarray(fn(x, axis=axis, dtype=x.dtype))
    count = x.size if axis is None else x.shape[axis]
    total = np.sum(x, axis=axis, dtype=np.int64)
    return np.asarray(total // count).astype(x.dtype)


def cumsum(x, *, axis, exclusive, reverse):
    y = np.flip(x, axis) if reverse else x
    out = np.cumsum(y, axis=axis, dtype=x.dtype)
    if exclusive:
        out = np.concatenate([np.zeros_like(np.take(out, [0], axis=axis)),
                              np.take(out, range(out.shape[axis] - 1), axis=axis)], axis=axis)
    return np.ascontiguousarray(np.flip(out, axis) if reverse else out)


def elementwise(x, *, fn, alpha):
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if fn == "sigmoid":
            if x.dtype.kind == "c":
                return (1 / (1 + np.exp(-x))).astype(x.dtype)
            e = np.exp(-np.abs(x))
            return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)
        if fn == "abs":
            return np.abs(x).astype(x.dtype)
        if fn == "hardswish":
            return (x * np.clip(x + 3, 0, 6) / 6).astype(x.dtype)
        if fn == "square":
            return x * x
        if fn == "neg":
            return -x
        if fn == "scale":
            return (x.dtype.type(alpha) * x).astype(x.dtype)
        return getattr(np, fn)(x).astype(x.dtype, copy=False)


def _route(gates, k):
    """Each token's ``k`` experts (largest gates, ties to the lower index) and each pair's row
    in the dispatch order (by expert, then token)."""
    t = gates.shape[0]
    chosen = np.argsort(-gates.astype(np.float64), axis=1, kind="stable")[:, :k]
    tokens = np.repeat(np.arange(t), k)
    order = np.lexsort((tokens, chosen.reshape(-1)))
    slot = np.empty(t * k, dtype=np.int64)
    slot[order] = np.arange(t * k)
    return chosen, slot.reshape(t, k)


def topk(x, *, k, norm, scale):
    flat = x.reshape(-1, x.shape[-1]).astype(np.float64)
    chosen = np.argsort(-flat, axis=1, kind="stable")[:, :k]
    rows = np.arange(flat.shape[0])[:, None]
    kept = flat[rows, chosen]
    factor = scale / kept.sum(axis=1, keepdims=True) if norm else scale
    out = np.zeros_like(flat)
    out[rows, chosen] = kept * factor
    return out.reshape(x.shape).astype(x.dtype)


def moe_dispatch(x, gates, *, topk):
    _, slot = _route(gates, topk)
    out = np.empty((x.shape[0] * topk, x.shape[1]), dtype=x.dtype)
    out[slot.reshape(-1)] = np.repeat(x, topk, axis=0)
    return out


def grouped_matmul(x, gates, w):
    k = x.shape[0] // gates.shape[0]
    chosen, slot = _route(gates, k)
    out = np.empty((x.shape[0], w.shape[2]), dtype=x.dtype)
    for r, e in zip(slot.reshape(-1), chosen.reshape(-1)):
        out[r] = x[r].astype(np.float64) @ w[e].astype(np.float64)
    return out


def moe_combine(y, gates):
    k = y.shape[0] // gates.shape[0]
    chosen, slot = _route(gates, k)
    g = np.take_along_axis(gates.astype(np.float64), chosen, axis=1)  # [T, k]
    return np.einsum("tk,tkh->th", g, y.astype(np.float64)[slot]).astype(y.dtype)


def mla_attention(q, kv, kr, *, heads, seq, causal, fused, base):
    t, dr = kr.shape
    dq = q.shape[1] // heads
    dn = dq - dr
    dv = kv.shape[1] // heads - dn
    pos = (np.arange(t) % seq)[:, None]
    theta = pos * base ** (-2.0 * np.arange(dr // 2) / dr)
    cos, sin = np.cos(theta), np.sin(theta)  # [T, dr/2]

    def turn(m):  # [T, ..., dr], the half-split pairing of rotary
        c = cos.reshape(t, *([1] * (m.ndim - 2)), dr // 2)
        s = sin.reshape(c.shape)
        a, b = m[..., :dr // 2], m[..., dr // 2:]
        return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)

    q3 = q.astype(np.float64).reshape(t, heads, dq)
    kv3 = kv.astype(np.float64).reshape(t, heads, dn + dv)
    qh = np.concatenate([q3[..., :dn], turn(q3[..., dn:])], axis=-1)
    shared = np.broadcast_to(turn(kr.astype(np.float64))[:, None, :], (t, heads, dr))
    kh = np.concatenate([kv3[..., :dn], shared], axis=-1)
    vh = kv3[..., dn:]

    def split(m):  # [T, heads, d] -> [B, heads, S, d]
        return m.reshape(t // seq, seq, heads, m.shape[-1]).transpose(0, 2, 1, 3)

    scores = split(qh) @ split(kh).transpose(0, 1, 3, 2) / np.sqrt(dq)
    if causal:
        scores = np.where(np.triu(np.ones((seq, seq), dtype=bool), 1), -np.inf, scores)
    p = softmax(scores, axis=-1)
    return np.ascontiguousarray((p @ split(vh)).transpose(0, 2, 1, 3).reshape(t, heads * dv)).astype(q.dtype)

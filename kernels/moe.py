"""Kernels of the mixture-of-experts ops (docs/ops.md, "Mixture of experts") and of multi-head
latent attention.

Every op that reads ``gates[T, E]`` routes the same way (:func:`route`): a token's experts are
the ``K`` largest entries of its row (ties to the lower index), and the dispatched rows are the
(token, expert) pairs ordered by expert, then token (the permutation of MegaBlocks, Gale et al.,
MLSys 2023, and of Megatron-Core's token dispatcher). Routing is one Numba loop; each expert's
GEMM is a BLAS call through NumPy, as :mod:`mapper.kernels.linalg` runs matmul.
"""

from __future__ import annotations

import numpy as np

from mapper.kernels._jit import jit, prange, readonly


@jit()
def _route(gates, k, chosen, slot, offsets):
    t_, e_ = gates.shape
    for t in range(t_):
        for j in range(k):
            best = -1
            for e in range(e_):
                taken = False
                for i in range(j):
                    if chosen[t, i] == e:
                        taken = True
                        break
                if not taken and (best < 0 or gates[t, e] > gates[t, best]):
                    best = e
            chosen[t, j] = best
            offsets[best + 1] += 1
    for e in range(e_):
        offsets[e + 1] += offsets[e]
    fill = offsets[:-1].copy()
    for t in range(t_):  # ascending tokens: within an expert, rows follow the tokens
        for j in range(k):
            e = chosen[t, j]
            slot[t, j] = fill[e]
            fill[e] += 1


def route(gates: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(chosen[T, k], slot[T, k], offsets[E + 1])``: each token's experts, the dispatched row
    of each (token, expert) pair, and where each expert's rows begin."""
    t, e = gates.shape
    chosen = np.empty((t, k), dtype=np.int64)
    slot = np.empty((t, k), dtype=np.int64)
    offsets = np.zeros(e + 1, dtype=np.int64)
    if t and k:
        _route(readonly(gates), k, chosen, slot, offsets)
    return chosen, slot, offsets


@jit(parallel=True)
def _topk_rows(x, out, k, norm, scale):
    e_ = x.shape[1]
    for r in prange(x.shape[0]):
        for e in range(e_):
            out[r, e] = 0.0
        total = 0.0
        for _ in range(k):
            best = -1
            for e in range(e_):
                if out[r, e] == 0.0 and (best < 0 or x[r, e] > x[r, best]):
                    best = e
            out[r, best] = 1.0  # marks the entry as taken; its value is written below
            total += float(x[r, best])
        factor = scale / total if norm else scale
        for e in range(e_):
            if out[r, e] != 0.0:
                out[r, e] = x[r, e] * factor


def topk(x: np.ndarray, *, k: int, norm: bool, scale: float) -> np.ndarray:
    """The ``k`` largest entries of each row of ``x`` kept (times ``scale``, over their sum when
    ``norm``), the others 0."""
    e = x.shape[-1]
    out = np.empty_like(x)
    if out.size:
        _topk_rows(readonly(x).reshape(-1, e), out.reshape(-1, e), k, bool(norm), float(scale))
    return out


@jit(parallel=True)
def _gather_rows(x, slot, out):
    for t in prange(slot.shape[0]):
        for j in range(slot.shape[1]):
            out[slot[t, j], :] = x[t, :]


def moe_dispatch(x: np.ndarray, gates: np.ndarray, *, topk: int) -> np.ndarray:
    """Each token's row once per expert it is routed to, in :func:`route`'s order."""
    _, slot, _ = route(gates, topk)
    out = np.empty((x.shape[0] * topk, x.shape[1]), dtype=x.dtype)
    if out.size:
        _gather_rows(readonly(x), slot, out)
    return out


def grouped_matmul(x: np.ndarray, gates: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``out[rows of e] = x[rows of e] @ w[e]`` for every expert ``e``."""
    _, _, offsets = route(gates, x.shape[0] // gates.shape[0])
    out = np.empty((x.shape[0], w.shape[2]), dtype=np.result_type(x, w))
    for e in range(w.shape[0]):
        a, b = offsets[e], offsets[e + 1]
        if b > a:
            np.matmul(x[a:b], w[e], out=out[a:b])
    return out


@jit(parallel=True)
def _combine_rows(y, gates, chosen, slot, out):
    for t in prange(out.shape[0]):
        for c in range(out.shape[1]):
            s = 0.0
            for j in range(chosen.shape[1]):
                s += float(gates[t, chosen[t, j]]) * float(y[slot[t, j], c])
            out[t, c] = s


def moe_combine(y: np.ndarray, gates: np.ndarray) -> np.ndarray:
    """``out[t] = sum over t's experts e of gates[t, e] * y[row of (t, e)]``."""
    chosen, slot, _ = route(gates, y.shape[0] // gates.shape[0])
    out = np.empty((gates.shape[0], y.shape[1]), dtype=y.dtype)
    if out.size:
        _combine_rows(readonly(y), readonly(gates), chosen, slot, out)
    return out


def mla_attention(q: np.ndarray, kv: np.ndarray, kr: np.ndarray, *, heads: int, seq: int, causal: bool,
                  fused: bool, base: float) -> np.ndarray:
    """Multi-head latent attention's core: the rotary columns of the query heads and the shared
    key turned by position (:func:`mapper.kernels.llm.rotary`'s pairing), each head's key
    ``[k_nope | kr]``, then :func:`mapper.kernels.attention.attention` with the heads padded
    with zero columns to one width (the padding's output columns are dropped)."""
    from mapper.kernels.attention import attention
    from mapper.kernels.llm import _rotary

    t, dr = kr.shape
    dq = q.shape[1] // heads
    dn = dq - dr
    dv = kv.shape[1] // heads - dn
    q3 = q.reshape(t, heads, dq)
    ropes = np.ascontiguousarray(np.concatenate([q3[:, :, dn:].reshape(t, heads * dr), kr], axis=1))
    turned = np.empty_like(ropes)
    if ropes.size:  # the heads' rotary columns and the shared key, dr wide each
        _rotary(readonly(ropes), turned, np.arange(heads + 1, dtype=np.int64) * dr, seq, dr // 2, float(base))
    qr = np.concatenate([q3[:, :, :dn], turned[:, :heads * dr].reshape(t, heads, dr)], axis=2)
    kv3 = kv.reshape(t, heads, dn + dv)
    shared = np.broadcast_to(turned[:, heads * dr:].reshape(t, 1, dr), (t, heads, dr))
    k = np.concatenate([kv3[:, :, :dn], shared], axis=2)
    w = max(dq, dv)  # one head width for the kernel: zero columns change no score nor output
    qp, kp, vp = (np.zeros((t, heads, w), dtype=q.dtype) for _ in range(3))
    qp[:, :, :dq] = qr * q.dtype.type(np.sqrt(w / dq))  # the kernel scales by 1/sqrt(w): keep 1/sqrt(dq)
    kp[:, :, :dq] = k
    vp[:, :, :dv] = kv3[:, :, dn:]
    out = attention(qp.reshape(t, heads * w), kp.reshape(t, heads * w), vp.reshape(t, heads * w), heads=heads,
                    seq=seq, causal=causal, fused=fused)
    return np.ascontiguousarray(out.reshape(t, heads, w)[:, :, :dv].reshape(t, heads * dv))

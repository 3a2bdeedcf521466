"""Scaled dot-product multi-head attention (Vaswani et al., "Attention Is
All You Need", NeurIPS 2017).

Rows of ``q``, ``k``, ``v`` ``[T, D]`` are ``T = batch * seq`` tokens, batch
major; head ``h`` owns columns ``h*D/heads .. (h+1)*D/heads``. ``qkv[T, 3D]``
holds q, k, v side by side. ``causal`` masks keys after the query. Two
paths:

- ``"blas"`` (the default once a unit has :data:`BLAS_MIN_MACS` multiply-adds
  per GEMM): a sequence's heads in groups (:func:`work_items`), each group
  by batched BLAS GEMMs on strided views of the operands (``np.matmul``, no
  copies): the scores ``Q_h K_h^T`` of a block of query rows, a Numba pass
  that turns each score row into its softmax in place (stable: the row's
  maximum subtracted; float64 normaliser; float32 exponentials without a
  libm call, :mod:`mapper.kernels.approx`; masked keys set to 0), then
  ``P V_h`` straight into the output's columns. A score block holds at most
  :data:`SCORE_BLOCK_BYTES` (:func:`score_block`: whole sequences of as many
  heads as fit, else rows of one head; GPT-2's causal attention ran 2x
  slower on 16 MiB blocks of six heads than on one head's 4 MiB); a causal
  block's GEMMs stop at its last query's key. The groups are dealt to as
  many workers as Numba has threads (the calling thread and a shared pool
  of Python threads: BLAS and the Numba pass release the GIL), each with its
  own scratch, allocated by the caller, where the BLAS pool has one thread,
  as the executor keeps it; with a larger BLAS pool the calling thread does
  all and BLAS's threads share its GEMMs (BLAS's threads on top of the
  workers made GPT-2's causal attention 2.1x slower on 2 cores). A causal
  call computes whole score blocks and masks them: it takes about 0.85-0.9
  of an unmasked call's time, where the direct path's takes 0.57.
- ``"direct"``: Numba, parallel over (sequence, head) units, no BLAS: each
  unit works on contiguous copies of its slices (K transposed), each
  query's scores accumulate over the head dimension with a vectorisable
  loop over the keys (only those up to the query when causal), then the
  softmax and the weighted sum of value rows. It serves small units, where
  the BLAS path's calls cost more than they save.

Measured on one thread against the direct path, side by side: BERT-base's
8 x 128-token attention 2.2-2.7x faster, GPT-2's causal 4 x 256-token one
1.9-2.0x, a 1024-token causal one 1.7-1.9x (docs/benchmarks.md).
"""

from __future__ import annotations

import math
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from mapper.kernels._jit import jit, num_threads, prange, readonly
from mapper.kernels.approx import row_max, scaled_exp_sum
from mapper.kernels.blas import blas_threads
from mapper.kernels.linalg import BLAS_MIN_MACS

#: Bytes of scores one worker holds at a time (a block of score rows).
SCORE_BLOCK_BYTES = 4 * 2**20


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
            m = row_max(p, end)
            total = scaled_exp_sum(p, e, end, m, scale, bits)
            acc[:] = 0
            for j in range(end):
                w = e[j]
                for c in range(dh):
                    acc[c] += w * vb[j, c]
            inv = 1.0 / total
            for c in range(dh):
                out[r0 + i, c0 + c] = acc[c] * inv


@jit()
def _softmax_scores(s, first, causal, scale, e, bits):
    """Each row ``s[g, r]`` (the scores of query ``first + r`` of head ``g``)
    replaced by ``softmax(scale * row)``; when ``causal``, over the keys up
    to the query, the later ones set to 0. ``e`` and ``bits``: scratch of a
    row."""
    heads, rows, n = s.shape
    for g in range(heads):
        for r in range(rows):
            end = min(first + r + 1, n) if causal else n
            row = s[g, r]
            m = row_max(row, end)
            total = scaled_exp_sum(row, e, end, m, scale, bits)
            inv = 1.0 / total
            for j in range(end):
                row[j] = e[j] * inv
            for j in range(end, n):
                row[j] = 0.0


def _heads_view(m: np.ndarray, seq: int, heads: int) -> np.ndarray:
    """``m[T, D]`` as ``[T / seq, heads, seq, D / heads]``, a view."""
    t, d = m.shape
    return m.reshape(t // seq, seq, heads, d // heads).transpose(0, 2, 1, 3)


def _blas_items(q4, k4, v4, o4, causal, items, scores, e, bits):
    """The BLAS path for ``items``, ``(sequence, first head, end head)`` each,
    with one worker's scratch (``scores[heads, rows, seq]``: a block of
    score rows of up to that many heads): per block, a batched GEMM for the
    scores, the softmax, a second batched GEMM into ``o4``."""
    seq, dh = q4.shape[2], q4.shape[3]
    scale = 1.0 / math.sqrt(dh)
    group, block = scores.shape[0], scores.shape[1]
    for b, h0, h1 in items:
        for g0 in range(h0, h1, group):
            g1 = min(h1, g0 + group)
            qh, kh, vh, oh = (m[b, g0:g1] for m in (q4, k4, v4, o4))  # [heads, seq, dh]
            for i0 in range(0, seq, block):
                i1 = min(seq, i0 + block)
                keys = i1 if causal else seq
                s = scores[:g1 - g0, :i1 - i0, :keys]
                np.matmul(qh[:, i0:i1], kh[:, :keys].transpose(0, 2, 1), out=s)
                _softmax_scores(s, i0, causal, scale, e, bits)
                np.matmul(s, vh[:, :keys], out=oh[:, i0:i1])


def score_block(heads: int, seq: int, itemsize: int) -> tuple[int, int]:
    """``(heads, rows)`` of a worker's score block: all ``heads`` of whole
    sequences while they fit :data:`SCORE_BLOCK_BYTES`, else fewer heads,
    else one head's rows in blocks."""
    per_head = seq * seq * itemsize
    if per_head <= SCORE_BLOCK_BYTES:
        return max(1, min(heads, SCORE_BLOCK_BYTES // per_head)), seq
    return 1, max(1, SCORE_BLOCK_BYTES // (seq * itemsize))


def work_items(sequences: int, heads: int, workers: int) -> list[list[tuple[int, int, int]]]:
    """Each worker's share of the ``(sequence, first head, end head)`` items,
    dealt out in order: each sequence's heads cut into the fewest groups
    that give every worker the same number of items (each item costs a few
    Python calls beside its GEMMs: BERT-base's one 128-token sequence took
    1.25-1.37 ms on 2 threads cut into eight items, 1.10-1.27 ms into two),
    else into as many as give each worker about four items."""
    sequences = max(sequences, 1)
    even = [s for s in range(-(-workers // sequences), heads + 1) if sequences * s % workers == 0]
    split = even[0] if even else max(1, min(heads, -(-4 * workers // sequences)))
    items = [(b, g * heads // split, (g + 1) * heads // split) for b in range(sequences) for g in range(split)]
    return [items[w * len(items) // workers:(w + 1) * len(items) // workers] for w in range(workers)]


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """The worker threads of the BLAS path, started on first use."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="mapper-attention")
        return _POOL


def _attention_blas(q, k, v, out, heads, seq, causal):
    q4, k4, v4, o4 = (_heads_view(m, seq, heads) for m in (q, k, v, out))
    sequences = q.shape[0] // seq
    blas = blas_threads()
    workers = 1 if blas is not None and blas > 1 else min(num_threads(), sequences * heads)
    shares = [w for w in work_items(sequences, heads, workers) if w]
    group, block = score_block(max(h1 - h0 for w in shares for _, h0, h1 in w), seq, q.itemsize)
    scratch = [(np.empty((group, block, seq), dtype=q.dtype), np.empty(seq, dtype=q.dtype),
                np.empty(seq, dtype=np.int32)) for _ in shares]
    futures: list[Future] = [_pool().submit(_blas_items, q4, k4, v4, o4, causal, share, *scr)
                             for share, scr in zip(shares[1:], scratch[1:])]
    try:
        _blas_items(q4, k4, v4, o4, causal, shares[0], *scratch[0])
    finally:
        for f in futures:
            f.result()


def attention(*xs: np.ndarray, heads: int, seq: int, causal: bool, kv_heads: int | None = None,
              fused: bool = True, method: str | None = None) -> np.ndarray:
    """Attention of one ``qkv[T, 3D]`` or of ``q, k, v [T, D]``; grouped-query operands
    (``kv_heads``) have their key and value heads repeated first
    (:func:`mapper.kernels.llm.expand_kv`); ``fused`` changes the cost, not the result;
    ``method`` "blas" or "direct" forces a path."""
    if kv_heads and kv_heads != heads:
        from mapper.kernels.llm import expand_kv

        xs = expand_kv(xs, heads, kv_heads)
    if len(xs) == 1:
        d = xs[0].shape[1] // 3
        q, k, v = (xs[0][:, i * d:(i + 1) * d] for i in range(3))
    else:
        q, k, v = xs
    dh = q.shape[1] // heads if heads else 0
    if method is None:
        method = "blas" if q.dtype.kind == "f" and seq * seq * dh >= BLAS_MIN_MACS else "direct"
    out = np.empty(q.shape, dtype=q.dtype)
    if out.size == 0:
        return out
    if method == "blas":
        _attention_blas(q, k, v, out, heads, seq, bool(causal))
    else:
        q, k, v = (readonly(m) for m in (q, k, v))
        _attention(q, k, v, out, heads, seq, causal)
    return out

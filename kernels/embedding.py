"""Embedding lookup ``table[ids]`` (Numba gather, parallel over ids)."""

from __future__ import annotations

import numpy as np

from mapper.kernels._jit import jit, prange, readonly


@jit(parallel=True)
def _gather(ids, table, out):
    for i in prange(ids.shape[0]):
        row = ids[i]
        for j in range(table.shape[1]):
            out[i, j] = table[row, j]


def embedding(ids: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Rows of ``table[V, D]`` at ``ids[...]`` (checked in range): ``[..., D]``."""
    flat = readonly(ids, np.int64).reshape(-1)
    out = np.empty((flat.shape[0], table.shape[1]), dtype=table.dtype)
    if out.size:
        _gather(flat, readonly(table), out)
    return out.reshape(ids.shape + (table.shape[1],))


@jit(parallel=True)
def _bag(ids, table, pooling, mode, out):
    for b in prange(out.shape[0]):
        for j in range(table.shape[1]):
            acc = table[ids[b * pooling], j]
            for p in range(1, pooling):
                v = table[ids[b * pooling + p], j]
                if mode == 2:
                    acc = max(acc, v)
                else:
                    acc += v
            out[b, j] = acc / pooling if mode == 1 else acc


#: Mode codes of the bag kernel.
_MODES = {"sum": 0, "mean": 1, "max": 2}


def embedding_bag(ids: np.ndarray, table: np.ndarray, *, pooling: int, mode: str = "sum",
                  cache_hit: float = 1.0) -> np.ndarray:
    """Bags of ``pooling`` rows of ``table[V, D]`` at ``ids`` (bag-major), combined by ``mode``:
    ``[ids.size / pooling, D]``. ``cache_hit`` prices where the rows live, not what they hold."""
    del cache_hit
    flat = readonly(ids, np.int64).reshape(-1)
    out = np.empty((flat.shape[0] // pooling, table.shape[1]), dtype=table.dtype)
    if out.size:
        _bag(flat, readonly(table), pooling, _MODES[mode], out)
    return out

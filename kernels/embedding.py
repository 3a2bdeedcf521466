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

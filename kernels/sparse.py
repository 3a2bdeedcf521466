"""Sparse matrix-vector product ``y = A x`` for CSR ``A`` (Numba, parallel over rows)."""

from __future__ import annotations

import numpy as np

from mapper.kernels._jit import jit, prange, readonly
from mapper.kernels.csr import Csr


@jit(parallel=True)
def _spmv(indptr, indices, data, x, out):
    for i in prange(out.shape[0]):
        acc = out[i]
        for p in range(indptr[i], indptr[i + 1]):
            acc += data[p] * x[indices[p]]
        out[i] = acc


def spmv(a: Csr, x: np.ndarray) -> np.ndarray:
    out = np.zeros(a.shape[0], dtype=x.dtype)
    if out.size:
        _spmv(readonly(a.indptr, np.int32), readonly(a.indices, np.int32), readonly(a.data), readonly(x), out)
    return out

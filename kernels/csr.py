"""The CSR sparse-matrix operand and its structural checks (NumPy only)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from mapper.errors import InputError


class Csr(NamedTuple):
    """A compressed-sparse-row matrix.

    ``indptr`` (int32, length M + 1, non-decreasing, from 0 to nnz),
    ``indices`` (int32 column of each stored value, in ``[0, N)``), ``data``
    (the values) and ``shape`` ``(M, N)``.
    """

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    shape: tuple[int, int]

    @property
    def nnz(self) -> int:
        return int(self.data.shape[0])

    def to_dense(self) -> np.ndarray:
        """The dense matrix (duplicate entries add up)."""
        m, n = self.shape
        out = np.zeros((m, n), dtype=self.data.dtype)
        rows = np.repeat(np.arange(m), np.diff(self.indptr))
        np.add.at(out, (rows, self.indices), self.data)
        return out


def check_csr(a: object, op: str) -> Csr:
    """``a`` as a :class:`Csr` after checking its structure; :class:`InputError` if broken."""
    if not isinstance(a, Csr):
        raise InputError(f"{op}: operand A must be a Csr matrix, got {type(a).__name__}", obj=op)
    m, n = (int(d) for d in a.shape)
    ip, ix, data = np.asarray(a.indptr), np.asarray(a.indices), np.asarray(a.data)
    problem = None
    if ip.ndim != 1 or ip.shape[0] != m + 1:
        problem = f"indptr has shape {ip.shape}, expected ({m + 1},)"
    elif ix.ndim != 1 or data.ndim != 1 or ix.shape != data.shape:
        problem = f"indices {ix.shape} and data {data.shape} must be 1-D of the same length"
    elif ip.dtype.kind not in "iu" or ix.dtype.kind not in "iu":
        problem = "indptr and indices must be integer arrays"
    elif ip[0] != 0 or ip[-1] != data.shape[0] or (m and np.any(np.diff(ip) < 0)):
        problem = "indptr must rise from 0 to nnz"
    elif ix.size and (ix.min() < 0 or ix.max() >= n):
        problem = f"column indices must lie in [0, {n})"
    if problem:
        raise InputError(f"{op}: malformed csr matrix {m}x{n}: {problem}", obj=op)
    return Csr(ip.astype(np.int32, copy=False), ix.astype(np.int32, copy=False), data, (m, n))

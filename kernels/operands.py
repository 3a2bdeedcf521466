"""Seeded operand generators, so every caller builds the same inputs.

The executor and the tests make inputs here: the same dtype, shape and
generator state give the same values on every machine.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mapper.errors import InputError
from mapper.kernels.csr import Csr
from mapper.kernels.dtypes import dsl_name, numpy_dtype, round_bf16


def make_tensor(dtype: str, shape: Sequence[int], rng: np.random.Generator, *,
                positive: bool = False) -> np.ndarray:
    """A tensor of ``dtype`` (DSL name) and ``shape`` drawn from ``rng``.

    Floats: standard normal (``positive``: uniform in [0.5, 2)); complex: the
    same for the real and imaginary parts; integers: uniform in [-8, 8)
    (``positive``: [1, 8)); bool: fair coin. ``bf16`` values are rounded to
    bf16 precision and stored as float32.
    """
    name = dsl_name(dtype)
    shape = tuple(int(d) for d in shape)
    kind = numpy_dtype(name).kind
    if kind == "b":
        return rng.random(shape) < 0.5
    if kind == "i":
        lo = 1 if positive else -8
        return rng.integers(lo, 8, size=shape, dtype=numpy_dtype(name))

    def real() -> np.ndarray:
        return rng.uniform(0.5, 2.0, size=shape) if positive else rng.standard_normal(shape)

    if kind == "c":
        re = real()
        return (re + 1j * real()).astype(numpy_dtype(name))
    values = real().astype(np.float32 if name == "bf16" else numpy_dtype(name))
    return round_bf16(values) if name == "bf16" else values


def make_ids(shape: Sequence[int], vocab: int, rng: np.random.Generator, dtype: str = "i64") -> np.ndarray:
    """Embedding ids of ``dtype`` (``i32`` or ``i64``), uniform in ``[0, vocab)``."""
    if vocab < 1:
        raise InputError(f"embedding vocabulary must have at least one row, got {vocab}", obj="embedding")
    np_dtype = numpy_dtype(dtype)
    if np_dtype.kind != "i":
        raise InputError(f"embedding ids must be i32 or i64, got {dtype}", obj="embedding")
    return rng.integers(0, vocab, size=tuple(int(d) for d in shape), dtype=np_dtype)


def make_csr(shape: Sequence[int], nnz: int, dtype: str, rng: np.random.Generator) -> Csr:
    """A random ``M x N`` CSR matrix with exactly ``nnz`` distinct entries.

    Each row gets ``nnz // M`` entries, and ``nnz % M`` randomly chosen rows
    one more; columns are distinct within a row and sorted. Values as
    :func:`make_tensor`.
    """
    m, n = (int(d) for d in shape)
    if nnz < 0 or nnz > m * n or (nnz and n == 0):
        raise InputError(f"cannot place nnz = {nnz} entries in a {m}x{n} matrix", obj="csr")
    per_row = np.full(m, nnz // m if m else 0, dtype=np.int64)
    if m:
        per_row[rng.permutation(m)[: nnz % m]] += 1
    indptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(per_row, out=indptr[1:])
    rows = np.repeat(np.arange(m), per_row)
    cols = _distinct_columns(rows, per_row, indptr, n, rng)
    data = make_tensor(dtype, (nnz,), rng)
    return Csr(indptr.astype(np.int32), cols.astype(np.int32), data, (m, n))


def _distinct_columns(rows: np.ndarray, per_row: np.ndarray, indptr: np.ndarray, n: int,
                      rng: np.random.Generator) -> np.ndarray:
    """Sorted distinct columns for each row, drawn without replacement."""
    nnz = rows.shape[0]
    if nnz == 0:
        return np.zeros(0, dtype=np.int64)
    dense_rows = per_row * 4 > n  # nearly full rows: a permutation per row
    cols = np.empty(nnz, dtype=np.int64)
    for r in np.flatnonzero(dense_rows):
        lo, hi = indptr[r], indptr[r + 1]
        cols[lo:hi] = np.sort(rng.permutation(n)[: hi - lo])
    sparse = ~dense_rows[rows]
    todo = np.flatnonzero(sparse)
    while todo.size:  # redraw columns that collide within their row
        cols[todo] = rng.integers(0, n, size=todo.size)
        key = rows * n + cols
        order = np.lexsort((cols, rows))
        dup = np.zeros(nnz, dtype=bool)
        dup[order[1:]] = key[order[1:]] == key[order[:-1]]
        todo = np.flatnonzero(dup & sparse)
    order = np.lexsort((cols, rows))
    return cols[order]


def random_operand(ty, rng: np.random.Generator, *, vocab: int | None = None) -> np.ndarray | Csr:
    """A random value for a :class:`mapper.core.graph.TensorType`-like ``ty`` (``dtype``,
    ``shape``, ``layout``, ``nnz``): a CSR matrix, embedding ids (when ``vocab``
    is given), or a dense tensor."""
    if getattr(ty, "layout", "dense") == "csr":
        return make_csr(ty.shape, ty.nnz or 0, ty.dtype, rng)
    if vocab is not None:
        return make_ids(ty.shape, vocab, rng, ty.dtype)
    return make_tensor(ty.dtype, ty.shape, rng)

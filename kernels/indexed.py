"""Gathers and scatters by index, as ONNX defines them (GatherND, ScatterElements; Numba).

Indices are checked in range by :func:`mapper.kernels.spec.prepare`; a negative one counts
from the end of its axis. gather_nd runs in parallel over the index tuples; scatter_elements
copies ``data`` and then visits the updates in row-major order on one thread, so that
repeated indices combine (or, without a reduction, the last one wins) exactly as the
NumPy reference does.
"""

from __future__ import annotations

import numpy as np

from mapper.kernels._jit import jit, prange, readonly


@jit(parallel=True)
def _gather_tuples(data, idx, dims, out):
    """``out[b, t] = data[b, flat(idx[b, t])]`` for ``data[B, P, S]``, ``idx[B, T, k]``."""
    k = idx.shape[2]
    for u in prange(idx.shape[0] * idx.shape[1]):
        b = u // idx.shape[1]
        t = u % idx.shape[1]
        row = 0
        for j in range(k):
            v = idx[b, t, j]
            row = row * dims[j] + (v + dims[j] if v < 0 else v)
        for s in range(data.shape[2]):
            out[b, t, s] = data[b, row, s]


def gather_nd(data: np.ndarray, indices: np.ndarray, *, batch_dims: int) -> np.ndarray:
    """``data[batch..., indices[batch..., t, :], ...]`` (ONNX GatherND)."""
    k = indices.shape[-1]
    lead, picked = data.shape[:batch_dims], data.shape[batch_dims:batch_dims + k]
    rest = data.shape[batch_dims + k:]
    nb, slice_ = int(np.prod(lead, dtype=np.int64)), int(np.prod(rest, dtype=np.int64))
    d3 = readonly(data).reshape(nb, int(np.prod(picked, dtype=np.int64)), slice_)
    i3 = readonly(indices, np.int64).reshape(nb, -1, k)
    out = np.empty((nb, i3.shape[1], slice_), dtype=data.dtype)
    if out.size:
        _gather_tuples(d3, i3, np.asarray(picked, dtype=np.int64), out)
    return out.reshape(indices.shape[:-1] + rest)


#: ``scatter_elements`` reductions, as the kernel numbers them.
REDUCTIONS = {"none": 0, "add": 1, "mul": 2, "max": 3, "min": 4}


@jit()
def _scatter(flat, dshape, idx, upd, ishape, axis, mode):
    """Each ``upd[p]`` into ``flat`` (the copied data, row-major ``dshape``) at the position of
    ``p`` in the indices' shape ``ishape`` with coordinate ``axis`` replaced by ``idx[p]``."""
    rank = dshape.shape[0]
    for p in range(idx.shape[0]):
        rem = p
        target = 0
        stride = 1
        for a in range(rank - 1, -1, -1):
            coord = rem % ishape[a]
            rem //= ishape[a]
            if a == axis:
                coord = idx[p] + dshape[a] if idx[p] < 0 else idx[p]
            target += coord * stride
            stride *= dshape[a]
        v = upd[p]
        if mode == 0:
            flat[target] = v
        elif mode == 1:
            flat[target] += v
        elif mode == 2:
            flat[target] *= v
        elif mode == 3:
            flat[target] = max(flat[target], v)
        else:
            flat[target] = min(flat[target], v)


def scatter_elements(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, axis: int,
                     reduction: str) -> np.ndarray:
    """A copy of ``data`` with ``updates`` written (or combined by ``reduction``) at ``indices``
    along ``axis`` (ONNX ScatterElements)."""
    out = np.array(data, order="C", copy=True)
    if indices.size:
        _scatter(out.reshape(-1), np.asarray(data.shape, dtype=np.int64), readonly(indices, np.int64).reshape(-1),
                 readonly(updates).reshape(-1), np.asarray(indices.shape, dtype=np.int64), axis,
                 REDUCTIONS[reduction])
    return out

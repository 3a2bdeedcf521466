"""Strided walks: the loop nest behind copies, transposes and broadcasting.

Arrays of one (broadcast) shape are coalesced: size-1 axes are dropped and
neighbouring axes merged wherever every array is contiguous across them. What
remains is walked as at most 4 axes over flat 1-D views of the arrays'
memory with element strides, so one compiled loop per dtype serves any rank,
layout and broadcast (ranks above 4 after merging loop over the leading axes
in Python). When the innermost stride of every array is 1 the inner loop is
a plain contiguous loop that vectorises.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from numpy.lib.stride_tricks import as_strided

from mapper.kernels._jit import chunks, jit, prange, span, split_index


def _flat(v: np.ndarray, writeable: bool) -> tuple[np.ndarray, list[int]]:
    """A 1-D view from ``v``'s first element covering all of it, and its element strides."""
    item = v.itemsize
    if any(s < 0 or s % item for s in v.strides):
        v = np.ascontiguousarray(v)
    strides = [s // item for s in v.strides]
    extent = 1 + sum((n - 1) * s for n, s in zip(v.shape, strides))
    return as_strided(v, shape=(extent,), strides=(item,), writeable=writeable), strides


def walk(out: np.ndarray, *srcs: np.ndarray) -> Iterator[tuple]:
    """Yield ``(shape4, nchunk, out_flat, out_off, out_strides4, src_flat, src_off, src_strides4, ...)``
    covering ``out`` and the sources (each of ``out``'s shape, e.g. ``np.broadcast_to``
    views; any strides). Sources are read-only views; nothing is copied."""
    if out.size == 0:
        return
    flats = [_flat(out, True)] + [_flat(s, False) for s in srcs]
    dims: list[tuple[int, list[int]]] = []
    for i, n in enumerate(out.shape):
        if n == 1:
            continue
        st = [f[1][i] for f in flats]
        if dims and all(ps == s * n for ps, s in zip(dims[-1][1], st)):
            dims[-1] = (dims[-1][0] * n, st)
        else:
            dims.append((n, st))
    while len(dims) < 4:
        dims.insert(0, (1, [0] * len(flats)))
    lead, inner = dims[:-4], dims[-4:]
    shape4 = tuple(n for n, _ in inner)
    nchunk = chunks(shape4[0] * shape4[1] * shape4[2], shape4[3])
    st4 = [tuple(st[k] for _, st in inner) for k in range(len(flats))]
    for idx in np.ndindex(*(n for n, _ in lead)):
        offs = [sum(i * st[k] for i, (_, st) in zip(idx, lead)) for k in range(len(flats))]
        args: list = [shape4, nchunk]
        for k, (flat, _) in enumerate(flats):
            args += [flat, offs[k], st4[k]]
        yield tuple(args)


@jit(parallel=True)
def _copy4(shape, nchunk, dst, doff, ds, src, soff, ss):
    n0, n1, n2, n3 = shape
    for t in prange(n0 * n1 * n2 * nchunk):
        i, j, k, c = split_index(t, nchunk, n1, n2)
        lo, hi = span(c, n3, nchunk)
        db = doff + i * ds[0] + j * ds[1] + k * ds[2]
        sb = soff + i * ss[0] + j * ss[1] + k * ss[2]
        if ds[3] == 1 and ss[3] == 1:
            for m in range(lo, hi):
                dst[db + m] = src[sb + m]
        else:
            for m in range(lo, hi):
                dst[db + m * ds[3]] = src[sb + m * ss[3]]


def copy_into(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` (same shape and dtype, any strides) with a parallel Numba loop."""
    for args in walk(dst, src):
        _copy4(*args)

"""Data-movement ops: transpose, concat, split (Numba strided copies) and
reshape (a NumPy view: no data moves)."""

from __future__ import annotations

import numpy as np

from mapper.kernels.strided import copy_into


def transpose(x: np.ndarray, *, perm: tuple[int, ...]) -> np.ndarray:
    out = np.empty(tuple(x.shape[p] for p in perm), dtype=x.dtype)
    copy_into(out, x.transpose(perm))
    return out


def concat(*xs: np.ndarray, axis: int) -> np.ndarray:
    shape = list(xs[0].shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    out = np.empty(tuple(shape), dtype=xs[0].dtype)
    at = 0
    for x in xs:
        index = (slice(None),) * axis + (slice(at, at + x.shape[axis]),)
        copy_into(out[index], x)
        at += x.shape[axis]
    return out


def split(x: np.ndarray, *, parts: int, index: int, axis: int) -> np.ndarray:
    size = x.shape[axis] // parts
    piece = x[(slice(None),) * axis + (slice(index * size, (index + 1) * size),)]
    out = np.empty(piece.shape, dtype=x.dtype)
    copy_into(out, piece)
    return out


def reshape(x: np.ndarray, *, shape: tuple[int, ...]) -> np.ndarray:
    if not x.flags.c_contiguous:
        flat = np.empty(x.shape, dtype=x.dtype)
        copy_into(flat, x)
        x = flat
    return x.reshape(shape)

"""Shared checks of kernel calls: the error a bad call raises and its attribute parsers
(:mod:`mapper.kernels.spec`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mapper.errors import InputError

REQUIRED = "<required>"


def fail(op: str, message: str, hint: str | None = None) -> InputError:
    return InputError(f"{op}: {message}", obj=op, hint=hint)


def _int(op: str, key: str, v: Any, low: int | None = None) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        if isinstance(v, (float, np.floating)) and float(v).is_integer():
            v = int(v)
        else:
            raise fail(op, f"{key} must be an integer, got {v!r}")
    if low is not None and v < low:
        raise fail(op, f"{key} must be >= {low}, got {v}")
    return int(v)


def _pair(op: str, key: str, v: Any, low: int) -> tuple[int, int]:
    if isinstance(v, (list, tuple)):
        if len(v) != 2:
            raise fail(op, f"{key} must be an integer or a pair [h, w], got {v!r}")
        return (_int(op, key, v[0], low), _int(op, key, v[1], low))
    x = _int(op, key, v, low)
    return (x, x)


def _float(op: str, key: str, v: Any) -> float:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise fail(op, f"{key} must be a number, got {v!r}")
    return float(v)


def _axis(op: str, key: str, v: Any, ndim: int) -> int:
    a = _int(op, key, v)
    if not -max(ndim, 1) <= a < max(ndim, 1):
        raise fail(op, f"{key} = {a} is out of range for a {ndim}-D tensor")
    return a % max(ndim, 1)


def _shape(x: np.ndarray) -> str:
    return "[" + ", ".join(str(d) for d in x.shape) + "]"


def _ndim(op: str, x: np.ndarray, what: str, dims: Sequence[int]) -> None:
    if x.ndim not in dims:
        raise fail(op, f"{what} must be {' or '.join(f'{d}-D' for d in dims)}, got {_shape(x)}")

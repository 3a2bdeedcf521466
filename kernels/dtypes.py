"""DSL dtypes as NumPy dtypes, and the tolerances results are compared with.

NumPy has no bfloat16: a ``bf16`` tensor is stored and computed as float32
(its values rounded to bf16 precision when generated, see
:func:`round_bf16`). ``f16`` tensors are stored as float16; every kernel
computes them in float32 and rounds the result to float16 (the NumPy
references do the same). No NumPy or Numba import of Numba happens here.
"""

from __future__ import annotations

import numpy as np

from mapper.errors import InputError

#: Storage dtype of every DSL dtype.
NUMPY_DTYPES: dict[str, np.dtype] = {
    "bool": np.dtype(np.bool_),
    "i8": np.dtype(np.int8),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(np.float32),  # no bf16 in NumPy: stored as float32
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "c64": np.dtype(np.complex64),
    "c128": np.dtype(np.complex128),
}

#: ``(rtol, atol)`` per dtype: a result ``r`` matches a reference ``e`` when
#: ``|r - e| <= atol + rtol * |e|`` elementwise, for data of magnitude about 1.
#:
#: - ``f16``: both paths compute in float32 and round to float16 once
#:   (half an ulp each, 2**-11 relative), plus float32 noise: 4e-3.
#: - ``bf16``: stored and computed as float32, but the bound is bf16's
#:   (8-bit significand, 2**-8), so it still holds if a result is rounded to bf16.
#: - ``f32``/``c64``: kernels sum in a different order than NumPy (blocked,
#:   vectorised, BLAS); with the short reductions of the tests and of the
#:   DNN ops the difference stays below 1e-4 relative.
#: - ``f64``/``c128``: the same at double precision.
#: - integers and bool: exact.
TOLERANCES: dict[str, tuple[float, float]] = {
    "f16": (4e-3, 4e-3),
    "bf16": (1e-2, 1e-2),
    "f32": (1e-4, 1e-4),
    "c64": (1e-4, 1e-4),
    "f64": (1e-10, 1e-10),
    "c128": (1e-10, 1e-10),
    "i8": (0.0, 0.0),
    "i32": (0.0, 0.0),
    "i64": (0.0, 0.0),
    "bool": (0.0, 0.0),
}

_BY_NUMPY = {"float16": "f16", "float32": "f32", "float64": "f64", "complex64": "c64",
             "complex128": "c128", "int8": "i8", "int32": "i32", "int64": "i64", "bool": "bool"}


def dsl_name(dtype: str | np.dtype | type) -> str:
    """The DSL name of ``dtype``: a DSL name itself or anything ``np.dtype`` takes."""
    if isinstance(dtype, str) and dtype in NUMPY_DTYPES:
        return dtype
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = str(dtype)
    if name not in _BY_NUMPY:
        raise InputError(f"unsupported dtype {dtype!r}", obj=str(dtype),
                         hint="one of " + ", ".join(NUMPY_DTYPES))
    return _BY_NUMPY[name]


def numpy_dtype(dtype: str | np.dtype | type) -> np.dtype:
    """The storage dtype of a DSL dtype (``bf16`` -> float32)."""
    return NUMPY_DTYPES[dsl_name(dtype)]


def tolerance(dtype: str | np.dtype | type) -> tuple[float, float]:
    """``(rtol, atol)`` for comparing results of ``dtype``; see :data:`TOLERANCES`."""
    return TOLERANCES[dsl_name(dtype)]


def round_bf16(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), as float32."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    bits = a.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(a), a, rounded)

"""Shape and work rules of the scientific ops: stencil, spmv, fft, dot,
axpy, reductions and elementwise functions (formulas in docs/ops.md)."""

from __future__ import annotations

import math
from math import prod

from mapper.core.opdefs.call import (
    COMPLEX_DTYPES,
    FLOAT_DTYPES,
    INEXACT_DTYPES,
    INT_DTYPES,
    NUMERIC_DTYPES,
    Call,
    OpInfo,
    dense,
)


def stencil(c: Call) -> OpInfo:
    """Jacobi averaging sweeps, fixed boundary: ``points`` flops per interior point per step."""
    (x,) = c.args
    c.dtypes(FLOAT_DTYPES, "a real floating-point tensor")
    c.ndim(0, (2, 3), "2-D [H, W] or 3-D [D, H, W]")
    pts, steps = c.attrs["points"], c.attrs["steps"]
    valid = (5, 9) if len(x.shape) == 2 else (7,)
    if pts not in valid:
        raise c.fail(f"points = {pts} is not valid for a {len(x.shape)}-D grid {x} "
                     f"(valid: {', '.join(map(str, valid))})", attr="points")
    interior = prod(d - 2 for d in x.shape) if min(x.shape) > 2 else 0
    flops = steps * pts * interior
    return c.info(dense(x.shape, x.dtype), flops, steps * x.nbytes, steps * x.nbytes)


def spmv(c: Call) -> OpInfo:
    """CSR sparse matrix times dense vector: ``2*nnz``."""
    a, x = c.args
    if a.layout != "csr":
        raise c.fail(f"A must be a csr matrix, got {a}", arg=0,
                     hint="declare it as e.g. f64[N, N] csr(nnz = 5*N)")
    c.dtypes(INEXACT_DTYPES, "a floating-point tensor")
    c.ndim(0, (2,), "2-D [M, N]")
    c.ndim(1, (1,), "1-D [N]")
    if a.nnz is None or not 0 <= a.nnz <= a.numel:
        raise c.fail(f"A's nnz must be between 0 and M*N = {a.numel}, got {a.nnz}", arg=0)
    if a.shape[1] != x.shape[0]:
        raise c.fail(f"inner dimensions differ: {c.desc(0)}, {c.desc(1)} "
                     f"({a.shape[1]} != {x.shape[0]})", arg=1)
    return c.info(dense((a.shape[0],), a.dtype), 2 * (a.nnz or 0))


def fft(c: Call) -> OpInfo:
    """1-D complex FFT along the last axis: ``5 N log2 N`` per transform
    (the radix-2 count of Cooley and Tukey, Math. Comp. 19(90), 1965)."""
    (x,) = c.args
    c.dtypes(COMPLEX_DTYPES, "a complex tensor (c64 or c128)")
    c.min_ndim(0, 1, "at least 1-D [..., N]")
    n = x.shape[-1]
    flops = 5 * n * math.log2(n) * (x.numel // n)
    return c.info(dense(x.shape, x.dtype), flops)


def dot(c: Call) -> OpInfo:
    """Unconjugated inner product: ``2*N``."""
    a, b = c.args
    c.dtypes(NUMERIC_DTYPES, "a numeric tensor")
    c.ndim(0, (1,), "1-D [N]")
    c.ndim(1, (1,), "1-D [N]")
    if a.shape != b.shape:
        raise c.fail(f"lengths differ: {c.desc(0)}, {c.desc(1)} ({a.shape[0]} != {b.shape[0]})", arg=1)
    return c.info(dense((), a.dtype), 2 * a.numel)


def axpy(c: Call) -> OpInfo:
    """``alpha*x + y`` or ``a*x + y`` with a scalar tensor ``a``: ``2*N``."""
    c.dtypes(NUMERIC_DTYPES, "a numeric tensor")
    if len(c.args) == 3:
        if c.attrs["alpha"] is not None:
            raise c.fail("alpha is only for the two-operand form axpy(x, y, alpha = ...); "
                         "here the scalar tensor a is the factor", attr="alpha")
        c.ndim(0, (0,), "a scalar tensor []")
    elif c.attrs["alpha"] is None:
        c.attrs["alpha"] = 1.0
    i = len(c.args) - 2
    c.ndim(i, (1,), "1-D [N]")
    c.ndim(i + 1, (1,), "1-D [N]")
    x, y = c.args[i:]
    if x.shape != y.shape:
        raise c.fail(f"lengths differ: {c.desc(i)}, {c.desc(i + 1)} ({x.shape[0]} != {y.shape[0]})",
                     arg=i + 1)
    return c.info(dense(y.shape, y.dtype), 2 * y.numel)


def reduce(c: Call) -> OpInfo:
    """sum, max or mean over all elements or one axis: 1 flop per input element (+1 per output for mean)."""
    (x,) = c.args
    kind = c.attrs["kind"]
    if kind == "max":
        c.dtypes(INT_DTYPES + FLOAT_DTYPES, "a real tensor (max has no order on complex)")
    else:
        c.dtypes(NUMERIC_DTYPES, "a numeric tensor")
    if c.attrs["axis"] is None:
        shape: tuple[int, ...] = ()
    else:
        ax = c.axis("axis", len(x.shape))
        shape = x.shape[:ax] + x.shape[ax + 1:]
    out = dense(shape, x.dtype)
    return c.info(out, x.numel + (out.numel if kind == "mean" else 0))


def cumsum(c: Call) -> OpInfo:
    """Running sum along ``axis`` (inclusive, or ``exclusive``; from the end with ``reverse``):
    one add per element, as :func:`reduce` counts a sum."""
    (x,) = c.args
    c.dtypes(NUMERIC_DTYPES, "a numeric tensor")
    c.min_ndim(0, 1, "at least 1-D")
    c.axis("axis", len(x.shape))
    return c.info(dense(x.shape, x.dtype), x.numel)


#: FLOPs per element of each ``elementwise`` function.
ELEMENTWISE_FLOPS: dict[str, int] = {
    "exp": 1, "log": 1, "sqrt": 1, "tanh": 1, "neg": 1, "abs": 1, "square": 1, "scale": 1,
    "sigmoid": 4,
    # x * min(max(x + 3, 0), 6) / 6 (Howard et al., "Searching for MobileNetV3", ICCV 2019)
    "hardswish": 5,
}


def elementwise(c: Call) -> OpInfo:
    """One unary function per element, :data:`ELEMENTWISE_FLOPS` flops each."""
    (x,) = c.args
    fn = c.attrs["fn"]
    if fn == "scale":
        if c.attrs["alpha"] is None:
            c.attrs["alpha"] = 1.0
    elif c.attrs["alpha"] is not None:
        raise c.fail(f'alpha is only for fn = "scale", not fn = "{fn}"', attr="alpha")
    if fn == "hardswish":
        c.dtypes(FLOAT_DTYPES, "a real floating-point tensor (hardswish compares)")
    else:
        c.dtypes(INEXACT_DTYPES, "a floating-point tensor")
    return c.info(dense(x.shape, x.dtype), ELEMENTWISE_FLOPS[fn] * x.numel)

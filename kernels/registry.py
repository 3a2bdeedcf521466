"""The kernel registry: what the executor calls.

``run_kernel(op, inputs, attrs)`` runs the Numba path, ``reference(op,
inputs, attrs)`` the NumPy-only path; both check the call first (see
:mod:`mapper.kernels.spec`) and return a new array (``reshape`` may return a
view of its input). :data:`KERNELS` says for every op how it is implemented.

Dtypes: ``f16`` operands are computed in float32 and the result rounded to
float16 (both paths); ``bf16`` tensors are float32 arrays (NumPy has no
bfloat16) and compute as float32. Importing this module imports Numba but
compiles nothing; each kernel compiles on its first call per dtype (cached
on disk, see :mod:`mapper.kernels._jit`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mapper.kernels import reference as ref
from mapper.kernels._jit import threads_for
from mapper.kernels.attention import attention
from mapper.kernels.binary import binary
from mapper.kernels.conv import conv2d, conv_transpose2d
from mapper.kernels.csr import Csr
from mapper.kernels.dtypes import numpy_dtype, round_bf16, tolerance
from mapper.kernels.elementwise import elementwise, gelu, relu
from mapper.kernels.embedding import embedding, embedding_bag
from mapper.kernels.fft import fft, ifft
from mapper.kernels.indexed import gather_nd, scatter_elements
from mapper.kernels.layout import concat, reshape, split, transpose
from mapper.kernels.linalg import axpy, dot, matmul
from mapper.kernels.llm import rmsnorm, rotary, swiglu
from mapper.kernels.moe import grouped_matmul, mla_attention, moe_combine, moe_dispatch, topk
from mapper.kernels.norm import batchnorm, instancenorm, layernorm, softmax
from mapper.kernels.operands import make_csr, make_ids, make_tensor, random_operand
from mapper.kernels.pool import avgpool, maxpool
from mapper.kernels.reduce import cumsum, reduce
from mapper.kernels.sparse import spmv
from mapper.kernels.spec import INEXACT, SPECS, TABLE_OPS, prepare
from mapper.kernels.stencil import stencil

__all__ = ["KERNELS", "KernelInfo", "Csr", "run_kernel", "reference", "tolerance", "make_tensor",
           "make_csr", "make_ids", "random_operand", "numpy_dtype", "round_bf16"]


@dataclass(frozen=True, slots=True)
class KernelInfo:
    """How one op is implemented: ``impl`` says honestly what runs."""

    name: str
    module: str
    impl: str
    dtypes: tuple[str, ...] = ()


def _binary(op: str) -> Callable[..., np.ndarray]:
    return lambda a, b: binary(op, a, b)


def _allreduce(xs: Sequence[np.ndarray]) -> np.ndarray:
    out = np.array(xs[0])
    for x in xs[1:]:
        out = binary("add", out, x)
    return out


_NUMBA: dict[str, tuple[Callable[..., np.ndarray], str, str]] = {
    "matmul": (matmul, "linalg", "BLAS GEMM through numpy (np.matmul, not numba) for float/complex; numba direct "
                                 "i-k-j loop for integers and tiny products"),
    "conv2d": (conv2d, "conv", "numba im2col + BLAS GEMM through numpy when Cg*R*S and K/groups >= 16 (1x1 "
                               "unpadded: the GEMM runs on the input, no im2col), else numba direct"),
    "conv_transpose2d": (conv_transpose2d, "conv", "BLAS GEMM through numpy per image and group, then a numba "
                                                   "col2im adding the columns into the output"),
    "maxpool": (maxpool, "pool", "numba direct"),
    "avgpool": (avgpool, "pool", "numba direct (divides by the count of valid elements)"),
    "batchnorm": (batchnorm, "norm", "numba direct (batch statistics, identity affine)"),
    "relu": (relu, "elementwise", "numba direct"),
    "gelu": (gelu, "elementwise", "numba direct (tanh approximation)"),
    "softmax": (softmax, "norm", "numba direct (rows; numpy moves a non-last axis)"),
    "layernorm": (layernorm, "norm", "numba direct"),
    "instancenorm": (instancenorm, "norm", "numba direct (layernorm's rows: one per (image, channel) plane, "
                                           "identity affine)"),
    "add": (_binary("add"), "binary", "numba strided broadcast loop"),
    "sub": (_binary("sub"), "binary", "numba strided broadcast loop"),
    "mul": (_binary("mul"), "binary", "numba strided broadcast loop"),
    "div": (_binary("div"), "binary", "numba strided broadcast loop (integers: floor division, x // 0 = 0)"),
    "attention": (attention, "attention", "BLAS GEMMs through numpy per group of a sequence's heads and a numba "
                                       "softmax of the scores, groups on parallel threads; numba direct for small "
                                       "units"),
    "embedding": (embedding, "embedding", "numba gather"),
    "embedding_bag": (embedding_bag, "embedding", "numba gather and pool, parallel over bags"),
    "gather_nd": (gather_nd, "indexed", "numba gather, parallel over the index tuples"),
    "scatter_elements": (scatter_elements, "indexed", "numpy copy, then a numba loop over the updates in order "
                                                     "(one thread: repeated indices combine as the reference's)"),
    "rmsnorm": (rmsnorm, "norm", "numba direct"),
    "swiglu": (swiglu, "elementwise", "numba direct"),
    "rotary": (rotary, "elementwise", "numba direct (angles per row and pair)"),
    "topk": (topk, "moe", "numba direct (k max-scans per row, rows in parallel)"),
    "moe_dispatch": (moe_dispatch, "moe", "numba routing and row gather"),
    "grouped_matmul": (grouped_matmul, "moe", "numba routing, a BLAS GEMM through numpy per expert"),
    "moe_combine": (moe_combine, "moe", "numba routing and weighted row sums, tokens in parallel"),
    "mla_attention": (mla_attention, "moe", "numba rotary of the query and shared key columns, then the "
                                            "attention kernel on heads padded to one width"),
    "allreduce": (lambda *xs: _allreduce(xs), "binary", "numba strided add loop, the parts summed in operand "
                                                       "order (every participant sums alike)"),
    "concat": (concat, "layout", "numba strided copy"),
    "split": (split, "layout", "numba strided copy"),
    "reshape": (reshape, "layout", "numpy view (no data movement)"),
    "transpose": (transpose, "layout", "numba strided copy"),
    "stencil": (stencil, "stencil", "numba direct Jacobi sweeps"),
    "spmv": (spmv, "sparse", "numba CSR, parallel over rows"),
    "fft": (fft, "fft", "numba radix-2 for power-of-two N; numpy.fft (pocketfft) otherwise"),
    "ifft": (ifft, "fft", "numba radix-2 for power-of-two N; numpy.fft (pocketfft) otherwise"),
    "dot": (dot, "linalg", "numba blocked parallel reduction"),
    "axpy": (axpy, "linalg", "numba direct"),
    "reduce": (reduce, "reduce", "numba blocked parallel reduction"),
    "cumsum": (cumsum, "reduce", "numba running sum, parallel over rows (the axis moved last)"),
    "elementwise": (elementwise, "elementwise", "numba direct"),
}

_F16_NOTE = "; f16 goes through float32 (result rounded to f16); bf16 is float32 storage"


def _dtypes(op: str) -> tuple[str, ...]:
    """DSL dtypes of the op's main operand (embedding: the table's)."""
    base = INEXACT if op in TABLE_OPS else SPECS[op].dtypes
    return tuple(sorted(base + (("bf16",) if "f32" in base else ())))


#: Every op: how its Numba path is implemented and which DSL dtypes it takes.
KERNELS: dict[str, KernelInfo] = {
    op: KernelInfo(op, f"mapper.kernels.{mod}", impl + (_F16_NOTE if "f16" in _dtypes(op) else ""), _dtypes(op))
    for op, (_, mod, impl) in _NUMBA.items()
}


def _widen(xs: list) -> tuple[list, bool]:
    """float16 operands as float32; whether the result goes back to float16."""
    floats = [x.dtype for x in xs if isinstance(x, np.ndarray) and x.dtype.kind in "fc"]
    floats += [x.data.dtype for x in xs if isinstance(x, Csr)]
    if not floats or any(d != np.float16 for d in floats):
        return xs, False
    out = []
    for x in xs:
        if isinstance(x, Csr):
            out.append(x._replace(data=x.data.astype(np.float32)))
        elif isinstance(x, np.ndarray) and x.dtype == np.float16:
            out.append(x.astype(np.float32))
        else:
            out.append(x)
    return out, True


def _work(op: str, xs: list, attrs: dict) -> int:
    """Rough element operations of a call, to choose one thread or all."""
    size = sum(x.nnz if isinstance(x, Csr) else x.size for x in xs)
    if op == "matmul":
        return xs[0].size * xs[1].shape[-1]
    if op == "conv2d":
        return xs[0].size * xs[1].size // (xs[1].shape[1] * attrs["groups"])
    if op == "attention":
        return size * attrs["seq"]
    if op == "stencil":
        return size * max(attrs["steps"], 1)
    return size


def _call(fn: Callable[..., np.ndarray], op: str, inputs: Sequence[Any], attrs: Mapping[str, Any],
          numba_path: bool) -> np.ndarray:
    xs, canon = prepare(op, inputs, attrs)
    xs, narrow = _widen(xs)
    if op == "axpy" and narrow:
        canon["alpha"] = np.float32(canon["alpha"])
    if numba_path:
        with threads_for(_work(op, xs, canon)):
            out = np.asarray(fn(*xs, **canon))
    else:
        out = np.asarray(fn(*xs, **canon))
    return out.astype(np.float16) if narrow and out.dtype == np.float32 else out


def run_kernel(op: str, inputs: Sequence[np.ndarray | Csr], attrs: Mapping[str, Any]) -> np.ndarray:
    """Run ``op``'s Numba kernel on ``inputs`` (operand order of docs/ops.md).

    Small calls (see :data:`mapper.kernels._jit.PARALLEL_MIN_WORK`) run on the
    calling thread only; large ones on all of Numba's threads.
    """
    entry = _NUMBA.get(op)
    return _call(entry[0] if entry else _missing, op, inputs, attrs, True)


def reference(op: str, inputs: Sequence[np.ndarray | Csr], attrs: Mapping[str, Any]) -> np.ndarray:
    """Run ``op``'s NumPy reference on ``inputs``."""
    return _call(getattr(ref, op, _missing), op, inputs, attrs, False)


def _missing(*_: Any, **__: Any) -> np.ndarray:  # pragma: no cover - prepare rejects unknown ops first
    raise AssertionError("unreachable: prepare() rejects unknown ops")

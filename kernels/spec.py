"""Operand and attribute checks shared by the Numba kernels and the references.

:func:`prepare` validates one call (operand count, dtypes, shapes, attribute
names and values) and returns the operands as arrays and the attributes in
canonical form (pairs for stride/padding/kernel, non-negative axes, tuples),
so both paths see the same, valid input. Bad input raises
:class:`~mapper.errors.InputError` naming the op; no kernel ever sees an
operand that could make it index out of bounds. docs/ops.md is the catalogue.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mapper.errors import InputError
from mapper.kernels.checks import REQUIRED, _axis, _float, _int, _ndim, _pair, _shape, fail
from mapper.kernels.csr import Csr, check_csr
from mapper.kernels.spec_moe import _grouped_matmul, _mla_attention, _moe_combine, _moe_dispatch, _topk

FLOAT = ("f16", "f32", "f64")
COMPLEX = ("c64", "c128")
INT = ("i8", "i32", "i64")
INEXACT = FLOAT + COMPLEX
NUMERIC = INT + INEXACT
ANY = ("bool",) + NUMERIC

_DTYPE_NAMES = {"float16": "f16", "float32": "f32", "float64": "f64", "complex64": "c64",
                "complex128": "c128", "int8": "i8", "int32": "i32", "int64": "i64", "bool": "bool"}

#: Functions of ``elementwise``.
ELEMENTWISE_FNS = ("exp", "log", "sqrt", "tanh", "neg", "abs", "square", "sigmoid", "scale", "hardswish")


#: The operand of each op that holds integer indices (i32 or i64).
INDEX_OPERAND = {"embedding": 0, "embedding_bag": 0, "gather_nd": 1, "scatter_elements": 1}
#: Ops whose second operand is a floating-point table indexed by the first.
TABLE_OPS = ("embedding", "embedding_bag")


@dataclass(frozen=True, slots=True)
class OpSpec:
    """One op: operand count, allowed dtypes, attributes with defaults, checker."""

    name: str
    min_inputs: int
    max_inputs: int | None
    dtypes: tuple[str, ...]
    attrs: tuple[tuple[str, Any], ...]
    check: Callable[[str, list, dict], dict]


# -- per-op checks: (op, inputs, attrs) -> canonical attrs --------------------------------
def _matmul(op, xs, at):
    a, b = xs
    if a.ndim < 2 or b.ndim < 2:
        raise fail(op, f"operands must be at least 2-D, got {_shape(a)} and {_shape(b)}")
    if a.shape[-1] != b.shape[-2]:
        raise fail(op, f"inner dimensions differ: {_shape(a)} @ {_shape(b)}")
    if b.ndim > 2:
        try:
            np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        except ValueError:
            raise fail(op, f"batch dimensions do not broadcast: {_shape(a)} @ {_shape(b)}") from None
    return {}


def _conv_common(op, xs, at):
    """A convolution's 4-D ``x`` and ``w``, its groups, stride and padding."""
    x, w = xs
    _ndim(op, x, "x", (4,))
    _ndim(op, w, "w", (4,))
    g = _int(op, "groups", at["groups"], 1)
    return x, w, g, _pair(op, "stride", at["stride"], 1), _pair(op, "padding", at["padding"], 0)


def _conv2d(op, xs, at):
    x, w, g, st, pad = _conv_common(op, xs, at)
    n, c, h, wd = x.shape
    k, cg, r, s = w.shape
    if c % g or k % g or cg * g != c:
        raise fail(op, f"x {_shape(x)} and w {_shape(w)} do not fit groups = {g} "
                       "(need C % groups == 0, K % groups == 0, w.shape[1] == C / groups)")
    if h + 2 * pad[0] < r or wd + 2 * pad[1] < s:
        raise fail(op, f"filter {r}x{s} is larger than the padded input {_shape(x)}")
    return {"stride": st, "padding": pad, "groups": g}


def _conv_transpose2d(op, xs, at):
    x, w, g, st, pad = _conv_common(op, xs, at)
    opad = _pair(op, "output_padding", at["output_padding"], 0)
    n, c, h, wd = x.shape
    cw, kg, r, s = w.shape
    if c % g or cw != c:
        raise fail(op, f"x {_shape(x)} and w {_shape(w)} do not fit groups = {g} "
                       "(need C % groups == 0 and w.shape[0] == C)")
    if opad[0] >= st[0] or opad[1] >= st[1]:
        raise fail(op, f"output_padding {opad} must be smaller than the stride {st}")
    if (h - 1) * st[0] - 2 * pad[0] + r + opad[0] < 1 or (wd - 1) * st[1] - 2 * pad[1] + s + opad[1] < 1:
        raise fail(op, f"padding {pad} leaves no output of x {_shape(x)} and the {r}x{s} filter")
    return {"stride": st, "padding": pad, "output_padding": opad, "groups": g}


def _cumsum(op, xs, at):
    (x,) = xs
    if x.ndim < 1:
        raise fail(op, f"x must be at least 1-D, got {_shape(x)}")
    flags = {}
    for key in ("exclusive", "reverse"):
        flags[key] = _int(op, key, at[key], 0)
        if flags[key] > 1:
            raise fail(op, f"{key} must be 0 or 1, got {flags[key]}")
    return {"axis": _axis(op, "axis", at["axis"], x.ndim), **flags}


def _pool(op, xs, at):
    (x,) = xs
    _ndim(op, x, "x", (4,))
    if at["kernel"] is REQUIRED:
        raise fail(op, "missing attribute kernel")
    k = _pair(op, "kernel", at["kernel"], 1)
    st = k if at["stride"] is None else _pair(op, "stride", at["stride"], 1)
    pad = _pair(op, "padding", at["padding"], 0)
    if pad[0] > k[0] // 2 or pad[1] > k[1] // 2:
        raise fail(op, f"padding {pad} must be at most half the kernel {k}")
    if x.shape[2] + 2 * pad[0] < k[0] or x.shape[3] + 2 * pad[1] < k[1]:
        raise fail(op, f"kernel {k} is larger than the padded input {_shape(x)}")
    return {"kernel": k, "stride": st, "padding": pad}


def _eps(op, xs, at, min_ndim):
    if xs[0].ndim < min_ndim:
        raise fail(op, f"x must be at least {min_ndim}-D, got {_shape(xs[0])}")
    eps = _float(op, "eps", at["eps"])
    if eps < 0:
        raise fail(op, f"eps must be >= 0, got {eps}")
    return {"eps": eps}


def _softmax(op, xs, at):
    return {"axis": _axis(op, "axis", at["axis"], xs[0].ndim)}


def _binary(op, xs, at):
    try:
        np.broadcast_shapes(xs[0].shape, xs[1].shape)
    except ValueError:
        raise fail(op, f"shapes do not broadcast: {_shape(xs[0])}, {_shape(xs[1])}") from None
    return {}


def _allreduce(op, xs, at):
    for x in xs[1:]:
        if x.shape != xs[0].shape or x.dtype != xs[0].dtype:
            raise fail(op, f"parts differ: {_shape(xs[0])} {xs[0].dtype}, {_shape(x)} {x.dtype}")
    rank = _int(op, "rank", at["rank"], 0)
    if rank >= len(xs):
        raise fail(op, f"rank {rank} is out of range for {len(xs)} parts")
    return {}


def _attention(op, xs, at):
    if len(xs) == 2:
        raise fail(op, "takes qkv[T, 3D] or q[T, D], k[T, D], v[T, D]; got 2 operands")
    for x in xs:
        _ndim(op, x, "each operand", (2,))
    t, width = xs[0].shape
    for key in ("heads", "seq"):
        if at[key] is REQUIRED:
            raise fail(op, f"missing attribute {key}")
    h, s = _int(op, "heads", at["heads"], 1), _int(op, "seq", at["seq"], 1)
    kv = h if at["kv_heads"] is None else _int(op, "kv_heads", at["kv_heads"], 1)
    if h % kv:
        raise fail(op, f"kv_heads = {kv} does not divide heads = {h}")
    if len(xs) == 1 and kv == h and width % 3:
        raise fail(op, f"qkv's last dimension must be 3*D, got {_shape(xs[0])}")
    if len(xs) == 1 and kv == h and (width // 3) % h:
        raise fail(op, f"D = {width // 3} is not divisible by heads = {h}")
    if len(xs) == 3 and kv == h and not xs[0].shape == xs[1].shape == xs[2].shape:
        raise fail(op, f"q, k, v shapes differ: {', '.join(_shape(x) for x in xs)}")
    if len(xs) == 3 and xs[0].shape[1] % h:
        raise fail(op, f"D = {xs[0].shape[1]} is not divisible by heads = {h}")
    if len(xs) == 1 and width % (h + 2 * kv):
        raise fail(op, f"qkv's last dimension must be (heads + 2 kv_heads) * dh, got {_shape(xs[0])}")
    if len(xs) == 3 and (xs[0].shape[1] % h or xs[1].shape != (t, xs[0].shape[1] // h * kv)):
        raise fail(op, f"q must be [T, heads dh] and k, v [T, kv_heads dh]: {', '.join(_shape(x) for x in xs)}")
    if t % s:
        raise fail(op, f"T = {t} is not a multiple of seq = {s}")
    if at["cache"] not in (0, None):
        raise fail(op, f"cache = {at['cache']!r}: a kernel call holds no KV cache; only cache = 0 runs",
                   hint="run the prefill graph (cache 0); decode steps are priced by mapper compile --inference")
    if at.get("window") not in (0, None):
        raise fail(op, f"window = {at['window']!r}: the kernels run no sliding window; only window = 0 runs",
                   hint="price sliding-window attention with mapper compile or mapper serve")
    causal, fused = at["causal"], at["fused"]
    for key, flag in (("causal", causal), ("fused", fused)):
        if flag not in (0, 1, True, False):
            raise fail(op, f"{key} must be 0 or 1, got {flag!r}")
    return {"heads": h, "seq": s, "causal": bool(causal), "kv_heads": kv, "fused": bool(fused)}


def _rotary(op, xs, at):
    _ndim(op, xs[0], "qkv", (2,))
    for key in ("heads", "seq"):
        if at[key] is REQUIRED:
            raise fail(op, f"missing attribute {key}")
    h, s = _int(op, "heads", at["heads"], 1), _int(op, "seq", at["seq"], 1)
    kv = h if at["kv_heads"] is None else _int(op, "kv_heads", at["kv_heads"], 1)
    t, width = xs[0].shape
    if h % kv or width % (h + 2 * kv) or (width // (h + 2 * kv)) % 2 or t % s:
        raise fail(op, f"qkv {_shape(xs[0])} is not [T = batch * {s}, (heads + 2 kv_heads) * even dh] "
                       f"for heads = {h}, kv_heads = {kv}")
    return {"heads": h, "seq": s, "kv_heads": kv, "base": _float(op, "base", at["base"])}


def _swiglu(op, xs, at):
    if xs[0].ndim < 1 or xs[0].shape[-1] % 2:
        raise fail(op, f"x must end in an even dimension [..., 2F], got {_shape(xs[0])}")
    return {}


def _embedding(op, xs, at):
    ids, table = xs
    if ids.dtype.kind not in "iu":
        raise fail(op, f"ids must be integers, got {ids.dtype}")
    _ndim(op, table, "table", (2,))
    if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
        raise fail(op, f"ids must lie in [0, {table.shape[0]}), got [{ids.min()}, {ids.max()}]")
    return {}


def _embedding_bag(op, xs, at):
    _embedding(op, xs, at)
    pooling = _int(op, "pooling", at["pooling"], 1)
    if xs[0].size % pooling:
        raise fail(op, f"pooling = {pooling} must divide the {xs[0].size} ids")
    if at["mode"] not in ("sum", "mean", "max"):
        raise fail(op, f"mode must be sum, mean or max, got {at['mode']!r}")
    return {"pooling": pooling, "mode": at["mode"], "cache_hit": float(at["cache_hit"])}


def _index_range(op, idx, dims, what):
    """Indices ``idx[..., j]`` in ``[-dims[j], dims[j])`` (a negative one counts from the end)."""
    if idx.size == 0:
        return
    low, high = idx.min(axis=tuple(range(idx.ndim - 1))), idx.max(axis=tuple(range(idx.ndim - 1)))
    for j, d in enumerate(dims):
        if low[j] < -d or high[j] >= d:
            raise fail(op, f"{what} must lie in [{-d}, {d}), got [{low[j]}, {high[j]}]")


def _gather_nd(op, xs, at):
    data, idx = xs
    b = _int(op, "batch_dims", at["batch_dims"], 0)
    if idx.ndim < 1 or b >= min(data.ndim, idx.ndim) or data.shape[:b] != idx.shape[:b]:
        raise fail(op, f"batch_dims = {b} must count leading axes data {_shape(data)} and indices "
                       f"{_shape(idx)} share, before indices' last axis")
    k = idx.shape[-1]
    if not 1 <= k <= data.ndim - b:
        raise fail(op, f"indices' last axis ({k}) must be 1 .. {data.ndim - b}")
    _index_range(op, idx, data.shape[b:b + k], "indices")
    return {"batch_dims": b}


def _scatter_elements(op, xs, at):
    data, idx, upd = xs
    if data.ndim < 1 or idx.shape != upd.shape or idx.ndim != data.ndim:
        raise fail(op, f"indices {_shape(idx)} and updates {_shape(upd)} must have one shape, of data "
                       f"{_shape(data)}'s rank")
    axis = _axis(op, "axis", at["axis"], data.ndim)
    if any(i > d for k, (i, d) in enumerate(zip(idx.shape, data.shape)) if k != axis):
        raise fail(op, f"indices {_shape(idx)} must be no larger than data {_shape(data)} along the axes "
                       f"other than axis = {axis}")
    reduction = at["reduction"]
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise fail(op, f"reduction must be \"none\", \"add\", \"mul\", \"max\" or \"min\", got {reduction!r}")
    if reduction != "none" and data.dtype == np.bool_:
        raise fail(op, f"reduction {reduction!r} needs numbers, got a bool tensor")
    if reduction in ("max", "min") and data.dtype.kind == "c":
        raise fail(op, f"{reduction} has no order on complex numbers")
    _index_range(op, idx[..., None], (data.shape[axis],), "indices")
    return {"axis": axis, "reduction": reduction}


def _concat(op, xs, at):
    ax = _axis(op, "axis", at["axis"], xs[0].ndim)
    if xs[0].ndim == 0:
        raise fail(op, "cannot concatenate scalars")
    for x in xs[1:]:
        if x.ndim != xs[0].ndim or x.shape[:ax] + x.shape[ax + 1:] != xs[0].shape[:ax] + xs[0].shape[ax + 1:]:
            raise fail(op, f"shapes differ off axis {ax}: {_shape(xs[0])}, {_shape(x)}")
        if x.dtype != xs[0].dtype:
            raise fail(op, f"dtypes differ: {xs[0].dtype}, {x.dtype}")
    return {"axis": ax}


def _split(op, xs, at):
    (x,) = xs
    if x.ndim == 0:
        raise fail(op, "cannot split a scalar")
    for key in ("parts", "index"):
        if at[key] is REQUIRED:
            raise fail(op, f"missing attribute {key}")
    ax = _axis(op, "axis", at["axis"], x.ndim)
    parts, index = _int(op, "parts", at["parts"], 1), _int(op, "index", at["index"], 0)
    if x.shape[ax] % parts:
        raise fail(op, f"axis {ax} of {_shape(x)} does not split into {parts} equal parts")
    if index >= parts:
        raise fail(op, f"index = {index} must be < parts = {parts}")
    return {"parts": parts, "index": index, "axis": ax}


def _reshape(op, xs, at):
    (x,) = xs
    if at["shape"] is REQUIRED:
        raise fail(op, "missing attribute shape")
    raw = at["shape"] if isinstance(at["shape"], (list, tuple)) else [at["shape"]]
    shape = [_int(op, "shape", d, -1) for d in raw]
    if shape.count(-1) > 1:
        raise fail(op, f"at most one -1 in shape, got {list(shape)}")
    known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
    if -1 in shape:
        if known == 0 or x.size % known:
            raise fail(op, f"cannot reshape {_shape(x)} into {list(shape)}")
        shape[shape.index(-1)] = x.size // known
    elif known != x.size:
        raise fail(op, f"cannot reshape {_shape(x)} ({x.size} elements) into {list(shape)}")
    return {"shape": tuple(shape)}


def _transpose(op, xs, at):
    (x,) = xs
    perm = tuple(range(x.ndim))[::-1] if at["perm"] is None else tuple(
        _int(op, "perm", p) for p in at["perm"])
    if sorted(perm) != list(range(x.ndim)):
        raise fail(op, f"perm {list(perm)} is not a permutation of the {x.ndim} axes")
    return {"perm": perm}


def _stencil(op, xs, at):
    (x,) = xs
    _ndim(op, x, "x", (2, 3))
    if at["points"] is REQUIRED:
        raise fail(op, "missing attribute points")
    pts, steps = _int(op, "points", at["points"]), _int(op, "steps", at["steps"], 0)
    valid = (5, 9) if x.ndim == 2 else (7,)
    if pts not in valid:
        raise fail(op, f"points = {pts} is not valid for a {x.ndim}-D grid (valid: {valid})")
    return {"points": pts, "steps": steps}


def _spmv(op, xs, at):
    a, x = xs
    _ndim(op, x, "x", (1,))
    if a.shape[1] != x.shape[0]:
        raise fail(op, f"A is {a.shape[0]}x{a.shape[1]} but x is {_shape(x)}")
    if a.data.dtype != x.dtype:
        raise fail(op, f"dtypes differ: A {a.data.dtype}, x {x.dtype}")
    return {}


def _fft(op, xs, at):
    if xs[0].ndim < 1:
        raise fail(op, "x must be at least 1-D")
    return {}


def _dot(op, xs, at):
    a, b = xs
    if a.ndim != 1 or a.shape != b.shape:
        raise fail(op, f"operands must be 1-D of equal length, got {_shape(a)}, {_shape(b)}")
    return {}


def _axpy(op, xs, at):
    if len(xs) == 3:
        if at["alpha"] is not None:
            raise fail(op, "alpha is only for the two-operand form; here a is the factor")
        if xs[0].ndim != 0:
            raise fail(op, f"a must be a scalar tensor [], got {_shape(xs[0])}")
        alpha = xs[0][()]
    else:
        alpha = 1.0 if at["alpha"] is None else _float(op, "alpha", at["alpha"])
    x, y = xs[-2:]
    if x.ndim != 1 or x.shape != y.shape:
        raise fail(op, f"x and y must be 1-D of equal length, got {_shape(x)}, {_shape(y)}")
    if y.dtype.kind in "iu":
        if complex(alpha).imag or not float(complex(alpha).real).is_integer():
            raise fail(op, f"alpha = {alpha} must be an integer for {y.dtype} vectors")
        alpha = int(complex(alpha).real)
    return {"alpha": y.dtype.type(alpha)}


def _reduce(op, xs, at):
    (x,) = xs
    kind = at["kind"]
    if kind not in ("sum", "max", "mean"):
        raise fail(op, f"kind must be \"sum\", \"max\" or \"mean\", got {kind!r}")
    if kind == "max" and x.dtype.kind == "c":
        raise fail(op, "max has no order on complex numbers")
    axis = None if at["axis"] is None or x.ndim == 0 else _axis(op, "axis", at["axis"], x.ndim)
    n = x.size if axis is None else (x.shape[axis] if x.ndim else 1)
    if kind != "sum" and n == 0:
        raise fail(op, f"{kind} of an empty set of elements")
    return {"kind": kind, "axis": axis}


def _elementwise(op, xs, at):
    fn = at["fn"]
    if fn is REQUIRED:
        raise fail(op, "missing attribute fn")
    if fn not in ELEMENTWISE_FNS:
        raise fail(op, f"unknown fn {fn!r}", hint="one of " + ", ".join(ELEMENTWISE_FNS))
    if fn == "hardswish" and xs[0].dtype.kind == "c":
        raise fail(op, "hardswish compares, and complex numbers have no order")
    if fn != "scale" and at["alpha"] is not None:
        raise fail(op, f'alpha is only for fn = "scale", not fn = "{fn}"')
    alpha = 1.0 if at["alpha"] is None else _float(op, "alpha", at["alpha"])
    return {"fn": fn, "alpha": alpha}


def _none(op, xs, at):
    return {}


def _spec(name, n, dtypes, check, *attrs):
    return OpSpec(name, n[0], n[1], dtypes, tuple(attrs), check)


_POOL = (("kernel", REQUIRED), ("stride", None), ("padding", 0))

#: Every op of docs/ops.md.
SPECS: dict[str, OpSpec] = {s.name: s for s in (
    _spec("matmul", (2, 2), NUMERIC, _matmul),
    _spec("conv2d", (2, 2), FLOAT, _conv2d, ("stride", 1), ("padding", 0), ("groups", 1)),
    _spec("conv_transpose2d", (2, 2), FLOAT, _conv_transpose2d, ("stride", 1), ("padding", 0),
          ("output_padding", 0), ("groups", 1)),
    _spec("maxpool", (1, 1), FLOAT + INT, _pool, *_POOL),
    _spec("avgpool", (1, 1), FLOAT, _pool, *_POOL),
    _spec("batchnorm", (1, 1), FLOAT, lambda o, x, a: _eps(o, x, a, 2), ("eps", 1e-5)),
    _spec("relu", (1, 1), FLOAT + INT, _none),
    _spec("gelu", (1, 1), FLOAT, _none),
    _spec("softmax", (1, 1), FLOAT, _softmax, ("axis", -1)),
    _spec("layernorm", (1, 1), FLOAT, lambda o, x, a: _eps(o, x, a, 1), ("eps", 1e-5)),
    _spec("instancenorm", (1, 1), FLOAT, lambda o, x, a: _eps(o, x, a, 3), ("eps", 1e-5)),
    *(_spec(b, (2, 2), NUMERIC, _binary) for b in ("add", "mul", "sub", "div")),
    _spec("attention", (1, 3), FLOAT, _attention, ("heads", REQUIRED), ("seq", REQUIRED), ("causal", 0),
          ("kv_heads", None), ("fused", 1), ("cache", 0), ("window", 0)),
    # fused marks how training frameworks run it (what their backward keeps); the result is the same
    _spec("rmsnorm", (1, 1), FLOAT, lambda o, x, a: _eps(o, x, a, 1), ("eps", 1e-5), ("fused", 1)),
    _spec("swiglu", (1, 1), FLOAT, _swiglu, ("fused", 1)),
    _spec("rotary", (1, 1), FLOAT, _rotary, ("heads", REQUIRED), ("seq", REQUIRED), ("kv_heads", None),
          ("base", 10000.0), ("fused", 1)),
    _spec("embedding", (2, 2), ANY, _embedding),
    _spec("topk", (1, 1), FLOAT, _topk, ("k", REQUIRED), ("norm", 0), ("scale", 1.0)),
    _spec("moe_dispatch", (2, 2), FLOAT, _moe_dispatch, ("topk", REQUIRED)),
    _spec("grouped_matmul", (3, 3), FLOAT, _grouped_matmul),
    _spec("moe_combine", (2, 2), FLOAT, _moe_combine),
    _spec("mla_attention", (3, 3), FLOAT, _mla_attention, ("heads", REQUIRED), ("seq", REQUIRED), ("causal", 0),
          ("fused", 1), ("base", 10000.0)),
    _spec("embedding_bag", (2, 2), ANY, _embedding_bag, ("pooling", REQUIRED), ("mode", "sum"), ("cache_hit", 1.0)),
    _spec("allreduce", (1, None), NUMERIC, _allreduce, ("rank", 0)),
    _spec("concat", (1, None), ANY, _concat, ("axis", 0)),
    _spec("split", (1, 1), ANY, _split, ("parts", REQUIRED), ("index", REQUIRED), ("axis", 0)),
    _spec("reshape", (1, 1), ANY, _reshape, ("shape", REQUIRED)),
    _spec("transpose", (1, 1), ANY, _transpose, ("perm", None)),
    _spec("gather_nd", (2, 2), ANY, _gather_nd, ("batch_dims", 0)),
    _spec("scatter_elements", (3, 3), ANY, _scatter_elements, ("axis", 0), ("reduction", "none")),
    _spec("stencil", (1, 1), FLOAT, _stencil, ("points", REQUIRED), ("steps", 1)),
    _spec("spmv", (2, 2), INEXACT, _spmv),
    _spec("fft", (1, 1), COMPLEX, _fft),
    _spec("ifft", (1, 1), COMPLEX, _fft),
    _spec("dot", (2, 2), NUMERIC, _dot),
    _spec("axpy", (2, 3), NUMERIC, _axpy, ("alpha", None)),
    _spec("reduce", (1, 1), NUMERIC, _reduce, ("kind", "sum"), ("axis", None)),
    _spec("cumsum", (1, 1), NUMERIC, _cumsum, ("axis", 0), ("exclusive", 0), ("reverse", 0)),
    _spec("elementwise", (1, 1), INEXACT, _elementwise, ("fn", REQUIRED), ("alpha", None)),
)}


def _dtype_name(dtype: np.dtype) -> str:
    return _DTYPE_NAMES.get(dtype.name, dtype.name)


def prepare(op: str, inputs: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[list, dict]:
    """Check one call of ``op``; return ``(operands, canonical attributes)``.

    Dense operands become NumPy arrays (not copied when already arrays); a
    ``spmv`` matrix must be a :class:`Csr`. Raises :class:`InputError`.
    """
    spec = SPECS.get(op)
    if spec is None:
        raise InputError(f"no kernel for op {op!r}", obj=str(op),
                         hint="ops: " + ", ".join(sorted(SPECS)))
    n = len(inputs)
    hi = spec.max_inputs
    if n < spec.min_inputs or (hi is not None and n > hi):
        want = str(spec.min_inputs) if hi == spec.min_inputs else (
            f"{spec.min_inputs} to {hi}" if hi is not None else f"at least {spec.min_inputs}")
        raise fail(op, f"takes {want} operands, got {n}")
    known = dict(spec.attrs)
    for key in attrs:
        if key not in known:
            raise fail(op, f"unknown attribute {key!r}", hint="attributes: " + (", ".join(known) or "none"))
    merged = {**known, **attrs}
    xs: list = []
    for i, v in enumerate(inputs):
        if op == "spmv" and i == 0:
            xs.append(check_csr(v, op))
            continue
        if isinstance(v, Csr):
            raise fail(op, f"operand {i + 1} is a csr matrix; {op} takes dense tensors")
        arr = np.asarray(v)
        name = _dtype_name(arr.dtype)
        ok = spec.dtypes if INDEX_OPERAND.get(op) != i else ("i32", "i64")
        if op in TABLE_OPS and i == 1:
            ok = INEXACT
        if name not in ok:
            raise fail(op, f"operand {i + 1} has dtype {name}", hint="allowed: " + ", ".join(ok))
        xs.append(arr)
    dense = [x for i, x in enumerate(xs) if isinstance(x, np.ndarray) and INDEX_OPERAND.get(op) != i]
    if op not in (*TABLE_OPS, "spmv") and len({x.dtype for x in dense}) > 1:
        raise fail(op, "operand dtypes differ: " + ", ".join(_dtype_name(x.dtype) for x in dense),
                   hint="convert one operand first")
    spmv_dtype = xs[0].data.dtype if op == "spmv" else None
    if spmv_dtype is not None and _dtype_name(spmv_dtype) not in INEXACT:
        raise fail(op, f"A has dtype {spmv_dtype}", hint="allowed: " + ", ".join(INEXACT))
    return xs, spec.check(op, xs, merged)

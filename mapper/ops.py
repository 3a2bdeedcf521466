"""The op catalogue: operand and attribute checks, shape inference, work counts.

:data:`OPS` maps each DSL op name to its :class:`OpSpec`; :func:`infer`
checks one call (operand count, dtypes, layouts, attribute names, types and
ranges, shape compatibility) and returns an :class:`OpInfo` with the output
type and the work the call does. A FLOP is one add or one multiply (a
multiply-accumulate counts 2); ``bytes_read`` is the sum of the operands'
sizes and ``bytes_written`` the output's size unless an op says otherwise.
docs/ops.md is the reference for every formula here.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from math import prod
from typing import Any, Callable, Mapping, Sequence

from mapper.errors import DslError
from mapper.graph import DTYPE_BYTES, TensorType

FLOAT_DTYPES = ("f16", "bf16", "f32", "f64")
COMPLEX_DTYPES = ("c64", "c128")
INT_DTYPES = ("i8", "i32", "i64")
NUMERIC_DTYPES = INT_DTYPES + FLOAT_DTYPES + COMPLEX_DTYPES
INEXACT_DTYPES = FLOAT_DTYPES + COMPLEX_DTYPES
ANY_DTYPES = ("bool",) + NUMERIC_DTYPES

#: The cost model's op classes (efficiency factors are chosen per class).
OP_CLASSES = (
    "gemm", "conv", "attention", "elementwise", "activation", "norm", "pool",
    "reduction", "stencil", "sparse", "fft", "shape", "embedding",
)

#: Flag attributes that make an op a different kernel when set: a task with
#: one set has the variant key ``op.flag`` in a device's per-op tables
#: (:func:`mapper.cost.model_keys`). Causal attention masks the scores that
#: the CPU kernel's BLAS path computes in full, so it takes about 0.85 of an
#: unmasked call's time, where its FLOPs (:func:`mapper.cost.kernel_flops`)
#: say half.
FLAG_VARIANTS: dict[str, tuple[str, ...]] = {"attention": ("causal",)}


class _Required:
    """Sentinel default of an attribute that must be given."""

    _instance: _Required | None = None

    def __new__(cls) -> _Required:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "REQUIRED"

    def __reduce__(self) -> str:
        return "REQUIRED"


#: Default of an attribute that has none: the call must give it.
REQUIRED = _Required()


class OpError(DslError):
    """A bad op call. No span: the lowerer adds the call's span.

    ``arg`` is the index of the operand at fault (or None), ``attr`` the
    attribute at fault (or None), ``hint`` a suggestion (or None).
    """

    def __init__(self, message: str, *, arg: int | None = None, attr: str | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.arg = arg
        self.attr = attr


@dataclass(frozen=True, slots=True)
class OpInfo:
    """What one op call produces and costs.

    ``attrs`` are the call's attributes after checking: every attribute of
    the op, defaults filled in (``None`` where the default means "all" or
    "derived"), lists as tuples, sorted by name.
    """

    output: TensorType
    flops: float
    bytes_read: float
    bytes_written: float
    attrs: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class OpSpec:
    """One op of the catalogue.

    ``max_operands`` is None for no limit; ``attrs`` are ``(name, default)``
    pairs with :data:`REQUIRED` for must-give attributes; ``attr_kinds`` the
    matching ``(name, kind)`` with kind one of ``int``, ``int2`` (an int or a
    pair ``[h, w]``), ``float``, ``bool``, ``str``, ``ints``; ``choices`` the
    allowed strings; ``formula`` the FLOP count as written in docs/ops.md;
    ``signature`` the operand forms. ``infer_fn`` is internal (it takes the
    checked call): use :func:`infer`.
    """

    name: str
    min_operands: int
    max_operands: int | None
    attrs: tuple[tuple[str, Any], ...]
    op_class: str
    formula: str
    infer_fn: Callable[[_Call], OpInfo]
    signature: str = ""
    attr_kinds: tuple[tuple[str, str], ...] = ()
    choices: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def default(self, attr: str) -> Any:
        for k, v in self.attrs:
            if k == attr:
                return v
        raise KeyError(attr)


# -- the call context -------------------------------------------------------


class _Call:
    """One call being checked: operands, resolved attributes, error helpers."""

    __slots__ = ("spec", "args", "attrs")

    def __init__(self, spec: OpSpec, args: Sequence[TensorType], attrs: dict[str, Any]) -> None:
        self.spec = spec
        self.args = tuple(args)
        self.attrs = attrs

    def fail(self, message: str, *, arg: int | None = None, attr: str | None = None,
             hint: str | None = None) -> OpError:
        return OpError(f"{self.spec.name}: {message}", arg=arg, attr=attr, hint=hint)

    def name(self, i: int) -> str:
        """The operand's name in messages, from the signature form with this many operands."""
        forms = [_operand_names(f) for f in self.spec.signature.split(" or ")]
        names = next((f for f in forms if len(f) == len(self.args)), forms[0])
        return names[i] if i < len(names) else f"x{i + 1}"

    def desc(self, i: int) -> str:
        return f"{self.name(i)} is {self.args[i]}"

    def ndim(self, i: int, allowed: Sequence[int], form: str) -> None:
        if len(self.args[i].shape) not in allowed:
            n = len(self.args[i].shape)
            raise self.fail(f"{self.name(i)} must be {form}, got {self.args[i]} ({n}-D)", arg=i)

    def min_ndim(self, i: int, low: int, form: str) -> None:
        if len(self.args[i].shape) < low:
            raise self.fail(f"{self.name(i)} must be {form}, got {self.args[i]}", arg=i)

    def dtypes(self, allowed: Sequence[str], what: str, indices: Sequence[int] | None = None) -> None:
        """Each listed operand has an allowed dtype, and all of them the same one."""
        idx = range(len(self.args)) if indices is None else indices
        first = None
        for i in idx:
            t = self.args[i]
            if t.dtype not in allowed:
                raise self.fail(
                    f"{self.name(i)} must be {what}, got {t}", arg=i,
                    hint="allowed dtypes: " + ", ".join(allowed),
                )
            if first is None:
                first = i
            elif t.dtype != self.args[first].dtype:
                raise self.fail(
                    f"operand dtypes differ: {self.desc(first)}, {self.desc(i)}", arg=i,
                    hint="mixing dtypes is not allowed; convert one operand first",
                )

    def axis(self, attr: str, ndim: int) -> int:
        """The attribute as a non-negative axis of an ``ndim``-D tensor."""
        ax = self.attrs[attr]
        if not -ndim <= ax < ndim:
            raise self.fail(
                f"{attr} = {ax} is out of range for a {ndim}-D operand (valid: {-ndim} .. {ndim - 1})",
                attr=attr,
            )
        return ax % ndim

    def info(self, output: TensorType, flops: float, bytes_read: float | None = None,
             bytes_written: float | None = None) -> OpInfo:
        """The result; bytes default to the operands' and the output's sizes."""
        if bytes_read is None:
            bytes_read = sum(t.nbytes for t in self.args)
        if bytes_written is None:
            bytes_written = output.nbytes
        return OpInfo(output, float(flops), float(bytes_read), float(bytes_written),
                      tuple(sorted(self.attrs.items())))


def _operand_names(signature: str) -> tuple[str, ...]:
    """``"a[..., M, K], b[K, N]"`` -> ``("a", "b")`` (top-level commas only)."""
    names, depth, token = [], 0, ""
    for ch in signature + ",":
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            word = token.strip().split("[")[0].split(" ")[0]
            if word and word != "...":
                names.append(word)
            token = ""
        else:
            token += ch
    return tuple(names)


def _dense(shape: Sequence[int], dtype: str) -> TensorType:
    return TensorType(dtype, tuple(int(d) for d in shape))


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """NumPy broadcasting of two shapes; None when they do not broadcast."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return tuple(reversed(out))


def _fmt(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


# -- DNN ops ------------------------------------------------------------------


def _matmul(c: _Call) -> OpInfo:
    """(Batched) matrix product: ``2*batch*M*N*K``."""
    a, b = c.args
    c.dtypes(NUMERIC_DTYPES, "a numeric tensor")
    c.min_ndim(0, 2, "at least 2-D ([..., M, K])")
    c.min_ndim(1, 2, "at least 2-D ([K, N] or [..., K, N])")
    (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
    if k != k2:
        raise c.fail(f"inner dimensions differ: {c.desc(0)}, {c.desc(1)} ({k} != {k2})", arg=1)
    batch = _broadcast(a.shape[:-2], b.shape[:-2])
    if batch is None:
        raise c.fail(f"batch dimensions do not broadcast: {c.desc(0)}, {c.desc(1)}", arg=1)
    return c.info(_dense(batch + (m, n), a.dtype), 2 * prod(batch) * m * n * k)


def _pair(v: int | tuple[int, int]) -> tuple[int, int]:
    """An ``int2`` attribute as ``(height, width)``."""
    return (v, v) if isinstance(v, int) else (v[0], v[1])


def _window(c: _Call, hw: Sequence[int], kern: tuple[int, int], what: str, at: dict) -> tuple[int, int]:
    """Output height and width of a sliding window; ``at`` names the error's operand/attr."""
    (kh, kw), (sh, sw) = kern, _pair(c.attrs["stride"])
    ph, pw = _pair(c.attrs["padding"])
    if hw[0] + 2 * ph < kh or hw[1] + 2 * pw < kw:
        raise c.fail(f"the {kh}x{kw} {what} is larger than the padded input: {c.desc(0)}, "
                     f"padding = {c.attrs['padding']}", **at)
    return (hw[0] + 2 * ph - kh) // sh + 1, (hw[1] + 2 * pw - kw) // sw + 1


def _conv2d(c: _Call) -> OpInfo:
    """Direct 2-D convolution (NCHW, grouped): 2 flops per MAC of each window."""
    x, w = c.args
    c.dtypes(FLOAT_DTYPES, "a real floating-point tensor")
    c.ndim(0, (4,), "4-D [N, C, H, W]")
    c.ndim(1, (4,), "4-D [K, C/groups, R, S]")
    n, ch, h, wd = x.shape
    k, cg, r, s = w.shape
    g = c.attrs["groups"]
    if ch % g or k % g:
        raise c.fail(f"groups = {g} must divide the input channels ({ch}) and the filters ({k})",
                     attr="groups")
    if cg != ch // g:
        raise c.fail(f"channels differ: {c.desc(0)}, {c.desc(1)} ({ch // g} != {cg}; "
                     f"w must be [K, C/groups, R, S] with C = {ch}, groups = {g})", arg=1)
    ho, wo = _window(c, (h, wd), (r, s), "filter", {"arg": 1})
    return c.info(_dense((n, k, ho, wo), x.dtype), 2 * n * k * ho * wo * cg * r * s)


def _pool(c: _Call) -> OpInfo:
    """Max or average pooling: ``kh*kw`` flops (adds or comparisons) per output element."""
    (x,) = c.args
    if c.spec.name == "maxpool":
        c.dtypes(INT_DTYPES + FLOAT_DTYPES, "a real tensor")
    else:
        c.dtypes(FLOAT_DTYPES, "a real floating-point tensor")
    c.ndim(0, (4,), "4-D [N, C, H, W]")
    if c.attrs["stride"] is None:
        c.attrs["stride"] = c.attrs["kernel"]
    kern, pad = _pair(c.attrs["kernel"]), _pair(c.attrs["padding"])
    if pad[0] > kern[0] // 2 or pad[1] > kern[1] // 2:
        raise c.fail(f"padding = {c.attrs['padding']} must be at most half the kernel "
                     f"({c.attrs['kernel']})", attr="padding")
    n, ch, h, w = x.shape
    ho, wo = _window(c, (h, w), kern, "kernel", {"attr": "kernel"})
    out = _dense((n, ch, ho, wo), x.dtype)
    return c.info(out, kern[0] * kern[1] * out.numel)


def _per_element(flops_per_element: int, dtypes: Sequence[str] = FLOAT_DTYPES,
                 what: str = "a real floating-point tensor", min_ndim: int = 0,
                 form: str = "") -> Callable[[_Call], OpInfo]:
    """An op whose output has its operand's type and costs a fixed count per element."""

    def fn(c: _Call) -> OpInfo:
        c.dtypes(dtypes, what)
        c.min_ndim(0, min_ndim, form)
        x = c.args[0]
        if "axis" in c.attrs:
            c.axis("axis", len(x.shape))
        return c.info(_dense(x.shape, x.dtype), flops_per_element * x.numel)

    return fn


def _binary(c: _Call) -> OpInfo:
    """add, mul, sub, div with NumPy broadcasting: 1 flop per output element."""
    a, b = c.args
    c.dtypes(NUMERIC_DTYPES, "a numeric tensor")
    shape = _broadcast(a.shape, b.shape)
    if shape is None:
        raise c.fail(f"shapes do not broadcast: {c.desc(0)}, {c.desc(1)}", arg=1)
    out = _dense(shape, a.dtype)
    return c.info(out, out.numel)


def _attention(c: _Call) -> OpInfo:
    """Multi-head scaled dot-product attention (Vaswani et al., NeurIPS 2017), no projections."""
    if len(c.args) == 2:
        raise c.fail("takes one operand qkv[T, 3D] or three q[T, D], k[T, D], v[T, D]; got 2", arg=1)
    c.dtypes(FLOAT_DTYPES, "a real floating-point tensor")
    for i in range(len(c.args)):
        c.ndim(i, (2,), "2-D [T, 3D]" if len(c.args) == 1 else "2-D [T, D]")
    t, width = c.args[0].shape
    if len(c.args) == 1:
        if width % 3:
            raise c.fail(f"qkv's last dimension must be 3*D, got {c.args[0]} ({width} % 3 != 0)", arg=0)
        d = width // 3
    else:
        d = width
        for i in (1, 2):
            if c.args[i].shape != c.args[0].shape:
                raise c.fail(f"q, k and v must have the same shape: {c.desc(0)}, {c.desc(i)}", arg=i)
    h, s = c.attrs["heads"], c.attrs["seq"]
    if d % h:
        raise c.fail(f"heads = {h} must divide the model width D = {d}", attr="heads")
    if t % s:
        raise c.fail(f"seq = {s} must divide the token count T = {t} (T = batch * seq)", attr="seq")
    b, dh = t // s, d // h
    flops = 2 * b * h * s * s * dh + 5 * b * h * s * s + 2 * b * h * s * s * dh
    return c.info(_dense((t, d), c.args[0].dtype), flops)


def _embedding(c: _Call) -> OpInfo:
    """Row gather: 0 flops; reads the ids and the gathered rows only."""
    ids, table = c.args
    c.dtypes(("i32", "i64"), "an integer tensor (i32 or i64)", (0,))
    c.dtypes(INEXACT_DTYPES, "a floating-point tensor", (1,))
    c.ndim(1, (2,), "2-D [V, D]")
    out = _dense(ids.shape + (table.shape[1],), table.dtype)
    return c.info(out, 0, ids.nbytes + out.nbytes)


# -- data movement --------------------------------------------------------------


def _concat(c: _Call) -> OpInfo:
    """Concatenation along ``axis``: a copy, 0 flops."""
    c.dtypes(ANY_DTYPES, "a tensor")
    first = c.args[0]
    c.min_ndim(0, 1, "at least 1-D")
    ax = c.axis("axis", len(first.shape))
    total = 0
    for i, t in enumerate(c.args):
        same = len(t.shape) == len(first.shape) and all(
            d == e for j, (d, e) in enumerate(zip(t.shape, first.shape)) if j != ax)
        if not same:
            raise c.fail(f"shapes differ outside axis {ax}: {c.desc(0)}, {c.desc(i)}", arg=i)
        total += t.shape[ax]
    shape = list(first.shape)
    shape[ax] = total
    return c.info(_dense(shape, first.dtype), 0)


def _split(c: _Call) -> OpInfo:
    """The ``index``-th of ``parts`` equal chunks: reads and writes only that chunk."""
    (x,) = c.args
    c.dtypes(ANY_DTYPES, "a tensor")
    c.min_ndim(0, 1, "at least 1-D")
    ax = c.axis("axis", len(x.shape))
    parts, index = c.attrs["parts"], c.attrs["index"]
    if x.shape[ax] % parts:
        raise c.fail(f"parts = {parts} does not divide axis {ax} of {c.desc(0)} "
                     f"({x.shape[ax]} % {parts} != 0)", attr="parts")
    if not 0 <= index < parts:
        raise c.fail(f"index = {index} is out of range for parts = {parts} (valid: 0 .. {parts - 1})",
                     attr="index")
    shape = list(x.shape)
    shape[ax] //= parts
    out = _dense(shape, x.dtype)
    return c.info(out, 0, out.nbytes)


def _reshape(c: _Call) -> OpInfo:
    """A view with a new shape: no flops and no bytes."""
    (x,) = c.args
    c.dtypes(ANY_DTYPES, "a tensor")
    shape = list(c.attrs["shape"])
    if any(d == 0 or d < -1 for d in shape) or shape.count(-1) > 1:
        raise c.fail(f"shape = {_fmt(shape)} must hold positive sizes and at most one -1",
                     attr="shape")
    known = prod(d for d in shape if d != -1)
    if -1 in shape:
        if x.numel % known:
            raise c.fail(f"cannot infer the -1 in shape = {_fmt(shape)}: x ({x}) has "
                         f"{x.numel} elements, not a multiple of {known}", attr="shape")
        shape[shape.index(-1)] = x.numel // known
    elif known != x.numel:
        raise c.fail(f"shape = {_fmt(shape)} has {known} elements but x ({x}) has {x.numel}",
                     attr="shape")
    return c.info(_dense(shape, x.dtype), 0, 0, 0)


def _transpose(c: _Call) -> OpInfo:
    """An axis permutation, materialised: a copy, 0 flops."""
    (x,) = c.args
    c.dtypes(ANY_DTYPES, "a tensor")
    nd = len(x.shape)
    perm = c.attrs["perm"]
    if perm is None:
        perm = tuple(reversed(range(nd)))
        c.attrs["perm"] = perm
    if sorted(perm) != list(range(nd)):
        raise c.fail(f"perm = {_fmt(perm)} is not a permutation of the axes 0 .. {nd - 1} "
                     f"of {c.desc(0)}", attr="perm")
    return c.info(_dense(tuple(x.shape[i] for i in perm), x.dtype), 0)


# -- scientific ops -------------------------------------------------------------


def _stencil(c: _Call) -> OpInfo:
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
    return c.info(_dense(x.shape, x.dtype), flops, steps * x.nbytes, steps * x.nbytes)


def _spmv(c: _Call) -> OpInfo:
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
    return c.info(_dense((a.shape[0],), a.dtype), 2 * (a.nnz or 0))


def _fft(c: _Call) -> OpInfo:
    """1-D complex FFT along the last axis: ``5 N log2 N`` per transform
    (the radix-2 count of Cooley and Tukey, Math. Comp. 19(90), 1965)."""
    (x,) = c.args
    c.dtypes(COMPLEX_DTYPES, "a complex tensor (c64 or c128)")
    c.min_ndim(0, 1, "at least 1-D [..., N]")
    n = x.shape[-1]
    flops = 5 * n * math.log2(n) * (x.numel // n)
    return c.info(_dense(x.shape, x.dtype), flops)


def _dot(c: _Call) -> OpInfo:
    """Unconjugated inner product: ``2*N``."""
    a, b = c.args
    c.dtypes(NUMERIC_DTYPES, "a numeric tensor")
    c.ndim(0, (1,), "1-D [N]")
    c.ndim(1, (1,), "1-D [N]")
    if a.shape != b.shape:
        raise c.fail(f"lengths differ: {c.desc(0)}, {c.desc(1)} ({a.shape[0]} != {b.shape[0]})", arg=1)
    return c.info(_dense((), a.dtype), 2 * a.numel)


def _axpy(c: _Call) -> OpInfo:
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
    return c.info(_dense(y.shape, y.dtype), 2 * y.numel)


def _reduce(c: _Call) -> OpInfo:
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
    out = _dense(shape, x.dtype)
    return c.info(out, x.numel + (out.numel if kind == "mean" else 0))


#: FLOPs per element of each ``elementwise`` function.
ELEMENTWISE_FLOPS: dict[str, int] = {
    "exp": 1, "log": 1, "sqrt": 1, "tanh": 1, "neg": 1, "abs": 1, "square": 1, "scale": 1,
    "sigmoid": 4,
}


def _elementwise(c: _Call) -> OpInfo:
    """One unary function per element, :data:`ELEMENTWISE_FLOPS` flops each."""
    (x,) = c.args
    fn = c.attrs["fn"]
    if fn == "scale":
        if c.attrs["alpha"] is None:
            c.attrs["alpha"] = 1.0
    elif c.attrs["alpha"] is not None:
        raise c.fail(f'alpha is only for fn = "scale", not fn = "{fn}"', attr="alpha")
    c.dtypes(INEXACT_DTYPES, "a floating-point tensor")
    return c.info(_dense(x.shape, x.dtype), ELEMENTWISE_FLOPS[fn] * x.numel)


# -- the catalogue --------------------------------------------------------------


def _spec(name: str, n: tuple[int, int | None], op_class: str, formula: str, fn: Callable,
          signature: str, *attrs: tuple, choices: tuple = ()) -> OpSpec:
    """An :class:`OpSpec` from ``(attr, kind, default)`` triples."""
    return OpSpec(
        name=name, min_operands=n[0], max_operands=n[1],
        attrs=tuple((a, d) for a, _, d in attrs), op_class=op_class, formula=formula,
        infer_fn=fn, signature=signature, attr_kinds=tuple((a, k) for a, k, _ in attrs),
        choices=choices,
    )


_POOL_ATTRS = (("kernel", "int2", REQUIRED), ("stride", "int2", None), ("padding", "int2", 0))
_EPS = ("eps", "float", 1e-5)

#: Every op, by name.
OPS: dict[str, OpSpec] = {s.name: s for s in (
    _spec("matmul", (2, 2), "gemm", "2*batch*M*N*K", _matmul, "a[..., M, K], b[K, N] or b[..., K, N]"),
    _spec("conv2d", (2, 2), "conv", "2*N*K*Ho*Wo*(C/groups)*R*S", _conv2d,
          "x[N, C, H, W], w[K, C/groups, R, S]",
          ("stride", "int2", 1), ("padding", "int2", 0), ("groups", "int", 1)),
    _spec("maxpool", (1, 1), "pool", "kh*kw * out.numel", _pool, "x[N, C, H, W]", *_POOL_ATTRS),
    _spec("avgpool", (1, 1), "pool", "kh*kw * out.numel", _pool, "x[N, C, H, W]", *_POOL_ATTRS),
    # batch norm (Ioffe and Szegedy, ICML 2015), inference form folded to scale + shift
    _spec("batchnorm", (1, 1), "norm", "2 * numel",
          _per_element(2, min_ndim=2, form="at least 2-D [N, C, ...]"),
          "x[N, C, ...]", _EPS),
    _spec("relu", (1, 1), "activation", "1 * numel",
          _per_element(1, INT_DTYPES + FLOAT_DTYPES, "a real tensor"), "x"),
    # GELU, tanh form (Hendrycks and Gimpel, arXiv:1606.08415)
    _spec("gelu", (1, 1), "activation", "8 * numel", _per_element(8), "x"),
    _spec("softmax", (1, 1), "norm", "5 * numel", _per_element(5, min_ndim=1, form="at least 1-D"), "x",
          ("axis", "int", -1)),
    # layer norm (Ba, Kiros and Hinton, arXiv:1607.06450), two-pass
    _spec("layernorm", (1, 1), "norm", "8 * numel", _per_element(8, min_ndim=1, form="at least 1-D"),
          "x", _EPS),
    *(_spec(op, (2, 2), "elementwise", "1 * out.numel", _binary, "a, b")
      for op in ("add", "mul", "sub", "div")),
    _spec("attention", (1, 3), "attention", "4*B*S*S*D + 5*B*heads*S*S", _attention,
          "qkv[T, 3D] or q[T, D], k[T, D], v[T, D]",
          ("heads", "int", REQUIRED), ("seq", "int", REQUIRED), ("causal", "bool", 0)),
    _spec("embedding", (2, 2), "embedding", "0", _embedding, "ids[...], table[V, D]"),
    _spec("concat", (1, None), "shape", "0", _concat, "x1, x2, ...", ("axis", "int", 0)),
    _spec("split", (1, 1), "shape", "0", _split, "x",
          ("parts", "int", REQUIRED), ("index", "int", REQUIRED), ("axis", "int", 0)),
    _spec("reshape", (1, 1), "shape", "0", _reshape, "x", ("shape", "ints", REQUIRED)),
    _spec("transpose", (1, 1), "shape", "0", _transpose, "x", ("perm", "ints", None)),
    _spec("stencil", (1, 1), "stencil", "steps * points * interior", _stencil,
          "x[H, W] or x[D, H, W]", ("points", "int", REQUIRED), ("steps", "int", 1)),
    _spec("spmv", (2, 2), "sparse", "2 * nnz", _spmv, "A[M, N] csr, x[N]"),
    _spec("fft", (1, 1), "fft", "5 * N * log2(N) * (numel / N)", _fft, "x[..., N]"),
    _spec("ifft", (1, 1), "fft", "5 * N * log2(N) * (numel / N)", _fft, "x[..., N]"),
    _spec("dot", (2, 2), "reduction", "2 * N", _dot, "a[N], b[N]"),
    _spec("axpy", (2, 3), "elementwise", "2 * N", _axpy, "x[N], y[N] or a[], x[N], y[N]",
          ("alpha", "float", None)),
    _spec("reduce", (1, 1), "reduction", "numel (+ out.numel for mean)", _reduce, "x",
          ("kind", "str", "sum"), ("axis", "int", None),
          choices=(("kind", ("sum", "max", "mean")),)),
    _spec("elementwise", (1, 1), "elementwise", "ELEMENTWISE_FLOPS[fn] * numel", _elementwise, "x",
          ("fn", "str", REQUIRED), ("alpha", "float", None),
          choices=(("fn", tuple(ELEMENTWISE_FLOPS)),)),
)}

#: Lower bounds of integer attributes; ``axis`` has none (negative counts from the end).
_INT_LOW = {"stride": 1, "groups": 1, "kernel": 1, "heads": 1, "seq": 1, "steps": 1, "parts": 1,
            "points": 1, "padding": 0, "index": 0}


def _close(word: str, options: Sequence[str]) -> str | None:
    found = difflib.get_close_matches(word, list(options), n=1)
    return f"did you mean '{found[0]}'?" if found else None


def _check_attr(spec: OpSpec, key: str, kind: str, value: Any) -> Any:
    """The attribute's value, normalised, after its type and range checks."""
    def bad(expected: str) -> OpError:
        return OpError(f"{spec.name}: {key} must be {expected}, got {value!r}", attr=key)

    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
        low = _INT_LOW.get(key)
        if low is not None and value < low:
            raise bad(f">= {low}")
        return value
    if kind == "int2":
        pair = isinstance(value, (list, tuple))
        items = list(value) if pair else [value]
        if (pair and len(items) != 2) or any(isinstance(v, bool) or not isinstance(v, int) for v in items):
            raise bad("an integer or a pair [h, w] of integers")
        for v in items:
            _check_attr(spec, key, "int", v)
        return tuple(items) if pair else value
    if kind == "bool":
        if value not in (0, 1) or not isinstance(value, int):
            raise bad("0 or 1")
        return int(value)
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise bad("a number")
        if key == "eps" and value < 0:
            raise bad(">= 0")
        return float(value)
    if kind == "str":
        if not isinstance(value, str):
            raise bad("a string")
        options = dict(spec.choices).get(key)
        if options is not None and value not in options:
            raise OpError(f"{spec.name}: {key} = {value!r} is not one of "
                          + ", ".join(f'"{o}"' for o in options), attr=key, hint=_close(value, options))
        return value
    # ints: a list of integers
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise bad("a list of integers")
    return tuple(value)


def infer(op: str, operands: Sequence[TensorType], attrs: Mapping[str, Any]) -> OpInfo:
    """Check one call of ``op`` and return its output type and work.

    Raises :class:`OpError` naming the operand (``arg``) or attribute
    (``attr``) at fault.
    """
    spec = OPS.get(op)
    if spec is None:
        raise OpError(f"unknown op '{op}'", hint=_close(op, OPS) or "see docs/ops.md for the op list")
    n, lo, hi = len(operands), spec.min_operands, spec.max_operands
    if n < lo or (hi is not None and n > hi):
        want = f"{lo}" if lo == hi else (f"at least {lo}" if hi is None else f"{lo} to {hi}")
        raise OpError(f"{op}: takes {want} operand{'s' if want != '1' else ''} "
                      f"({spec.signature}), got {n}", arg=min(n, hi) if hi is not None and n > hi else None)
    kinds = dict(spec.attr_kinds)
    resolved: dict[str, Any] = {}
    for key in sorted(attrs):
        if key not in kinds:
            valid = ", ".join(kinds) if kinds else "none"
            hint = _close(key, kinds)
            raise OpError(f"{op}: unknown attribute '{key}' (valid: {valid})", attr=key, hint=hint)
        resolved[key] = _check_attr(spec, key, kinds[key], attrs[key])
    for key, default in spec.attrs:
        if key not in resolved:
            if default is REQUIRED:
                raise OpError(f"{op}: missing required attribute '{key}'", attr=key,
                              hint=f"write {op}(..., {key} = ...)")
            resolved[key] = default
    for i, t in enumerate(operands):
        if t.layout != "dense" and not (op == "spmv" and i == 0):
            raise OpError(f"{op}: operand {i + 1} must be dense, got {t}", arg=i,
                          hint="only spmv takes a csr matrix (its first operand)")
        if t.dtype not in DTYPE_BYTES:
            raise OpError(f"{op}: operand {i + 1} has unknown dtype '{t.dtype}'", arg=i)
    return spec.infer_fn(_Call(spec, operands, resolved))

"""The vocabulary of op rules: dtype groups, op classes, the checked call
(:class:`Call`) that every rule receives, and what a rule returns
(:class:`OpInfo`); :class:`OpSpec` describes one op of the catalogue."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mapper.core.graph import TensorType
from mapper.errors import DslError

FLOAT_DTYPES = ("f16", "bf16", "f32", "f64")
#: What a DNN layer takes: a float tensor, or an int8 one of a quantised model (its QDQ node units,
#: mapper.frontend.importers.onnx_qdq; Jacob et al., "Quantization and Training of Neural Networks for
#: Efficient Integer-Arithmetic-Only Inference", CVPR 2018).
LAYER_DTYPES = FLOAT_DTYPES + ("i8",)
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
#: (:func:`mapper.costing.efficiency.model_keys`). Causal attention masks the scores that
#: the CPU kernel's BLAS path computes in full, so it takes about 0.85 of an
#: unmasked call's time, where its FLOPs (:func:`mapper.costing.work.kernel_flops`)
#: say half.
FLAG_VARIANTS: dict[str, tuple[str, ...]] = {"attention": ("causal",), "mla_attention": ("causal",)}

#: Ops that run an attention kernel (scores, softmax, the product with the values), with the
#: attributes ``heads``, ``seq``, ``causal`` and ``fused``: the cost model's causal and wave
#: rules, the training step's backward and the plan model's activation count apply to each.
ATTENTION_OPS = frozenset({"attention", "mla_attention"})


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
    infer_fn: Callable[[Call], OpInfo]
    signature: str = ""
    attr_kinds: tuple[tuple[str, str], ...] = ()
    choices: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def default(self, attr: str) -> Any:
        for k, v in self.attrs:
            if k == attr:
                return v
        raise KeyError(attr)


# -- the call context -------------------------------------------------------


class Call:
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
        forms = [operand_names(f) for f in self.spec.signature.split(" or ")]
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


def operand_names(signature: str) -> tuple[str, ...]:
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


def dense(shape: Sequence[int], dtype: str) -> TensorType:
    return TensorType(dtype, tuple(int(d) for d in shape))


def broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """NumPy broadcasting of two shapes; None when they do not broadcast."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return tuple(reversed(out))


def fmt(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"

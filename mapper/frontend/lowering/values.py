"""Values in a DSL program: integer and float expressions (exact integer
arithmetic), attribute values, units, indexed names and tensor types, each
checked with an error at the construct's span."""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from mapper.core.graph import DTYPE_BYTES, TensorType
from mapper.errors import DslError, OptionsError, SourceSpan
from mapper.frontend import syntax as S

#: Integers must stay below this magnitude (64-bit signed).
MAX_INT = 2**63
#: The most elements a tensor may have: a 64-bit count, as ONNX's dims and the frameworks' numel are
#: (a larger one is a typo in a size, or a --param out of range).
MAX_ELEMENTS = MAX_INT - 1
#: The largest FLOP or byte count a program may give (10^30: a zettascale machine busy for 30 years).
MAX_WORK = 1e30
#: The largest time a program may give, in seconds (10^12 s: over 30,000 years).
MAX_SECONDS = 1e12
#: The smallest time other than 0 a program may give, in seconds (a femtosecond, far below one clock
#: cycle): smaller ones (a subnormal 1e-320) only overflow the scales that mappers divide by.
MIN_SECONDS = 1e-15
#: Time units per second (``comm`` and ``cost`` values are divided by it; default s).
TIME_UNITS: dict[str, float] = {"ns": 1e9, "us": 1e6, "ms": 1e3, "s": 1.0}
#: Bytes per size unit (``bytes`` values; default B).
BYTE_UNITS: dict[str, float] = {
    "B": 1.0, "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30, "TiB": 2.0**40,
    "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
}


def literal_seconds(value: S.Expr, unit: str | None) -> float | None:
    """Seconds of a literal time ``value unit`` within the limits, the same float as
    :meth:`Evaluator.number`, :meth:`Evaluator.unit` and :meth:`Evaluator.time` give; None for
    anything else (an expression, another unit, out of range), which those then check, with
    the message. The common case of a huge explicit-cost program, without their calls."""
    if not isinstance(value, S.Num):
        return None
    if unit is None:
        seconds = float(value.value)
    else:
        scale = TIME_UNITS.get(unit)
        if scale is None:
            return None
        seconds = float(value.value) / scale
    return seconds if seconds == 0 or MIN_SECONDS <= seconds <= MAX_SECONDS else None


class ErrorAt(Protocol):
    """Makes the :class:`DslError` of a construct: message, span and an optional hint."""

    def __call__(self, message: str, span: SourceSpan | None, hint: str | None = None) -> DslError: ...


def hint(word: str, options: Iterable[str]) -> str | None:
    """A "did you mean" hint: the closest of ``options`` to ``word``, if any is close."""
    opts = list(options)
    if len(opts) > 20000:  # keep error paths fast on huge scopes
        return None
    found = difflib.get_close_matches(word, opts, n=1)
    return f"did you mean '{found[0]}'?" if found else None


class Evaluator:
    """Evaluates the values of a program; ``err`` makes its errors."""

    __slots__ = ("err",)

    def __init__(self, err: ErrorAt) -> None:
        self.err = err

    def eval(self, e: S.Expr, values: dict[str, Any]) -> int | float:
        """Evaluate an integer/float expression (exact integer arithmetic)."""
        if isinstance(e, S.Num):
            if isinstance(e.value, float) and not math.isfinite(e.value):
                raise self.err("number too large", e.span)
            return e.value
        if isinstance(e, S.Var):
            try:
                v = values[e.name]
            except KeyError:
                raise self.err(f"undefined name '{e.name}'", e.span, hint(e.name, values)) from None
            if isinstance(v, (int, float)):
                return v
            raise self.err(f"'{e.name}' is {_kind(v)}, not a number", e.span)
        if isinstance(e, S.Neg):
            return -self.eval(e.operand, values)
        a = self.eval(e.left, values)
        b = self.eval(e.right, values)
        op = e.op
        both_int = isinstance(a, int) and isinstance(b, int)
        try:
            if op == "+":
                r = a + b
            elif op == "-":
                r = a - b
            elif op == "*":
                r = a * b
            elif op in ("/", "//", "%"):
                if b == 0:
                    raise self.err("division by zero", e.span)
                if op == "/" and both_int:
                    if a % b:
                        raise self.err(f"division not exact: {a} / {b}", e.span,
                                       "use // to round down, or a float literal for a fraction")
                    r = a // b
                else:
                    r = a / b if op == "/" else (a // b if op == "//" else a % b)
            else:
                r = self._pow(a, b, e.span)
        except OverflowError:
            raise self.err("number too large", e.span) from None
        if isinstance(r, int):
            if not -MAX_INT < r < MAX_INT:
                raise self.err(f"integer too large (the limit is 2**63): {_short(r)}", e.span)
        elif not math.isfinite(r):
            raise self.err("number too large", e.span)
        return r

    def _pow(self, a: int | float, b: int | float, span: SourceSpan) -> int | float:
        if isinstance(a, int) and isinstance(b, int):
            if b < 0:
                raise self.err(f"negative integer exponent: {a} ** {b}", span, "write a float base (2.0 ** -1)")
            if abs(a) > 1 and b * math.log2(abs(a)) > 64:
                raise self.err(f"integer too large (the limit is 2**63): {a} ** {b}", span)
            return a**b
        if a == 0 and b < 0:
            raise self.err("division by zero", span)
        if a < 0 and not float(b).is_integer():
            raise self.err(f"a fractional power of a negative number: {a} ** {b}", span)
        return math.pow(a, b)

    def integer(self, e: S.Expr, values: dict[str, Any], what: str, low: int | None = None) -> int:
        v = self.eval(e, values)
        if not isinstance(v, int):
            raise self.err(f"{what} must be an integer, got {v!r}", e.span)
        if low is not None and v < low:
            raise self.err(f"{what} must be >= {low}, got {v}", e.span)
        return v

    def number(self, e: S.Expr, values: dict[str, Any], what: str) -> float:
        v = float(self.eval(e, values))
        if v < 0:
            raise self.err(f"{what} must be >= 0, got {v!r}", e.span)
        return v

    def at_most(self, v: float, most: float, what: str, span: SourceSpan | None) -> float:
        """``v`` (in base units) when it is at most ``most``, else an error at ``span``."""
        if not v <= most:
            raise self.err(f"{what} of {v:g} is too large (at most {most:g})", span,
                           "check the value and its unit")
        return v

    def time(self, v: float, what: str, span: SourceSpan | None) -> float:
        """``v`` seconds when it is 0 or from :data:`MIN_SECONDS` to :data:`MAX_SECONDS`, else an error at ``span``."""
        v = self.at_most(v, MAX_SECONDS, what, span)
        if 0 < abs(v) < MIN_SECONDS:
            raise self.err(f"{what} of {v:g} is below the resolution of {MIN_SECONDS:g} s (give 0 or at least "
                           "that)", span, "check the value and its unit")
        return v

    def value(self, v: S.Value, values: dict[str, Any]) -> Any:
        """An attribute value: number, string, or tuple of integers."""
        if isinstance(v, S.Str):
            return v.value
        if isinstance(v, S.ListValue):
            return tuple(self.eval(x, values) for x in v.items)
        if isinstance(v, S.Var) and isinstance(values.get(v.name), (str, tuple)):
            return values[v.name]
        return self.eval(v, values)

    def unit(self, value: float, unit: str | None, span: SourceSpan | None, table: dict[str, float],
              what: str) -> float:
        """``value`` in base units: sizes multiply by ``BYTE_UNITS``, times divide by ``TIME_UNITS``
        (so 40 us is exactly the float nearest 4e-05)."""
        if unit is None:
            return value
        try:
            return value / table[unit] if table is TIME_UNITS else value * table[unit]
        except KeyError:
            same = [u for u in table if u.lower() == unit.lower()]
            tip = (f"did you mean '{same[0]}'?" if same else hint(unit, table)) or (
                f"{what} units: " + ", ".join(table))
            raise self.err(f"unknown {what} unit '{unit}'", span, tip) from None

    def name(self, n: S.Name, values: dict[str, Any]) -> str:
        if not n.indices:
            return n.base
        parts = []
        for e in n.indices:
            parts.append(str(self.integer(e, values, "a name index", low=0)))
        return n.base + "_".join(parts)

    def type(self, t: S.TypeExpr, values: dict[str, Any]) -> TensorType:
        if t.dtype not in DTYPE_BYTES:
            raise self.err(f"unknown dtype '{t.dtype}'", t.dtype_span,
                           hint(t.dtype, DTYPE_BYTES) or "dtypes: " + " ".join(DTYPE_BYTES))
        shape = tuple(self.integer(d, values, "a dimension", low=1) for d in t.dims)
        check_elements(shape, self.err, t.span)
        if t.layout is None:
            return TensorType(t.dtype, shape)
        lay = t.layout
        if lay.name != "csr":
            raise self.err(f"unknown layout '{lay.name}'", lay.span, "the only sparse layout is csr(nnz = ...)")
        if len(shape) != 2:
            raise self.err(f"a csr tensor must be 2-D, got {len(shape)}-D", t.span)
        nnz = None
        for a in lay.args:
            if a.key != "nnz":
                raise self.err(f"unknown csr argument '{a.key}'", a.key_span, "csr takes nnz = ...")
            if nnz is not None:
                raise self.err("nnz is given twice", a.key_span)
            if isinstance(a.value, (S.Str, S.ListValue)):
                raise self.err("nnz must be an integer", a.value.span)
            nnz = self.integer(a.value, values, "nnz", low=0)
            if nnz > shape[0] * shape[1]:
                raise self.err(f"nnz = {nnz} exceeds the matrix size {shape[0]}*{shape[1]}", a.span)
        if nnz is None:
            raise self.err("csr needs nnz = ...", lay.span)
        return TensorType(t.dtype, shape, "csr", nnz)


def check_elements(shape: tuple[int, ...], err: ErrorAt, span: SourceSpan | None) -> None:
    """An error at ``span`` for a shape of more than :data:`MAX_ELEMENTS` elements."""
    n = math.prod(shape)
    if n > MAX_ELEMENTS:
        raise err(f"too large: a tensor of shape [{', '.join(map(str, shape))}] has {float(n):.3g} elements "
                  f"(at most 2**63 - 1)", span, "check its sizes (the params, and any --param)")


def _kind(v: Any) -> str:
    return "a string" if isinstance(v, str) else "a list"


def _short(v: int) -> str:
    s = str(v)
    return s if len(s) <= 30 else f"{s[:12]}...({len(s)} digits)"


def check_overrides(overrides: Mapping[str, object], params: Mapping[str, object]) -> None:
    """An :class:`~mapper.errors.OptionsError` for a ``--param`` name the program does not define,
    listing those it does."""
    unknown = [name for name in overrides if name not in params]
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(params), n=1)
        raise OptionsError(f"--param {unknown[0]}: the program has no top-level param of that name "
                           f"(its params: {', '.join(params) or 'none'})", obj="--param",
                           hint=f"did you mean '{close[0]}'?" if close else None)

"""The DSL's abstract syntax tree: what :func:`mapper.frontend.parse.parse` returns.

Every node is a frozen dataclass carrying the :class:`~mapper.errors.SourceSpan`
of the text it came from, so the lowerer can point at the exact place of an
error. Child collections are tuples in source order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from mapper.errors import SourceSpan

#: Reserved words of the DSL (the grammar's keywords; a test checks them equal).
KEYWORDS = frozenset(
    "include param graph template input weight output return for in task "
    "work cost parallel streamable comm bytes memory colocate backward deadline".split()
)

# -- expressions -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Num:
    """An integer or float literal."""

    value: int | float
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class Var:
    """A reference to a param, loop variable or template value parameter."""

    name: str
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class BinOp:
    """``left OP right`` with OP one of ``+ - * / // % **``."""

    op: str
    left: Expr
    right: Expr
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class Neg:
    """Unary minus."""

    operand: Expr
    span: SourceSpan


Expr: TypeAlias = Num | Var | BinOp | Neg


@dataclass(frozen=True, slots=True)
class Str:
    """A string literal (attribute values only), without its quotes."""

    value: str
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class ListValue:
    """``[e0, e1, ...]`` (attribute values only)."""

    items: tuple[Expr, ...]
    span: SourceSpan


Value: TypeAlias = Num | Var | BinOp | Neg | Str | ListValue

# -- names, types, tensor expressions -----------------------------------------


@dataclass(frozen=True, slots=True)
class Name:
    """A tensor or task name, possibly indexed: ``h{l+1}``."""

    base: str
    indices: tuple[Expr, ...]
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class Layout:
    """A sparse layout after a type: ``csr(nnz = 5*N)``."""

    name: str
    args: tuple[Attr, ...]
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class TypeExpr:
    """``DTYPE[d0, d1, ...]`` with an optional layout."""

    dtype: str
    dims: tuple[Expr, ...]
    layout: Layout | None
    span: SourceSpan
    dtype_span: SourceSpan


@dataclass(frozen=True, slots=True)
class Attr:
    """A keyword argument ``key = value``."""

    key: str
    value: Value
    span: SourceSpan
    key_span: SourceSpan


@dataclass(frozen=True, slots=True)
class InlineWeight:
    """An anonymous weight argument: ``weight f32[H, H]``."""

    type: TypeExpr
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class Call:
    """``func(args..., key = value, ...)``: an op or a template call."""

    func: str
    args: tuple[TensorExpr, ...]
    attrs: tuple[Attr, ...]
    span: SourceSpan
    func_span: SourceSpan


TensorExpr: TypeAlias = Call | Name | InlineWeight

# -- annotations ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Place:
    """``@target`` (allow) or ``@!target`` (deny)."""

    target: str
    deny: bool
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class Measure:
    """``key value [unit]``: one entry of a ``work`` or ``cost`` block."""

    key: str
    value: Expr
    unit: str | None
    span: SourceSpan
    unit_span: SourceSpan | None


@dataclass(frozen=True, slots=True)
class Work:
    """``work { flops F, bytes B }``."""

    items: tuple[Measure, ...]
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class Cost:
    """``cost { dev: time [unit], ... }``."""

    items: tuple[Measure, ...]
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class Parallel:
    """``parallel P``."""

    value: Expr
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class Streamable:
    """``streamable N``."""

    value: Expr
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class Memory:
    """``memory S [unit]``: bytes resident on the task's device."""

    value: Expr
    unit: str | None
    span: SourceSpan
    unit_span: SourceSpan | None


@dataclass(frozen=True, slots=True)
class Colocate:
    """``colocate NAME``: the task shares a device with every task of that class."""

    name: str
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class Backward:
    """``backward``: the task belongs to the backward pass of a training step."""

    span: SourceSpan


@dataclass(frozen=True, slots=True)
class Deadline:
    """``deadline [=] T [unit]``: the task (or, after ``graph NAME``, every sink) ends by T."""

    value: Expr
    unit: str | None
    span: SourceSpan
    unit_span: SourceSpan | None


Annotation: TypeAlias = Place | Work | Cost | Parallel | Streamable | Memory | Colocate | Backward | Deadline

# -- statements ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InputStmt:
    name: Name
    type: TypeExpr
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class WeightStmt:
    name: Name
    type: TypeExpr
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class CallStmt:
    """``target = call annotations``."""

    target: Name
    call: Call
    annotations: tuple[Annotation, ...]
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class AliasStmt:
    """``target = source`` (no task)."""

    target: Name
    source: Name
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class OutputStmt:
    names: tuple[Name, ...]
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class ReturnStmt:
    name: Name
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class ForStmt:
    """``for var in lo..hi { body }`` (half-open range)."""

    var: str
    lo: Expr
    hi: Expr
    body: tuple[Stmt, ...]
    span: SourceSpan
    var_span: SourceSpan


@dataclass(frozen=True, slots=True)
class TaskStmt:
    """``task name annotations``: a kernel-less task (explicit cost or work)."""

    name: Name
    annotations: tuple[Annotation, ...]
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class EdgeStmt:
    """``src -> dst [comm T [unit] | bytes S [unit]]``; ``kind`` is None for a plain edge."""

    src: Name
    dst: Name
    kind: str | None
    value: Expr | None
    unit: str | None
    span: SourceSpan
    unit_span: SourceSpan | None


@dataclass(frozen=True, slots=True)
class TemplateParam:
    """A template parameter: a tensor (no default) or a value (with a default)."""

    name: str
    default: Value | None
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class TemplateDef:
    name: str
    params: tuple[TemplateParam, ...]
    body: tuple[Stmt, ...]
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class ParamBind:
    name: str
    value: Expr
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class ParamDecl:
    binds: tuple[ParamBind, ...]
    span: SourceSpan


Stmt: TypeAlias = (
    InputStmt | WeightStmt | CallStmt | AliasStmt | OutputStmt | ReturnStmt
    | ForStmt | TaskStmt | EdgeStmt | TemplateDef | ParamDecl
)

# -- top level -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Include:
    path: str
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class GraphDef:
    name: str
    body: tuple[Stmt, ...]
    span: SourceSpan
    deadline: Deadline | None = None


Item: TypeAlias = Include | ParamDecl | TemplateDef | GraphDef


@dataclass(frozen=True, slots=True)
class Program:
    """One parsed file: its top-level items in source order, and its text."""

    file: str
    items: tuple[Item, ...]
    text: str

"""Lower a parsed DSL program to a :class:`~mapper.graph.TaskGraph`.

The lowerer resolves includes, evaluates params and integer expressions,
unrolls ``for`` loops, instantiates templates, infers every op's output type
and work through :mod:`mapper.ops`, applies annotations, and builds the edges.
Every user error becomes a :class:`~mapper.errors.DslError` with the span of
the construct at fault. docs/dsl.md is the reference for the semantics.

Public API: :func:`graph_from_text`, :func:`load_graph`, :func:`lower`,
:func:`read_source`.
"""

from __future__ import annotations

import difflib
import gc
import math
import os
from dataclasses import dataclass
from typing import Any, Iterable

from mapper import syntax as S
from mapper.errors import DslError, InputError, SourceSpan
from mapper.graph import DTYPE_BYTES, Edge, Operand, Placement, Task, TaskGraph, TensorType
from mapper.ops import OPS, OpError, infer
from mapper.parse import parse

__all__ = [
    "graph_from_text", "load_graph", "lower", "read_source", "MAX_TASKS", "MAX_LOOP_ITERATIONS",
    "TIME_UNITS", "BYTE_UNITS",
]

#: The most tasks one graph may have.
MAX_TASKS = 1_000_000
#: The most loop iterations one program may run (all loops together).
MAX_LOOP_ITERATIONS = 10_000_000
#: Integers must stay below this magnitude (64-bit signed).
MAX_INT = 2**63
#: Time units per second (``comm`` and ``cost`` values are divided by it; default s).
TIME_UNITS: dict[str, float] = {"ns": 1e9, "us": 1e6, "ms": 1e3, "s": 1.0}
#: Bytes per size unit (``bytes`` values; default B).
BYTE_UNITS: dict[str, float] = {
    "B": 1.0, "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30, "TiB": 2.0**40,
    "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
}
_WORK_KEYS = ("flops", "bytes", "bytes_read", "bytes_written")


def graph_from_text(text: str, file: str = "<string>") -> TaskGraph:
    """Parse and lower DSL ``text``; ``file`` names it in errors and anchors includes."""
    return lower(parse(text, file))


def load_graph(path: str | os.PathLike[str]) -> TaskGraph:
    """Read, parse and lower the DSL file at ``path``.

    Raises
    ------
    InputError
        When the file cannot be read (naming the file).
    DslError
        On any error in the program.
    """
    file = os.fspath(path)
    return graph_from_text(read_source(file), file)


def read_source(path: str | os.PathLike[str]) -> str:
    """The text of the DSL file at ``path``; InputError naming the file if unreadable."""
    return _read(os.fspath(path), None, None)


def lower(program: S.Program) -> TaskGraph:
    """Lower a parsed program (and the files it includes) to a task graph."""
    lowerer = _Lowerer(program)
    collecting = gc.isenabled()
    gc.disable()  # lowering allocates many acyclic objects; collection passes only cost time
    try:
        return lowerer.run()
    except RecursionError:
        raise DslError("the program is nested too deeply", span=SourceSpan(program.file, 1, 1),
                       source_line=_first_line(program.text)) from None
    finally:
        if collecting:
            gc.enable()


def _first_line(text: str) -> str | None:
    lines = text.splitlines()
    return lines[0] if lines else None


def _read(file: str, span: SourceSpan | None, err: Any) -> str:
    """The text of ``file``; errors name the file (and the include, via ``err``)."""
    try:
        with open(file, encoding="utf-8-sig") as fh:  # a leading BOM is dropped
            return fh.read()
    except UnicodeDecodeError:
        why = "it is not UTF-8 text"
    except IsADirectoryError:
        why = "it is a directory"
    except FileNotFoundError:
        why = "no such file"
    except OSError as exc:
        why = exc.strerror or str(exc)
    if err is None:
        raise InputError(f"cannot read '{file}': {why}", obj=file)
    raise err(f"cannot read included file '{file}': {why}", span)


def _hint(word: str, options: Iterable[str]) -> str | None:
    opts = list(options)
    if len(opts) > 20000:  # keep error paths fast on huge scopes
        return None
    found = difflib.get_close_matches(word, opts, n=1)
    return f"did you mean '{found[0]}'?" if found else None


@dataclass(slots=True)
class _Binding:
    """What a tensor name stands for: an operand, or an explicit (output-less) task."""

    operand: Operand | None
    task: int | None
    span: SourceSpan


@dataclass(slots=True)
class _Scope:
    """A graph body or one template instance."""

    tensors: dict[str, _Binding]
    values: dict[str, Any]
    prefix: str  # "" in the graph, "h1." in instance h1
    template: str | None  # the template's name in an instance
    allow: tuple[str, ...] = ()  # placement inherited from the instance's call
    deny: tuple[str, ...] = ()

    def full(self, local: str) -> str:
        return self.prefix + local


@dataclass(slots=True)
class _ExplicitEdge:
    src: int
    dst: int
    bytes: float
    comm: float | None
    span: SourceSpan


class _Lowerer:
    """One lowering run; holds the growing task list and the error context."""

    def __init__(self, program: S.Program) -> None:
        self.root = program
        self.lines: dict[str, list[str]] = {}
        self.params: dict[str, Any] = {}
        self.param_spans: dict[str, SourceSpan] = {}
        self.templates: dict[str, S.TemplateDef] = {}
        self.graph: S.GraphDef | None = None
        self.tasks: list[Task] = []
        self.task_names: dict[str, int] = {}
        self.inputs: list[tuple[str, TensorType]] = []
        self.outputs: list[str] = []
        self.explicit: list[_ExplicitEdge] = []
        self.iterations = 0
        self.instances: list[str] = []  # template call stack
        self.min_tasks_memo: dict[str, int] = {}
        self.included: set[str] = set()

    # -- errors -------------------------------------------------------------
    def err(self, message: str, span: SourceSpan | None, hint: str | None = None) -> DslError:
        line = None
        if span is not None:
            lines = self.lines.get(span.file)
            if lines is not None and 0 < span.line <= len(lines):
                line = lines[span.line - 1]
        return DslError(message, span=span, hint=hint, source_line=line)

    # -- program ------------------------------------------------------------
    def run(self) -> TaskGraph:
        self._load(self.root, [self._key(self.root.file)])
        if self.graph is None:
            raise self.err("no graph: the program defines no 'graph NAME { ... }'",
                           SourceSpan(self.root.file, 1, 1))
        g = self.graph
        scope = _Scope({}, dict(self.params), "", None)
        local_templates = self._templates(g.body, self.templates)
        self._block(g.body, scope, local_templates)
        if not self.tasks:
            raise self.err(f"empty graph: '{g.name}' has no tasks", g.span,
                           "add op calls (y = relu(x)) or tasks (task t cost { ... })")
        edges = self._edges()
        return TaskGraph(g.name, tuple(self.tasks), edges, tuple(self.inputs), tuple(self.outputs))

    @staticmethod
    def _key(file: str) -> str:
        return os.path.normcase(os.path.abspath(file)) if not file.startswith("<") else file

    def _load(self, program: S.Program, chain: list[str]) -> None:
        """Register the items of ``program``, splicing includes in place."""
        self.lines[program.file] = program.text.splitlines()
        self.included.add(chain[-1])
        for item in program.items:
            if isinstance(item, S.Include):
                self._include(program, item, chain)
            elif isinstance(item, S.ParamDecl):
                self._params(item)
            elif isinstance(item, S.TemplateDef):
                self._define_template(item, self.templates)
            elif self.graph is not None:
                raise self.err(f"a second graph '{item.name}'; a program has one graph", item.span,
                               f"the first is '{self.graph.name}' at {self.graph.span}")
            else:
                self.graph = item

    def _include(self, program: S.Program, inc: S.Include, chain: list[str]) -> None:
        base = os.path.dirname(program.file) if not program.file.startswith("<") else ""
        file = os.path.normpath(os.path.join(base, inc.path))
        key = self._key(file)
        if key in chain:
            names = [os.path.basename(c) for c in chain[chain.index(key):]] + [os.path.basename(file)]
            raise self.err("include cycle: " + " -> ".join(names), inc.span)
        if key in self.included:  # a diamond: each file is included once
            return
        text = _read(file, inc.span, self.err)
        self._load(parse(text, file), chain + [key])

    def _params(self, decl: S.ParamDecl) -> None:
        for b in decl.binds:
            if b.name in self.params:
                raise self.err(f"param '{b.name}' is already defined", b.span,
                               f"first defined at {self.param_spans[b.name]}")
            self.params[b.name] = self._eval(b.value, self.params)
            self.param_spans[b.name] = b.span

    def _define_template(self, t: S.TemplateDef, table: dict[str, S.TemplateDef]) -> None:
        if t.name in table:
            raise self.err(f"template '{t.name}' is already defined", t.span,
                           f"first defined at {table[t.name].span}")
        if t.name in OPS:
            raise self.err(f"template '{t.name}' has the name of an op", t.span, "rename the template")
        seen: set[str] = set()
        for p in t.params:
            if p.name in seen:
                raise self.err(f"template '{t.name}' has two parameters named '{p.name}'", p.span)
            seen.add(p.name)
        if not t.body or not isinstance(t.body[-1], S.ReturnStmt):
            raise self.err(f"template '{t.name}' must end with 'return NAME'", t.span)
        stray = _find_return(t.body[:-1])
        if stray is not None:
            raise self.err("'return' must be the last statement of a template", stray.span)
        table[t.name] = t

    def _templates(self, body: tuple[S.Stmt, ...], outer: dict[str, S.TemplateDef]) -> dict[str, S.TemplateDef]:
        """Templates defined in a graph body (visible in all of it), plus ``outer``."""
        table = dict(outer)
        for st in body:
            if isinstance(st, S.TemplateDef):
                if st.name in outer:
                    raise self.err(f"template '{st.name}' is already defined", st.span,
                                   f"first defined at {outer[st.name].span}")
                self._define_template(st, table)
        return table

    # -- expressions --------------------------------------------------------
    def _eval(self, e: S.Expr, values: dict[str, Any]) -> int | float:
        """Evaluate an integer/float expression (exact integer arithmetic)."""
        if isinstance(e, S.Num):
            return e.value
        if isinstance(e, S.Var):
            try:
                v = values[e.name]
            except KeyError:
                raise self.err(f"undefined name '{e.name}'", e.span, _hint(e.name, values)) from None
            if isinstance(v, (int, float)):
                return v
            raise self.err(f"'{e.name}' is {_kind(v)}, not a number", e.span)
        if isinstance(e, S.Neg):
            return -self._eval(e.operand, values)
        a = self._eval(e.left, values)
        b = self._eval(e.right, values)
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

    def _int(self, e: S.Expr, values: dict[str, Any], what: str, low: int | None = None) -> int:
        v = self._eval(e, values)
        if not isinstance(v, int):
            raise self.err(f"{what} must be an integer, got {v!r}", e.span)
        if low is not None and v < low:
            raise self.err(f"{what} must be >= {low}, got {v}", e.span)
        return v

    def _number(self, e: S.Expr, values: dict[str, Any], what: str) -> float:
        v = float(self._eval(e, values))
        if v < 0:
            raise self.err(f"{what} must be >= 0, got {v!r}", e.span)
        return v

    def _value(self, v: S.Value, values: dict[str, Any]) -> Any:
        """An attribute value: number, string, or tuple of integers."""
        if isinstance(v, S.Str):
            return v.value
        if isinstance(v, S.ListValue):
            return tuple(self._eval(x, values) for x in v.items)
        if isinstance(v, S.Var) and isinstance(values.get(v.name), (str, tuple)):
            return values[v.name]
        return self._eval(v, values)

    def _unit(self, value: float, unit: str | None, span: SourceSpan | None, table: dict[str, float],
              what: str) -> float:
        """``value`` in base units: sizes multiply by ``BYTE_UNITS``, times divide by ``TIME_UNITS``
        (so 40 us is exactly the float nearest 4e-05)."""
        if unit is None:
            return value
        try:
            return value / table[unit] if table is TIME_UNITS else value * table[unit]
        except KeyError:
            same = [u for u in table if u.lower() == unit.lower()]
            hint = (f"did you mean '{same[0]}'?" if same else _hint(unit, table)) or (
                f"{what} units: " + ", ".join(table))
            raise self.err(f"unknown {what} unit '{unit}'", span, hint) from None

    # -- names and types ----------------------------------------------------
    def _name(self, n: S.Name, values: dict[str, Any]) -> str:
        if not n.indices:
            return n.base
        parts = []
        for e in n.indices:
            parts.append(str(self._int(e, values, "a name index", low=0)))
        return n.base + "_".join(parts)

    def _type(self, t: S.TypeExpr, values: dict[str, Any]) -> TensorType:
        if t.dtype not in DTYPE_BYTES:
            raise self.err(f"unknown dtype '{t.dtype}'", t.dtype_span,
                           _hint(t.dtype, DTYPE_BYTES) or "dtypes: " + " ".join(DTYPE_BYTES))
        shape = tuple(self._int(d, values, "a dimension", low=1) for d in t.dims)
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
            nnz = self._int(a.value, values, "nnz", low=0)
            if nnz > shape[0] * shape[1]:
                raise self.err(f"nnz = {nnz} exceeds the matrix size {shape[0]}*{shape[1]}", a.span)
        if nnz is None:
            raise self.err("csr needs nnz = ...", lay.span)
        return TensorType(t.dtype, shape, "csr", nnz)

    def _lookup(self, n: S.Name, scope: _Scope) -> tuple[str, _Binding]:
        local = self._name(n, scope.values)
        b = scope.tensors.get(local)
        if b is None:
            hint = _hint(local, scope.tensors)
            if hint is None and scope.template is not None:
                hint = f"a template sees only its parameters and its own names (in '{scope.template}')"
            if local in scope.values:
                raise self.err(f"'{local}' is a number, not a tensor", n.span)
            raise self.err(f"undefined name '{local}'", n.span, hint)
        return local, b

    def _operand(self, n: S.Name, scope: _Scope) -> Operand:
        local, b = self._lookup(n, scope)
        if b.operand is None:
            raise self.err(f"'{local}' is a task without an output tensor", n.span,
                           "connect explicit tasks with '->'")
        return b.operand

    def _define(self, n: S.Name, scope: _Scope, binding: _Binding) -> str:
        local = self._name(n, scope.values)
        self._bind(local, n.span, scope, binding)
        return local

    def _bind(self, local: str, span: SourceSpan, scope: _Scope, binding: _Binding) -> None:
        self._check_free(local, span, scope)
        scope.tensors[local] = binding

    def _check_free(self, local: str, span: SourceSpan, scope: _Scope) -> None:
        old = scope.tensors.get(local)
        if old is not None:
            raise self.err(f"'{local}' is already defined; names are assigned once", span,
                           f"first defined at {old.span}")
        if local in scope.values:
            raise self.err(f"'{local}' is already a number (a param or loop variable)", span)

    # -- statements ---------------------------------------------------------
    def _block(self, body: tuple[S.Stmt, ...], scope: _Scope, templates: dict[str, S.TemplateDef]) -> None:
        for st in body:
            kind = type(st)
            if kind is S.CallStmt:
                self._call_stmt(st, scope, templates)
            elif kind is S.AliasStmt:
                _, b = self._lookup(st.source, scope)
                self._define(st.target, scope, _Binding(b.operand, b.task, st.target.span))
            elif kind is S.ForStmt:
                self._for(st, scope, templates)
            elif kind is S.InputStmt or kind is S.WeightStmt:
                self._tensor_decl(st, scope)
            elif kind is S.TaskStmt:
                self._task_stmt(st, scope)
            elif kind is S.EdgeStmt:
                self._edge_stmt(st, scope)
            elif kind is S.OutputStmt:
                self._output(st, scope)
            elif kind is S.ReturnStmt:
                if scope.template is None:
                    raise self.err("'return' outside a template", st.span)
            elif kind is S.TemplateDef:
                if st.name not in templates or templates[st.name] is not st:
                    raise self.err("templates are defined at the top level or directly in the graph",
                                   st.span)
            else:  # ParamDecl
                raise self.err("'param' belongs at the top level of a file", st.span)

    def _tensor_decl(self, st: S.InputStmt | S.WeightStmt, scope: _Scope) -> None:
        is_input = isinstance(st, S.InputStmt)
        if is_input and scope.template is not None:
            raise self.err("'input' inside a template; pass tensors as template parameters", st.span)
        local = self._name(st.name, scope.values)
        ty = self._type(st.type, scope.values)
        name = scope.full(local)
        op = Operand("input" if is_input else "weight", name, ty)
        self._bind(local, st.name.span, scope, _Binding(op, None, st.name.span))
        if is_input:
            self.inputs.append((name, ty))

    def _output(self, st: S.OutputStmt, scope: _Scope) -> None:
        if scope.template is not None:
            raise self.err("'output' inside a template; use 'return'", st.span)
        for n in st.names:
            local, b = self._lookup(n, scope)
            if b.task is None:
                raise self.err(f"'{local}' is a graph {b.operand.kind}, not a task's output", n.span)
            name = self.tasks[b.task].name
            if name in self.outputs:
                raise self.err(f"'{local}' is already an output", n.span)
            self.outputs.append(name)

    def _for(self, st: S.ForStmt, scope: _Scope, templates: dict[str, S.TemplateDef]) -> None:
        lo = self._int(st.lo, scope.values, "a loop bound")
        hi = self._int(st.hi, scope.values, "a loop bound")
        if st.var in scope.tensors:
            raise self.err(f"loop variable '{st.var}' has the name of a tensor", st.var_span)
        if st.var in scope.values:
            raise self.err(f"loop variable '{st.var}' hides a param or an outer loop variable", st.var_span)
        trip = max(0, hi - lo)
        if trip == 0:
            return
        tasks, iters = self._estimate(st.body, scope.values, templates)
        if self.iterations + trip * (1 + iters) > MAX_LOOP_ITERATIONS:
            raise self.err(
                f"too large: this loop runs at least {trip * (1 + iters):,} iterations "
                f"(the limit is {MAX_LOOP_ITERATIONS:,} in all)", st.span)
        if len(self.tasks) + trip * tasks > MAX_TASKS:
            raise self.err(f"too large: this loop makes at least {trip * tasks:,} tasks "
                           f"(the limit is {MAX_TASKS:,})", st.span)
        self.iterations += trip
        values = scope.values
        try:
            for i in range(lo, hi):
                values[st.var] = i
                self._block(st.body, scope, templates)
        finally:
            values.pop(st.var, None)

    def _estimate(self, body: tuple[S.Stmt, ...], values: dict[str, Any],
                  templates: dict[str, S.TemplateDef]) -> tuple[int, int]:
        """Lower bounds on (tasks, loop iterations) of one run of ``body``.

        Inner loop bounds that cannot be evaluated yet count as empty loops.
        """
        tasks = iters = 0
        for st in body:
            if isinstance(st, S.CallStmt):
                tasks += self._call_tasks(st.call, templates)
            elif isinstance(st, S.TaskStmt):
                tasks += 1
            elif isinstance(st, S.ForStmt):
                try:
                    trip = max(0, int(self._eval(st.hi, values)) - int(self._eval(st.lo, values)))
                except DslError:
                    continue
                t, i = self._estimate(st.body, values, templates)
                tasks += trip * t
                iters += trip * (1 + i)
            if tasks > MAX_TASKS or iters > MAX_LOOP_ITERATIONS:
                break
        return tasks, iters

    def _call_tasks(self, call: S.Call, templates: dict[str, S.TemplateDef]) -> int:
        n = sum(self._call_tasks(a, templates) for a in call.args if isinstance(a, S.Call))
        t = templates.get(call.func)
        if t is None:
            return n + 1
        if t.name not in self.min_tasks_memo:
            self.min_tasks_memo[t.name] = 0  # a recursive template counts 0 (and fails later)
            self.min_tasks_memo[t.name] = self._estimate(t.body, self.params, templates)[0]
        return n + self.min_tasks_memo[t.name]

    # -- calls ------------------------------------------------------------------
    def _call_stmt(self, st: S.CallStmt, scope: _Scope, templates: dict[str, S.TemplateDef]) -> None:
        local = self._name(st.target, scope.values)
        self._check_free(local, st.target.span, scope)  # before the call makes any task
        counters: dict[str, int] = {}
        full = scope.full(local)
        b = self._call(st.call, scope, templates, full, full, counters, st.annotations)
        self._bind(local, st.target.span, scope, _Binding(b.operand, b.task, st.target.span))

    def _call(self, call: S.Call, scope: _Scope, templates: dict[str, S.TemplateDef], name: str,
              stmt: str, counters: dict[str, int], annotations: tuple[S.Annotation, ...] = ()) -> _Binding:
        """Lower one call as the task or instance ``name``; nested calls become ``stmt.OP[.K]``."""
        template = templates.get(call.func)
        if template is None and call.func not in OPS:
            names = list(OPS) + list(templates)
            raise self.err(f"unknown op or template '{call.func}'", call.func_span,
                           _hint(call.func, names) or "see docs/ops.md for the ops")
        operands: list[Operand] = []
        weights = 0
        for a in call.args:
            if isinstance(a, S.Name):
                operands.append(self._operand(a, scope))
            elif isinstance(a, S.InlineWeight):
                operands.append(Operand("weight", f"{name}.w{weights}", self._type(a.type, scope.values)))
                weights += 1
            else:
                k = counters[a.func] = counters.get(a.func, 0) + 1
                inner = f"{stmt}.{a.func}" if k == 1 else f"{stmt}.{a.func}.{k}"
                op = self._call(a, scope, templates, inner, stmt, counters).operand
                if op is None:
                    raise self.err(f"'{a.func}' returns a task without an output tensor", a.span)
                operands.append(op)
        if template is not None:
            return self._instance(template, call, operands, scope, templates, name, annotations)
        attrs: dict[str, Any] = {}
        for at in call.attrs:
            if at.key in attrs:
                raise self.err(f"attribute '{at.key}' is given twice", at.key_span)
            attrs[at.key] = self._value(at.value, scope.values)
        try:
            info = infer(call.func, [o.type for o in operands], attrs)
        except OpError as exc:
            span = call.span
            if exc.arg is not None and exc.arg < len(call.args):
                span = call.args[exc.arg].span
            elif exc.attr is not None:
                span = next((at.span for at in call.attrs if at.key == exc.attr), call.span)
            raise self.err(exc.message, span, exc.hint) from None
        idx = self._new_task(name, call.func, call.span, scope, annotations, operands=tuple(operands),
                             attrs=info.attrs, output=info.output, flops=info.flops,
                             bytes_read=info.bytes_read, bytes_written=info.bytes_written)
        return _Binding(Operand("task", name, info.output, idx), idx, call.span)

    def _instance(self, t: S.TemplateDef, call: S.Call, operands: list[Operand], scope: _Scope,
                  templates: dict[str, S.TemplateDef], name: str,
                  annotations: tuple[S.Annotation, ...]) -> _Binding:
        """Instantiate template ``t`` with prefix ``name``; return what it returns."""
        if t.name in self.instances:
            chain = self.instances[self.instances.index(t.name):] + [t.name]
            raise self.err("recursive template: " + " -> ".join(chain), call.span)
        need = self._call_tasks(call, templates)
        if len(self.tasks) + need > MAX_TASKS:
            raise self.err(f"too large: this call makes at least {need:,} tasks (the limit is {MAX_TASKS:,})",
                           call.span)
        tensor_params = [p for p in t.params if p.default is None]
        if len(operands) != len(tensor_params):
            raise self.err(f"template '{t.name}' takes {len(tensor_params)} tensor argument"
                           f"{'s' if len(tensor_params) != 1 else ''}, got {len(operands)}", call.span,
                           f"{t.name}({', '.join(p.name for p in t.params)}) at {t.span}")
        values = dict(self.params)
        given = {}
        for at in call.attrs:
            if at.key in given:
                raise self.err(f"argument '{at.key}' is given twice", at.key_span)
            given[at.key] = self._value(at.value, scope.values)
        value_params = {p.name: p for p in t.params if p.default is not None}
        for key in given:
            if key not in value_params:
                raise self.err(f"template '{t.name}' has no value parameter '{key}'",
                               next(a.key_span for a in call.attrs if a.key == key),
                               _hint(key, value_params) or f"parameters: {', '.join(p.name for p in t.params)}")
        for p in value_params.values():
            values[p.name] = given[p.name] if p.name in given else self._value(p.default, self.params)
        allow, deny = scope.allow, scope.deny
        for ann in annotations:
            if not isinstance(ann, S.Place):
                raise self.err("a template call takes only placement annotations (@...)", ann.span,
                               "put work/cost/parallel/streamable on the op calls inside the template")
        if annotations:
            allow, deny = self._placement(annotations, allow, deny)
        inner = _Scope({}, values, name + ".", t.name, allow, deny)
        for p, op in zip(tensor_params, operands):
            if p.name in values:
                raise self.err(f"tensor parameter '{p.name}' of template '{t.name}' has the name of a "
                               "param or value parameter", p.span)
            inner.tensors[p.name] = _Binding(op, op.producer, p.span)
        self.instances.append(t.name)
        try:
            self._block(t.body, inner, templates)
        finally:
            self.instances.pop()
        ret = t.body[-1]
        _, b = self._lookup(ret.name, inner)
        return _Binding(b.operand, b.task, call.span)

    # -- tasks and annotations ------------------------------------------------------
    def _task_stmt(self, st: S.TaskStmt, scope: _Scope) -> None:
        local = self._name(st.name, scope.values)
        if not any(isinstance(a, (S.Work, S.Cost)) for a in st.annotations):
            raise self.err(f"task '{local}' needs a cost {{ ... }} or a work {{ ... }}", st.span)
        self._bind(local, st.name.span, scope, _Binding(None, None, st.name.span))
        idx = self._new_task(scope.full(local), "task", st.span, scope, st.annotations)
        scope.tensors[local] = _Binding(None, idx, st.name.span)

    def _new_task(self, name: str, op: str, span: SourceSpan, scope: _Scope,
                  annotations: tuple[S.Annotation, ...], **fields: Any) -> int:
        if name in self.task_names:
            first = self.tasks[self.task_names[name]].span
            raise self.err(f"duplicate task name '{name}'", span, f"first at {first}" if first else None)
        if len(self.tasks) >= MAX_TASKS:
            raise self.err(f"too large: more than {MAX_TASKS:,} tasks", span)
        allow, deny = scope.allow, scope.deny
        if annotations:
            fields, allow, deny = self._annotate(annotations, scope, fields, allow, deny)
        idx = len(self.tasks)
        placement = Placement(allow, deny) if (allow or deny) else _ANYWHERE
        self.tasks.append(Task(idx, name, op, placement=placement, span=span, **fields))
        self.task_names[name] = idx
        return idx

    def _annotate(self, annotations: tuple[S.Annotation, ...], scope: _Scope, fields: dict[str, Any],
                  allow: tuple[str, ...], deny: tuple[str, ...]):
        seen: dict[type, SourceSpan] = {}
        values = scope.values
        for ann in annotations:
            kind = type(ann)
            if kind is S.Place:
                continue
            if kind in seen:
                raise self.err(f"'{_ANN_WORD[kind]}' is given twice", ann.span, f"first at {seen[kind]}")
            seen[kind] = ann.span
            if kind is S.Work:
                fields.update(self._work(ann, values))
            elif kind is S.Cost:
                fields["explicit_cost"] = self._cost(ann, values)
            elif kind is S.Parallel:
                p = self._number(ann.value, values, "parallel")
                if p > 1:
                    raise self.err(f"parallel must be between 0 and 1, got {p!r}", ann.value.span)
                fields["parallel"] = p
            else:
                fields["streamable"] = self._int(ann.value, values, "streamable", low=1)
        if any(type(a) is S.Place for a in annotations):
            allow, deny = self._placement(annotations, allow, deny)
        return fields, allow, deny

    def _placement(self, annotations: tuple[S.Annotation, ...], outer_allow: tuple[str, ...],
                   outer_deny: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Merge this call's ``@`` annotations with the placement of the enclosing instance."""
        allow: list[str] = []
        deny: list[str] = list(outer_deny)
        first: S.Place | None = None
        for a in annotations:
            if not isinstance(a, S.Place):
                continue
            first = first or a
            target = deny if a.deny else allow
            if a.target in (deny[len(outer_deny):] if a.deny else allow):
                raise self.err(f"'{a.target}' appears twice in the placement", a.span)
            if a.target not in target:
                target.append(a.target)
        if outer_allow and allow:
            both = [x for x in allow if x in outer_allow]
            if not both:
                raise self.err("this placement excludes every device the template call allows", first.span,
                               "the call allows " + " ".join("@" + x for x in outer_allow))
            allow = both
        elif outer_allow:
            allow = list(outer_allow)
        clash = [x for x in allow if x in deny]
        if clash:
            raise self.err(f"'{clash[0]}' is both allowed and denied", first.span)
        return tuple(allow), tuple(deny)

    def _work(self, w: S.Work, values: dict[str, Any]) -> dict[str, float]:
        got: dict[str, float] = {}
        for m in w.items:
            if m.key not in _WORK_KEYS:
                raise self.err(f"unknown work key '{m.key}'", m.span,
                               _hint(m.key, _WORK_KEYS) or "keys: " + ", ".join(_WORK_KEYS))
            if m.key in got:
                raise self.err(f"'{m.key}' is given twice", m.span)
            v = self._number(m.value, values, m.key)
            if m.key == "flops":
                if m.unit is not None:
                    raise self.err("flops take no unit", m.unit_span)
            else:
                v = self._unit(v, m.unit, m.unit_span, BYTE_UNITS, "size")
            got[m.key] = v
        if "bytes" in got and ("bytes_read" in got or "bytes_written" in got):
            raise self.err("give either bytes or bytes_read/bytes_written", w.span)
        out: dict[str, float] = {}
        if "flops" in got:
            out["flops"] = got["flops"]
        if "bytes" in got:
            out["bytes_read"], out["bytes_written"] = got["bytes"], 0.0
        for k in ("bytes_read", "bytes_written"):
            if k in got:
                out[k] = got[k]
        return out

    def _cost(self, c: S.Cost, values: dict[str, Any]) -> tuple[tuple[str, float], ...]:
        got: dict[str, float] = {}
        for m in c.items:
            if m.key in got:
                raise self.err(f"device '{m.key}' is given twice", m.span)
            t = self._number(m.value, values, "a time")
            got[m.key] = self._unit(t, m.unit, m.unit_span, TIME_UNITS, "time")
        return tuple(sorted(got.items()))

    # -- edges ------------------------------------------------------------------
    def _edge_stmt(self, st: S.EdgeStmt, scope: _Scope) -> None:
        ends = []
        for n in (st.src, st.dst):
            local, b = self._lookup(n, scope)
            if b.task is None:
                raise self.err(f"'{local}' is a graph {b.operand.kind}, not a task", n.span)
            ends.append(b.task)
        size, comm = 0.0, None
        if st.kind == "comm":
            comm = self._unit(self._number(st.value, scope.values, "comm"), st.unit, st.unit_span,
                              TIME_UNITS, "time")
        elif st.kind == "bytes":
            size = self._unit(self._number(st.value, scope.values, "bytes"), st.unit, st.unit_span,
                              BYTE_UNITS, "size")
        if ends[0] == ends[1]:
            raise self.err(f"task '{self.tasks[ends[0]].name}' cannot depend on itself", st.span)
        self.explicit.append(_ExplicitEdge(ends[0], ends[1], size, comm, st.span))

    def _edges(self) -> tuple[Edge, ...]:
        """Data edges (one per producer/consumer pair) and explicit edges, by (dst, src)."""
        found: dict[tuple[int, int], tuple[float, float | None, str]] = {}
        tasks = self.tasks
        for t in tasks:
            for o in t.operands:
                if o.producer is not None and (o.producer, t.index) not in found:
                    found[(o.producer, t.index)] = (float(o.type.nbytes), None, o.name)
        spans: dict[tuple[int, int], SourceSpan] = {}
        for e in self.explicit:
            key = (e.src, e.dst)
            a, b = tasks[e.src].name, tasks[e.dst].name
            if key in spans:
                raise self.err(f"duplicate edge '{a} -> {b}'", e.span, f"first at {spans[key]}")
            if key in found:
                raise self.err(f"edge '{a} -> {b}' duplicates the data dependency of '{b}' on '{a}'", e.span)
            found[key] = (e.bytes, e.comm, "")
            spans[key] = e.span
        if any(e.src > e.dst for e in self.explicit):
            self._check_cycles()
        order = sorted(found, key=lambda k: (k[1], k[0]))
        return tuple(Edge(i, s, d, found[(s, d)][0], found[(s, d)][1], found[(s, d)][2])
                     for i, (s, d) in enumerate(order))

    def _check_cycles(self) -> None:
        """Raise at the first explicit edge (in source order) that closes a cycle.

        Binary search over prefixes of the explicit edges, each tested with
        Kahn's topological sort (A. B. Kahn, "Topological sorting of large
        networks", CACM 5(11), 1962); the cycle shown is a breadth-first path.
        """
        n = len(self.tasks)
        base: list[list[int]] = [[] for _ in range(n)]
        for t in self.tasks:
            for o in t.operands:
                if o.producer is not None:
                    base[o.producer].append(t.index)

        def cyclic(k: int) -> bool:
            succ = [list(s) for s in base]
            indeg = [0] * n
            for e in self.explicit[:k]:
                succ[e.src].append(e.dst)
            for s in succ:
                for d in s:
                    indeg[d] += 1
            stack = [i for i in range(n) if indeg[i] == 0]
            seen = 0
            while stack:
                i = stack.pop()
                seen += 1
                for d in succ[i]:
                    indeg[d] -= 1
                    if indeg[d] == 0:
                        stack.append(d)
            return seen < n

        if not cyclic(len(self.explicit)):
            return
        lo, hi = 1, len(self.explicit)  # the smallest k with a cycle in the first k edges
        while lo < hi:
            mid = (lo + hi) // 2
            if cyclic(mid):
                hi = mid
            else:
                lo = mid + 1
        bad = self.explicit[lo - 1]
        succ = [list(s) for s in base]
        for e in self.explicit[: lo - 1]:
            succ[e.src].append(e.dst)
        path = _path(succ, bad.dst, bad.src)
        names = " -> ".join(self.tasks[i].name for i in path + [bad.dst])
        raise self.err(f"edge '{self.tasks[bad.src].name} -> {self.tasks[bad.dst].name}' makes a cycle: {names}",
                       bad.span)


_ANYWHERE = Placement()
_ANN_WORD = {S.Work: "work", S.Cost: "cost", S.Parallel: "parallel", S.Streamable: "streamable"}


def _path(succ: list[list[int]], a: int, b: int) -> list[int]:
    """A shortest path from ``a`` to ``b`` (breadth first, smallest index first)."""
    parent = {a: a}
    queue = [a]
    for i in queue:
        if i == b:
            break
        for d in sorted(succ[i]):
            if d not in parent:
                parent[d] = i
                queue.append(d)
    path = [b]
    while path[-1] != a:
        path.append(parent[path[-1]])
    return path[::-1]


def _find_return(body: tuple[S.Stmt, ...]) -> S.ReturnStmt | None:
    for st in body:
        if isinstance(st, S.ReturnStmt):
            return st
        if isinstance(st, S.ForStmt):
            found = _find_return(st.body)
            if found is not None:
                return found
    return None


def _kind(v: Any) -> str:
    return "a string" if isinstance(v, str) else "a list"


def _short(v: int) -> str:
    s = str(v)
    return s if len(s) <= 30 else f"{s[:12]}...({len(s)} digits)"

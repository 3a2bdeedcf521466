"""Lower a parsed DSL program to a :class:`~mapper.core.graph.TaskGraph`.

The lowerer resolves includes, evaluates params and integer expressions,
unrolls ``for`` loops, instantiates templates, infers every op's output type
and work through :mod:`mapper.core.ops`, applies annotations, and builds the edges.
Every user error becomes a :class:`~mapper.errors.DslError` with the span of
the construct at fault. docs/dsl.md is the reference for the semantics.

Public API: :func:`lower`; reading a file and lowering it is
:mod:`mapper.frontend.load`'s (:func:`~mapper.frontend.load.load_graph`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from mapper.core.files import Unreadable, read_text
from mapper.core.graph import Operand, Placement, Task, TaskGraph, TensorType
from mapper.core.heap import collection_paused
from mapper.core.ops import OPS, OpError, infer
from mapper.errors import DslError, InputError, SourceSpan
from mapper.frontend import syntax as S
from mapper.frontend.lowering.annotations import Annotator
from mapper.frontend.lowering.edges import ExplicitEdge, graph_edges
from mapper.frontend.lowering.values import (
    BYTE_UNITS,
    MAX_WORK,
    TIME_UNITS,
    Evaluator,
    check_elements,
    check_overrides,
    hint,
    literal_seconds,
)
from mapper.frontend.parse import parse

__all__ = ["lower", "MAX_TASKS", "OP_TASK_WEIGHT", "TASK_LIMITS", "MAX_LOOP_ITERATIONS"]

#: The file name endings an include may have: includes are task-graph programs (.tg) or fragments
#: of them (.inc) only, so that no other file on the machine is read, or echoed in an error.
INCLUDE_SUFFIXES = (".tg", ".inc")
#: The most tasks one graph may have: a million tasks with explicit costs (huge workflows and
#: generated DAGs, docs/huge.md), or a fifth as many tasks of ops, whose lowering, shape inference,
#: fusion and summary take some 0.1 ms and 2 KiB each, so that a graph at either limit is checked in
#: well under a minute and 1 GiB. An op task counts :data:`OP_TASK_WEIGHT` against the budget.
MAX_TASKS = 1_000_000
OP_TASK_WEIGHT = 5
#: The two limits as the messages give them.
TASK_LIMITS = f"{MAX_TASKS // OP_TASK_WEIGHT:,} tasks of ops, or {MAX_TASKS:,} with explicit costs"
#: The most loop iterations one program may run (all loops together).
MAX_LOOP_ITERATIONS = 10_000_000


def lower(program: S.Program, params: Mapping[str, int | float] | None = None) -> TaskGraph:
    """Lower a parsed program (and its includes) to a task graph; ``params`` replace the values
    of its top-level params (``--param``, :func:`~mapper.frontend.lowering.values.check_overrides`)."""
    lowerer = _Lowerer(program, dict(params or {}))
    try:
        with collection_paused():
            graph = lowerer.run()
    except RecursionError:
        raise DslError("the program is nested too deeply", span=SourceSpan(program.file, 1, 1),
                       source_line=next(iter(program.text.splitlines()), None)) from None
    # the lowerer is a reference cycle (its helpers hold its bound ``err``) holding the syntax tree
    # and the text's lines: broken here, they go by reference counting, also when a huge graph's
    # heap is frozen next (mapper.core.heap), which would keep an uncollected cycle for good
    vars(lowerer).clear()
    return graph


def read_dsl_file(file: str, span: SourceSpan | None, err: Any) -> str:
    """The text of ``file`` (a regular file, at most :data:`mapper.core.files.MAX_INPUT_BYTES`);
    errors name the file (and the include, via ``err``)."""
    try:
        return read_text(file)
    except Unreadable as exc:
        why = exc.why
    if err is None:
        raise InputError(f"cannot read '{file}': {why}", obj=file)
    raise err(f"cannot read included file '{file}': {why}", span)


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


class _Lowerer:
    """One lowering run; holds the growing task list and the error context."""
    def __init__(self, program: S.Program, overrides: dict[str, int | float] | None = None) -> None:
        self.root = program
        self.overrides = overrides or {}
        self.texts: dict[str, str] = {}  # each file's text, split into lines only for a message
        self.lines: dict[str, list[str]] = {}
        self.params: dict[str, Any] = {}
        self.param_spans: dict[str, SourceSpan] = {}
        self.templates: dict[str, S.TemplateDef] = {}
        self.graph: S.GraphDef | None = None
        self.tasks: list[Task] = []
        self.task_names: dict[str, int] = {}
        self.inputs: list[tuple[str, TensorType]] = []
        self.outputs: list[str] = []
        self.output_set: set[str] = set()  # the same names, for a constant-time look-up
        self.explicit: list[ExplicitEdge] = []
        self.iterations = 0
        self.instances: list[str] = []  # template call stack
        self.min_tasks_memo: dict[str, int] = {}
        self.units = 0  # tasks so far, an op task counting OP_TASK_WEIGHT (MAX_TASKS)
        self.included: set[str] = set()
        self.ev = Evaluator(self.err)
        self.ann = Annotator(self.ev, self.err)

    # -- errors -------------------------------------------------------------
    def err(self, message: str, span: SourceSpan | None, hint: str | None = None) -> DslError:
        line = None
        if span is not None:
            lines = self.lines.get(span.file)
            if lines is None and span.file in self.texts:
                lines = self.lines[span.file] = self.texts[span.file].splitlines()
            if lines is not None and 0 < span.line <= len(lines):
                line = lines[span.line - 1]
        return DslError(message, span=span, hint=hint, source_line=line)

    # -- program ------------------------------------------------------------
    def run(self) -> TaskGraph:
        self._load(self.root, [self._key(self.root.file)])
        check_overrides(self.overrides, self.params)
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
        total = sum(float(t.flops or 0.0) for t in self.tasks)
        if not total <= MAX_WORK:
            given = ", ".join(f"--param {k}={v}" for k, v in self.overrides.items())
            raise self.err(f"too large: graph '{g.name}' does {total:.3g} FLOPs in all (at most {MAX_WORK:g}); "
                           f"check its sizes (its params{', and ' + given if given else ''})", g.span)
        edges = graph_edges(self.tasks, self.explicit, self.err)
        if g.deadline is not None:
            self._graph_deadline(self.ann.deadline(g.deadline, scope.values), edges)
        return TaskGraph(g.name, tuple(self.tasks), edges, tuple(self.inputs), tuple(self.outputs))

    def _graph_deadline(self, seconds: float, edges: tuple) -> None:
        """A graph's deadline is every sink task's (the earlier one where a sink has its own)."""
        has_succ = {e.src for e in edges}
        for i, t in enumerate(self.tasks):
            if i not in has_succ and (t.deadline is None or seconds < t.deadline):
                self.tasks[i] = replace(t, deadline=seconds)

    @staticmethod
    def _key(file: str) -> str:
        return os.path.normcase(os.path.abspath(file)) if not file.startswith("<") else file

    def _load(self, program: S.Program, chain: list[str]) -> None:
        """Register the items of ``program``, splicing includes in place."""
        self.texts[program.file] = program.text
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
        if not inc.path.endswith(INCLUDE_SUFFIXES):
            raise self.err(f"an include names a DSL file ending in {' or '.join(INCLUDE_SUFFIXES)}, "
                           f"got '{inc.path}'", inc.span,
                           "include only task-graph programs and fragments, relative to the including file")
        base = os.path.dirname(program.file) if not program.file.startswith("<") else ""
        file = os.path.normpath(os.path.join(base, inc.path))
        key = self._key(file)
        if key in chain:
            names = [os.path.basename(c) for c in chain[chain.index(key):]] + [os.path.basename(file)]
            raise self.err("include cycle: " + " -> ".join(names), inc.span)
        if key in self.included:  # a diamond: each file is included once
            return
        text = read_dsl_file(file, inc.span, self.err)
        self._load(parse(text, file), chain + [key])

    def _params(self, decl: S.ParamDecl) -> None:
        for b in decl.binds:
            if b.name in self.params:
                raise self.err(f"param '{b.name}' is already defined", b.span,
                               f"first defined at {self.param_spans[b.name]}")
            if b.name in self.overrides:  # --param: the given value, checked as the file's would be
                self.params[b.name] = self.ev.eval(S.Num(self.overrides[b.name], b.span), self.params)
            else:
                self.params[b.name] = self.ev.eval(b.value, self.params)
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

    def _lookup(self, n: S.Name, scope: _Scope) -> tuple[str, _Binding]:
        local = self.ev.name(n, scope.values)
        b = scope.tensors.get(local)
        if b is None:
            tip = hint(local, scope.tensors)
            if tip is None and scope.template is not None:
                tip = f"a template sees only its parameters and its own names (in '{scope.template}')"
            if local in scope.values:
                raise self.err(f"'{local}' is a number, not a tensor", n.span)
            raise self.err(f"undefined name '{local}'", n.span, tip)
        return local, b

    def _operand(self, n: S.Name, scope: _Scope) -> Operand:
        local, b = self._lookup(n, scope)
        if b.operand is None:
            raise self.err(f"'{local}' is a task without an output tensor", n.span,
                           "connect explicit tasks with '->'")
        return b.operand

    def _define(self, n: S.Name, scope: _Scope, binding: _Binding) -> str:
        local = self.ev.name(n, scope.values)
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
            if isinstance(st, S.CallStmt):
                self._call_stmt(st, scope, templates)
            elif isinstance(st, S.AliasStmt):
                _, b = self._lookup(st.source, scope)
                self._define(st.target, scope, _Binding(b.operand, b.task, st.target.span))
            elif isinstance(st, S.ForStmt):
                self._for(st, scope, templates)
            elif isinstance(st, (S.InputStmt, S.WeightStmt)):
                self._tensor_decl(st, scope)
            elif isinstance(st, S.TaskStmt):
                self._task_stmt(st, scope)
            elif isinstance(st, S.EdgeStmt):
                self._edge_stmt(st, scope)
            elif isinstance(st, S.OutputStmt):
                self._output(st, scope)
            elif isinstance(st, S.ReturnStmt):
                if scope.template is None:
                    raise self.err("'return' outside a template", st.span)
            elif isinstance(st, S.TemplateDef):
                if st.name not in templates or templates[st.name] is not st:
                    raise self.err("templates are defined at the top level or directly in the graph",
                                   st.span)
            else:  # ParamDecl
                raise self.err("'param' belongs at the top level of a file", st.span)

    def _tensor_decl(self, st: S.InputStmt | S.WeightStmt, scope: _Scope) -> None:
        is_input = isinstance(st, S.InputStmt)
        if is_input and scope.template is not None:
            raise self.err("'input' inside a template; pass tensors as template parameters", st.span)
        local = self.ev.name(st.name, scope.values)
        ty = self.ev.type(st.type, scope.values)
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
                raise self.err(f"'{local}' is a graph {_operand_kind(b)}, not a task's output", n.span)
            name = self.tasks[b.task].name
            if name in self.output_set:
                raise self.err(f"'{local}' is already an output", n.span)
            self.output_set.add(name)
            self.outputs.append(name)

    def _for(self, st: S.ForStmt, scope: _Scope, templates: dict[str, S.TemplateDef]) -> None:
        lo = self.ev.integer(st.lo, scope.values, "a loop bound")
        hi = self.ev.integer(st.hi, scope.values, "a loop bound")
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
        if self.units + trip * tasks > MAX_TASKS:
            raise self.err(f"too large: this loop makes more tasks than a graph may have (the limit is "
                           f"{TASK_LIMITS})", st.span)
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
        """Lower bounds on (tasks, loop iterations) of one run of ``body``, an op task counting
        :data:`OP_TASK_WEIGHT` tasks.

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
                    trip = max(0, int(self.ev.eval(st.hi, values)) - int(self.ev.eval(st.lo, values)))
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
            return n + OP_TASK_WEIGHT
        if t.name not in self.min_tasks_memo:
            self.min_tasks_memo[t.name] = 0  # a recursive template counts 0 (and fails later)
            self.min_tasks_memo[t.name] = self._estimate(t.body, self.params, templates)[0]
        return n + self.min_tasks_memo[t.name]

    # -- calls ------------------------------------------------------------------
    def _call_stmt(self, st: S.CallStmt, scope: _Scope, templates: dict[str, S.TemplateDef]) -> None:
        local = self.ev.name(st.target, scope.values)
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
                           hint(call.func, names) or "see docs/ops.md for the ops")
        operands: list[Operand] = []
        weights = 0
        for a in call.args:
            if isinstance(a, S.Name):
                operands.append(self._operand(a, scope))
            elif isinstance(a, S.InlineWeight):
                operands.append(Operand("weight", f"{name}.w{weights}", self.ev.type(a.type, scope.values)))
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
            attrs[at.key] = self.ev.value(at.value, scope.values)
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
        if self.units + need > MAX_TASKS:
            raise self.err(f"too large: this call makes more tasks than a graph may have (the limit is "
                           f"{TASK_LIMITS})", call.span)
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
            given[at.key] = self.ev.value(at.value, scope.values)
        value_params = {p.name: p.default for p in t.params if p.default is not None}
        for key in given:
            if key not in value_params:
                raise self.err(f"template '{t.name}' has no value parameter '{key}'",
                               next(a.key_span for a in call.attrs if a.key == key),
                               hint(key, value_params) or f"parameters: {', '.join(p.name for p in t.params)}")
        for key, default in value_params.items():
            values[key] = given[key] if key in given else self.ev.value(default, self.params)
        allow, deny = scope.allow, scope.deny
        for ann in annotations:
            if not isinstance(ann, S.Place):
                raise self.err("a template call takes only placement annotations (@...)", ann.span,
                               "put work/cost/parallel/streamable on the op calls inside the template")
        if annotations:
            allow, deny = self.ann.placement(annotations, allow, deny)
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
        assert isinstance(ret, S.ReturnStmt)  # checked when the template was defined
        _, b = self._lookup(ret.name, inner)
        return _Binding(b.operand, b.task, call.span)

    # -- tasks and annotations ------------------------------------------------------
    def _task_stmt(self, st: S.TaskStmt, scope: _Scope) -> None:
        local = self.ev.name(st.name, scope.values)
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
        self.units += 1 if op == "task" else OP_TASK_WEIGHT
        if self.units > MAX_TASKS:
            raise self.err(f"too large: more tasks than a graph may have (the limit is {TASK_LIMITS})", span)
        allow, deny = scope.allow, scope.deny
        if annotations:
            fields, allow, deny = self.ann.annotate(annotations, scope.values, fields, allow, deny)
        out = fields.get("output")
        if out is not None:
            check_elements(out.shape, self.err, span)
        for key, what in (("flops", "FLOPs"), ("bytes_read", "bytes read"), ("bytes_written", "bytes written")):
            v = fields.get(key)
            if v is not None and not v <= MAX_WORK:  # the sizes' product, when no annotation gave it
                raise self.err(f"too large: task '{name}' has {float(v):.3g} {what} (at most {MAX_WORK:g}); "
                               "check its sizes (the params, and any --param)", span)
        idx = len(self.tasks)
        placement = Placement(allow, deny) if (allow or deny) else _ANYWHERE
        self.tasks.append(Task(idx, name, op, placement=placement, span=span, **fields))
        self.task_names[name] = idx
        return idx

    # -- edges ------------------------------------------------------------------
    def _edge_stmt(self, st: S.EdgeStmt, scope: _Scope) -> None:
        ends = []
        for n in (st.src, st.dst):
            local, b = self._lookup(n, scope)
            if b.task is None:
                raise self.err(f"'{local}' is a graph {_operand_kind(b)}, not a task", n.span)
            ends.append(b.task)
        size, comm = 0.0, None
        if st.value is None:  # a plain edge
            pass
        elif st.kind == "comm" and (comm := literal_seconds(st.value, st.unit)) is not None:
            pass  # a literal time (the common case): checked as below
        elif st.kind == "comm":
            comm = self.ev.unit(self.ev.number(st.value, scope.values, "comm"), st.unit, st.unit_span,
                                TIME_UNITS, "time")
            comm = self.ev.time(comm, "comm (s)", st.value.span)
        elif st.kind == "bytes":
            size = self.ev.unit(self.ev.number(st.value, scope.values, "bytes"), st.unit, st.unit_span,
                                BYTE_UNITS, "size")
            size = self.ev.at_most(size, MAX_WORK, "bytes", st.value.span)
        if ends[0] == ends[1]:
            raise self.err(f"task '{self.tasks[ends[0]].name}' cannot depend on itself", st.span)
        self.explicit.append(ExplicitEdge(ends[0], ends[1], size, comm, st.span))


_ANYWHERE = Placement()


def _find_return(body: tuple[S.Stmt, ...]) -> S.ReturnStmt | None:
    for st in body:
        if isinstance(st, S.ReturnStmt):
            return st
        if isinstance(st, S.ForStmt):
            found = _find_return(st.body)
            if found is not None:
                return found
    return None


def _operand_kind(b: _Binding) -> str:
    """``input`` or ``weight``: what a binding without a task stands for."""
    return b.operand.kind if b.operand is not None else "task"

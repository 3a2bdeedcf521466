"""Which model ops a device runs: op-support lists (docs/platforms.md, Op support).

A list names ONNX op types, each with optional conditions: the dtypes it takes
(of its output, ``dtypes``, or of its inputs, ``inputs``), attributes that must
take one of some values (``attrs``) and attributes whose every element is at
most a bound (``max``), and inputs that must be initializers in the model file
(``static``, ONNX input positions: an execution provider that bakes them into
its graph, such as QNN's BatchNormalization, leaves the node to the CPU when the
file computes them, though mapper folds such inputs). A node is supported when some rule of its op type holds
for it; an attribute the node does not set satisfies every condition on it (the
node takes ONNX's default). Shipped lists live in ``platforms/support/`` and
cite the runtime's published table they copy (the ONNX Runtime QNN execution
provider's operator table, TensorRT's DLA layer list).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mapper.core.graph import DTYPE_BYTES, SourceNode

#: A rule's keys in a list file.
RULE_KEYS = ("op", "dtypes", "inputs", "attrs", "max", "static", "note")
#: A list file's top-level keys.
LIST_KEYS = ("name", "source", "dtypes", "rule")


@dataclass(frozen=True, slots=True)
class OpRule:
    """One supported form of an op type."""

    op: str
    dtypes: tuple[str, ...] = ()  # the output dtypes it takes; (): the list's (or any)
    inputs: tuple[str, ...] = ()  # the input dtypes it takes; (): any
    attrs: tuple[tuple[str, tuple[Any, ...]], ...] = ()  # attribute -> the values allowed
    max: tuple[tuple[str, float], ...] = ()  # attribute -> bound on each of its elements
    note: str = ""
    static: tuple[int, ...] = ()  # input positions that must be initializers in the model file

    def why_not(self, node: SourceNode, dtypes: tuple[str, ...]) -> str | None:
        """Why ``node`` is not of this form; None when it is."""
        allowed = self.dtypes or dtypes
        if allowed and node.dtype not in allowed:
            return f"{node.op} takes {'/'.join(allowed)} here, the node is {node.dtype}"
        bad = [d for d in node.inputs if self.inputs and d not in self.inputs]
        if bad:
            return f"{node.op} takes inputs of {'/'.join(self.inputs)}, the node has {bad[0]}"
        for key, values in self.attrs:
            v = node.attr(key)
            if v is not None and v not in values:
                return f"{node.op} needs {key} in {_show(values)}, the node has {key} = {_show(v)}"
        for key, bound in self.max:
            v = node.attr(key)
            items = v if isinstance(v, tuple) else (v,)
            if v is not None and any(isinstance(x, (int, float)) and x > bound for x in items):
                return f"{node.op} needs {key} <= {bound:g}, the node has {key} = {_show(v)}"
        for j, what in node.computed:
            if j in self.static:
                return (f"{node.op} needs input {j} as an initializer in the model file, the node's comes from "
                        f"a {what}")
        return None


@dataclass(frozen=True, slots=True)
class OpSupport:
    """An op-support list: its name, where it comes from, and its rules."""

    name: str
    source: str
    rules: tuple[OpRule, ...]
    dtypes: tuple[str, ...] = ()  # output dtypes every rule takes unless it says

    @property
    def ops(self) -> frozenset[str]:
        return frozenset(r.op for r in self.rules)

    def why_not(self, node: SourceNode) -> str | None:
        """Why the list does not support ``node``; None when it does."""
        rules = [r for r in self.rules if r.op == node.op]
        if not rules:
            return f"{node.op} is not in the {self.name} list"
        reasons = [r.why_not(node, self.dtypes) for r in rules]
        return None if None in reasons else f"{reasons[0]} ({self.name} list)"


Fail = Callable[[str, str], Exception]


def read_support(doc: Any, path: str, name: str, fail: Fail) -> OpSupport:
    """An op-support list from a parsed table (a list file) or an array (inline in a
    device: op type names or rule tables); ``fail(path, message)`` makes the error."""
    if isinstance(doc, list):
        return OpSupport(name, "inline", tuple(_rule(r, f"{path}[{i}]", fail) for i, r in enumerate(doc)))
    if not isinstance(doc, dict):
        raise fail(path, "expected a list name, an array of op types or rule tables")
    for key in doc:
        if key not in LIST_KEYS:
            raise fail(f"{path}.{key}", f"unknown key {key!r}; expected one of {', '.join(LIST_KEYS)}")
    rules = doc.get("rule", [])
    if not isinstance(rules, list) or not rules:
        raise fail(f"{path}.rule", "expected one or more [[rule]] tables")
    source = doc.get("source", "")
    if not isinstance(source, str) or not source:
        raise fail(f"{path}.source", "expected the published table the list copies (a URL and version)")
    dtypes = _dtypes(doc.get("dtypes", []), f"{path}.dtypes", fail)
    return OpSupport(name, source, tuple(_rule(r, f"{path}.rule[{i}]", fail) for i, r in enumerate(rules)), dtypes)


def _rule(raw: Any, path: str, fail: Fail) -> OpRule:
    if isinstance(raw, str):
        raw = {"op": raw}
    if not isinstance(raw, dict):
        raise fail(path, "expected an op type or a rule table")
    for key in raw:
        if key not in RULE_KEYS:
            raise fail(f"{path}.{key}", f"unknown key {key!r}; expected one of {', '.join(RULE_KEYS)}")
    op = raw.get("op")
    if not isinstance(op, str) or not op.isidentifier():
        raise fail(f"{path}.op", "expected an ONNX op type such as \"Conv\"")
    attrs = []
    for key, v in sorted(_table(raw.get("attrs", {}), f"{path}.attrs", fail).items()):
        values = v if isinstance(v, list) else [v]
        if not all(isinstance(x, (int, float, str, list)) and not isinstance(x, bool) for x in values):
            raise fail(f"{path}.attrs.{key}", "expected a value or an array of the values allowed")
        attrs.append((key, tuple(tuple(x) if isinstance(x, list) else x for x in values)))
    bounds = []
    for key, v in sorted(_table(raw.get("max", {}), f"{path}.max", fail).items()):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise fail(f"{path}.max.{key}", "expected a number")
        bounds.append((key, float(v)))
    note = raw.get("note", "")
    if not isinstance(note, str):
        raise fail(f"{path}.note", "expected a string")
    static = raw.get("static", [])
    if not isinstance(static, list) or not all(isinstance(j, int) and not isinstance(j, bool) and j >= 0
                                               for j in static):
        raise fail(f"{path}.static", "expected an array of input positions (0, 1, ...) that must be "
                                     "initializers in the model file")
    return OpRule(op, _dtypes(raw.get("dtypes", []), f"{path}.dtypes", fail),
                  _dtypes(raw.get("inputs", []), f"{path}.inputs", fail), tuple(attrs), tuple(bounds), note,
                  tuple(sorted(set(static))))


def _table(v: Any, path: str, fail: Fail) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise fail(path, "expected a table")
    return v


def _dtypes(v: Any, path: str, fail: Fail) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(d, str) for d in v):
        raise fail(path, f"expected an array of dtypes ({' '.join(DTYPE_BYTES)})")
    for d in v:
        if d not in DTYPE_BYTES:
            raise fail(path, f"unknown dtype {d!r}; expected one of {' '.join(DTYPE_BYTES)}")
    return tuple(v)


def _show(v: Any) -> str:
    if isinstance(v, tuple):
        return "[" + ", ".join(_show(x) for x in v) + "]"
    return repr(v) if isinstance(v, str) else f"{v:g}" if isinstance(v, float) else str(v)

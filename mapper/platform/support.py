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

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mapper.core.graph import DTYPE_BYTES, SourceNode

#: A rule's keys in a list file.
RULE_KEYS = ("op", "dtypes", "inputs", "attrs", "max", "static", "rank", "each", "consts", "below", "axis_max",
             "note")
#: A list file's top-level keys.
LIST_KEYS = ("name", "source", "dtypes", "batch_max", "dim_max", "rule")


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
    rank: tuple[int, ...] = ()  # the ranks its first input may have; (): any
    each: tuple[tuple[str, tuple[float, ...]], ...] = ()  # attribute -> the values each element may take
    consts: tuple[tuple[int, tuple[float, ...]], ...] = ()  # input position -> the values each element may take
    below: tuple[tuple[str, str], ...] = ()  # attribute -> the attribute each element is below
    axis_max: float | None = None  # bound on the first input's size along ``axis`` (unset: -1)

    def why_not(self, node: SourceNode, dtypes: tuple[str, ...]) -> str | None:
        """Why ``node`` is not of this form; None when it is."""
        return self._plain(node, dtypes) or self._shaped(node)

    def matched(self, node: SourceNode) -> int:
        """How many of ``attrs`` the node sets to an allowed value."""
        return sum(node.attr(key) in values for key, values in self.attrs)

    def _plain(self, node: SourceNode, dtypes: tuple[str, ...]) -> str | None:
        """The conditions on dtypes, attributes and initializers."""
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
        for key, each in self.each:
            v = node.attr(key)
            items = v if isinstance(v, tuple) else (v,)
            if v is not None and any(x not in each for x in items):
                return f"{node.op} needs each of {key} in {_show(each)}, the node has {key} = {_show(v)}"
        for key, other in self.below:
            v, w = node.attr(key), node.attr(other)
            if isinstance(v, tuple) and isinstance(w, tuple) and w and any(
                    x >= w[i % len(w)] for i, x in enumerate(v)):
                return f"{node.op} needs each of {key} below {other}, the node has {key} = {_show(v)}, " \
                       f"{other} = {_show(w)}"
        for j, what in node.computed:
            if j in self.static:
                return (f"{node.op} needs input {j} as an initializer in the model file, the node's comes from "
                        f"a {what}")
        return None

    def _shaped(self, node: SourceNode) -> str | None:
        """The conditions on the first input's shape and on constant inputs' values; a shape or
        value the importer does not know satisfies them."""
        shape = node.shapes[0] if node.shapes else None
        if self.rank and shape is not None and len(shape) not in self.rank:
            return f"{node.op} takes a {'/'.join(map(str, self.rank))}-D input, the node's is {len(shape)}-D"
        if self.axis_max is not None and shape:
            axis = node.attr("axis", -1)
            if isinstance(axis, int) and -len(shape) <= axis < len(shape) and shape[axis] > self.axis_max:
                return (f"{node.op} needs at most {self.axis_max:g} along its axis, the node's input has "
                        f"{shape[axis]} along axis {axis}")
        values = dict(node.values)
        computed = dict(node.computed)
        for j, allowed in self.consts:
            if j in values:
                bad = [x for x in values[j] if x not in allowed]
                if bad:
                    return f"{node.op} needs each of input {j} in {_show(allowed)}, the node's has {_show(bad[0])}"
            elif j in computed:
                return f"{node.op} needs input {j} as a build-time constant, the node's comes from a {computed[j]}"
        return None


@dataclass(frozen=True, slots=True)
class OpSupport:
    """An op-support list: its name, where it comes from, and its rules."""

    name: str
    source: str
    rules: tuple[OpRule, ...]
    dtypes: tuple[str, ...] = ()  # output dtypes every rule takes unless it says
    batch_max: float | None = None  # bound on the product of the first input's dimensions before its last three
    dim_max: float | None = None  # bound on each of the first input's last three dimensions

    @property
    def ops(self) -> frozenset[str]:
        return frozenset(r.op for r in self.rules)

    def why_not(self, node: SourceNode) -> str | None:
        """Why the list does not support ``node``; None when it does."""
        rules = [r for r in self.rules if r.op == node.op]
        if not rules:
            return f"{node.op} is not in the {self.name} list"
        general = self._general(node)
        if general is not None:
            return f"{general} ({self.name} list: general restrictions)"
        reasons = [r.why_not(node, self.dtypes) for r in rules]
        if None in reasons:
            return None
        # the reason of the rule nearest the node: the most of its attribute values matched (then the first)
        best = max(range(len(rules)), key=lambda k: (rules[k].matched(node), -k))
        note = rules[best].note
        return f"{reasons[best]} ({self.name} list{': ' + note if note else ''})"

    def _general(self, node: SourceNode) -> str | None:
        """Why the node's first input breaks the list's ``batch_max`` or ``dim_max``; None when it does not."""
        shape = node.shapes[0] if node.shapes else ()
        batch = math.prod(shape[:-3]) if len(shape) > 3 else 1
        if self.batch_max is not None and batch > self.batch_max:
            return f"{node.op} takes a batch of at most {self.batch_max:g}, the node's input has {batch}"
        big = [d for d in shape[-3:] if self.dim_max is not None and d > self.dim_max]
        if big:
            return f"{node.op} takes dimensions of at most {self.dim_max:g}, the node's input has {big[0]}"
        return None


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
    bounds = [_number(doc[k], f"{path}.{k}", fail) if k in doc else None for k in ("batch_max", "dim_max")]
    return OpSupport(name, source, tuple(_rule(r, f"{path}.rule[{i}]", fail) for i, r in enumerate(rules)), dtypes,
                     *bounds)


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
    rank = raw.get("rank", [])
    if not isinstance(rank, list) or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0
                                             for r in rank):
        raise fail(f"{path}.rank", "expected an array of ranks (4 for NCHW)")
    each = tuple((k, _numbers(v, f"{path}.each.{k}", fail))
                 for k, v in sorted(_table(raw.get("each", {}), f"{path}.each", fail).items()))
    consts = []
    for k, v in sorted(_table(raw.get("consts", {}), f"{path}.consts", fail).items()):
        if not k.isdigit():
            raise fail(f"{path}.consts.{k}", "expected an ONNX input position (0, 1, ...) as the key")
        consts.append((int(k), _numbers(v, f"{path}.consts.{k}", fail)))
    below = []
    for k, v in sorted(_table(raw.get("below", {}), f"{path}.below", fail).items()):
        if not isinstance(v, str) or not v:
            raise fail(f"{path}.below.{k}", "expected the name of the attribute it stays below")
        below.append((k, v))
    axis_max = _number(raw["axis_max"], f"{path}.axis_max", fail) if "axis_max" in raw else None
    return OpRule(op, _dtypes(raw.get("dtypes", []), f"{path}.dtypes", fail),
                  _dtypes(raw.get("inputs", []), f"{path}.inputs", fail), tuple(attrs), tuple(bounds), note,
                  tuple(sorted(set(static))), tuple(sorted(set(rank))), each, tuple(sorted(consts)), tuple(below),
                  axis_max)


def _number(v: Any, path: str, fail: Fail) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise fail(path, "expected a number >= 0")
    return float(v)


def _numbers(v: Any, path: str, fail: Fail) -> tuple[float, ...]:
    if not isinstance(v, list) or not v or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                  for x in v):
        raise fail(path, "expected an array of the numbers allowed")
    return tuple(v)


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

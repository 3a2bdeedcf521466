"""A deterministic textual dump of a :class:`~mapper.core.graph.TaskGraph` (for golden tests).

One line per input, task, edge and output, in index order (the task's line
is wrapped here)::

    graph NAME
    input x : f32[1024, 768]
    task 0 h1.qkv = matmul(x, weight h1.qkv.w0 : f32[768, 2304]) -> f32[1024, 2304]
        flops 3623878656 read 10223616 written 9437184
    edge 0 h1.qkv -> h1.att bytes 9437184 tensor h1.qkv
    output y

Operands: a task's output by the task's name, ``input NAME`` or
``weight NAME : TYPE``. After the work: attributes ``key=value``, then the
placement, ``parallel``, ``streamable``, ``cost { dev: seconds }``,
``memory``, ``colocate`` and ``backward`` when set.
"""

from __future__ import annotations

from typing import Any

from mapper.core.graph import Operand, Task, TaskGraph

__all__ = ["dump_graph"]


def dump_graph(g: TaskGraph) -> str:
    """The dump of ``g``, one line per item, ending with a newline."""
    lines = [f"graph {g.name}"]
    lines += [f"input {name} : {ty}" for name, ty in g.inputs]
    lines += [_task(t) for t in g.tasks]
    for e in g.edges:
        line = f"edge {e.index} {g.tasks[e.src].name} -> {g.tasks[e.dst].name} bytes {num(e.bytes)}"
        if e.comm is not None:
            line += f" comm {num(e.comm)}"
        if e.tensor:
            line += f" tensor {e.tensor}"
        lines.append(line)
    lines += [f"output {name}" for name in g.outputs]
    return "\n".join(lines) + "\n"


def num(x: float) -> str:
    """A number, integral values without a fraction (``3``, ``0.5``, ``1e-05``)."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e16:
        return str(int(x))
    return repr(x)


def _operand(o: Operand) -> str:
    if o.kind == "task":
        return o.name
    if o.kind == "input":
        return f"input {o.name}"
    return f"weight {o.name} : {o.type}"


def _value(v: Any) -> str:
    if isinstance(v, str):
        return '"' + v + '"'
    if isinstance(v, tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if v is None:
        return "none"
    if isinstance(v, float):
        return num(v)
    return str(v)


def _task(t: Task) -> str:
    args = ", ".join(_operand(o) for o in t.operands)
    parts = [f"task {t.index} {t.name} = {t.op}({args})"]
    if t.output is not None:
        parts.append(f"-> {t.output}")
    parts.append(f"flops {num(t.flops)} read {num(t.bytes_read)} written {num(t.bytes_written)}")
    parts += [f"{k}={_value(v)}" for k, v in t.attrs]
    if t.placement.allow or t.placement.deny:
        parts.append(str(t.placement))
    if t.parallel != 1.0:
        parts.append(f"parallel {num(t.parallel)}")
    if t.streamable:
        parts.append(f"streamable {t.streamable}")
    if t.explicit_cost:
        parts.append("cost { " + ", ".join(f"{d}: {num(s)}" for d, s in t.explicit_cost) + " }")
    if t.memory is not None:
        parts.append(f"memory {num(t.memory)}")
    if t.colocate:
        parts.append(f"colocate {t.colocate}")
    if t.backward:
        parts.append("backward")
    if t.parts:
        parts.append("fused " + " + ".join(f"{p.name}={p.op}" for p in t.parts))
    return " ".join(parts)

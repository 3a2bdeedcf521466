"""Operator fusion: a graph rewrite that merges a kernel and the cheap ops
that follow it into one task, as deployment compilers do.

Two patterns, each grown greedily along single-consumer chains in
topological order:

- **GEMM epilogues**: a ``matmul`` or a convolution followed by elementwise
  ops, activations and batch norm (conv + batchnorm (+ add) + relu,
  GEMM + bias + GELU). The epilogue runs on the GEMM's output tile while it
  is still on chip (cuDNN's and CUTLASS's fused epilogues; TensorRT's
  vertical layer fusion, NVIDIA TensorRT Developer Guide, "Layer Fusion").
- **Elementwise chains**: elementwise ops and activations, ending at most in
  one row-wise norm (residual add + layernorm; XLA's loop and input fusion,
  "XLA: Optimizing Compiler for Machine Learning", 2017; Chen et al., "TVM",
  OSDI 2018, section 3: injective ops fused into a reduction).

An op joins a group only when the group's last op feeds it alone (the
intermediate has exactly one consumer and is no graph output), it has the
group's output size and dtype, the same placement, and no explicit cost or
streaming depth. Such a chain cannot close a cycle: everything downstream
of an inner op passes through the next one.

A fused task is an ordinary task: its name joins its ops' names with ``+``,
its op and attributes are the first op's, its operands are the group's
external operands (the first op's first), its output the last op's, and
``parts`` holds the original tasks. A device that fuses
(:attr:`mapper.platform.devices.Device.fuses`) prices it as one kernel that reads its
external operands and writes its output once; any other device runs and
prices the parts one after the other (:mod:`mapper.costing.cost`). The executor runs
the parts' kernels in order (:func:`run_parts`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from mapper.core.graph import Edge, Operand, Task, TaskGraph, retask
from mapper.costing.cost import refusal
from mapper.errors import OptionsError
from mapper.platform.devices import Platform

#: What ``--fuse`` accepts.
FUSE_MODES = ("none", "auto")
#: Ops that start a GEMM-epilogue group.
GEMM_ANCHORS = frozenset({"matmul", "conv2d", "conv_transpose2d"})
#: Ops a GEMM epilogue or an elementwise chain may hold.
POINTWISE = frozenset({"add", "sub", "mul", "div", "relu", "gelu", "elementwise", "batchnorm"})
#: Row-wise norms that may end an elementwise chain (not a GEMM epilogue: a
#: GEMM's output row is spread over several tiles).
TERMINAL = frozenset({"layernorm", "rmsnorm", "softmax"})


def check_fuse(mode: str) -> str:
    """``mode`` if it is one of :data:`FUSE_MODES`, else an :class:`OptionsError`."""
    if mode not in FUSE_MODES:
        raise OptionsError(f"unknown --fuse mode {mode!r}; choose one of {', '.join(FUSE_MODES)}")
    return mode


def _joins(graph: TaskGraph, last: Task, nxt: Task, first: Task) -> bool:
    """True when ``nxt`` may join the group ``first ... last``."""
    if nxt.op not in POINTWISE and (nxt.op not in TERMINAL or first.op in GEMM_ANCHORS):
        return False
    if not nxt.attr("fused", 1):  # PyTorch's composite form: its own kernels (mapper.costing.eager)
        return False
    if graph.succ_tasks(last.index) != (nxt.index,) or last.name in graph.outputs:
        return False
    if not any(o.kind == "task" and o.producer == last.index for o in nxt.operands):
        return False  # only a control edge: no tensor to keep on chip
    out, prev = nxt.output, last.output
    if out is None or prev is None or out.numel != prev.numel or out.dtype != prev.dtype:
        return False
    return not (nxt.explicit_cost or nxt.streamable or nxt.placement != first.placement)


def _starts(task: Task) -> bool:
    return (task.op in GEMM_ANCHORS or task.op in POINTWISE) and not (
        task.explicit_cost or task.streamable or task.parts)


def fusion_groups(graph: TaskGraph, key: Callable[[Task], Any] | None = None) -> tuple[tuple[int, ...], ...]:
    """Groups of two or more task indices to fuse, each in execution order,
    ordered by their first task's topological position; with ``key``, only tasks
    of the first one's key join its group."""
    taken: set[int] = set()
    groups: list[tuple[int, ...]] = []
    for t in graph.topo_order:
        first = graph.tasks[t]
        if t in taken or not _starts(first):
            continue
        group = [t]
        last = first
        while True:
            succ = graph.succ_tasks(last.index)
            if len(succ) != 1 or succ[0] in taken:
                break
            nxt = graph.tasks[succ[0]]
            if not _joins(graph, last, nxt, first) or (key is not None and key(nxt) != key(first)):
                break
            group.append(nxt.index)
            last = nxt
            if nxt.op in TERMINAL:
                break
        if len(group) > 1:
            taken.update(group)
            groups.append(tuple(group))
    return tuple(groups)


def _key(op: Operand) -> tuple[str, str, int | None]:
    return (op.kind, op.name, op.producer)


def _wiring(parts: Sequence[Task]) -> tuple[tuple[tuple[int, int], ...], tuple[Operand, ...]]:
    """:func:`external_slots` and the external operands they number, in order of first use."""
    inner = {p.index: j for j, p in enumerate(parts)}
    seen: dict[tuple[str, str, int | None], int] = {}
    external: list[Operand] = []
    slots: list[tuple[int, int]] = []
    for p in parts:
        for op in p.operands:
            if op.kind == "task" and op.producer in inner:
                slots.append((1, inner[op.producer]))
                continue
            key = _key(op)
            if key not in seen:
                seen[key] = len(external)
                external.append(op)
            slots.append((0, seen[key]))
    return tuple(slots), tuple(external)


def external_slots(parts: Sequence[Task]) -> tuple[tuple[int, int], ...]:
    """For every operand of every part, in order, where its value comes from:
    ``(0, i)`` the fused task's operand ``i``, ``(1, j)`` the output of part
    ``j``. External operands are numbered by first use (each tensor once)."""
    return _wiring(parts)[0]


def fuse_for(graph: TaskGraph, platform: Platform, mode: str = "auto") -> TaskGraph:
    """``graph`` as ``platform`` runs it: fused (:func:`fuse`) when ``mode`` is
    ``auto`` and a device of the platform fuses, else as written. A group never
    mixes tasks that a device with an op-support list or ``dtypes`` runs with tasks
    it refuses: a runtime delegates per node, so a fused task must not carry an
    unsupported node onto the device nor drag supported ones off it."""
    check_fuse(mode)
    if mode != "auto" or not any(d.fuses for d in platform.devices):
        return graph
    picky = [d for d in platform.devices if d.supports is not None or d.dtypes]
    return fuse(graph, (lambda t: tuple(refusal(t, d) is None for d in picky)) if picky else None)


def fuse(graph: TaskGraph, key: Callable[[Task], Any] | None = None) -> TaskGraph:
    """``graph`` with every :func:`fusion_groups` group (``key``: as there) merged into
    one task (``graph`` itself when there is nothing to fuse)."""
    groups = fusion_groups(graph, key)
    if not groups:
        return graph
    head = {g[0]: g for g in groups}
    inside = {t for g in groups for t in g[1:]}
    new_of: dict[int, int] = {}
    order = [t.index for t in graph.tasks if t.index not in inside]
    for k, t in enumerate(order):
        for member in head.get(t, (t,)):
            new_of[member] = k
    names = [("+".join(graph.tasks[m].name for m in head[t]) if t in head else graph.tasks[t].name)
             for t in order]

    def remap(op: Operand) -> Operand:
        if op.kind != "task" or op.producer is None:
            return op
        k = new_of[op.producer]
        return replace(op, name=names[k], producer=k)

    tasks: list[Task] = []
    for k, t in enumerate(order):
        task = graph.tasks[t]
        if t not in head:
            tasks.append(retask(task, index=k, operands=tuple(remap(o) for o in task.operands)))
            continue
        parts = tuple(graph.tasks[m] for m in head[t])
        ext = _wiring(parts)[1]
        first, last = parts[0], parts[-1]
        extra = sum(o.type.nbytes for o in ext[len(_wiring(parts[:1])[1]):])
        tasks.append(retask(
            first, index=k, name=names[k], operands=tuple(remap(o) for o in ext), output=last.output,
            flops=float(sum(p.flops for p in parts)), bytes_read=float(first.bytes_read + extra),
            bytes_written=float(last.bytes_written), parts=parts,
            deadline=min((p.deadline for p in parts if p.deadline is not None), default=None)))  # the earliest
    pairs: dict[tuple[int, int], tuple[float, float | None, str]] = {}
    for e in graph.edges:
        s, d = new_of[e.src], new_of[e.dst]
        if s == d:
            continue
        old = pairs.get((s, d))
        tensor = names[s] if e.tensor else ""
        if old is None:
            pairs[(s, d)] = (e.bytes, e.comm, tensor)
        else:  # two edges into one group from the same producer: the tensor moves once
            comm = e.comm if old[1] is None else old[1] if e.comm is None else max(old[1], e.comm)
            pairs[(s, d)] = (max(old[0], e.bytes), comm, old[2] or tensor)
    edges = tuple(Edge(i, s, d, *pairs[(s, d)]) for i, (s, d) in enumerate(sorted(pairs, key=lambda k: (k[1], k[0]))))
    index = {t.name: t.index for t in graph.tasks}
    outputs = tuple(names[new_of[index[o]]] if o in index else o for o in graph.outputs)
    return TaskGraph(graph.name, tuple(tasks), edges, graph.inputs, outputs)


def leaf_tasks(graph: TaskGraph) -> tuple[Task, ...]:
    """Every kernel call of ``graph``: the parts of fused tasks, the other tasks themselves."""
    return tuple(p for t in graph.tasks for p in (t.parts or (t,)))


def run_parts(task: Task, args: Sequence[Any], call: Callable[[Task, list[Any]], Any]) -> list[Any]:
    """Run a fused task's parts in order with ``call(part, operands)``; the
    outputs of every part (the last one is the task's output)."""
    slots = external_slots(task.parts)
    outs: list[Any] = []
    i = 0
    for part in task.parts:
        vals = []
        for _ in part.operands:
            src, j = slots[i]
            vals.append(args[j] if src == 0 else outs[j])
            i += 1
        outs.append(call(part, vals))
    return outs

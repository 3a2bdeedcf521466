"""A split plan applied to a forward graph: pieces, collectives, gathers.

:func:`split_graph` rewrites the forward graph for a :class:`Plan`. Every
task becomes one piece per batch chunk (``NAME.bB``) and tensor rank
(``NAME.tR``), pinned to its device of the mesh:

* a piece reads its slice of the batch: graph inputs through a
  :class:`~mapper.core.graph.Shard` of their leading axis, activations from the
  pieces of the same chunk;
* in a tensor-parallel region (:func:`mapper.parallel.roles.tensor_regions`)
  a piece reads its shard of the weights (columns, rows, heads, output
  channels); the row GEMM's partial sums go to an ``allreduce`` task on every
  rank, a convolution region's channel pieces to a ``concat`` on every rank
  (the all-gather); both carry the collective's time over the ranks' routes
  as an explicit cost (:mod:`mapper.parallel.collectives`) and reach their
  parts through edges that take no time of their own;
* everything else runs whole on every rank, as in Megatron-LM;
* each graph output is the ``concat`` of its chunks, on the device of the
  output's stage, replica 0, rank 0, under the output's own name.

Work and data are recomputed by the op catalogue (:func:`mapper.core.ops.infer`)
on the pieces' operand types, so a piece's FLOPs and bytes are exact, and the
pieces of a split op add up to the op (plus what a tensor split repeats).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mapper.core.graph import Edge, Operand, Placement, Shard, Task, TaskGraph, TensorType, retask
from mapper.core.ops import OpError, infer
from mapper.errors import OptionsError
from mapper.parallel.collectives import Network, collective, group
from mapper.parallel.plan import Plan
from mapper.parallel.roles import Region, batch_blocker, region_starts, spans_batch, tensor_regions, uncut
from mapper.platform.devices import Platform


class SplitError(OptionsError):
    """A plan that cannot cut this graph (exit 2): the message says which task and why."""


@dataclass(frozen=True, slots=True)
class Column:
    """One chunk's column pieces of a tensor-parallel region: their backward
    pass sums the input gradients of the ranks (Megatron's ``f`` operator)."""

    pieces: tuple[str, ...]  # by rank
    devices: tuple[str, ...]
    nbytes: float  # the region input's size


@dataclass(frozen=True, slots=True)
class Split:
    """A split forward graph and what its training step needs to know."""

    graph: TaskGraph
    plan: Plan
    columns: tuple[Column, ...]
    regions: int  # tensor-parallel regions per chunk
    exact: bool  # its outputs equal the unsplit graph's (no batch statistics cut)


def _shape_with(shape: tuple[int, ...], axis: int, size: int) -> tuple[int, ...]:
    out = list(shape)
    out[axis] = size
    return tuple(out)


def _shard(o: Operand, axis: int, index: int, parts: int, groups: int, tag: str) -> Operand:
    full = o.type
    axis = axis % len(full.shape)
    ty = TensorType(full.dtype, _shape_with(full.shape, axis, full.shape[axis] // parts))
    return Operand(o.kind, f"{o.name}.{tag}", ty, None, Shard(o.name, full, axis, index, parts, groups))


class _Builder:
    def __init__(self, graph: TaskGraph, plan: Plan, platform: Platform) -> None:
        self.g = graph
        self.plan = plan
        self.tasks: list[Task] = []
        self.edges: dict[tuple[int, int], tuple[float, float | None, str]] = {}
        self.index = {d.name: d.index for d in platform.devices}
        self.kinds = {d.name: d.kind for d in platform.devices}
        self.platform = platform
        self.groups: dict[tuple[str, ...], tuple[Network, int]] = {}

    def add(self, task: Task) -> int:
        self.tasks.append(retask(task, index=len(self.tasks)))
        return len(self.tasks) - 1

    def edge(self, src: int, dst: int, nbytes: float, comm: float | None = None) -> None:
        old = self.edges.get((src, dst))
        size = max(nbytes, old[0]) if old else nbytes
        self.edges[(src, dst)] = (size, comm, self.tasks[src].name)

    def graph(self, like: TaskGraph) -> TaskGraph:
        """The tasks and edges built, as a graph with ``like``'s name, inputs and outputs."""
        order = sorted(self.edges, key=lambda e: (e[1], e[0]))
        edges = tuple(Edge(i, s, d, *self.edges[(s, d)]) for i, (s, d) in enumerate(order))
        return TaskGraph(like.name, tuple(self.tasks), edges, like.inputs, like.outputs)

    def collective(self, kind: str, nbytes: float, devices: tuple[str, ...]) -> float:
        """Seconds of collective ``kind`` among ``devices``, its kernel's launch included."""
        if len(devices) <= 1:
            return 0.0
        if devices not in self.groups:
            self.groups[devices] = group(self.platform, devices)
        net, per_node = self.groups[devices]
        return collective(net, kind, nbytes, len(devices), per_node)[0]

    def operand(self, src: int) -> Operand:
        t = self.tasks[src]
        assert t.output is not None
        return Operand("task", t.name, t.output, src)


def _check(task: Task, out: TensorType, want: tuple[int, ...]) -> None:
    if tuple(out.shape) != want:
        raise SplitError(f"cannot split task {task.name} ({task.op}): its piece gives {out}, "
                         f"expected shape {list(want)}", obj=task.name)


def _stage_of(graph: TaskGraph, cuts: tuple[int, ...]) -> list[int]:
    stage = [0] * len(graph.tasks)
    for pos, t in enumerate(graph.topo_order):
        stage[t] = sum(1 for c in cuts if c <= pos)
    return stage


def check_batch(graph: TaskGraph, parts: int) -> None:
    """Raise :class:`SplitError` naming the first task that cannot take 1/``parts`` of the batch."""
    if parts == 1:
        return
    for t in graph.topo_order:
        why = batch_blocker(graph.tasks[t], parts)
        if why is not None:
            task = graph.tasks[t]
            raise SplitError(f"cannot cut the batch {parts} ways at task {task.name} ({task.op}): {why}",
                             span=task.span, obj=task.name)
    for name, ty in graph.inputs:
        if not ty.shape or ty.shape[0] % parts:
            raise SplitError(f"cannot cut the batch {parts} ways: input {name} ({ty}) has no leading axis "
                             f"that divides by {parts}", obj=name)


def split_graph(graph: TaskGraph, plan: Plan, platform: Platform, first_chunk: bool = False) -> Split:
    """``graph`` cut as ``plan`` says (module docstring); with ``first_chunk`` only the pieces of
    batch chunk 0, without the outputs' gathers (what one micro-batch costs on one replica)."""
    if plan.trivial and not plan.devices:
        return Split(graph, plan, (), 0, True)
    n, k = plan.chunks, plan.tensor
    for task in graph.tasks:
        if task.op == "task" or task.explicit_cost:
            raise SplitError(f"cannot split task {task.name}: it has explicit costs, not an op whose work the "
                             "split can divide", span=task.span, obj=task.name)
    check_batch(graph, n)
    regions = tensor_regions(graph, k, plan.vocab) if k > 1 else ()
    blocked = uncut(graph, regions) if k > 1 else None
    if blocked is not None:
        task = graph.tasks[blocked[0]]
        raise SplitError(f"cannot split task {task.name} ({task.op}) over {k} tensor ranks: {blocked[1]}",
                         span=task.span, obj=task.name, hint="use a layout without tensor parallelism (tensor=1)")
    member: dict[int, tuple[Region, int]] = {}
    for reg in regions:
        for i, m in enumerate(reg.members):
            member[m] = (reg, i)
    row_of = {reg.row: reg for reg in regions if reg.row is not None}
    starts = {m for reg in regions for m in region_starts(graph, reg.members)}
    end_of = {reg.members[-1]: reg for reg in regions if reg.row is None}
    stage = _stage_of(graph, plan.cuts)
    b_ = _Builder(graph, plan, platform)
    view: dict[tuple[int, int, int], int] = {}  # (task, chunk, rank) -> piece holding that rank's view
    columns: list[Column] = []
    for dev in plan.devices:
        if dev not in b_.index:
            raise SplitError(f"plan device {dev!r} is not on platform {platform.name}", obj=dev)
    for b in range(1 if first_chunk else n):
        replica = b % plan.data
        for t in graph.topo_order:
            task = graph.tasks[t]
            mesh = plan.mesh(stage[t], replica)
            pieces = [_piece(b_, task, b, r, mesh[r], member.get(t), t in row_of, view) for r in range(k)]
            for r, p in enumerate(pieces):
                view[(t, b, r)] = p
            if t in member and t in starts:
                columns.append(Column(tuple(b_.tasks[p].name for p in pieces), mesh,
                                      float(b_.tasks[pieces[0]].operands[0].type.nbytes)))
            if t in row_of:
                _combine(b_, task, b, pieces, mesh, "allreduce", view)
            elif t in end_of and not (plan.parallel_loss and task.name in graph.outputs):
                _combine(b_, task, b, pieces, mesh, "allgather", view)
    names = {t.name: t.index for t in graph.tasks}
    for out in () if first_chunk else graph.outputs:
        t = names[out]
        parts = [view[(t, b, 0)] for b in range(n)]
        if n == 1 and k == 1:
            continue
        dev = plan.device(stage[t], 0, 0)
        ops = [b_.operand(p) for p in parts]
        info = infer("concat", [o.type for o in ops], {"axis": 0})
        g_idx = b_.add(Task(0, out, "concat", tuple(ops), info.attrs, info.output, info.flops, info.bytes_read,
                            info.bytes_written, placement=Placement(allow=(dev,)), span=graph.tasks[t].span))
        for p in parts:
            b_.edge(p, g_idx, float(b_.tasks[p].output.nbytes))  # type: ignore[union-attr]
    split = b_.graph(graph)
    exact = n == 1 or not any(t.op == "batchnorm" for t in graph.tasks)
    return Split(split, plan, tuple(columns), len(regions), exact)


def _suffix(b_: _Builder, b: int, r: int) -> str:
    return (f".b{b}" if b_.plan.chunks > 1 else "") + (f".t{r}" if b_.plan.tensor > 1 else "")


def _piece(b_: _Builder, task: Task, b: int, r: int, device: str, role: tuple[Region, int] | None,
           row: bool, view: dict[tuple[int, int, int], int]) -> int:
    """One piece of ``task``: chunk ``b``, rank ``r``, on ``device``."""
    n, k = b_.plan.chunks, b_.plan.tensor
    if not task.placement.permits(device, b_.kinds[device]):
        raise SplitError(f"task {task.name} may not run on {device} ({task.placement}), where the plan puts it",
                         span=task.span, obj=task.name)
    operands: list[Operand] = []
    srcs: list[int] = []
    for o in task.operands:
        if o.kind == "task":
            assert o.producer is not None
            src = view[(o.producer, b, r)]
            srcs.append(src)
            operands.append(b_.operand(src))
        elif o.kind == "input" or (o.kind == "weight" and spans_batch(task, o)):
            operands.append(_shard(o, 0, b, n, 1, f"b{b}") if n > 1 else o)
        elif k > 1 and role is not None and (role[0].axis == -1 or o is task.operands[1]):
            reg, i = role
            axis = -1 if reg.axis == -1 else 0  # GEMM columns and biases; conv output channels
            operands.append(_shard(o, axis, r, k, reg.groups[i], f"t{r}"))
        elif k > 1 and row:
            operands.append(_shard(o, -2, r, k, 1, f"t{r}"))  # the row GEMM's weight, cut by rows
        else:
            operands.append(o)
    attrs: dict[str, Any] = dict(task.attrs)
    if role is not None and task.op in ("attention", "rotary", "mla_attention"):
        attrs["heads"] = task.attr("heads") // k
        if task.attr("kv_heads"):
            attrs["kv_heads"] = task.attr("kv_heads") // k
    if task.op in ("reshape", "opaque") and n > 1 and attrs["shape"][0] > 0:
        attrs["shape"] = (attrs["shape"][0] // n, *attrs["shape"][1:])
        if task.op == "opaque":  # its given work, shared by the rows
            attrs["flops"] = attrs["flops"] / n
    try:
        info = infer(task.op, [o.type for o in operands], attrs)
    except OpError as err:  # a piece the op cannot take: the plan cannot cut this task
        raise SplitError(f"cannot split task {task.name} ({task.op}) as plan {b_.plan.label()} cuts it: "
                         f"{err.message}", span=task.span, obj=task.name) from None
    assert task.output is not None
    want = task.output.shape
    if n > 1:
        want = _shape_with(want, 0, want[0] // n)
    if role is not None:
        axis = role[0].axis % len(want)
        want = _shape_with(want, axis, want[axis] // k)
    _check(task, info.output, tuple(want))
    colocate = f"{task.colocate}{_suffix(b_, b, r)}" if task.colocate else ""
    idx = b_.add(retask(task, name=f"{task.name}{_suffix(b_, b, r)}", operands=tuple(operands), attrs=info.attrs,
                         output=info.output, flops=info.flops, bytes_read=info.bytes_read,
                         bytes_written=info.bytes_written, placement=Placement(allow=(device,)),
                         colocate=colocate, parts=()))
    for o, src in zip((o for o in operands if o.kind == "task"), srcs):
        b_.edge(src, idx, float(o.type.nbytes))
    return idx


def _combine(b_: _Builder, task: Task, b: int, pieces: list[int], mesh: tuple[str, ...], kind: str,
             view: dict[tuple[int, int, int], int]) -> None:
    """The collective after ``task``'s pieces of chunk ``b``: one task per rank."""
    k = len(pieces)
    ops = [b_.operand(p) for p in pieces]
    if kind == "allreduce":
        nbytes = float(ops[0].type.nbytes)
    else:
        nbytes = float(sum(o.type.nbytes for o in ops))
    seconds = b_.collective(kind, nbytes, mesh)
    bsuf = f".b{b}" if b_.plan.chunks > 1 else ""
    for r in range(k):
        if kind == "allreduce":
            op, attrs = "allreduce", {"rank": r}
        else:
            op, attrs = "concat", {"axis": 1}
        info = infer(op, [o.type for o in ops], attrs)
        idx = b_.add(Task(0, f"{task.name}{bsuf}.{kind}.t{r}", op, tuple(ops), info.attrs, info.output, info.flops,
                          info.bytes_read, info.bytes_written, placement=Placement(allow=(mesh[r],)),
                          explicit_cost=((mesh[r], seconds),), span=task.span))
        for p in pieces:  # the data moves inside the collective's time
            b_.edge(p, idx, nbytes / k, 0.0)
        view[(task.index, b, r)] = idx

"""A forward graph cut into blocks: the units a pipeline stage holds (:mod:`mapper.cluster`).

A block boundary is a point of the topological order that exactly one tensor
crosses (the residual stream between two Transformer sub-layers, between two
layers, after the embedding): a pipeline stage may begin there and sends that
one tensor to the next. Blocks with the same ops, shapes and attributes have
the same *signature*; the plan model prices one block per signature
(:mod:`mapper.cluster.profile`), so a 96-layer model costs what two
sub-layers and the ends cost to price.
"""

from __future__ import annotations

from dataclasses import dataclass

from mapper.core.graph import Edge, Operand, Task, TaskGraph


@dataclass(frozen=True, slots=True)
class Block:
    """Tasks ``tasks`` (graph indices, in topological order) between two boundaries."""

    tasks: tuple[int, ...]
    signature: int  # blocks with the same signature cost the same
    out_bytes: float  # the tensor that crosses the boundary after it (0 for the last block)


def _task_key(task: Task, local: dict[int, int]) -> tuple:
    ops = tuple((o.kind, local.get(o.producer, -1) if o.producer is not None else -1, o.type.dtype,
                 tuple(o.type.shape)) for o in task.operands)
    return (task.op, ops, task.attrs, task.output.shape if task.output else None, task.precision)


def cut_blocks(graph: TaskGraph) -> tuple[Block, ...]:
    """``graph`` cut at every point one tensor crosses (module docstring)."""
    order = graph.topo_order
    pos = {t: i for i, t in enumerate(order)}
    last_use = [pos[t] for t in order]  # the last position that reads each task's output
    for e in graph.edges:
        last_use[pos[e.src]] = max(last_use[pos[e.src]], pos[e.dst])
    outputs = {graph.tasks[t].index for t in order if graph.tasks[t].name in set(graph.outputs)}
    boundaries: list[int] = []
    live: set[int] = set()  # positions whose output is read after the current position
    for i, t in enumerate(order):
        live = {j for j in live if last_use[j] > i}
        if last_use[i] > i:
            live.add(i)
        if i + 1 < len(order) and len(live) == 1 and t not in outputs:
            boundaries.append(i + 1)
    starts = [0, *boundaries]
    ends = [*boundaries, len(order)]
    sigs: dict[tuple, int] = {}
    blocks = []
    for a, b in zip(starts, ends):
        tasks = tuple(order[a:b])
        local = {t: k for k, t in enumerate(tasks)}
        key = tuple(_task_key(graph.tasks[t], local) for t in tasks)
        sig = sigs.setdefault(key, len(sigs))
        out = graph.tasks[order[b - 1]].output
        blocks.append(Block(tasks, sig, float(out.nbytes) if out is not None and b < len(order) else 0.0))
    return tuple(blocks)


def block_graph(graph: TaskGraph, block: Block) -> TaskGraph:
    """One block as a graph of its own: what it reads from earlier blocks becomes graph inputs."""
    local = {t: k for k, t in enumerate(block.tasks)}
    inputs: dict[str, object] = {}
    tasks = []
    for t in block.tasks:
        task = graph.tasks[t]
        ops = []
        for o in task.operands:
            if o.kind == "task" and o.producer not in local:
                inputs.setdefault(o.name, o.type)
                ops.append(Operand("input", o.name, o.type))
            elif o.kind == "task" and o.producer is not None:
                ops.append(Operand("task", o.name, o.type, local[o.producer]))
            else:
                ops.append(o)
        tasks.append(Task(local[t], task.name, task.op, tuple(ops), task.attrs, task.output, task.flops,
                          task.bytes_read, task.bytes_written, placement=task.placement, precision=task.precision))
    edges: list[Edge] = []
    for e in graph.edges:
        if e.src in local and e.dst in local:
            edges.append(Edge(len(edges), local[e.src], local[e.dst], e.bytes, e.comm, e.tensor))
    last = graph.tasks[block.tasks[-1]].name
    return TaskGraph(f"{graph.name}.block", tuple(tasks), tuple(edges),
                     tuple((n, ty) for n, ty in inputs.items()), (last,))  # type: ignore[misc]

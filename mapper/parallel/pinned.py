"""Task graphs whose tasks are pinned to one device each: the plans of :mod:`mapper.parallel.hybrid`
and :mod:`mapper.parallel.burst_graph` are built from them, then mapped and validated like any
other graph."""

from __future__ import annotations

from dataclasses import replace

from mapper.core.graph import Edge, Placement, Task, TaskGraph

#: An edge's bytes, communication seconds (None: priced from the route) and tensor name.
EdgeData = tuple[float, float | None, str]


def pinned(task: Task, index: int, dev: str, cost: float | None = None) -> Task:
    """``task`` as task ``index`` of a new graph, named and allowed on ``dev`` only, costing
    ``cost`` seconds there when given; its operands lose their producers (the new edges carry them)."""
    return replace(task, index=index, name=f"{dev}/{task.name}", placement=Placement(allow=(dev,)),
                   colocate=f"{dev}/{task.colocate}" if task.colocate else "",
                   explicit_cost=((dev, cost),) if cost is not None else (),
                   operands=tuple(replace(o, producer=None) for o in task.operands))


def graph_of(name: str, tasks: list[Task], edges: dict[tuple[int, int], EdgeData]) -> TaskGraph:
    """The graph of ``tasks`` and ``edges`` (keyed by (src, dst)), edges in a fixed order."""
    order = sorted(edges, key=lambda p: (p[1], p[0]))
    return TaskGraph(name, tuple(tasks), tuple(Edge(i, s, d, *edges[(s, d)]) for i, (s, d) in enumerate(order)))

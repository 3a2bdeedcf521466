"""The edges of a lowered graph: one data edge per producer/consumer pair
plus the explicit ``a -> b`` edges, checked for duplicates and cycles."""

from __future__ import annotations

from dataclasses import dataclass

from mapper.core.graph import Edge, Task, topological_order
from mapper.errors import SourceSpan
from mapper.frontend.lowering.values import ErrorAt


@dataclass(slots=True)
class ExplicitEdge:
    """An ``a -> b`` statement: task indices, its bytes or ``comm`` time, where it was written."""

    src: int
    dst: int
    bytes: float
    comm: float | None
    span: SourceSpan


def graph_edges(tasks: list[Task], explicit: list[ExplicitEdge], err: ErrorAt) -> tuple[Edge, ...]:
    """Data edges (one per producer/consumer pair) and explicit edges, by (dst, src)."""
    found: dict[tuple[int, int], tuple[float, float | None, str]] = {}
    for t in tasks:
        for o in t.operands:
            if o.producer is not None and (o.producer, t.index) not in found:
                found[(o.producer, t.index)] = (float(o.type.nbytes), None, o.name)
    spans: dict[tuple[int, int], SourceSpan] = {}
    for e in explicit:
        key = (e.src, e.dst)
        a, b = tasks[e.src].name, tasks[e.dst].name
        if key in spans:
            raise err(f"duplicate edge '{a} -> {b}'", e.span, f"first at {spans[key]}")
        if key in found:
            raise err(f"edge '{a} -> {b}' duplicates the data dependency of '{b}' on '{a}'", e.span)
        found[key] = (e.bytes, e.comm, "")
        spans[key] = e.span
    if any(e.src > e.dst for e in explicit):
        check_cycles(tasks, explicit, err)
    order = sorted(found, key=lambda k: (k[1], k[0]))
    return tuple(Edge(i, s, d, found[(s, d)][0], found[(s, d)][1], found[(s, d)][2])
                 for i, (s, d) in enumerate(order))


def check_cycles(tasks: list[Task], explicit: list[ExplicitEdge], err: ErrorAt) -> None:
    """Raise at the first explicit edge (in source order) that closes a cycle.

    Binary search over prefixes of the explicit edges, each tested with
    Kahn's topological sort (A. B. Kahn, "Topological sorting of large
    networks", CACM 5(11), 1962); the cycle shown is a breadth-first path.
    """
    n = len(tasks)
    base: list[list[int]] = [[] for _ in range(n)]
    for t in tasks:
        for o in t.operands:
            if o.producer is not None:
                base[o.producer].append(t.index)

    def cyclic(k: int) -> bool:
        succ = [list(s) for s in base]
        for e in explicit[:k]:
            succ[e.src].append(e.dst)
        return len(topological_order(succ)[0]) < n

    if not cyclic(len(explicit)):
        return
    lo, hi = 1, len(explicit)  # the smallest k with a cycle in the first k edges
    while lo < hi:
        mid = (lo + hi) // 2
        if cyclic(mid):
            hi = mid
        else:
            lo = mid + 1
    bad = explicit[lo - 1]
    succ = [list(s) for s in base]
    for e in explicit[: lo - 1]:
        succ[e.src].append(e.dst)
    path = _path(succ, bad.dst, bad.src)
    names = " -> ".join(tasks[i].name for i in path + [bad.dst])
    raise err(f"edge '{tasks[bad.src].name} -> {tasks[bad.dst].name}' makes a cycle: {names}",
                   bad.span)


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

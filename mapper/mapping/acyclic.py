"""Acyclic clusters from any partition: the repair that makes a quotient graph a DAG.

A partition of a DAG's tasks into blocks (Mt-KaHyPar's, which knows nothing
of edge directions) usually has a cyclic quotient: block A feeds B and B
feeds A. Multilevel schedulers need acyclic parts (Herrmann, Özkaya, Uçar,
Kaya, Çatalyürek, "Multilevel algorithms for acyclic partitioning of
directed acyclic graphs", SIAM J. Sci. Comput. 41(4), 2019; Popp, Schlag,
Schulz, Seemaier, "Multilevel acyclic hypergraph partitioning", ALENEX 2021;
the clustering scheduler of Özkaya, Benoit, Uçar, Herrmann, Çatalyürek,
"A scalable clustering-based task scheduler for homogeneous processors using
DAG partitioning", IPDPS 2019). The repair here splits, it never moves: each
task gets a level ``r`` = the most block changes on a path into it
(``r[v] = max over preds u of r[u] + [block u != block v]``), and tasks of
one block and one level form a cluster, cut into pieces of at most ``size``
tasks along a topological order. Every edge between two clusters raises the
level or, inside one (block, level), the piece: the quotient is acyclic by
construction, in linear time, and the blocks' cut is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

from mapper.core.graph import TaskGraph


def convex_clusters(graph: TaskGraph, block: Sequence[int], size: int) -> tuple[tuple[int, ...], ...]:
    """Clusters (each in topological order, listed by their first task's topological position) whose
    quotient graph is acyclic; each lies in one block of ``block`` and has at most ``size`` tasks."""
    size = max(1, size)
    edges = graph.edges
    level = [0] * len(graph.tasks)
    members: dict[tuple[int, int], list[int]] = {}
    for v in graph.topo_order:
        b = block[v]
        r = 0
        for e in graph.preds[v]:
            u = edges[e].src
            r = max(r, level[u] + (block[u] != b))
        level[v] = r
        members.setdefault((r, b), []).append(v)
    out: list[tuple[int, ...]] = []
    for key in sorted(members):
        tasks = members[key]
        out.extend(tuple(tasks[i:i + size]) for i in range(0, len(tasks), size))
    return tuple(out)


def quotient_arcs(graph: TaskGraph, group_of: Sequence[int]) -> set[tuple[int, int]]:
    """The quotient graph's arcs ``(group a, group b)``, ``a != b``."""
    return {(group_of[e.src], group_of[e.dst]) for e in graph.edges if group_of[e.src] != group_of[e.dst]}


def is_acyclic(n_groups: int, arcs: set[tuple[int, int]]) -> bool:
    """Whether the arcs over ``0..n_groups-1`` form a DAG (Kahn's algorithm)."""
    succ: list[list[int]] = [[] for _ in range(n_groups)]
    indeg = [0] * n_groups
    for a, b in arcs:
        succ[a].append(b)
        indeg[b] += 1
    stack = [i for i in range(n_groups) if indeg[i] == 0]
    seen = 0
    while stack:
        i = stack.pop()
        seen += 1
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                stack.append(j)
    return seen == n_groups

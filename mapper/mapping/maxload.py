"""Max-load throughput mapping: contiguous splits by dynamic programming.

The max-load model of Tarnawski, Phanishayee, Devanur, Mahajan and
Nagarajan, "Efficient Algorithms for Device Placement of DNN Graph
Operators", NeurIPS 2020 (defined in :mod:`mapper.mapping.objectives`),
minimises the largest device load of a pipelined graph. Their exact
algorithm is a dynamic program over contiguous splits (sets between two
ideals of the DAG). This module provides

* :func:`task_groups`: colocation classes (and every other task alone) as
  the units a split moves, in a topological order of the forward edges
  between them;
* :func:`split_dp`: the DP over contiguous splits of that order: device
  class counts as the state (Tarnawski et al.'s ``dp[cpus][fpgas][ideal]``
  with one linear order instead of all ideals), memory knapsack per device,
  CPUs paying compute only; it returns the best split it finds, which warm
  starts the exact model of :mod:`mapper.mapping.exact.maxload_model`
  (None when no split fits, or when the states pass :data:`MAX_STATES`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mapper.costing.cost import CostTable
from mapper.mapping.orders import allowed_devices, identical_device_classes

INF = math.inf
#: Above this many DP states (products of device-class counts) the DP is not run.
MAX_STATES = 512


@dataclass(frozen=True, slots=True)
class Groups:
    """Tasks that move together: ``of[t]`` is task ``t``'s group; groups are
    numbered in the order of :func:`_group_order`."""

    of: tuple[int, ...]
    members: tuple[tuple[int, ...], ...]
    time: tuple[tuple[float, ...], ...]  # [group][device]: the members' times summed, inf if one cannot run
    memory: tuple[float, ...]  # [group] the members' footprints summed

    @property
    def n(self) -> int:
        return len(self.members)


def task_groups(cost: CostTable, fuse_cycles: bool = False) -> Groups:
    """Colocation classes and single tasks, in a topological order of the
    forward edges between them (:func:`_group_order`). With ``fuse_cycles``
    the groups on a cycle of those edges become one group, as Tarnawski et
    al. fuse the strongly connected components of their contracted forward
    graph (``dp.cpp``, ``fuseStronglyConnectedComponentsInForward``): a
    contiguous split keeps each such component on one device."""
    g = cost.graph
    key: dict[str, int] = {}
    of = [-1] * cost.n_tasks
    members: list[list[int]] = []
    for t in g.topo_order:
        cls = g.tasks[t].colocate
        if cls and cls in key:
            k = key[cls]
        else:
            k = len(members)
            members.append([])
            if cls:
                key[cls] = k
        of[t] = k
        members[k].append(t)
    if fuse_cycles:
        comp = _components(_group_edges(cost, of, len(members)))
        merged: dict[int, list[int]] = {}
        for q, c in enumerate(comp):
            merged.setdefault(c, []).extend(members[q])
        first = sorted(merged)  # a component is numbered by its lowest group
        rank_of = {c: k for k, c in enumerate(first)}
        position = {t: k for k, t in enumerate(g.topo_order)}
        members = [sorted(merged[c], key=position.__getitem__) for c in first]
        of = [rank_of[comp[q]] for q in of]
    order = _group_order(cost, of, len(members))
    rank = {q: k for k, q in enumerate(order)}
    members = [members[q] for q in order]
    of = [rank[q] for q in of]
    allowed = [frozenset(allowed_devices(cost, t)) for t in range(cost.n_tasks)]
    time = []
    for m in members:
        row = []
        for d in range(cost.n_devices):
            ok = all(d in allowed[t] for t in m)
            row.append(sum(cost.time[t][d] for t in m) if ok else INF)
        time.append(tuple(row))
    memory = tuple(float(sum(cost.footprint[t] for t in m)) for m in members)
    return Groups(tuple(of), tuple(tuple(sorted(m)) for m in members), tuple(time), memory)


def _group_order(cost: CostTable, of: Sequence[int], n: int) -> list[int]:
    """Groups in topological order of the edges between forward tasks (Tarnawski
    et al. split the forward graph; backward tasks follow their class), ties
    to the lower group number; a cycle among groups is broken at its lowest
    group. A group of backward tasks only is placed by the mirror image of its
    backward edges, as their artificial forward nodes are (``dp.cpp``,
    ``createArtificialForwardNodes``)."""
    succ = _group_edges(cost, of, n)
    indeg = [0] * n
    for a in range(n):
        for b in succ[a]:
            indeg[b] += 1
    ready = [q for q in range(n) if indeg[q] == 0]
    heapq.heapify(ready)
    done = [False] * n
    order: list[int] = []
    while len(order) < n:
        if not ready:  # a cycle: release its lowest group
            q = next(q for q in range(n) if not done[q])
            indeg[q] = 0
            heapq.heappush(ready, q)
        q = heapq.heappop(ready)
        if done[q]:
            continue
        done[q] = True
        order.append(q)
        for b in sorted(succ[q]):
            indeg[b] -= 1
            if indeg[b] == 0 and not done[b]:
                heapq.heappush(ready, b)
    return order


def _group_edges(cost: CostTable, of: Sequence[int], n: int) -> list[set[int]]:
    """Successor groups: along edges between forward tasks, and mirrored along
    backward edges of groups without forward tasks (:func:`_group_order`)."""
    g = cost.graph
    has_forward = [False] * n
    for t in range(cost.n_tasks):
        if not g.tasks[t].backward:
            has_forward[of[t]] = True
    succ: list[set[int]] = [set() for _ in range(n)]
    for e in g.edges:
        a, b = of[e.src], of[e.dst]
        if a == b:
            continue
        if not g.tasks[e.src].backward and not g.tasks[e.dst].backward:
            succ[a].add(b)
        elif g.tasks[e.src].backward and g.tasks[e.dst].backward and not (has_forward[a] and has_forward[b]):
            succ[b].add(a)
    return succ


def _components(succ: list[set[int]]) -> list[int]:
    """Strongly connected components (Tarjan, SIAM J. Comput. 1(2), 1972, iteratively):
    the component of each node, numbered by its lowest node."""
    n = len(succ)
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    stack: list[int] = []
    comp = [-1] * n
    counter = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        work = [(root, iter(sorted(succ[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = True
                    work.append((w, iter(sorted(succ[w]))))
                elif on_stack[w]:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                members = []
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    members.append(w)
                    if w == v:
                        break
                for w in members:
                    comp[w] = min(members)
    return comp


def pays_transfers(cost: CostTable) -> tuple[bool, ...]:
    """Per device: whether its load counts transfers (every device but a CPU)."""
    return tuple(d.kind != "cpu" for d in cost.platform.devices)


def edge_transfer(cost: CostTable, e: int) -> float:
    """The slowest finite transfer time of edge ``e`` between two different devices its ends may use."""
    edge = cost.graph.edges[e]
    worst = 0.0
    for a in allowed_devices(cost, edge.src):
        for b in allowed_devices(cost, edge.dst):
            if a != b:
                c = cost.comm(e, a, b)
                if c < INF:
                    worst = max(worst, c)
    return worst


def uniform_transfers(cost: CostTable) -> bool:
    """Whether every edge takes the same time between any two different devices (as in the paper)."""
    for e in cost.graph.edges:
        seen = {cost.comm(e.index, a, b) for a in allowed_devices(cost, e.src)
                for b in allowed_devices(cost, e.dst) if a != b}
        if len(seen) > 1:
            return False
    return True


def segment_transfers(cost: CostTable, groups: Groups) -> np.ndarray:
    """``comm[i, j]``: the transfer part of the load of groups ``i .. j-1`` on
    one accelerator: each task inside with a consumer outside pays its output
    once, each task outside with a consumer inside pays it once
    (incremental in ``j``: O(groups x (tasks + edges)))."""
    g = cost.graph
    n = groups.n
    out_cost = [0.0] * cost.n_tasks
    for u in range(cost.n_tasks):
        out_cost[u] = max((edge_transfer(cost, e) for e in g.succs[u]), default=0.0)
    consumers = [len(g.succs[u]) for u in range(cost.n_tasks)]
    comm = np.full((n + 1, n + 1), INF)
    for i in range(n + 1):
        comm[i, i] = 0.0
        inside = [0] * cost.n_tasks  # consumers of u inside the segment
        member = [False] * cost.n_tasks
        total = 0.0
        for j in range(i, n):
            for w in groups.members[j]:
                # w joins: it stops paying "in", starts paying "out"
                if inside[w] > 0:
                    total -= out_cost[w]
                member[w] = True
                if inside[w] < consumers[w]:
                    total += out_cost[w]
                for e in g.preds[w]:
                    u = g.edges[e].src
                    inside[u] += 1
                    if member[u]:
                        if inside[u] == consumers[u]:
                            total -= out_cost[u]
                    elif inside[u] == 1:
                        total += out_cost[u]
            comm[i, j + 1] = max(0.0, total)
    return comm


def device_classes(cost: CostTable) -> tuple[tuple[int, ...], ...]:
    """Interchangeable devices grouped (singletons for the rest), in device order."""
    classes = list(identical_device_classes(cost))
    seen = {d for c in classes for d in c}
    classes += [(d,) for d in range(cost.n_devices) if d not in seen]
    return tuple(sorted(classes))


def split_dp(cost: CostTable, groups: Groups, memory: bool) -> tuple[tuple[int, ...], float] | None:
    """The best contiguous split of the group order (module docstring):
    ``(device per task, max-load)``, or None when no split fits."""
    n = groups.n
    if n == 0:
        return (), 0.0
    comm = segment_transfers(cost, groups)
    pays = pays_transfers(cost)
    classes = device_classes(cost)
    counts = [min(len(c), n) for c in classes]  # n groups fill at most n devices of a class
    if math.prod(k + 1 for k in counts) > MAX_STATES:
        return None  # too many states: the heuristics and the exact model do without the DP
    upper = np.triu(np.ones((n + 1, n + 1), dtype=bool))
    seg = []
    for cls in classes:
        d = cls[0]
        times = np.array([0.0] + [groups.time[k][d] for k in range(n)])
        with np.errstate(invalid="ignore"):
            prefix = np.cumsum(times)
            load = prefix[None, :] - prefix[:, None]
        load = np.where(np.isnan(load), INF, load)
        if pays[d]:
            load = load + comm
        if memory:
            mem = np.cumsum([0.0] + list(groups.memory))
            used = mem[None, :] - mem[:, None]
            load = np.where(used > cost.memory_capacity[d] * (1 + 1e-9), INF, load)
        load = np.where(upper, load, INF)
        np.fill_diagonal(load, 0.0)
        seg.append(load)
    states = _states(counts)
    index = {s: k for k, s in enumerate(states)}
    dp = np.full((len(states), n + 1), INF)
    back: dict[tuple[int, int], tuple[int, int, int]] = {}
    dp[index[tuple(0 for _ in counts)], 0] = 0.0
    for s in states:
        k = index[s]
        if not any(s):
            continue
        best = np.full(n + 1, INF)
        arg_c = np.full(n + 1, -1)
        arg_i = np.zeros(n + 1, dtype=int)
        for c, used in enumerate(s):
            if used == 0:
                continue
            prev = index[s[:c] + (used - 1,) + s[c + 1:]]
            cand = np.maximum(dp[prev][:, None], seg[c])
            i = np.argmin(cand, axis=0)
            v = cand[i, np.arange(n + 1)]
            better = v < best
            best = np.where(better, v, best)
            arg_c = np.where(better, c, arg_c)
            arg_i = np.where(better, i, arg_i)
        dp[k] = best
        for j in range(n + 1):
            if arg_c[j] >= 0:
                back[k, j] = (int(arg_c[j]), int(arg_i[j]), 0)
    full = index[tuple(counts)]
    if not dp[full, n] < INF:
        return None
    # walk back: segments and the class that took each
    segments: list[tuple[int, int, int]] = []
    s, j = tuple(counts), n
    while j > 0:
        c, i, _ = back[index[s], j]
        if i < j:
            segments.append((c, i, j))
        s = s[:c] + (s[c] - 1,) + s[c + 1:]
        j = i
    free = {c: list(cls) for c, cls in enumerate(classes)}
    device = [-1] * cost.n_tasks
    for c, i, j in reversed(segments):
        dev = free[c].pop(0)
        for k in range(i, j):
            for t in groups.members[k]:
                device[t] = dev
    return tuple(device), float(dp[full, n])


def _states(counts: Sequence[int]) -> list[tuple[int, ...]]:
    """Every count vector up to ``counts``, in an order where ``s - e_c`` comes before ``s``."""
    out: list[tuple[int, ...]] = [()]
    for k in counts:
        out = [s + (x,) for s in out for x in range(k + 1)]
    return sorted(out, key=sum)


def non_contiguous(cost: CostTable, device: Sequence[int]) -> tuple[int, ...]:
    """Devices whose forward tasks are not contiguous: a path of forward tasks
    leaves the device and comes back (Tarnawski et al.'s contiguity; backward
    tasks follow their colocated forward tasks)."""
    g = cost.graph
    forward = [not t.backward for t in g.tasks]
    bad = []
    for d in sorted(set(device)):
        seen = [False] * cost.n_tasks
        stack = [v for u in range(cost.n_tasks) if forward[u] and device[u] == d
                 for v in g.succ_tasks(u) if forward[v] and device[v] != d]
        back = False
        while stack and not back:
            w = stack.pop()
            if seen[w]:
                continue
            seen[w] = True
            for v in g.succ_tasks(w):
                if not forward[v]:
                    continue
                if device[v] == d:
                    back = True
                    break
                stack.append(v)
        if back:
            bad.append(d)
    return tuple(bad)

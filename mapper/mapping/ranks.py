"""Task priorities shared by the list-scheduling heuristics.

Mean costs and the upward and downward ranks of Topcuoglu, Hariri and Wu,
"Performance-effective and low-complexity task scheduling for heterogeneous
computing", IEEE TPDS 13(3), 2002, generalised to infeasible entries: means
are taken over the devices (and device pairs) where a task can run.
"""

from __future__ import annotations

import heapq
import math
import weakref
from collections.abc import Sequence

from mapper.costing.cost import CostTable

INF = math.inf


#: The last few means computed, by table (identity, held weakly: an entry goes with its table, so
#: the memo never keeps a graph alive): the multilevel path and the heuristics it runs ask for the
#: same table's means several times (the full graph's and the coarse graph's three kinds each, so
#: that the full graph's are not computed again).
MEMO_SIZE = 8
_MEMO: list[tuple[weakref.ref[CostTable], object, tuple[float, ...]]] = []


def _forget(ref: weakref.ref[CostTable]) -> None:
    _MEMO[:] = [m for m in _MEMO if m[0] is not ref]


def _memo(cost: CostTable, key: object, compute) -> tuple[float, ...]:
    for known, k, value in _MEMO:
        if known() is cost and k == key:
            return value
    value = compute()
    _MEMO.insert(0, (weakref.ref(cost, _forget), key, value))
    del _MEMO[MEMO_SIZE:]
    return value


def mean_times(cost: CostTable) -> tuple[float, ...]:
    """``w̄[t]``: the mean of ``time[t][d]`` over the devices where ``t`` can run."""
    return _memo(cost, "times", lambda: _mean_times(cost))


def _mean_times(cost: CostTable) -> tuple[float, ...]:
    out = []
    for t in range(cost.n_tasks):
        feas = [x for x in cost.time[t] if x < INF]
        out.append(sum(feas) / len(feas) if feas else INF)
    return tuple(out)


def mean_comm(cost: CostTable, same_device: bool = False) -> tuple[float, ...]:
    """``c̄[e]``: the mean transfer time of edge ``e`` over the ordered pairs of
    distinct devices ``(a, b)`` with ``a`` feasible for its source, ``b`` for its
    destination, and a route between them (0 if there is no such pair).

    On the HEFT paper's example (uniform links) this is the edge weight. With
    ``same_device`` the pairs ``(a, a)`` count too, at no cost and twice (once
    each way): the mean over an undirected network whose nodes link to
    themselves, as SAGA's HEFT and CPoP take it (Coleman and Krishnamachari,
    arXiv:2403.07120, ``saga.schedulers.cpop.upward_rank``); on symmetric links
    the two means are the same but for the same-device pairs.
    """
    return _memo(cost, same_device, lambda: _mean_comm(cost, same_device))


def _mean_comm(cost: CostTable, same_device: bool) -> tuple[float, ...]:
    out = []
    pairs: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[float, float, int, int]] = {}
    for e in cost.graph.edges:
        fa, fb = cost.feasible_devices(e.src), cost.feasible_devices(e.dst)
        key = (fa, fb)
        if key not in pairs:  # sums over the device pairs, shared by every edge between such tasks
            lat = spb = 0.0
            routed = same = 0
            for a in fa:
                for b in fb:
                    if a == b:
                        same += 1
                    elif cost.route_latency[a][b] < INF:
                        lat += cost.route_latency[a][b]
                        spb += cost.route_sec_per_byte[a][b]
                        routed += 1
            pairs[key] = (lat, spb, routed, same)
        lat, spb, routed, same = pairs[key]
        if e.comm is not None:  # an explicit transfer time between any two different devices
            distinct = len(fa) * len(fb) - same
            total, count = e.comm * distinct, distinct
        else:
            total, count = lat + e.bytes * spb, routed
        count += 2 * same if same_device else 0  # a link to itself, counted as each direction
        out.append(total / count if count else 0.0)
    return tuple(out)


def upward_rank(cost: CostTable, w: Sequence[float], c: Sequence[float]) -> tuple[float, ...]:
    """``rank_u(i) = w̄_i + max_{j in succ(i)} (c̄_ij + rank_u(j))`` (Topcuoglu et al., eq. 7)."""
    g = cost.graph
    rank = [0.0] * cost.n_tasks
    for i in reversed(g.topo_order):
        rank[i] = w[i] + max((c[e] + rank[g.edges[e].dst] for e in g.succs[i]), default=0.0)
    return tuple(rank)


def downward_rank(cost: CostTable, w: Sequence[float], c: Sequence[float]) -> tuple[float, ...]:
    """``rank_d(i) = max_{j in pred(i)} (rank_d(j) + w̄_j + c̄_ji)`` (Topcuoglu et al., eq. 8)."""
    g = cost.graph
    rank = [0.0] * cost.n_tasks
    for i in g.topo_order:
        rank[i] = max((rank[g.edges[e].src] + w[g.edges[e].src] + c[e] for e in g.preds[i]), default=0.0)
    return tuple(rank)


def rank_key(x: float) -> float:
    """``x`` rounded to 12 significant digits, so equal ranks computed along
    different float paths tie (and the tie goes by index)."""
    return float(f"{x:.12g}")


def effective_deadlines(cost: CostTable, w: Sequence[float]) -> tuple[float, ...]:
    """``D[i] = min(d_i, min_{j in succ(i)} (D[j] - w[j]))``: the latest end of ``i`` that
    leaves its successors time to meet theirs (Chetto, Silly and Bouchentouf, "Dynamic
    scheduling of real-time tasks under precedence constraints", Real-Time Systems 2(3),
    1990); ``inf`` where no deadline is downstream."""
    g = cost.graph
    dl = [INF] * cost.n_tasks
    for i in reversed(g.topo_order):
        own = g.tasks[i].deadline
        dl[i] = min(own if own is not None else INF,
                    min((dl[g.edges[e].dst] - w[g.edges[e].dst] for e in g.succs[i]), default=INF))
    return tuple(dl)


def edf_order(cost: CostTable, w: Sequence[float], rank: Sequence[float]) -> tuple[int, ...]:
    """A topological order taking, among the ready tasks, the earliest effective
    deadline first (EDF), ties by the higher ``rank``, then by index."""
    g = cost.graph
    dl = effective_deadlines(cost, w)
    indeg = [len(p) for p in g.preds]
    heap = [(dl[t], -rank_key(rank[t]), t) for t in range(cost.n_tasks) if indeg[t] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        *_, t = heapq.heappop(heap)
        order.append(t)
        for e in g.succs[t]:
            v = g.edges[e].dst
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(heap, (dl[v], -rank_key(rank[v]), v))
    return tuple(order)


def priority_order(cost: CostTable, priority: Sequence[float]) -> tuple[int, ...]:
    """A topological order taking, among the ready tasks, the one of highest
    priority first (ties by index): the task list of HEFT when ranks decrease
    along edges, and CPOP's and PEFT's ready-queue order."""
    g = cost.graph
    indeg = [len(p) for p in g.preds]
    heap = [(-rank_key(priority[t]), t) for t in range(cost.n_tasks) if indeg[t] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, t = heapq.heappop(heap)
        order.append(t)
        for e in g.succs[t]:
            v = g.edges[e].dst
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(heap, (-rank_key(priority[v]), v))
    return tuple(order)

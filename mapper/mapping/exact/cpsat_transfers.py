"""Transfers and idle times in the CP-SAT model (:mod:`mapper.mapping.exact.cpsat_model`).

**Transfers.** An edge ``u -> v`` whose transfer costs the same ``c`` between
any two distinct devices (identical processors on a fully connected network,
P|prec,c_ij|Cmax) gets one literal ``same`` (both ends on one device) and the
row ``s[v] >= e[u] + c - c same``, in place of a conditional row per device
pair (``m (m-1)`` of them on ``m`` devices). Other edges keep the per-pair rows.

**Idle times.** Where every transfer is uniform
(:func:`every_transfer_uniform`), per device ``d``: ``first[d]`` and
``last[d]``, the start of its first task and the end of its last one, chosen
by literals ``f[t,d]`` and ``l[t,d]`` (one each on a used device, none on an
idle one), and

* ``last[d] - first[d] >= sum_t len[t,d] x[t,d]`` (its tasks fit between);
* the first task on a device has every predecessor elsewhere, so its
  transfers all count (``f[t,d] -> not same``) and ``first[d] >= drt(t)``, the
  data ready time with every input remote (Sinnen, "Reducing the solution
  space of optimal task scheduling", Computers & OR 43, 2014);
* likewise the last task has every successor elsewhere:
  ``Cmax - last[d] >= max_v (c + bottom level of v)``;
* summed over the devices, ``sum first + sum (Cmax - last) <= m Cmax - work``:
  the idle-time bound of Shahul and Sinnen ("Scheduling task graphs optimally
  with A*", J. Supercomputing 51, 2010), which the search now sees per device.

On Sinnen's 21-task graphs on 4 processors these rows prove the fork, join and
fork-join instances that the model without them leaves at gaps of up to 10 %
(``benchmarks/sinnen.py``). The caller passes the model (an OR-Tools
``CpModel``); this module does not import OR-Tools.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mapper.costing.cost import INF, CostTable


def uniform_transfer(cost: CostTable, e: int, fu: Sequence[int], fv: Sequence[int]) -> float | None:
    """The transfer time of edge ``e`` when it is the same finite value between every
    pair of distinct devices of ``fu`` (where ``u`` may run) and ``fv``; else None."""
    values = {cost.comm(e, a, b) for a in fu for b in fv if a != b}
    if len(values) != 1:
        return None
    (c,) = values
    return None if c == INF else c


def add_transfers(m: Any, p: dict[tuple[int, int], Any], start: Sequence[Any] | None, end: Sequence[Any],
                  cost: CostTable, ticks: Callable[[float], int], n_devices: int, *,
                  pairs: bool) -> tuple[dict[int, Any], dict[tuple[int, int, int], Any]]:
    """The rows of every edge (module docstring; none for times when ``start`` is None).
    Returns the ``same`` literal of each edge given one, and with ``pairs`` a literal per
    edge and device pair that pays a transfer (true where both ends are there), in place of
    ``same`` literals."""
    same: dict[int, Any] = {}
    pair: dict[tuple[int, int, int], Any] = {}
    for e in cost.graph.edges:
        u, v = e.src, e.dst
        if start is not None:
            m.add(start[v] >= end[u])
        fu = [a for a in range(n_devices) if (u, a) in p]
        fv = [b for b in range(n_devices) if (v, b) in p]
        c = None if pairs or start is None else uniform_transfer(cost, e.index, fu, fv)
        if c is not None and start is not None and ticks(c) > 0:
            same[e.index] = _same_device(m, p, u, v, fu, fv, f"same{e.index}")
            m.add(start[v] >= end[u] + ticks(c) - ticks(c) * same[e.index])
            continue
        for a in fu:
            for b in fv:
                if a == b:
                    continue
                cab = cost.comm(e.index, a, b)
                if cab == INF:
                    m.add_bool_or([~p[u, a], ~p[v, b]])
                elif ticks(cab) > 0:
                    if start is not None:
                        m.add(start[v] >= end[u] + ticks(cab)).only_enforce_if([p[u, a], p[v, b]])
                    if pairs:
                        z = pair[e.index, a, b] = m.new_bool_var(f"z{e.index}_{a}_{b}")
                        m.add_bool_or([~p[u, a], ~p[v, b], z])
    return same, pair


def _same_device(m: Any, p: dict[tuple[int, int], Any], u: int, v: int, fu: Sequence[int], fv: Sequence[int],
                 name: str) -> Any:
    """A literal true exactly when tasks ``u`` and ``v`` are on one device."""
    z = m.new_bool_var(name)
    for a in set(fu) | set(fv):
        lu, lv = p.get((u, a)), p.get((v, a))
        if lu is not None and lv is not None:
            m.add_bool_or([~lu, ~lv, z])
            m.add_bool_or([~z, ~lu, lv])
            m.add_bool_or([~z, ~lv, lu])
        elif lu is not None:
            m.add_implication(lu, ~z)
        else:
            m.add_implication(lv, ~z)
    return z


def every_transfer_uniform(cost: CostTable, p: dict[tuple[int, int], Any], same: dict[int, Any],
                           ticks: Callable[[float], int]) -> bool:
    """Every edge that can cost a transfer has a ``same`` literal (its transfer is uniform).
    Only then does the model get the idle-time rows: they lean on those literals, and on
    related machines with links of different speeds they only weigh the model down (the
    50- and 100-task instances of ``benchmarks/vs_saga.py`` part 1b: the ``milp`` mapper
    at 0.918 of the best SAGA schedule with them, 0.907 without, in 10 s)."""
    nd = cost.n_devices
    for e in cost.graph.edges:
        if e.index in same:
            continue
        fu = [a for a in range(nd) if (e.src, a) in p]
        fv = [b for b in range(nd) if (e.dst, b) in p]
        if any(a != b and (c := cost.comm(e.index, a, b)) < INF and ticks(c) > 0 for a in fu for b in fv):
            return False
    return True


def add_idle_times(m: Any, p: dict[tuple[int, int], Any], start: Sequence[Any], end: Sequence[Any], cmax: Any,
                   lengths: dict[tuple[int, int], int], same: dict[int, Any], cost: CostTable,
                   ticks: Callable[[float], int], devices: Sequence[int], horizon: int) -> None:
    """The idle-time rows (module docstring) for each of ``devices`` (devices of the model, not pools)."""
    n = cost.n_tasks
    g = cost.graph
    shortest = [min((lengths[t, d] for d in range(cost.n_devices) if (t, d) in lengths), default=0) for t in range(n)]
    least_comm = {e.index: min((ticks(c) for a in range(cost.n_devices) for b in range(cost.n_devices)
                                if a != b and (e.src, a) in p and (e.dst, b) in p
                                and (c := cost.comm(e.index, a, b)) < INF), default=0)
                  for e in g.edges}
    top = [0] * n
    for t in g.topo_order:
        for e in g.preds[t]:
            top[t] = max(top[t], top[g.edges[e].src] + shortest[g.edges[e].src])
    bottom = [0] * n
    for t in reversed(g.topo_order):
        bottom[t] = shortest[t] + max((bottom[g.edges[e].dst] for e in g.succs[t]), default=0)
    ready = [max((top[g.edges[e].src] + shortest[g.edges[e].src] + least_comm[e] for e in g.preds[t]), default=0)
             for t in range(n)]
    tail = [max((least_comm[e] + bottom[g.edges[e].dst] for e in g.succs[t]), default=0) for t in range(n)]
    firsts, lasts, work = [], [], []
    for d in devices:
        on = [t for t in range(n) if (t, d) in p]
        if not on:
            continue
        used = m.new_bool_var(f"used{d}")
        first = m.new_int_var(0, horizon, f"first{d}")
        last = m.new_int_var(0, horizon, f"last{d}")
        f = {t: m.new_bool_var(f"f{t}_{d}") for t in on}
        lt = {t: m.new_bool_var(f"l{t}_{d}") for t in on}
        for t in on:
            m.add_implication(p[t, d], used)
            m.add_implication(f[t], p[t, d])
            m.add_implication(lt[t], p[t, d])
            m.add(first == start[t]).only_enforce_if(f[t])
            m.add(last == end[t]).only_enforce_if(lt[t])
            m.add(first <= start[t]).only_enforce_if(p[t, d])
            m.add(last >= end[t]).only_enforce_if(p[t, d])
            for e in g.preds[t]:
                if e in same:
                    m.add_implication(f[t], ~same[e])
            for e in g.succs[t]:
                if e in same:
                    m.add_implication(lt[t], ~same[e])
        m.add_bool_or([~used] + [p[t, d] for t in on])
        m.add(sum(f.values()) == used)
        m.add(sum(lt.values()) == used)
        m.add(first == last).only_enforce_if(~used)
        m.add(first >= sum(ready[t] * f[t] for t in on))
        m.add(cmax - last >= sum(tail[t] * lt[t] for t in on))
        load = sum(lengths[t, d] * p[t, d] for t in on)
        m.add(last - first >= load)
        m.add(last <= cmax)
        firsts.append(first)
        lasts.append(last)
        work.append(load)
    if len(firsts) > 1:
        m.add(sum(firsts) + sum(cmax - x for x in lasts) <= len(firsts) * cmax - sum(work))

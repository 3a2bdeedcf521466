"""Fixed task orders on forks and joins in the CP-SAT model (:mod:`mapper.mapping.exact.cpsat_model`).

On a fork (every task but one, ``a``, has ``a`` as its only parent and no
child) a device runs ``a`` (if there) and then some of the other tasks, and
nothing else. On device ``d`` such a task ``i`` is ready at ``f(a) + r_i``,
``r_i`` its transfer (0 when ``a`` is on ``d``): earliest release first is an
optimal order on one machine, so the model may fix it, ``e[i] <= s[j]``
whenever ``i`` and ``j`` both run on ``d`` (ties by task index), and bound
``Cmax`` by each block of that order (:func:`_blocks`). A join (one child
``b``, every other task its parent without parents of its own) is the same
backwards: longest transfer to ``b`` first (Jackson's rule), bounding ``b``'s
start. This is the fixed task order of Orr and Sinnen ("Further explorations
in state-space search for optimal task scheduling", HiPC 2017), applied once
per device and per placement of ``a`` (or ``b``); it removes the ``k!`` orders
of ``k`` tasks on a device that the search would otherwise tell apart.

Value precedence over the devices (:func:`precedence_order`) takes ``a`` and
``b`` first, then the other tasks longest first, as bin packing breaks the
symmetry of its bins; on forks, joins and fork-joins of Sinnen's set that is
what proves the 21-task ones at CCR 0.1 on 8 processors (60 s without a proof
before, 12-25 s now). On fork-joins the orders are not fixed: both release and
delivery times vary there, and measured on the set, the rows of the devices
where they agree cost the search more than they gave (the 30-task fork-join at
CCR 0.1 on 8 processors ends at a bound of 646 with them, 703 without;
``benchmarks/sinnen.py``). Only transfers that cost the same between any two
devices are used (identical processors on a fully connected network). The
caller passes the model (an OR-Tools ``CpModel``); this module does not import
OR-Tools.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mapper.costing.cost import INF, CostTable
from mapper.mapping.exact.cpsat_transfers import uniform_transfer

#: At most this many literal terms in all the rows together; any subset of the rows is as
#: valid as all of them, so a large graph keeps the rows of its first devices and cases.
MAX_TERMS = 200_000

#: ``(a, middle, b)`` of a fork, join, fork-join or set of independent tasks, or None.
Parts = tuple[int | None, tuple[int, ...], int | None] | None


def fork_join_parts(cost: CostTable) -> Parts:
    """``(a, middle, b)`` when the graph is a fork (``b`` None), a join (``a`` None), a
    fork-join or a set of independent tasks (both None) with at least two middle tasks;
    else None. A direct edge ``a -> b`` is allowed."""
    g = cost.graph
    n = cost.n_tasks
    parents = [frozenset(g.edges[e].src for e in g.preds[t]) for t in range(n)]
    children = [frozenset(g.edges[e].dst for e in g.succs[t]) for t in range(n)]
    # the common parent has the most children and the common child the most parents
    most_out = max((len(c) for c in children), default=0)
    most_in = max((len(q) for q in parents), default=0)
    for a in [None, *(t for t in range(n) if len(children[t]) == most_out > 1)]:
        for b in [None, *(t for t in range(n) if len(parents[t]) == most_in > 1)]:
            if a is not None and a == b:
                continue
            want_p = frozenset() if a is None else frozenset((a,))
            want_c = frozenset() if b is None else frozenset((b,))
            middle = tuple(t for t in range(n) if t not in (a, b))
            if len(middle) >= 2 and all(parents[t] == want_p and children[t] == want_c for t in middle):
                return a, middle, b
    return None


def precedence_order(cost: CostTable, parts: Parts) -> list[int]:
    """The task order for value precedence over interchangeable devices
    (:func:`~mapper.mapping.exact.cpsat_model.break_symmetry`): on a fork, join or
    fork-join (``parts``, from :func:`fork_join_parts`), the common parent and child
    first, then the middle tasks longest first, as bin packing breaks the symmetry of
    its bins (largest item in the first bin); other graphs in task order."""
    if parts is None:
        return list(range(cost.n_tasks))
    a, middle, b = parts
    longest = sorted(middle, key=lambda t: (-max((x for x in cost.time[t] if x < INF), default=0.0), t))
    return [t for t in (a, b) if t is not None] + longest


def add_fixed_orders(m: Any, p: dict[tuple[int, int], Any], start: Sequence[Any], end: Sequence[Any], cmax: Any,
                     lengths: dict[tuple[int, int], int], cost: CostTable, ticks: Callable[[float], int],
                     devices: Sequence[int], parts: Parts) -> int:
    """The order rows and the bound rows (module docstring) on each of ``devices``
    (devices of the model, not pools) of the graph's ``parts`` (:func:`fork_join_parts`);
    returns how many rows were added."""
    if parts is None:
        return 0
    a, middle, b = parts
    if (a is None) == (b is None):
        # a fork-join: measured, its rows cost the search more than they gave (module
        # docstring); independent tasks: every order is as good, nothing to fix
        return 0
    g = cost.graph
    nd = cost.n_devices

    def on(t: int | None) -> list[int]:
        return [d for d in range(nd) if t is not None and (t, d) in p]

    def transfer(e: int, fu: list[int], fv: list[int]) -> int | None:
        if not any(x != y for x in fu for y in fv):
            return 0  # the two ends always share a device
        c = uniform_transfer(cost, e, fu, fv)
        return None if c is None else ticks(c)

    release: dict[int, int] = {}
    delivery: dict[int, int] = {}
    for t in middle:
        for e in g.preds[t]:
            c = transfer(e, on(a), on(t))
            if c is None:
                return 0
            release[t] = max(release.get(t, 0), c)
        for e in g.succs[t]:
            c = transfer(e, on(t), on(b))
            if c is None:
                return 0
            delivery[t] = max(delivery.get(t, 0), c)
    target = cmax if b is None else start[b]  # what waits for the middle tasks' results
    base = 0 if a is None else end[a]  # when they may start at the earliest
    rows = terms = 0
    for d in devices:
        here = [t for t in middle if (t, d) in p]
        if not here:
            continue
        # placements of a and b relative to d: (a on d, b on d), each only where possible
        cases = [(pa, pb) for pa in ((False, True) if (a, d) in p else (False,))
                 for pb in ((False, True) if (b, d) in p else (False,))]
        before: dict[tuple[int, int], list[tuple[bool, bool]]] = {}
        for pa, pb in cases:
            r = {t: 0 if pa else release.get(t, 0) for t in here}
            q = {t: 0 if pb else delivery.get(t, 0) for t in here}
            order = sorted(here, key=lambda t: (r[t], -q[t], t))
            size = len(order)
            terms += 2 * size * size + size * size // 2
            if terms > MAX_TERMS:
                return rows
            for i, x in enumerate(order):
                for y in order[i + 1:]:
                    before.setdefault((x, y), []).append((pa, pb))
            case = _case(p, a, b, d, pa, pb)
            pos = {t: i for i, t in enumerate(order)}
            for j, k, ends in _blocks(order, r, q):
                rows += _row(m, target, base, r[j], order[pos[j]:pos[k] + 1], q[k], lengths, p, d, list(ends), case)
        for (x, y), where in before.items():
            if len(where) == len(cases):
                m.add(start[y] >= end[x]).only_enforce_if([p[x, d], p[y, d]])
                rows += 1
                continue
            for pa, pb in where:
                m.add(start[y] >= end[x]).only_enforce_if([p[x, d], p[y, d]] + _case(p, a, b, d, pa, pb))
                rows += 1
    return rows


def _row(m: Any, target: Any, base: Any, release: int, tasks: Sequence[int], delivery: int,
         lengths: dict[tuple[int, int], int], p: dict[tuple[int, int], Any], d: int, ends: Sequence[int],
         case: list[Any]) -> int:
    """``target >= base + release + (lengths of those of tasks on d) + delivery`` where
    ``ends`` are on ``d`` and ``case`` holds; returns 1 (the rows added)."""
    m.add(target >= base + release + sum(lengths[t, d] * p[t, d] for t in tasks) + delivery) \
        .only_enforce_if([p[t, d] for t in ends] + case)
    return 1


def _case(p: dict[tuple[int, int], Any], a: int | None, b: int | None, d: int, pa: bool, pb: bool) -> list[Any]:
    """The literals that say where ``a`` and ``b`` are relative to device ``d``."""
    out = []
    if a is not None and (a, d) in p:
        out.append(p[a, d] if pa else ~p[a, d])
    if b is not None and (b, d) in p:
        out.append(p[b, d] if pb else ~p[b, d])
    return out


def _blocks(order: list[int], r: dict[int, int], q: dict[int, int]) -> list[tuple[int, int, tuple[int, ...]]]:
    """The blocks ``(j, k, ends)`` (``j`` up to ``k`` in ``order``) whose bound rows are
    needed, each with the ends that must be on the device for it to hold. On one
    device the fixed order delivers its last result at the latest of
    ``r_j + sum of lengths from j to k + q_k`` over the blocks with both ends there
    (Carlier, "The one-machine sequencing problem", EJOR 11, 1982). With equal
    deliveries (a fork) only blocks that reach the end of the order matter, and only
    ``j`` need be there (the sum counts the tasks that are); with equal releases (a
    join), likewise from the start of the order and for ``k``."""
    if len(set(q.values())) == 1:
        return [(j, order[-1], (j,)) for j in order]
    return [(order[0], k, (k,)) for k in order]

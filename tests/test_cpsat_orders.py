"""Fixed task orders and their bound rows on forks and joins, value precedence longest first (cpsat_orders)."""

from __future__ import annotations

import itertools
import random

import pytest
from randdag import make_cost, make_graph, make_platform
from test_cpsat import proves_brute_force_optimum, shaped

from mapper.mapping.exact import cpsat_model
from mapper.mapping.exact.cpsat_orders import _blocks, fork_join_parts, precedence_order


def _cost(n: int, edges: list[tuple[int, int]], procs: int = 2):
    graph = make_graph(n, [(u, v, 0.0, 3.0) for u, v in edges], name="shape")
    links = [(a, b, 1.0, 0.0) for a in range(procs) for b in range(a + 1, procs)]
    return make_cost(graph, make_platform(["cpu"] * procs, links), [[4.0] * procs for _ in range(n)])


def test_the_parts_of_forks_joins_and_fork_joins():
    assert fork_join_parts(_cost(4, [(0, 1), (0, 2), (0, 3)])) == (0, (1, 2, 3), None)
    assert fork_join_parts(_cost(4, [(1, 0), (2, 0), (3, 0)])) == (None, (1, 2, 3), 0)
    assert fork_join_parts(_cost(5, [(0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (3, 4)])) == (0, (1, 2, 3), 4)
    # a direct edge from the parent to the child leaves the middle tasks as they are
    assert fork_join_parts(_cost(4, [(0, 1), (0, 2), (1, 3), (2, 3), (0, 3)])) == (0, (1, 2), 3)
    assert fork_join_parts(_cost(3, [])) == (None, (0, 1, 2), None)
    # a chain, a fork whose middle task has a child of its own, two forks side by side
    for n, edges in ((3, [(0, 1), (1, 2)]), (4, [(0, 1), (0, 2), (1, 3)]), (4, [(0, 1), (2, 3)])):
        assert fork_join_parts(_cost(n, edges)) is None
    # value precedence takes the parent and child first, then the middle tasks longest first
    cost = shaped(3, "forkjoin", 6, 2)
    order = precedence_order(cost, fork_join_parts(cost))
    assert order[:2] == [0, 5] and [cost.time[t][0] for t in order[2:]] == sorted(
        (cost.time[t][0] for t in range(1, 5)), reverse=True)


@pytest.mark.parametrize("seed", range(40))
def test_block_rows_give_the_best_order_on_one_device(seed):
    # the claim behind the rows: with equal deliveries (a fork) the order by release, with
    # equal releases (a join) the order by delivery, largest first, is optimal on one device,
    # and its latest delivery is the largest block sum r_j + lengths j..k + q_k; checked
    # against every order
    rng = random.Random(seed)
    k = rng.randint(1, 6)
    tasks = list(range(k))
    fork = seed % 2 == 0
    r = {t: rng.randint(0, 9) if fork else 0 for t in tasks}
    q = {t: 0 if fork else rng.randint(0, 9) for t in tasks}
    w = {t: rng.randint(1, 9) for t in tasks}

    def latest(seq):
        now, out = 0, 0
        for t in seq:
            now = max(now, r[t]) + w[t]
            out = max(out, now + q[t])
        return out

    order = sorted(tasks, key=lambda t: (r[t], -q[t], t))
    blocks = max(r[j] + sum(w[t] for t in order[order.index(j):order.index(kk) + 1]) + q[kk]
                 for j, kk, _ in _blocks(order, r, q))
    assert latest(order) == blocks == min(latest(s) for s in itertools.permutations(tasks))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(9))
def test_fixed_orders_keep_the_brute_force_optimum(seed):
    # orders fixed per device and placement of the common parent (or child), the block rows
    # and value precedence longest first cut no optimum off: CP-SAT proves brute force's
    # value, with a bound below it
    shape = ("fork", "join", "forkjoin")[seed % 3]
    proves_brute_force_optimum(shaped(100 + seed, shape, 6, 2 + seed % 2), seed)


def test_the_rows_are_added_only_where_they_hold():
    from mapper.mapping.exact import cpsat_orders

    added = []
    real = cpsat_orders.add_fixed_orders

    def counting(*args, **kwargs):
        added.append(real(*args, **kwargs))
        return added[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cpsat_model, "add_fixed_orders", counting)
        cpsat_model._build(shaped(1, "fork", 6, 3), "makespan", 1e3, memory=False, area=False, makespan_bound=None,
                           hint=None, micro_batches=1)
        # transfers that differ between device pairs: release times would depend on the pair
        n = 4
        graph = make_graph(n, [(0, t, 1e9, None) for t in (1, 2, 3)], name="hetero")
        platform = make_platform(["cpu"] * 3, [(0, 1, 1.0, 0.0), (0, 2, 0.1, 0.0), (1, 2, 1.0, 0.0)])
        cpsat_model._build(make_cost(graph, platform, [[4.0] * 3 for _ in range(n)]), "makespan", 1e3,
                           memory=False, area=False, makespan_bound=None, hint=None, micro_batches=1)
        # a fork-join gets no rows
        cpsat_model._build(shaped(1, "forkjoin", 6, 3), "makespan", 1e3, memory=False, area=False,
                           makespan_bound=None, hint=None, micro_batches=1)
    assert added[0] > 0 and added[1] == added[2] == 0


def test_a_wide_fork_keeps_the_rows_within_their_budget():
    # 300 middle tasks on 4 processors would need about 180,000 order rows alone: the rows
    # stop at the budget (any subset of them is valid) and the model still solves
    from mapper.mapping.exact import cpsat_orders

    cost = shaped(5, "fork", 302, 4)
    added = []
    real = cpsat_orders.add_fixed_orders
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cpsat_model, "add_fixed_orders", lambda *a, **k: added.append(real(*a, **k)) or added[-1])
        built = cpsat_model._build(cost, "makespan", 1e4, memory=False, area=False, makespan_bound=None, hint=None,
                                   micro_batches=1)
    assert built is not None and added[0] * 2 <= cpsat_orders.MAX_TERMS

"""Response-time bounds: Graham's and Han et al.'s are never below a work-conserving
schedule's makespan, and Han et al.'s is Graham's for one type."""

from __future__ import annotations

import random

import pytest
from randdag import random_edges

from mapper.mapping.response_bound import TypedDag, graham_bound, han_bound, work_conserving_makespan


def _typed(rng: random.Random) -> TypedDag:
    n = rng.randint(1, 9)
    kinds = rng.randint(1, 3)
    edges = [(u, v, rng.choice((0.0, 0.0, rng.uniform(0, 3)))) for u, v in
             random_edges(rng, n, rng.choice(("random", "layered", "forkjoin")))] if n > 2 else []
    return TypedDag(times=[rng.choice((rng.uniform(0.1, 5), float(rng.randint(1, 5)))) for _ in range(n)],
                    types=[rng.randrange(kinds) for _ in range(n)], edges=edges,
                    cores={s: rng.randint(1, 3) for s in range(kinds)})


def test_the_bound_is_never_below_a_simulated_makespan():
    rng = random.Random(49)
    tight = 0
    for _ in range(1000):
        dag = _typed(rng)
        bound = han_bound(dag)
        for _ in range(3):  # any work-conserving order, and any shorter execution times
            times = [c * rng.choice((1.0, 1.0, rng.random())) for c in dag.times]
            run = TypedDag(times, dag.types, dag.edges, dag.cores)
            makespan = work_conserving_makespan(run, [rng.random() for _ in times])
            assert makespan <= bound * (1 + 1e-12) + 1e-12
            tight += makespan >= bound * (1 - 1e-9)
    assert tight > 0  # and it is reached, on chains and one-core types


def test_one_type_is_grahams_bound():
    times = [3.0, 2.0, 2.0, 1.0]
    edges = [(0, 1, 0.0), (0, 2, 0.0), (1, 3, 0.0), (2, 3, 0.0)]
    # len = 6, vol = 8: 6 + (8 - 6) / 2
    assert graham_bound(times, edges, 2) == pytest.approx(7.0)
    assert han_bound(TypedDag(times, ["a"] * 4, edges, {"a": 2})) == pytest.approx(7.0)


def test_han_bound_by_hand():
    # a -> b -> c with a, c on type x (2 cores), b on y (1 core), and d on y beside them:
    # vol_x / 2 + vol_y / 1 = (2 + 2) / 2 + (4 + 3) = 9, plus the path's 2 (1/2) + 2 (1/2) = 2
    dag = TypedDag([2.0, 4.0, 2.0, 3.0], ["x", "y", "x", "y"], [(0, 1, 0.0), (1, 2, 0.0)], {"x": 2, "y": 1})
    assert han_bound(dag) == pytest.approx(11.0)
    # a transfer delay holds no core: it lengthens the path by itself
    delayed = TypedDag(dag.times, dag.types, [(0, 1, 0.5), (1, 2, 0.0)], dag.cores)
    assert han_bound(delayed) == pytest.approx(11.5)



def _dfs_order(n: int, edges) -> list[int]:
    """A topological order other than Kahn's: reverse postorder of a depth-first search from the highest index."""
    succ: list[list[int]] = [[] for _ in range(n)]
    for a, b, _ in edges:
        succ[a].append(b)
    seen, post = [False] * n, []
    for root in reversed(range(n)):
        stack = [(root, iter(succ[root]))] if not seen[root] else []
        seen[root] = True
        while stack:
            v, it = stack[-1]
            w = next((w for w in it if not seen[w]), None)
            if w is None:
                post.append(v)
                stack.pop()
            else:
                seen[w] = True
                stack.append((w, iter(succ[w])))
    return post[::-1]


def test_any_topological_order_gives_the_same_bound():
    # schedule_dag hands han_bound the graph's own topological order: the same floats as its own
    rng = random.Random(7)
    for _ in range(300):
        dag = _typed(rng)
        order = _dfs_order(len(dag.times), dag.edges)
        pos = {v: i for i, v in enumerate(order)}
        assert all(pos[a] < pos[b] for a, b, _ in dag.edges)
        assert han_bound(TypedDag(dag.times, dag.types, dag.edges, dag.cores, order)) == han_bound(dag)

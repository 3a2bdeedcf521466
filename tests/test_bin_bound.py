"""The bin-packing bound on identical processors (Martello and Toth's L2) against brute force."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from randdag import make_cost, make_graph, make_platform

from mapper.engine.validate import validate
from mapper.mapping import get_mapper
from mapper.mapping.base import MapOptions
from mapper.mapping.bin_bound import bin_packing_bound, bins_needed
from mapper.mapping.bounds import compute_lower_bound

#: 30 independent tasks of Sinnen's set (Independent_Nodes_30): 183 units on 16 processors
#: is 11.4 each, yet four 10s and four 9s leave no room for what 12 would need.
SINNEN_30 = [10, 10, 10, 10, 9, 9, 9, 9, 8, 8, 7, 7, 7, 6, 6, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 3, 2, 2, 2]


def _fewest_bins(sizes, capacity):
    for k in range(1, len(sizes) + 1):
        for labels in itertools.product(range(k), repeat=len(sizes)):
            loads = [0] * k
            for s, b in zip(sizes, labels):
                loads[b] += s
            if max(loads) <= capacity:
                return k
    return len(sizes) + 1


@pytest.mark.parametrize("seed", range(30))
def test_bins_needed_never_passes_the_fewest_bins(seed):
    rng = random.Random(seed)
    sizes = [rng.randint(1, 12) for _ in range(rng.randint(1, 7))]
    capacity = rng.randint(max(sizes), 20)
    need = bins_needed(sizes, capacity)
    assert math.ceil(sum(sizes) / capacity) <= need <= _fewest_bins(sizes, capacity)


@pytest.mark.parametrize("seed", range(20))
def test_the_bound_never_passes_the_optimal_makespan(seed):
    rng = random.Random(100 + seed)
    times = [rng.randint(1, 9) for _ in range(rng.randint(2, 7))]
    procs = rng.randint(2, 3)
    best = min(max(sum(t for t, p in zip(times, labels) if p == q) for q in range(procs))
               for labels in itertools.product(range(procs), repeat=len(times)))
    load = math.ceil(max(sum(times) / procs, max(times)))
    assert load <= bin_packing_bound(times, procs, load) <= best


def test_sinnen_independent_tasks_need_13_on_16_processors():
    assert math.ceil(sum(SINNEN_30) / 16) == 12 and bins_needed(SINNEN_30, 12) > 16
    assert bin_packing_bound(SINNEN_30, 16, 12) == 13


def test_the_mapper_proves_it():
    n, procs = len(SINNEN_30), 16
    graph = make_graph(n, [], name="independent")
    cost = make_cost(graph, make_platform(["cpu"] * procs), [[float(x)] * procs for x in SINNEN_30])
    assert compute_lower_bound(cost, "makespan") == 13
    result = get_mapper("milp").map(cost, MapOptions(time_limit=20))
    assert result.status == "optimal" and result.objective_value == 13 and result.lower_bound == 13
    assert not validate(result.schedule)
    # times that differ between processors: not identical, so no bin-packing bound
    skewed = make_cost(graph, make_platform(["cpu"] * procs),
                       [[float(x)] * (procs - 1) + [float(x) + 1] for x in SINNEN_30])
    assert compute_lower_bound(skewed, "makespan") == 12


def test_tasks_of_no_time_fit_a_makespan_of_zero():
    assert bins_needed([0, 0, 0], 0) == 1
    assert bin_packing_bound([0.0, 0.0, 0.0], 1, 0.0) == 0.0

"""Heuristic mappers on the HEFT paper's example, objectives, bounds, registry."""

from __future__ import annotations

import math

import pytest
from randdag import heft_paper_example, make_cost, make_graph, make_platform, random_instance

from mapper.cli import main
from mapper.core.graph import Placement
from mapper.engine.schedule import Assignment, ScheduleOptions, build_schedule
from mapper.engine.validate import validate
from mapper.errors import InfeasibleError, OptionsError
from mapper.mapping import MAPPERS, available_mappers, get_mapper
from mapper.mapping.base import MapOptions, Mapper
from mapper.mapping.bounds import (
    class_load_bound,
    fractional_load_bound,
    lower_bound,
    makespan_lower_bound,
    path_bound,
)
from mapper.mapping.cpop import critical_path
from mapper.mapping.objectives import device_loads, objective_value
from mapper.mapping.ranks import downward_rank, mean_comm, mean_times, upward_rank

INF = math.inf
HEURISTICS = ("heft", "heft-samedev", "cpop", "peft", "greedy", "single", "cpu")


@pytest.fixture(scope="module")
def paper():
    return heft_paper_example()


def test_upward_ranks_match_the_paper(paper):
    rank = upward_rank(paper, mean_times(paper), mean_comm(paper))
    want = (108.0, 77.0, 80.0, 80.0, 69.0, 63.333, 42.667, 35.667, 44.333, 14.667)  # Table 2
    assert rank == pytest.approx(want, abs=1e-3)
    down = downward_rank(paper, mean_times(paper), mean_comm(paper))
    assert down[0] == 0.0 and down[9] == pytest.approx(93.333, abs=1e-3)


def test_heft_reproduces_the_paper_schedule(paper):
    r = get_mapper("heft").map(paper)
    s = r.schedule
    assert r.objective_value == s.makespan == 80.0
    assert s.device_of == (2, 0, 2, 1, 2, 1, 2, 0, 1, 1)  # n1 p3, n2 p1, n3 p3, n4 p2, ...
    assert tuple(sl.start for sl in s.slots) == (0, 27, 9, 18, 28, 26, 38, 57, 56, 73)
    assert r.status == "heuristic" and r.mapper == "heft" and validate(s) == []


def test_cpop_gives_86_with_the_critical_path_on_p2(paper):
    w, c = mean_times(paper), mean_comm(paper)
    prio = tuple(a + b for a, b in zip(upward_rank(paper, w, c), downward_rank(paper, w, c)))
    assert critical_path(paper, prio) == (0, 1, 8, 9)  # n1 n2 n9 n10
    r = get_mapper("cpop").map(paper)
    assert r.objective_value == 86.0
    assert {r.schedule.device_of[t] for t in (0, 1, 8, 9)} == {1}
    assert validate(r.schedule) == []


def test_peft_gives_85(paper):
    r = get_mapper("peft").map(paper)
    assert r.objective_value == 85.0 and validate(r.schedule) == []


def test_baselines_and_greedy(paper):
    assert get_mapper("cpu").map(paper).objective_value == 127.0  # sum of p1's column
    single = get_mapper("single").map(paper)
    assert single.objective_value == 127.0 and set(single.schedule.device_of) == {0}
    greedy = get_mapper("greedy").map(paper)
    assert validate(greedy.schedule) == [] and greedy.objective_value >= 80.0


def test_bounds_and_gap(paper):
    # critical path with transfers: n1 on p1 (14), n2 on p1 (27), n9 on p2 at
    # 35 = n2's 27 + the transfer of 16 on p1 (or 35 on p2), + 12 = 47; n10 on p2
    # + 7 = 54 (at minimum times alone, n1 n2 n9 n10 gave 9 + 13 + 12 + 7 = 41)
    assert makespan_lower_bound(paper) == 54.0
    r = get_mapper("heft").map(paper)
    assert r.lower_bound == 54.0 and r.gap == pytest.approx((80 - 54) / 80)
    assert lower_bound(paper, "makespan", ScheduleOptions(streaming=True)) == 54.0  # nothing streamable
    streamable = make_cost(make_graph(3, [(0, 1, 0.0, 1.0), (1, 2, 0.0, 1.0)], streamable=[2, 2, 2]),
                           make_platform(["cpu", "fpga"]), [[4.0, 3.0], [5.0, 6.0], [1.0, 2.0]])
    # 3 + 5 + 1 at minimum times, but moving to the fpga and back costs 1 each way: 10 (all on the cpu)
    assert lower_bound(streamable, "makespan") == 10.0
    assert lower_bound(streamable, "makespan", ScheduleOptions(streaming=True)) == 5.0
    # the busiest device with tasks split: the LP optimum 30.7853577 (HiGHS), above 91 / 3 on its three speeds
    assert 30.7853577 * (1 - 1e-3) <= lower_bound(paper, "throughput") <= 30.7853577
    assert lower_bound(paper, "energy") == 10.0 * 91.0  # test energies are 10 x time


def test_bounds_see_transfers_that_pins_force_and_loads_that_pins_share():
    # a -> b -> c with a and c pinned to cpu0 and b to gpu0 (fastest there or not):
    # both transfers are unavoidable; cpu0 must run a, c and d one after another
    pins = [Placement(allow=("cpu0",)), Placement(allow=("gpu0",)), Placement(allow=("cpu0",)),
            Placement(allow=("cpu0",))]
    graph = make_graph(4, [(0, 1, 0.0, 2.0), (1, 2, 0.0, 3.0)], placement=pins)
    cost = make_cost(graph, make_platform(["cpu", "gpu"], [(0, 1, 10.0, 1.0)]),
                     [[1.0, 1.0], [5.0, 1.0], [1.0, 1.0], [6.0, 1.0]])
    assert path_bound(cost) == 1 + 2 + 1 + 3 + 1  # a, to the gpu, b, back, c
    assert class_load_bound(cost) == 1 + 1 + 6  # cpu0: a, c, d
    assert makespan_lower_bound(cost) == 8.0
    unpinned = make_cost(make_graph(4, [(0, 1, 0.0, 2.0), (1, 2, 0.0, 3.0)]), cost.platform,
                         [[1.0, 1.0], [5.0, 1.0], [1.0, 1.0], [6.0, 1.0]])
    assert path_bound(unpinned) == 3.0  # all on the gpu, no transfer
    assert class_load_bound(unpinned) == 4 / 2


@pytest.mark.parametrize("seed", range(6))
def test_bounds_hold_under_the_proven_optimum(seed):
    # the bounds are relaxations: at most the optimum the exact engine proves, and
    # at least the critical path at minimum times without transfers
    cost = random_instance(seed, 8, n_devices=3, explicit_comm=seed % 2 == 0)
    result = get_mapper("milp").map(cost, MapOptions(time_limit=30, seed=seed))
    assert result.status == "optimal"
    w = [min(row) for row in cost.time]
    finish = [0.0] * cost.n_tasks
    for t in cost.graph.topo_order:
        finish[t] = w[t] + max((finish[p] for p in cost.graph.pred_tasks(t)), default=0.0)
    assert max(finish) <= path_bound(cost) * (1 + 1e-12)
    assert max(path_bound(cost), class_load_bound(cost)) <= result.objective_value * (1 + 1e-9)
    assert fractional_load_bound(cost) <= min(max(device_loads(result.schedule)), result.objective_value)


def test_fractional_load_bound_on_related_and_pinned_devices():
    # related machines (times are work over speed): total work over total speed, exactly
    works, speeds = [3.0, 7.0, 2.0, 9.0, 4.0], [1.0, 2.0, 4.0]
    related = make_cost(make_graph(5, []), make_platform(["cpu", "gpu", "gpu"]),
                        [[w / s for s in speeds] for w in works])
    assert fractional_load_bound(related) == pytest.approx(sum(works) / sum(speeds), rel=1e-9)
    assert class_load_bound(related) < fractional_load_bound(related)
    # the best whole assignment of 4 unrelated tasks, by brute force, is never below it
    times = [[4.0, 1.0], [2.0, 5.0], [3.0, 3.0], [6.0, 2.0]]
    unrelated = make_cost(make_graph(4, []), make_platform(["cpu", "gpu"]), times)
    best = min(max(sum(times[t][d] for t in range(4) if (mask >> t) & 1 == d) for d in range(2))
               for mask in range(16))
    assert 0 < fractional_load_bound(unrelated) <= best
    # a task pinned to the slow device adds its whole time there
    pinned = make_cost(make_graph(2, [], placement=[Placement(allow=("cpu0",)), Placement()]),
                       make_platform(["cpu", "gpu"]), [[10.0, 1.0], [1.0, 1.0]])
    assert fractional_load_bound(pinned) == pytest.approx(10.0, rel=1e-6)


def test_objectives(paper):
    s = get_mapper("heft").map(paper).schedule
    assert objective_value(s, "energy") == pytest.approx(10.0 * sum(paper.time[t][d] for t, d in enumerate(s.device_of)))
    loads = device_loads(s)
    # p1 runs n2 (13) and n8 (5) and receives n1->n2 (18), n4->n8 (27), n6->n8 (15)
    assert loads[0] == 13 + 5 + 18 + 27 + 15
    assert objective_value(s, "throughput") == max(loads)
    r = get_mapper("heft").map(paper, MapOptions(objective="throughput"))
    assert r.objective == "throughput" and r.objective_value == max(loads) and r.notes
    with pytest.raises(OptionsError, match="unknown objective 'speed'"):
        objective_value(s, "speed")


def test_registry():
    assert MAPPERS["milp"] == "mapper.mapping.milp:MilpMapper"
    with pytest.raises(OptionsError, match="unknown mapper 'hef'; available: milp, heft"):
        get_mapper("hef")
    names = [n for n, _ in available_mappers()]
    assert set(HEURISTICS) <= set(names)
    for name in HEURISTICS:
        m = get_mapper(name)
        assert isinstance(m, Mapper) and m.name == name and m.summary and type(m).__doc__


def test_cli_lists_mappers(capsys):
    assert main(["mappers"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("heft ") and "Topcuoglu" in line for line in lines)
    assert len(lines) == len(available_mappers())


def test_infeasible_entries_explicit_comm_and_errors():
    plat = make_platform(["cpu", "gpu", "fpga"], links=[(0, 1, 8.0, 0.0), (0, 2, 8.0, 0.0)])
    g = make_graph(3, [(0, 1, 0.0, 2.0), (1, 2, 0.0, 0.5)])
    cost = make_cost(g, plat, [[5.0, 1.0, INF], [INF, 9.0, 1.0], [3.0, INF, INF]])
    for name in ("heft", "cpop", "peft", "greedy"):
        r = get_mapper(name).map(cost)
        assert validate(r.schedule) == [], name
        assert all(cost.time[t][d] < INF for t, d in enumerate(r.schedule.device_of))
    with pytest.raises(InfeasibleError, match="'t1' cannot run on cpu0"):
        get_mapper("cpu").map(cost)
    with pytest.raises(InfeasibleError, match="no single device can run every task"):
        get_mapper("single").map(cost)
    dead = make_cost(make_graph(1, []), plat, [[INF, INF, INF]])
    for name in ("heft", "cpop", "peft", "greedy"):
        with pytest.raises(InfeasibleError, match="t0 can run on no device"):
            get_mapper(name).map(dead)
    with pytest.raises(InfeasibleError, match="no CPU"):
        get_mapper("cpu").map(make_cost(make_graph(1, []), make_platform(["gpu"]), [[1.0]]))


def test_unreachable_device_and_makespan_bound_note():
    # t1 runs only on the GPU, t0 only on the CPU, and no link joins them
    cost = make_cost(make_graph(2, [(0, 1, 1e6, None)]), make_platform(["cpu", "gpu"]), [[1.0, INF], [INF, 1.0]])
    for name in ("heft", "cpop", "peft", "greedy"):
        with pytest.raises(InfeasibleError, match="'t1' fits on no device"):
            get_mapper(name).map(cost)
    r = get_mapper("heft").map(heft_paper_example(), MapOptions(objective="energy", makespan_bound=70.0))
    assert any("exceeds the requested bound 70" in note for note in r.notes)


def test_contention_aware_placement():
    # one producer on the CPU, four consumers 3.2x faster on the GPU behind one 2 s link
    plat = make_platform(["cpu", "gpu"], links=[(0, 1, 8.0, 0.0)])
    cost = make_cost(make_graph(5, [(0, k, 16e9, None) for k in (1, 2, 3, 4)]), plat, [[1.0, INF]] + [[3.2, 1.0]] * 4)
    blind = get_mapper("heft").map(cost).schedule
    assert blind.device_of == (0, 1, 0, 1, 1) and blind.makespan == 6.0
    on = ScheduleOptions(contention=True)
    assert build_schedule(cost, blind.assignment, on).makespan == 8.0  # transfers queue: 3, 5, 7
    aware = get_mapper("heft").map(cost, MapOptions(schedule=on)).schedule
    assert aware.device_of == (0, 1, 0, 1, 0) and aware.makespan == pytest.approx(7.4)
    assert validate(aware) == []


def test_heuristics_respect_memory_budgets():
    # the GPU is fastest but holds only one task's footprint
    plat = make_platform(["cpu", "gpu"], links=[(0, 1, 8.0, 0.0)])
    cost = make_cost(make_graph(3, []), plat, [[4.0, 1.0]] * 3, footprint=[6.0] * 3, memory_capacity=[INF, 8.0])
    opts = MapOptions(schedule=ScheduleOptions(memory=True))
    for name in ("heft", "cpop", "peft", "greedy"):
        r = get_mapper(name).map(cost, opts)
        assert r.schedule.device_of.count(1) == 1 and validate(r.schedule) == []
    with pytest.raises(InfeasibleError, match="gpu0 need 18 bytes"):
        build_schedule(cost, Assignment((1, 1, 1)), ScheduleOptions(memory=True))


def test_deterministic(paper):
    for name in HEURISTICS:
        a, b = get_mapper(name).map(paper), get_mapper(name).map(paper)
        assert a.schedule == b.schedule


def test_heft_rank_variants_differ_only_in_the_transfer_mean(paper):
    from mapper.mapping.ranks import mean_comm

    plain, same = mean_comm(paper), mean_comm(paper, same_device=True)
    # three devices, uniform links: 6 ordered pairs of distinct devices, and 3 links to
    # themselves counted each way: the mean shrinks by 6 / 12
    assert all(s == pytest.approx(p * 6 / 12) for p, s in zip(plain, same))
    result = get_mapper("heft-samedev").map(paper)
    assert validate(result.schedule) == [] and result.mapper == "heft-samedev"
    assert get_mapper("heft").map(paper).objective_value == 80.0  # the paper's HEFT is unchanged

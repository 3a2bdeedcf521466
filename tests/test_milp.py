"""The exact MILP mapper: optimality, agreement with the schedule builder,
brute force on tiny cases, capacities, infeasibility and the fallbacks."""

from __future__ import annotations

import itertools
import math
import random
import time

import pytest
from randdag import heft_paper_example, make_cost, make_graph, make_platform, random_instance

from mapper.core.graph import Placement
from mapper.engine.schedule import Assignment, ScheduleOptions, build_schedule
from mapper.engine.validate import validate
from mapper.errors import InfeasibleError, OptionsError
from mapper.mapping import get_mapper
from mapper.mapping.base import MapOptions
from mapper.mapping.exact.incumbent import retime
from mapper.mapping.exact.solve import solve
from mapper.mapping.exact.subproblem import Subproblem
from mapper.mapping.milp import MilpMapper
from mapper.mapping.objectives import objective_value
from mapper.mapping.orders import canonical_devices, identical_device_classes


@pytest.fixture
def milp_only(monkeypatch):
    """The milp mapper without its CP-SAT turn, to test the MILP itself."""
    monkeypatch.setattr("mapper.mapping.milp.CPSAT_SHARE", 0.0)

INF = math.inf
HEURISTIC_NAMES = ("heft", "cpop", "peft", "greedy", "single", "cpu")


def _full(cost, objective="makespan", time_limit=10.0, makespan_bound=None, symmetry=True):
    """Solve the whole problem from scratch (no warm start)."""
    from mapper.mapping.exact.incumbent import serial_upper_bound

    upper = serial_upper_bound(cost) if makespan_bound is None else makespan_bound
    return solve(Subproblem(cost=cost, objective=objective, free=tuple(range(cost.n_tasks)), device=None,
                            start=None, upper=upper, time_limit=time_limit, makespan_bound=makespan_bound,
                            symmetry=symmetry))


# -- the HEFT paper's example ------------------------------------------------------
def test_heft_example_proves_optimum_under_80(milp_only):
    cost = heft_paper_example()
    result = MilpMapper().map(cost, MapOptions(time_limit=30))
    print(f"\nHEFT example: MILP {result.status} makespan {result.objective_value:g} in {result.solve_time:.3f} s")
    assert result.status == "optimal"
    assert result.objective_value <= 80 + 1e-9
    assert result.objective_value == pytest.approx(73.0)
    assert result.lower_bound == pytest.approx(result.objective_value, rel=1e-6)
    assert result.gap == pytest.approx(0.0, abs=1e-6)
    assert not validate(result.schedule)
    assert any(n.startswith("MILP:") and "; started from " in n for n in result.notes), result.notes
    assert result.mapper == "milp" and result.objective == "makespan"


def test_registry_finds_milp():
    assert isinstance(get_mapper("milp"), MilpMapper)
    assert MilpMapper.summary


# -- re-timing agrees with the MILP ------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_retimed_makespan_equals_milp_objective(seed):
    cost = random_instance(seed, 6 + seed, n_devices=3, explicit_comm=seed % 2 == 0)
    solved = _full(cost)
    assert solved.status == "optimal"
    sched = retime(cost, solved.device, solved.order, ScheduleOptions())
    assert not validate(sched)
    assert sched.makespan == pytest.approx(solved.objective, rel=1e-6)


# -- never worse than a heuristic, on many random graphs ------------------------------
def _heuristic_values(cost, options):
    out = {}
    for name in HEURISTIC_NAMES:
        try:
            out[name] = get_mapper(name).map(cost, options).objective_value
        except InfeasibleError:
            pass
    return out


@pytest.mark.slow
def test_random_graphs_never_worse_than_heuristics():
    rng = random.Random(2024)
    shapes = ("layered", "forkjoin", "chain", "random")
    checked = optimal = 0
    for k in range(200):
        n = rng.randint(2, 9) if k < 180 else rng.randint(10, 40)
        cost = random_instance(k, n, shape=shapes[k % 4], n_devices=rng.choice((2, 3, 4)),
                               ccr=rng.choice((0.2, 1.0, 3.0)), explicit_comm=k % 3 != 0, zero_times=k % 7 == 0)
        options = MapOptions(time_limit=2.0 if n < 10 else 0.5, seed=k)
        result = MilpMapper().map(cost, options)
        assert not validate(result.schedule), k
        assert result.objective_value == pytest.approx(result.schedule.makespan)
        for name, value in _heuristic_values(cost, options).items():
            assert result.objective_value <= value * (1 + 1e-6) + 1e-9, (k, name)
        if result.status == "optimal":
            optimal += 1
            assert result.gap == pytest.approx(0.0, abs=1e-5)
        checked += 1
    assert checked == 200
    assert optimal >= 170  # the small ones are proven


# -- brute force on tiny cases -----------------------------------------------------
def _orders(cost):
    """Every per-device order that a topological order of the graph induces."""
    n = cost.n_tasks
    preds = [set(cost.graph.pred_tasks(t)) for t in range(n)]
    for perm in itertools.permutations(range(n)):
        pos = {t: i for i, t in enumerate(perm)}
        if all(pos[p] < pos[t] for t in range(n) for p in preds[t]):
            yield perm


def _brute(cost, objective, makespan_bound=None, options=ScheduleOptions()):
    best = INF
    feas = [cost.feasible_devices(t) for t in range(cost.n_tasks)]
    perms = list(_orders(cost))
    for device in itertools.product(*feas):
        for perm in perms:
            order = tuple(tuple(t for t in perm if device[t] == d) for d in range(cost.n_devices))
            try:
                sched = build_schedule(cost, Assignment(tuple(device), order), options)
            except InfeasibleError:
                break
            if makespan_bound is not None and sched.makespan > makespan_bound * (1 + 1e-9):
                continue
            best = min(best, objective_value(sched, objective))
    return best


def _tiny(seed):
    rng = random.Random(seed)
    n = rng.randint(3, 5)
    return random_instance(seed, n, shape=("random", "layered", "forkjoin")[seed % 3], n_devices=rng.choice((2, 3)),
                           ccr=rng.choice((0.5, 2.0)), explicit_comm=seed % 2 == 0, infeasible=0.15)


@pytest.mark.parametrize("seed", range(8))
def test_makespan_matches_brute_force(seed):
    cost = _tiny(seed)
    result = MilpMapper().map(cost, MapOptions(time_limit=10))
    assert result.status == "optimal"
    assert result.objective_value == pytest.approx(_brute(cost, "makespan"), rel=1e-6)


@pytest.mark.parametrize("seed", range(8))
def test_energy_and_throughput_match_brute_force(seed):
    cost = _tiny(100 + seed)
    for objective in ("energy", "throughput"):
        result = MilpMapper().map(cost, MapOptions(objective=objective, time_limit=10))
        assert result.status == "optimal" and result.objective == objective
        assert not validate(result.schedule)
        assert result.objective_value == pytest.approx(_brute(cost, objective), rel=1e-6)
        assert result.objective_value == pytest.approx(objective_value(result.schedule, objective), rel=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_energy_under_makespan_bound_matches_brute_force(seed):
    cost = _tiny(200 + seed)
    fastest = _brute(cost, "makespan")
    bound = fastest * 1.15
    result = MilpMapper().map(cost, MapOptions(objective="energy", makespan_bound=bound, time_limit=10))
    assert result.status == "optimal"
    assert result.schedule.makespan <= bound * (1 + 1e-9)
    assert result.objective_value == pytest.approx(_brute(cost, "energy", makespan_bound=bound), rel=1e-6)


# -- capacities, routes, placement --------------------------------------------------
def _independent(n, kinds, time, **kw):
    graph = make_graph(n, [])
    return make_cost(graph, make_platform(kinds), time, **kw)


def test_memory_capacity_binds():
    # dev 0 is fastest for all; unbounded, three go there (3) and one to dev 1 (3);
    # its memory holds only two, so two go to dev 1 (6)
    cost = _independent(4, ("cpu", "gpu"), [(1, 3)] * 4, footprint=[1.0] * 4, memory_capacity=[2.0, 10.0])
    free = MilpMapper().map(cost, MapOptions())
    assert free.objective_value == pytest.approx(3.0)
    bound = MilpMapper().map(cost, MapOptions(schedule=ScheduleOptions(memory=True)))
    assert sum(1 for d in bound.schedule.device_of if d == 0) == 2
    assert bound.status == "optimal"
    assert bound.objective_value == pytest.approx(6.0)
    assert not validate(bound.schedule)


def test_fpga_area_binds():
    cost = _independent(3, ("cpu", "fpga"), [(4, 1)] * 3, area=[(0, 2.0)] * 3, area_capacity=[INF, 4.0])
    result = MilpMapper().map(cost, MapOptions(schedule=ScheduleOptions(area=True)))
    assert sum(1 for d in result.schedule.device_of if d == 1) == 2
    assert result.objective_value == pytest.approx(4.0)
    assert result.status == "optimal"
    unbounded = MilpMapper().map(cost, MapOptions())
    assert unbounded.objective_value == pytest.approx(3.0)


def test_no_route_pair_is_never_used():
    # bytes-based edge, no links at all: the two tasks must share a device
    graph = make_graph(2, [(0, 1, 1e9, None)])
    cost = make_cost(graph, make_platform(("cpu", "gpu")), [(1, 10), (10, 1)])
    result = MilpMapper().map(cost, MapOptions())
    dev = result.schedule.device_of
    assert dev[0] == dev[1]
    assert result.objective_value == pytest.approx(11.0)
    assert result.status == "optimal"


def test_placement_leaving_no_device_is_named():
    graph = make_graph(3, [(0, 1, 0, 1.0), (1, 2, 0, 1.0)], placement=[Placement(), Placement(allow=("gpu",)),
                                                                         Placement()])
    cost = make_cost(graph, make_platform(("cpu", "gpu")), [(1, 5), (1, INF), (1, 5)])
    with pytest.raises(InfeasibleError) as err:
        MilpMapper().map(cost)
    assert err.value.obj == "t1"


def test_placement_is_respected():
    graph = make_graph(3, [(0, 1, 0, 1.0), (1, 2, 0, 1.0)], placement=[Placement(), Placement(allow=("gpu",)),
                                                                         Placement()])
    cost = make_cost(graph, make_platform(("cpu", "gpu")), [(1, 5), (1, 5), (1, 5)])
    result = MilpMapper().map(cost)
    assert result.schedule.device_of[1] == 1
    assert result.objective_value == pytest.approx(9.0)  # t0 cpu, comm, t1 gpu, comm, t2 cpu
    assert not validate(result.schedule)


def test_task_feasible_nowhere_is_named():
    cost = _independent(3, ("cpu", "gpu"), [(1, 2), (INF, INF), (3, 1)])
    with pytest.raises(InfeasibleError) as err:
        MilpMapper().map(cost)
    assert err.value.obj == "t1" and "t1" in str(err.value)


def test_memory_too_small_is_infeasible():
    cost = _independent(2, ("cpu", "gpu"), [(1, 2), (1, 2)], footprint=[5.0, 1.0], memory_capacity=[2.0, 2.0])
    with pytest.raises(InfeasibleError) as err:
        MilpMapper().map(cost, MapOptions(schedule=ScheduleOptions(memory=True)))
    assert err.value.obj == "t0"


def test_memory_too_small_in_total_is_infeasible():
    # each task fits a device, all four do not fit the two devices together
    cost = _independent(4, ("cpu", "gpu"), [(1, 2)] * 4, footprint=[1.0] * 4, memory_capacity=[1.5, 1.5])
    with pytest.raises(InfeasibleError) as err:
        MilpMapper().map(cost, MapOptions(schedule=ScheduleOptions(memory=True)))
    assert "memory" in str(err.value)


# -- limits, fallbacks, options -----------------------------------------------------
def test_tiny_time_limit_on_40_tasks_returns_valid_schedule():
    cost = random_instance(7, 40, shape="layered", n_devices=4)
    result = MilpMapper().map(cost, MapOptions(time_limit=0.05))
    assert not validate(result.schedule)
    assert result.status in ("feasible", "heuristic")
    heft = get_mapper("heft").map(cost)
    assert result.objective_value <= heft.objective_value * (1 + 1e-9)
    assert result.lower_bound is not None and result.lower_bound <= result.objective_value * (1 + 1e-9)


def test_bad_objective_is_an_options_error():
    with pytest.raises(OptionsError):
        MilpMapper().map(heft_paper_example(), MapOptions(objective="speed"))
    with pytest.raises(OptionsError):
        MilpMapper().map(heft_paper_example(), MapOptions(time_limit=0))


def test_progress_reports_start_and_end():
    seen = []
    MilpMapper().map(heft_paper_example(), MapOptions(progress=seen.append))
    assert len(seen) >= 2
    assert seen[0].incumbent is None
    assert seen[-1].incumbent == pytest.approx(73.0)
    assert all(b.elapsed >= a.elapsed for a, b in zip(seen, seen[1:]))


def test_same_input_same_output():
    cost = random_instance(11, 9, shape="layered", n_devices=3)
    a = MilpMapper().map(cost, MapOptions(seed=3))
    b = MilpMapper().map(cost, MapOptions(seed=3))
    assert a.status == b.status == "optimal"
    assert a.schedule.slots == b.schedule.slots


def test_contention_is_applied_when_retiming():
    cost = random_instance(5, 8, shape="forkjoin", n_devices=3, explicit_comm=False)
    result = MilpMapper().map(cost, MapOptions(schedule=ScheduleOptions(contention=True)))
    # the MILP does not model contention: optimal only when the re-timed schedule meets the lower bound
    assert result.status in ("feasible", "heuristic") or result.objective_value <= result.lower_bound * (1 + 1e-6)
    assert result.schedule.options.contention
    assert not validate(result.schedule)
    assert any("contention" in n for n in result.notes)


# -- symmetry breaking -------------------------------------------------------------
def test_identical_devices_detected_and_symmetry_keeps_optimum():
    graph = make_graph(6, [(0, 1, 0, 2.0), (0, 2, 0, 2.0), (0, 3, 0, 2.0), (1, 4, 0, 1.0), (2, 4, 0, 1.0),
                           (3, 5, 0, 1.0)])
    times = [(4, 2, 2), (5, 3, 3), (6, 2, 2), (3, 4, 4), (2, 2, 2), (7, 3, 3)]
    cost = make_cost(graph, make_platform(("cpu", "gpu", "gpu")), times)
    assert identical_device_classes(cost) == ((1, 2),)
    assert canonical_devices((2, 2, 1, 0, 1, 2), ((1, 2),)) == (1, 1, 2, 0, 2, 1)
    with_sym = _full(cost, symmetry=True)
    without = _full(cost, symmetry=False)
    assert with_sym.status == without.status == "optimal"
    assert with_sym.objective == pytest.approx(without.objective, rel=1e-9)


def test_different_devices_are_not_merged():
    cost = random_instance(1, 5, n_devices=4)
    assert identical_device_classes(cost) == ()


def test_large_graph_takes_the_lns_path():
    cost = random_instance(3, 70, shape="layered", n_devices=3)
    start = time.perf_counter()
    result = MilpMapper().map(cost, MapOptions(time_limit=3))
    assert time.perf_counter() - start < 15
    assert any("coarsened 70 ->" in n for n in result.notes)
    assert not validate(result.schedule)


def test_cbc_is_used_when_highs_is_missing(monkeypatch, milp_only):
    from mapper.mapping.exact import solver

    cost = random_instance(3, 7, n_devices=3)
    exact = MilpMapper().map(cost, MapOptions(time_limit=10))
    monkeypatch.setattr(solver, "HIGHS_AVAILABLE", False)
    result = MilpMapper().map(cost, MapOptions(time_limit=10))
    assert result.status == "optimal"
    assert result.objective_value == pytest.approx(exact.objective_value, rel=1e-5)
    assert any("CBC" in n for n in result.notes)
    assert not validate(result.schedule)


@pytest.mark.parametrize("scale", [1e-6, 1e4])
def test_time_units_do_not_change_the_optimum(milp_only, scale):
    # the HEFT example in microseconds and in hours: same optimum, still proven
    from randdag import HEFT_EDGES, HEFT_TIMES

    from mapper.platform.loader import Device, Platform

    platform = Platform(name="heft3", devices=tuple(Device(index=i, name=f"p{i + 1}", kind="cpu") for i in range(3)))
    graph = make_graph(10, [(s - 1, d - 1, 0.0, c * scale) for s, d, c in HEFT_EDGES], name="heft_scaled")
    cost = make_cost(graph, platform, [[x * scale for x in row] for row in HEFT_TIMES])
    result = MilpMapper().map(cost, MapOptions(time_limit=30))
    assert result.status == "optimal"
    assert result.objective_value == pytest.approx(73.0 * scale, rel=1e-9)
    assert any(n.startswith("MILP:") and "; started from " in n for n in result.notes), result.notes


def test_mid_size_graph_runs_lns_before_the_exact_model(milp_only):
    cost = random_instance(30032, 30, shape="random", n_devices=3)
    result = MilpMapper().map(cost, MapOptions(time_limit=4))
    assert any(n.startswith("LNS before the exact model") for n in result.notes)
    assert not validate(result.schedule)
    assert result.objective_value <= min(get_mapper(h).map(cost).objective_value for h in ("heft", "cpop", "peft"))
    assert result.lower_bound is not None and result.lower_bound <= result.objective_value * (1 + 1e-9)


def test_cbc_takes_a_warm_start_a_rounding_step_outside_its_bounds(monkeypatch, milp_only):
    # Jacobi's heuristic start times land 1 ulp below their variables' lower bounds;
    # CBC rejects such a start, so the glue clamps it (HiGHS accepts it as it is)
    from pathlib import Path

    from mapper.costing.cost import build_cost_table
    from mapper.frontend.load import load_graph
    from mapper.mapping.exact import solver
    from mapper.platform.loader import load_platform

    root = Path(__file__).resolve().parents[1]
    cost = build_cost_table(load_graph(root / "examples" / "jacobi2d.tg"), load_platform("cpu-gpu-fpga"))
    monkeypatch.setattr(solver, "HIGHS_AVAILABLE", False)
    result = MilpMapper().map(cost, MapOptions(time_limit=3))
    assert any("CBC" in n for n in result.notes)
    assert not validate(result.schedule)


def test_a_heuristic_that_meets_the_lower_bound_is_optimal_without_a_search():
    from mapper.costing.cost import build_cost_table
    from mapper.frontend.load import graph_from_text
    from mapper.platform.loader import load_platform

    # a chain whose fastest device takes both tasks: HEFT's schedule is the critical-path bound
    g = graph_from_text("graph c {\n task a cost { p1: 2, p2: 3, p3: 4 }\n task b cost { p1: 5, p2: 6, p3: 7 }\n"
                        "  a -> b comm 10\n}")
    result = MilpMapper().map(build_cost_table(g, load_platform("heft3")), MapOptions(time_limit=5))
    assert result.status == "optimal" and result.objective_value == result.lower_bound == 7.0
    assert result.notes == ("heft's schedule reaches the lower bound 7 s, so it is optimal: no search was needed",)
    assert not validate(result.schedule)


def test_lns_stops_when_its_gain_per_second_cannot_pay_for_the_time_left(monkeypatch):
    # a search asked for more than it can gain in the time left (1000 % of the objective) is
    # judged stalled once its probe is over, whatever the machine's speed
    from mapper.engine.schedule import ScheduleOptions
    from mapper.mapping import lns

    cost = random_instance(5, 40, shape="layered", n_devices=3)
    start = get_mapper("heft").map(cost).schedule
    monkeypatch.setattr(lns, "MIN_GAIN", 10.0)
    _, stats = lns.improve(cost, start, "makespan", ScheduleOptions(), time.perf_counter() + 5)
    assert stats.stalled
    assert stats.windows >= lns.STALL_MIN_WINDOWS
    assert "recent gain per second would not reach 1000 %" in lns.stall_note(stats)


def _identical_processors(seed: int, n: int, procs: int, linked: bool = False, shape: str = "layered"):
    """P|prec|Cmax with whole times (as the Standard Task Graph set); without
    ``linked`` no route joins two processors, with it free links do."""
    from randdag import random_edges

    rng = random.Random(seed)
    graph = make_graph(n, [(u, v, 0.0, None) for u, v in random_edges(rng, n, shape)], name=f"stg{seed}")
    links = [(a, b, 1.0, 0.0) for a in range(procs) for b in range(a + 1, procs)] if linked else []
    return make_cost(graph, make_platform(["cpu"] * procs, links),
                     [[float(rng.randint(1, 30))] * procs for _ in range(n)])


def test_cpsat_proves_a_large_graph_before_lns():
    # above the MILP's size limit the default mapper gives CP-SAT its turn
    # first; on identical processors with whole times it proves the optimum
    cost = _identical_processors(3, 90, 4)
    result = MilpMapper().map(cost, MapOptions(time_limit=20))
    assert result.mapper == "milp" and result.status == "optimal"
    assert any(n.startswith("CP-SAT proved this schedule optimal, so LNS did not run") for n in result.notes)
    assert result.lower_bound == pytest.approx(result.objective_value)
    assert not validate(result.schedule)


def test_a_large_graph_on_pooled_processors_gets_cp_sat_s_turn():
    # 400 tasks on 8 identical processors without transfers: per device CP-SAT's
    # model would be too large for the large path, as one pool it is not
    from mapper.mapping.exact.cpsat_model import model_terms
    from mapper.mapping.milp import CPSAT_MAX_TERMS

    cost = _identical_processors(4, 400, 8, linked=True, shape="random")  # HEFT is 1 above the bound
    per_device = cost.n_tasks * 8 + len(cost.graph.edges) * 8 * 7
    assert model_terms(cost, "makespan", False, False) == 400 < CPSAT_MAX_TERMS < per_device
    assert model_terms(cost, "makespan", True, False) == per_device  # a memory budget is per device
    result = MilpMapper().map(cost, MapOptions(time_limit=4))
    pooled = "cpu0, cpu1, cpu2, cpu3, cpu4, cpu5, cpu6, cpu7 pooled"
    assert any(n.startswith("CP-SAT:") and pooled in n for n in result.notes)
    assert not validate(result.schedule)


def test_the_portfolio_hands_cpsat_s_schedule_to_the_milp():
    cost = random_instance(30032, 30, shape="random", n_devices=3)
    result = MilpMapper().map(cost, MapOptions(time_limit=4))
    assert any(n.startswith("CP-SAT:") for n in result.notes)
    assert not validate(result.schedule)
    assert result.objective_value <= min(get_mapper(h).map(cost).objective_value for h in ("heft", "cpop", "peft"))
    if result.status != "optimal":
        assert any(n.startswith("MILP:") for n in result.notes)
    assert result.lower_bound is not None and result.lower_bound <= result.objective_value * (1 + 1e-9)


def test_lns_is_judged_only_after_its_probe(monkeypatch):
    # no stall before PROBE_SHARE of the time (and STALL_MIN_WINDOWS windows): with the probe
    # longer than the deadline, the search is never judged stalled (it ends out of time or windows)
    from mapper.engine.schedule import ScheduleOptions
    from mapper.mapping import lns

    monkeypatch.setattr(lns, "PROBE_MIN", 100.0)
    cost = random_instance(5, 40, shape="layered", n_devices=3)
    start = get_mapper("heft").map(cost).schedule
    _, stats = lns.improve(cost, start, "makespan", ScheduleOptions(), time.perf_counter() + 2)
    assert not stats.stalled


def test_a_pinned_graph_runs_one_list_schedule_and_no_coarse_pass():
    from mapper.mapping.exact.incumbent import best_heuristic, pinned

    cost = random_instance(11, 30, shape="layered", n_devices=1)
    assert pinned(cost)
    best, notes = best_heuristic(cost, MapOptions())
    assert best is not None and best.name == "heft" and notes == ()


def test_a_coarse_pass_whose_heuristics_would_not_fit_the_time_is_skipped():
    from mapper.mapping import lns
    from mapper.mapping.exact.incumbent import best_heuristic

    cost = random_instance(0, 80, shape="forkjoin", n_devices=3)
    assert lns.coarsen(cost, MapOptions().schedule).fused
    best, _ = best_heuristic(cost, MapOptions())
    # heuristics that took 100 s on the original graph: the coarse pass would not fit 3 s
    slow = lns.map_large(cost, MapOptions(time_limit=3), best, (), time.perf_counter(), heuristics_s=100.0)
    assert any(n.startswith("coarse pass skipped") for n in slow.notes)
    assert not any(n.startswith("coarse LNS") for n in slow.notes)
    fast = lns.map_large(cost, MapOptions(time_limit=3), best, (), time.perf_counter(), heuristics_s=0.01)
    assert any(n.startswith("coarse LNS") for n in fast.notes)
    assert not validate(slow.schedule) and not validate(fast.schedule)

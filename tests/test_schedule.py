"""The timing semantics: build_schedule, list_schedule and their options."""

from __future__ import annotations

import math

import pytest
from randdag import heft_paper_example, make_cost, make_graph, make_platform, random_instance

from mapper.core.graph import Placement
from mapper.costing.cost import stream_chain_times
from mapper.engine.schedule import Assignment, ScheduleOptions, build_schedule, list_schedule
from mapper.engine.timeline import Timeline
from mapper.engine.validate import validate
from mapper.errors import InfeasibleError, MapperError, OptionsError

INF = math.inf

# The paper's HEFT schedule (Topcuoglu et al. 2002, Fig. 4a): processor and start per task.
HEFT_DEVICE = (2, 0, 2, 1, 2, 1, 2, 0, 1, 1)
HEFT_START = (0, 27, 9, 18, 28, 26, 38, 57, 56, 73)
HEFT_ORDER = ((1, 7), (3, 5, 8, 9), (0, 2, 4, 6))


def test_order_gives_the_paper_schedule():
    cost = heft_paper_example()
    s = build_schedule(cost, Assignment(HEFT_DEVICE, HEFT_ORDER))
    assert s.makespan == 80.0
    assert tuple(sl.start for sl in s.slots) == HEFT_START
    assert all(sl.end == sl.start + cost.time[sl.task][sl.device] for sl in s.slots)
    assert s.order == HEFT_ORDER and s.options.enabled == () and s.streamed == ()
    # one transfer per cross-device edge, from the producer's end, lasting comm
    cross = [e for e in cost.graph.edges if HEFT_DEVICE[e.src] != HEFT_DEVICE[e.dst]]
    assert [t.edge for t in s.transfers] == [e.index for e in cross]
    for tr in s.transfers:
        e = cost.graph.edges[tr.edge]
        assert (tr.start, tr.end) == (s.slots[e.src].end, s.slots[e.src].end + e.comm)
    assert validate(s) == []


def test_list_schedule_inserts_into_gaps_and_retimes_exactly():
    cost = heft_paper_example()
    s = list_schedule(cost, HEFT_DEVICE, (0, 2, 3, 1, 4, 5, 8, 6, 7, 9))
    assert tuple(sl.start for sl in s.slots) == HEFT_START
    again = build_schedule(cost, s.assignment)
    assert again.slots == s.slots and again.makespan == s.makespan
    # without an order, build_schedule list-schedules in topological order
    assert validate(build_schedule(cost, Assignment(HEFT_DEVICE))) == []


def test_timeline_insertion_policy():
    line = Timeline(1)
    line.place(0, 0, 0, 0.0, 2.0)
    line.place(0, 1, 1, 5.0, 9.0)
    assert line.slot(0, 1.0, 3.0) == (2.0, 1)  # gap [2, 5] fits 3
    assert line.slot(0, 1.0, 4.0) == (9.0, 2)  # too long for the gap
    assert line.slot(0, 3.0, 3.0) == (9.0, 2)  # ready too late for the gap
    assert line.slot(0, 1.0, 3.0, insertion=False) == (9.0, 2)
    line.place(0, 1, 2, 2.0, 5.0)
    assert line.order() == ((0, 2, 1),)


@pytest.mark.parametrize("seed", range(40))
def test_timeline_gap_index_answers_as_the_walk_does(seed, monkeypatch):
    # the indexed gap search gives the walk's (start, position) bit for bit, zero-length tasks
    # and tasks that just fit included, over many insertions into one timeline; small blocks
    # for half the seeds, so that blocks split and empty out
    import random

    from mapper.engine import timeline as tl
    if seed % 2:
        monkeypatch.setattr(tl, "BLOCK", 4)
    rng = random.Random(seed)
    line = Timeline(2)
    for t in range(400):
        d = rng.randrange(2)
        ready = rng.choice([0.0, rng.uniform(0, 100 + t), line.last_end(d) * rng.random()])
        duration = rng.choice([0.0, 0.1, 0.3, 1 / 3, rng.uniform(0, 5), rng.uniform(0, 0.5)])
        got = line.slot(d, ready, duration)
        assert got == line._walk(d, ready, duration), (t, ready, duration)
        line.place(d, got[1], t, got[0], got[0] + duration)
    if seed % 2:
        assert max(len(g.starts) for g in line._gaps) > 4
    for d in range(2):  # the tasks never overlap and stay in start order
        starts, ends = line._starts[d], line._ends[d]
        assert all(e0 <= s1 for e0, s1 in zip(ends, starts[1:]))


def test_wide_graphs_list_schedule_in_near_linear_time_of_the_gaps():
    # 3,000 independent tasks: no gap ever fits, and the index says so without walking the tasks
    from mapper.engine.timeline import Timeline as Line

    line = Line(1)
    for t in range(3000):
        start, pos = line.slot(0, 0.0, 1.0)
        assert (start, pos) == (float(t), t)
        line.place(0, pos, t, start, start + 1.0)
    assert not line._gaps[0].starts


def test_deadlocking_order_names_the_tasks():
    cost = heft_paper_example()
    order = ((7, 1), (3, 5, 8, 9), (0, 2, 4, 6))  # n8 before its predecessor n2 on p1
    with pytest.raises(OptionsError, match=r"deadlock.*n8 on p1 waits for n2"):
        build_schedule(cost, Assignment(HEFT_DEVICE, order))


@pytest.mark.parametrize("order, pattern", [
    (((1,), (3, 5, 8, 9), (0, 2, 4, 6)), "leaves out tasks n8"),
    (((1, 7, 7), (3, 5, 8, 9), (0, 2, 4, 6)), "n8.*twice"),
    (((1, 7, 0), (3, 5, 8, 9), (2, 4, 6)), "n1.*on p1 but it is assigned to p3"),
    (((1, 7), (3, 5, 8, 9)), "lists 2 devices"),
])
def test_malformed_orders(order, pattern):
    with pytest.raises(OptionsError, match=pattern):
        build_schedule(heft_paper_example(), Assignment(HEFT_DEVICE, order))


def test_bad_assignment_and_priority():
    cost = heft_paper_example()
    with pytest.raises(OptionsError, match="places 3 tasks"):
        build_schedule(cost, Assignment((0, 0, 0)))
    with pytest.raises(OptionsError, match="device 7"):
        build_schedule(cost, Assignment((7,) * 10))
    with pytest.raises(OptionsError, match="'n2' before its predecessor 'n1'"):
        list_schedule(cost, HEFT_DEVICE, (1, 0, 2, 3, 4, 5, 6, 7, 8, 9))


def test_infeasible_device_names_task_device_and_reason():
    g = make_graph(2, [(0, 1, 0.0, 1.0)])
    cost = make_cost(g, make_platform(["cpu", "gpu"]), [[1.0, INF], [1.0, 1.0]])
    with pytest.raises(InfeasibleError, match=r"'t0' cannot run on gpu0: not supported there") as err:
        build_schedule(cost, Assignment((1, 0)))
    assert err.value.exit_code == 3 and err.value.obj == "t0"


def test_placement_is_enforced():
    g = make_graph(1, [], placement=[Placement(deny=("gpu",))])
    cost = make_cost(g, make_platform(["cpu", "gpu"]), [[1.0, 1.0]])
    with pytest.raises(InfeasibleError, match="placement @!gpu"):
        build_schedule(cost, Assignment((1,)))


def test_missing_route_names_the_pair():
    # gpu0 and fpga0 only link to each other; cpu0 is isolated
    plat = make_platform(["cpu", "gpu", "fpga"], links=[(1, 2, 10.0, 1.0)])
    g = make_graph(2, [(0, 1, 1e6, None)])
    cost = make_cost(g, plat, [[1.0, 1.0, 1.0]] * 2)
    with pytest.raises(InfeasibleError, match="t0 -> t1 would move 1e.06 bytes from cpu0 to gpu0, but platform"):
        build_schedule(cost, Assignment((0, 1)))
    s = build_schedule(cost, Assignment((1, 2)))
    assert s.makespan == pytest.approx(2.0 + 1e-6 + 1e6 / 10e9)


def _fanout(nbytes: float = 8e9):
    """A producer on the CPU feeding two consumers on the GPU over one 8 GB/s link."""
    plat = make_platform(["cpu", "gpu", "fpga"], links=[(0, 1, 8.0, 0.0), (0, 2, 8.0, 0.0)])
    g = make_graph(3, [(0, 1, nbytes, None), (0, 2, nbytes, None)])
    return make_cost(g, plat, [[1.0, 1.0, 1.0]] * 3)


def test_contention_serialises_transfers_on_a_link():
    cost = _fanout()
    a = Assignment((0, 1, 1), ((0,), (1, 2), ()))
    free = build_schedule(cost, a)
    assert [(t.start, t.end) for t in free.transfers] == [(1.0, 2.0), (1.0, 2.0)]
    assert free.makespan == 4.0
    busy = build_schedule(cost, a, ScheduleOptions(contention=True))
    assert [(t.start, t.end) for t in busy.transfers] == [(1.0, 2.0), (1.0, 3.0)]
    assert busy.transfers[1].hops == ((0, 2.0, 3.0),)  # waits for edge 0 (FIFO, tie by index)
    assert busy.makespan == 4.0 and busy.options.enabled == ("contention",)
    assert validate(busy) == []


def test_contention_is_store_and_forward_per_hop():
    # gpu0 -> fpga0 goes through the host: two 8 GB/s hops of 1 s each
    cost = _fanout()
    g = make_graph(3, [(0, 1, 8e9, None), (0, 2, 8e9, None)])
    cost = make_cost(g, cost.platform, [[1.0, 1.0, 1.0]] * 3)
    s = build_schedule(cost, Assignment((1, 2, 2), ((), (0,), (1, 2))), ScheduleOptions(contention=True))
    t0, t1 = s.transfers
    assert t0.hops == ((1, 1.0, 2.0), (2, 2.0, 3.0))  # links gpu0->cpu0, then cpu0->fpga0
    assert t1.hops == ((1, 2.0, 3.0), (2, 3.0, 4.0))
    assert (t1.start, t1.end) == (1.0, 4.0)
    assert s.makespan == 5.0 and validate(s) == []


def test_contention_splits_explicit_comm_over_hops():
    plat = make_platform(["cpu", "gpu", "fpga"], links=[(0, 1, 8.0, 0.0), (0, 2, 8.0, 0.0)])
    g = make_graph(2, [(0, 1, 0.0, 3.0)])
    cost = make_cost(g, plat, [[1.0, 1.0, 1.0]] * 2)
    s = build_schedule(cost, Assignment((1, 2)), ScheduleOptions(contention=True))
    assert s.transfers[0].hops == ((1, 1.0, 2.5), (2, 2.5, 4.0))
    assert s.makespan == 5.0


def _stream_chain(streaming: bool = True):
    """a -> b -> c all streamable (4 chunks) on a streaming FPGA, then d on the CPU."""
    plat = make_platform(["cpu", "fpga"], links=[(0, 1, 8.0, 0.0)], streaming=streaming)
    g = make_graph(4, [(0, 1, 0.0, 1.0), (1, 2, 0.0, 1.0), (2, 3, 0.0, 2.0)], streamable=[4, 4, 8, 0])
    return make_cost(g, plat, [[9.0, 4.0], [9.0, 8.0], [9.0, 4.0], [1.0, INF]])


def test_streaming_pipelines_a_chain():
    cost = _stream_chain()
    a = Assignment((1, 1, 1, 0), ((3,), (0, 1, 2)))
    plain = build_schedule(cost, a)
    assert plain.makespan == 4 + 8 + 4 + 2 + 1
    s = build_schedule(cost, a, ScheduleOptions(streaming=True))
    offsets = stream_chain_times([4.0, 8.0, 4.0], 4)
    assert [(sl.start, sl.end) for sl in s.slots[:3]] == list(offsets)
    assert s.streamed == ((0, 1, 2),)
    assert s.makespan == offsets[-1][1] + 2 + 1 < plain.makespan
    assert validate(s) == []
    # a device without streaming support runs the chain one task at a time
    off = build_schedule(_stream_chain(streaming=False), a, ScheduleOptions(streaming=True))
    assert off.makespan == plain.makespan and off.streamed == ()


def test_memory_and_area_are_static_budgets():
    plat = make_platform(["cpu", "fpga"], links=[(0, 1, 8.0, 0.0)])
    g = make_graph(3, [])
    kw = dict(footprint=[4.0, 4.0, 4.0], memory_capacity=[INF, 8.0],
              area=[[0, 2.0]] * 3, area_capacity=[INF, 5.0])
    cost = make_cost(g, plat, [[1.0, 1.0]] * 3, **kw)
    both = ScheduleOptions(memory=True, area=True)
    assert validate(build_schedule(cost, Assignment((0, 1, 1)), both)) == []
    with pytest.raises(InfeasibleError, match=r"fpga0 need 12 bytes of memory, it has 8") as err:
        build_schedule(cost, Assignment((1, 1, 1)), ScheduleOptions(memory=True))
    assert err.value.obj == "fpga0"
    with pytest.raises(InfeasibleError, match=r"fpga0 need 6 area units, it has 5"):
        build_schedule(cost, Assignment((1, 1, 1)), ScheduleOptions(area=True))
    assert build_schedule(cost, Assignment((1, 1, 1))).makespan == 3.0  # options off: no budget


def test_errors_are_mapper_errors_and_empty_graph():
    g = make_graph(0, [])
    cost = make_cost(g, make_platform(["cpu"]), [])
    s = build_schedule(cost, Assignment(()))
    assert s.makespan == 0.0 and s.slots == () and validate(s) == []
    assert issubclass(OptionsError, MapperError)


def test_random_retiming_is_exact():
    cost = random_instance(7, 30, "layered", explicit_comm=False)
    dev = tuple(cost.feasible_devices(t)[-1] for t in range(cost.n_tasks))
    s = build_schedule(cost, Assignment(dev))
    assert build_schedule(cost, s.assignment).slots == s.slots
    assert validate(s) == []


def test_numpy_integers_are_accepted():
    import numpy as np

    cost = heft_paper_example()
    dev = tuple(np.int64(d) for d in HEFT_DEVICE)
    order = tuple(tuple(np.int32(t) for t in seq) for seq in HEFT_ORDER)
    s = build_schedule(cost, Assignment(dev, order))
    assert s.makespan == 80.0 and all(type(sl.device) is int for sl in s.slots)
    assert all(type(t) is int for seq in s.order for t in seq)
    with pytest.raises(OptionsError, match="device 1.5"):
        build_schedule(cost, Assignment((1.5,) * 10))


@pytest.mark.parametrize("seed", range(12))
def test_one_pass_timing_equals_the_event_simulation(seed, monkeypatch):
    # without contention and streamed chains build_schedule times in one topological pass
    # (schedule._plain_times); its schedule is the event simulation's, bit for bit
    import random

    from mapper.engine import schedule as sc

    rng = random.Random(seed)
    cost = random_instance(seed, 40, ("layered", "random")[seed % 2], explicit_comm=bool(seed % 3))
    dev = tuple(rng.choice(cost.feasible_devices(t)) for t in range(cost.n_tasks))
    order = list_schedule(cost, dev, cost.graph.topo_order).assignment.order
    fast = build_schedule(cost, Assignment(dev, order))
    monkeypatch.setattr(sc, "_plain_times", lambda *a: None)
    slow = build_schedule(cost, Assignment(dev, order))
    assert fast.slots == slow.slots and fast.transfers == slow.transfers and fast.makespan == slow.makespan
    assert fast.order == slow.order and fast.streamed == slow.streamed and validate(fast) == []

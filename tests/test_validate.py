"""The independent validator: a correct schedule passes, each broken one is caught."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from randdag import heft_paper_example, make_cost, make_graph, make_platform

from mapper.core.graph import Placement
from mapper.engine.schedule import Assignment, ScheduleOptions, TaskSlot, Transfer, build_schedule
from mapper.engine.validate import Violation, validate

INF = math.inf
HEFT_DEVICE = (2, 0, 2, 1, 2, 1, 2, 0, 1, 1)
HEFT_ORDER = ((1, 7), (3, 5, 8, 9), (0, 2, 4, 6))


@pytest.fixture(scope="module")
def good():
    return build_schedule(heft_paper_example(), Assignment(HEFT_DEVICE, HEFT_ORDER))


def _slot(s, t, **kw):
    slots = list(s.slots)
    slots[t] = replace(slots[t], **kw)
    return replace(s, slots=tuple(slots))


def _kinds(s) -> list[str]:
    return [v.kind for v in validate(s)]


def test_correct_schedule_has_no_violation(good):
    assert validate(good) == []


def test_missing_and_misnumbered_slots(good):
    assert _kinds(replace(good, slots=good.slots[:-1])) == ["structure"]
    assert _kinds(_slot(good, 3, task=4)) == ["structure"]
    assert _kinds(_slot(good, 3, device=9)) == ["placement"]


def test_non_finite_or_negative_times(good):
    v = validate(_slot(good, 0, start=-1.0))
    assert v[0].kind == "time" and v[0].tasks == (0,)
    assert "time" in _kinds(_slot(good, 9, end=INF))
    assert "time" in _kinds(replace(good, makespan=math.nan))


def test_infeasible_device_and_forbidden_placement():
    g = make_graph(2, [], placement=[Placement(), Placement(allow=("cpu",))])
    cost = make_cost(g, make_platform(["cpu", "gpu"]), [[1.0, INF], [1.0, 1.0]])
    s = build_schedule(cost, Assignment((0, 0), ((0, 1), ())))
    assert validate(s) == []
    bad = replace(s, slots=(TaskSlot(0, 1, 0.0, 1.0), TaskSlot(1, 1, 1.0, 2.0)), order=((), (0, 1)))
    v = validate(bad)
    assert [x.kind for x in v] == ["placement", "placement"]
    assert "cannot run" in v[0].message and "@cpu" in v[1].message


def test_wrong_duration(good):
    v = validate(_slot(good, 9, end=81.0))
    assert [x.kind for x in v] == ["duration", "makespan"]
    assert v[0].tasks == (9,)


def test_overlap_on_a_device(good):
    # n7 (task 6) moved onto n5's slot on p3
    s = _slot(good, 6, start=28.0, end=39.0)
    v = [x for x in validate(s) if x.kind == "overlap"]
    assert v and set(v[0].tasks) == {4, 6}


def test_precedence_same_device(good):
    # n3 (on p3) starting before n1 (p3) ends
    s = _slot(_slot(good, 0, start=0.0, end=9.0), 2, start=5.0, end=24.0)
    assert "precedence" in _kinds(s)


def test_precedence_ignores_no_transfer_time(good):
    # n2 on p1 may start at 9 + 18 = 27; at 26 it is one second early
    v = [x for x in validate(_slot(good, 1, start=26.0, end=39.0)) if x.kind == "precedence"]
    assert v and v[0].tasks == (0, 1) and v[0].edges == (0,)


def test_transfer_missing_extra_or_wrong(good):
    assert "transfer" in _kinds(replace(good, transfers=good.transfers[1:]))
    same = Transfer(edge=2, src_device=2, dst_device=2, start=9.0, end=9.0)  # n1 -> n3 both on p3
    assert "transfer" in _kinds(replace(good, transfers=good.transfers + (same,)))
    tr = list(good.transfers)
    tr[0] = replace(tr[0], end=tr[0].end - 1.0)
    assert _kinds(replace(good, transfers=tuple(tr))) == ["transfer"]
    tr[0] = replace(good.transfers[0], start=0.0, end=18.0)
    assert _kinds(replace(good, transfers=tuple(tr))) == ["transfer"]
    tr[0] = replace(good.transfers[0], dst_device=1)
    assert _kinds(replace(good, transfers=tuple(tr))) == ["transfer"]
    assert "transfer" in _kinds(replace(good, transfers=good.transfers + good.transfers[:1]))


def test_order_must_agree_with_the_slots(good):
    v = validate(replace(good, order=((7, 1),) + good.order[1:]))
    assert [x.kind for x in v] == ["order"] and v[0].tasks == (7, 1)
    assert _kinds(replace(good, order=((1,),) + good.order[1:])) == ["order"]
    assert validate(replace(good, order=())) == []  # no order recorded: sorted by time


def test_wrong_makespan(good):
    v = validate(replace(good, makespan=79.0))
    assert v == [Violation("makespan", "makespan is 79.0, the latest task ends at 80.0")]


def _link_case():
    plat = make_platform(["cpu", "gpu"], links=[(0, 1, 8.0, 0.0)])
    g = make_graph(3, [(0, 1, 8e9, None), (0, 2, 8e9, None)])
    cost = make_cost(g, plat, [[1.0, 1.0]] * 3)
    return build_schedule(cost, Assignment((0, 1, 1), ((0,), (1, 2))), ScheduleOptions(contention=True))


def test_link_overlap_under_contention():
    s = _link_case()
    assert validate(s) == []
    t0, t1 = s.transfers
    # both transfers on link 0 during [1, 2]: consistent each, but they collide
    bad = replace(s, transfers=(t0, replace(t1, end=2.0, hops=((0, 1.0, 2.0),))))
    assert _kinds(bad) == ["link"]
    # a hop list that does not follow the route
    assert _kinds(replace(s, transfers=(t0, replace(t1, hops=((1, 2.0, 3.0),))))) == ["transfer"]


def test_streamed_chain_must_follow_the_pipeline():
    plat = make_platform(["cpu", "fpga"], links=[(0, 1, 8.0, 0.0)])
    g = make_graph(2, [(0, 1, 0.0, 1.0)], streamable=[4, 4])
    cost = make_cost(g, plat, [[5.0, 4.0], [5.0, 4.0]])
    on = ScheduleOptions(streaming=True)
    s = build_schedule(cost, Assignment((1, 1), ((), (0, 1))), on)
    assert s.streamed == ((0, 1),) and validate(s) == []
    late = _slot(s, 1, start=s.slots[1].start + 0.5, end=s.slots[1].end + 0.5)
    assert "stream" in _kinds(replace(late, makespan=late.slots[1].end))
    # the same overlapping slots are an overlap and a precedence violation without streaming
    kinds = _kinds(replace(s, options=ScheduleOptions()))
    assert "overlap" in kinds and "precedence" in kinds


def test_memory_and_area_checked_when_on():
    plat = make_platform(["cpu", "fpga"], links=[(0, 1, 8.0, 0.0)])
    g = make_graph(2, [])
    cost = make_cost(g, plat, [[1.0, 1.0]] * 2, footprint=[5.0, 5.0], memory_capacity=[INF, 8.0],
                     area=[[0.0, 3.0]] * 2, area_capacity=[INF, 4.0])
    s = build_schedule(cost, Assignment((1, 1), ((), (0, 1))))
    assert validate(s) == []  # options off: budgets not checked
    assert _kinds(replace(s, options=ScheduleOptions(memory=True))) == ["memory"]
    v = validate(replace(s, options=ScheduleOptions(area=True)))
    assert [x.kind for x in v] == ["area"] and v[0].tasks == (0, 1)

"""The plain paths of the list scheduler and the schedule builder against the general ones:
the same schedules, float for float, on small random graphs."""

from __future__ import annotations

import random

import pytest

from mapper.engine import schedule as schedule_module
from mapper.engine.schedule import Assignment, ScheduleOptions, build_schedule
from mapper.engine.validate import validate
from mapper.errors import MapperError
from mapper.mapping import get_mapper
from mapper.mapping.base import MapOptions
from mapper.mapping.multilevel import _guided
from mapper.mapping.placer import Placer
from mapper.mapping.ranks import mean_comm, mean_times, priority_order, upward_rank
from tests.randdag import random_instance

SHAPES = ("layered", "forkjoin", "chain", "random")


def _times(schedule):
    return ([(s.task, s.device, s.start, s.end) for s in schedule.slots],
            [(x.edge, x.src_device, x.dst_device, x.start, x.end, x.links, x.hops) for x in schedule.transfers])


def _general(monkeypatch):
    """Placers built from here on take the general path (every device through ``eft``)."""
    init = Placer.__init__

    def general(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.plain = False

    monkeypatch.setattr(Placer, "__init__", general)


def _reference_guided(cost, hint, fastest, rank, options):
    """The earliest-finish placement near ``hint`` as it was written first (a ``min`` over the
    devices' last ends read from the timeline on every task)."""
    g = cost.graph
    placer = Placer(cost, options.schedule)
    comm = mean_comm(cost)
    for t in rank:
        row = cost.time[t]
        last_end = placer.timeline.last_end
        cand = {hint[t], fastest[t], min(cost.feasible_devices(t), key=lambda d: (last_end(d) + row[d], d))}
        if g.preds[t]:
            e = max(g.preds[t], key=lambda e: (placer.end[g.edges[e].src] + comm[e], -e))
            cand.add(placer.device[g.edges[e].src])
        if not any(placer.fits(t, d) for d in cand):
            cand = set(cost.feasible_devices(t))
        placer.place_best(t, devices=sorted(cand))
    return placer.schedule()


@pytest.mark.parametrize("seed", range(16))
@pytest.mark.parametrize("mapper", ["heft", "peft", "cpop", "greedy"])
def test_plain_placement_equals_the_general_one(seed, mapper, monkeypatch):
    cost = random_instance(seed, 60, SHAPES[seed % 4], n_devices=3 + seed % 3, explicit_comm=seed % 2 == 0,
                           zero_times=seed % 5 == 0)
    fast = get_mapper(mapper).map(cost, MapOptions()).schedule
    _general(monkeypatch)
    slow = get_mapper(mapper).map(cost, MapOptions()).schedule
    assert _times(fast) == _times(slow)
    assert validate(fast) == []


@pytest.mark.parametrize("seed", range(12))
def test_guided_placement_equals_its_first_form(seed, monkeypatch):
    cost = random_instance(seed, 80, SHAPES[seed % 4], n_devices=4, explicit_comm=seed % 2 == 1)
    rng = random.Random(seed)
    hint = [rng.choice(cost.feasible_devices(t)) for t in range(cost.n_tasks)]
    fastest = [min(cost.feasible_devices(t), key=row.__getitem__) for t, row in enumerate(cost.time)]
    rank = priority_order(cost, upward_rank(cost, mean_times(cost), mean_comm(cost)))
    fast = _guided(cost, hint, fastest, rank, MapOptions())
    _general(monkeypatch)
    slow = _reference_guided(cost, hint, fastest, rank, MapOptions())
    assert fast is not None
    assert _times(fast) == _times(slow)


@pytest.mark.parametrize("seed", range(16))
def test_plain_times_equal_the_event_simulation(seed, monkeypatch):
    cost = random_instance(seed, 70, SHAPES[seed % 4], n_devices=4, explicit_comm=seed % 2 == 0,
                           zero_times=seed % 3 == 0)
    rng = random.Random(seed)
    device = [rng.choice(cost.feasible_devices(t)) for t in range(cost.n_tasks)]
    try:
        assignment = Assignment(tuple(device), build_schedule(cost, Assignment(tuple(device))).order)
    except MapperError:  # a random placement may need a missing route: that case is not this test's
        pytest.skip("no route for this random placement")
    fast = build_schedule(cost, assignment, ScheduleOptions())
    monkeypatch.setattr(schedule_module, "_plain_times", lambda *args: None)
    slow = build_schedule(cost, assignment, ScheduleOptions())
    assert _times(fast) == _times(slow)
    assert fast.makespan == slow.makespan


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("options", [ScheduleOptions(), ScheduleOptions(contention=True)])
def test_timing_gives_the_built_schedules_makespan_and_schedule(seed, options):
    # schedule.timing: the makespan first, the schedule made only when asked for (one pass), or
    # built at once (contention, no order): the same as build_schedule either way
    cost = random_instance(seed, 50, SHAPES[seed % 4], n_devices=3, explicit_comm=seed % 2 == 0)
    rng = random.Random(seed)
    device = tuple(rng.choice(cost.feasible_devices(t)) for t in range(cost.n_tasks))
    try:
        order = build_schedule(cost, Assignment(device)).order
    except MapperError:
        pytest.skip("no route for this random placement")
    for assignment in (Assignment(device, order), Assignment(device)):
        want = build_schedule(cost, assignment, options)
        makespan, make = schedule_module.timing(cost, assignment, options)
        got = make()
        assert makespan == want.makespan == got.makespan and _times(got) == _times(want)
        assert got.order == want.order and got.options == want.options


@pytest.mark.parametrize("seed", range(16))
@pytest.mark.parametrize("mapper", ["heft", "peft", "greedy"])
def test_placement_times_equal_the_rebuilt_schedule(seed, mapper):
    """A plain placement's own times are those build_schedule gives its order (insertion included)."""
    cost = random_instance(seed, 60, SHAPES[seed % 4], n_devices=3 + seed % 3, explicit_comm=seed % 2 == 1,
                           zero_times=seed % 4 == 0)
    placed = get_mapper(mapper).map(cost, MapOptions()).schedule
    rebuilt = build_schedule(cost, placed.assignment, ScheduleOptions())
    assert _times(placed) == _times(rebuilt)
    assert placed.makespan == rebuilt.makespan and placed.order == rebuilt.order

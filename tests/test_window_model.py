"""The LNS window model: the same optimum as the whole-graph model, in a size set by the window."""

from __future__ import annotations

import time

import pytest
from randdag import random_instance

from mapper.engine.schedule import ScheduleOptions
from mapper.engine.validate import validate
from mapper.mapping import get_mapper
from mapper.mapping.exact import solve as solve_module
from mapper.mapping.exact.formulation import Formulation
from mapper.mapping.exact.incumbent import delay_options, retime, schedule_order
from mapper.mapping.exact.subproblem import Subproblem
from mapper.mapping.exact.window_model import WindowFormulation, is_window
from mapper.mapping.lns import _windows, improve


def _current(cost):
    heft = get_mapper("heft").map(cost).schedule
    return retime(cost, heft.device_of, schedule_order(heft), delay_options(ScheduleOptions()))


def _window(cur, free, flow=0.0, time_limit=30.0):
    ends = sum(s.end for s in cur.slots)
    return Subproblem(cost=cur.cost, objective="makespan", free=free, device=cur.device_of,
                      start=tuple(s.start for s in cur.slots), upper=cur.makespan * (1 + 1e-9),
                      time_limit=time_limit, symmetry=False, start_value=cur.makespan + flow * ends,
                      flow_weight=flow, frozen_before=min(cur.slots[t].start for t in free),
                      horizon=max(cur.slots[t].end for t in free))


@pytest.mark.parametrize("seed,shape,zero", [(0, "layered", False), (1, "forkjoin", False), (2, "random", True),
                                             (3, "layered", True)])
def test_window_model_has_the_optimum_of_the_whole_graph_model(monkeypatch, seed, shape, zero):
    cost = random_instance(seed, 36, shape=shape, n_devices=3, zero_times=zero)
    cur = _current(cost)
    for free in _windows(cur, 6, True)[:3]:
        sub = _window(cur, free)
        assert is_window(sub)
        small = solve_module.solve(sub)
        monkeypatch.setattr(solve_module, "is_window", lambda s: False)
        whole = solve_module.solve(sub)
        monkeypatch.undo()
        assert small.status == whole.status == "optimal"
        assert small.objective == pytest.approx(whole.objective, rel=2e-6)
        sched = retime(cost, small.device, small.order, delay_options(ScheduleOptions()))
        assert not validate(sched)
        assert sched.makespan <= cur.makespan * (1 + 1e-7)


def test_window_model_size_follows_the_window_not_the_graph():
    cost = random_instance(5, 1200, shape="layered", n_devices=4)
    cur = _current(cost)
    free = _windows(cur, 8, True)[len(_windows(cur, 8, True)) // 2]
    sub = _window(cur, free, time_limit=5.0)
    whole = Formulation(sub)
    whole.build()
    small = WindowFormulation(sub)
    small.build()
    assert whole.prob.n_rows() > cost.n_tasks  # a row per edge at least
    assert small.prob.n_rows() < whole.prob.n_rows() / 5
    assert len(small.s) < cost.n_tasks / 10
    res = solve_module.solve(sub)
    assert res.device is not None and res.objective <= cur.makespan * (1 + 1e-9)


def test_lns_with_zero_duration_tasks_keeps_valid_schedules():
    cost = random_instance(7, 80, shape="forkjoin", n_devices=3, zero_times=True)
    heft = get_mapper("heft").map(cost).schedule
    out, stats = improve(cost, heft, "makespan", ScheduleOptions(), time.perf_counter() + 3.0)
    assert stats.windows >= 1
    assert not validate(out)
    assert out.makespan <= heft.makespan * (1 + 1e-9)


def test_a_window_that_finds_nothing_better_returns_its_start():
    cost = random_instance(8, 40, shape="layered", n_devices=3)
    cur = _current(cost)
    free = _windows(cur, 4, True)[0]
    sub = _window(cur, free)
    # a start value below anything reachable: the solver cannot beat it
    res = solve_module.solve(Subproblem(**{**{f: getattr(sub, f) for f in sub.__dataclass_fields__},
                                           "start_value": 0.0}))
    assert res.device == cur.device_of and res.start == sub.start

"""Every heuristic on a few hundred random DAGs: each schedule validates."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from randdag import SHAPES, random_instance

from mapper.engine.schedule import ScheduleOptions, build_schedule
from mapper.engine.validate import validate
from mapper.errors import InfeasibleError
from mapper.mapping import get_mapper
from mapper.mapping.base import MapOptions
from mapper.mapping.bounds import lower_bound

HEURISTICS = ("heft", "cpop", "peft", "greedy", "single", "cpu")


@st.composite
def cases(draw):
    budgets = draw(st.booleans())
    cost = random_instance(
        seed=draw(st.integers(0, 2**31 - 1)),
        n=draw(st.integers(2, 40)),
        shape=draw(st.sampled_from(SHAPES)),
        ccr=draw(st.floats(0.1, 10.0)),
        heterogeneity=draw(st.floats(0.0, 0.9)),
        n_devices=draw(st.integers(3, 4)),
        infeasible=draw(st.sampled_from((0.0, 0.1, 0.3))),
        explicit_comm=draw(st.booleans()),
        zero_times=draw(st.booleans()),
        budgets=budgets,
    )
    options = ScheduleOptions(contention=draw(st.booleans()), streaming=draw(st.booleans()),
                              memory=budgets, area=budgets)
    return cost, options


@settings(max_examples=220, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_every_heuristic_schedule_validates(case):
    cost, sched = case
    options = MapOptions(schedule=sched)
    bound = lower_bound(cost, "makespan", sched)
    whole = [all(row[d] < float("inf") for row in cost.time) for d in range(cost.n_devices)]
    for name in HEURISTICS:
        # the baselines put everything on one device: infeasible exactly when no
        # such device can run every task (with budgets, the CPU always can)
        if name == "cpu" and not whole[0] or name == "single" and not any(whole):
            with pytest.raises(InfeasibleError):
                get_mapper(name).map(cost, options)
            continue
        r = get_mapper(name).map(cost, options)
        s = r.schedule
        assert validate(s) == [], name
        assert s.options == sched and r.objective_value == s.makespan
        assert s.makespan >= bound * (1 - 1e-9), name
        # re-timing the mapper's own order reproduces its schedule
        again = build_schedule(cost, s.assignment, sched)
        assert again.makespan == s.makespan and again.slots == s.slots, name


@settings(max_examples=80, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.sampled_from(("heft", "peft", "greedy")), st.integers(0, 10**6), st.floats(1e-3, 1.0))
def test_moving_any_task_earlier_is_caught(case, name, pick, frac):
    """Schedules are as-soon-as-possible, so starting any task earlier breaks
    a rule (precedence, overlap, streaming or time >= 0) and the validator says so."""
    cost, sched = case
    s = get_mapper(name).map(cost, MapOptions(schedule=sched)).schedule
    t = pick % cost.n_tasks
    slot = s.slots[t]
    delta = max(slot.start * frac, 1e-3)
    moved = replace(slot, start=slot.start - delta, end=slot.end - delta)
    bad = replace(s, slots=s.slots[:t] + (moved,) + s.slots[t + 1:])
    assert validate(bad) != []

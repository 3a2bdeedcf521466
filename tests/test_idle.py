"""No idle waiting: work a compile would redo or could not gain from is skipped
(counted here, never timed)."""

from __future__ import annotations

import json
import time

import pytest
from randdag import make_cost, make_graph, make_platform
from test_parallel import BLOCK  # one transformer block, as the splitter's tests use it

from mapper.engine.validate import validate
from mapper.frontend.lowering.program import lower
from mapper.frontend.parse import parse
from mapper.mapping import get_mapper, lns
from mapper.mapping.base import MapOptions
from mapper.mapping.exact import incumbent
from mapper.parallel import search
from mapper.pipeline import compile_graph
from mapper.platform.loader import load_platform
from mapper.report.json_text import chunks, dumps


def _count_heuristics(monkeypatch) -> list[str]:
    ran: list[str] = []
    for cls in incumbent.HEURISTICS:
        inner = cls.map

        def counted(self, cost, options=MapOptions(), _inner=inner, _name=cls.name):
            ran.append(_name)
            return _inner(self, cost, options)

        monkeypatch.setattr(cls, "map", counted)
    return ran


def _count_windows(monkeypatch) -> list[int]:
    """The LNS windows solved, one entry per search (lns.improve) run."""
    windows: list[int] = []
    real_improve = lns.improve

    def counted_improve(*args, **kwargs):
        sched, stats = real_improve(*args, **kwargs)
        windows.append(stats.windows)
        return sched, stats

    monkeypatch.setattr(lns, "improve", counted_improve)
    return windows


def _record_calls(monkeypatch, module, name: str) -> list:
    """The first argument of each call of ``module.name`` from now on (the function still runs)."""
    seen: list = []
    real = getattr(module, name)

    def recorded(first, *args, **kwargs):
        seen.append(first)
        return real(first, *args, **kwargs)

    monkeypatch.setattr(module, name, recorded)
    return seen


def _chain(n: int, slow: float):
    """A chain of ``n`` tasks, each 1 s on cpu0 and ``slow`` s on cpu1: HEFT's all-on-cpu0
    schedule meets the critical-path bound."""
    plat = make_platform(["cpu", "cpu"], [(0, 1, 1.0, 0.0)])
    g = make_graph(n, [(i, i + 1, 1e3, None) for i in range(n - 1)])
    return make_cost(g, plat, [[1.0, slow] for _ in range(n)])


def test_large_graph_stops_at_the_first_heuristic_that_meets_the_bound_and_runs_no_lns(monkeypatch):
    ran = _count_heuristics(monkeypatch)
    windows = _count_windows(monkeypatch)
    cost = _chain(100, 2.0)
    result = get_mapper("milp").map(cost, MapOptions(time_limit=10))
    assert ran == ["heft"]  # HEFT meets the bound: the other five heuristics are not run
    assert windows == []  # nor is any LNS window solved
    assert result.status == "optimal" and result.objective_value == pytest.approx(100.0)
    assert validate(result.schedule) == []


def test_small_graph_still_runs_every_heuristic(monkeypatch):
    ran = _count_heuristics(monkeypatch)
    get_mapper("milp").map(_chain(10, 2.0), MapOptions(time_limit=5))
    assert set(ran) == {cls.name for cls in incumbent.HEURISTICS}  # every one runs


def test_data_parallel_prices_each_scored_plan_once(monkeypatch):
    dgx = load_platform("dgx-a100")
    priced: list[str] = []
    real = search.build_cost_table

    def counted(graph, platform):
        priced.append(graph.name)
        return real(graph, platform)

    monkeypatch.setattr(search, "build_cost_table", counted)
    c = compile_graph(lower(parse(BLOCK, "<test>")), dgx, mapper="heft", train="adam", parallel="data")
    scored = c.parallel.to_json()["plans_scored"]
    # the prepared graph once (devices ranked), then each scored plan: no unsplit pricing
    # (data plans cut no pipeline stages), and the kept plan's table is the one mapped
    assert len(priced) == 1 + scored
    assert c.cost is c.parallel.cost
    assert validate(c.result.schedule) == []


def test_json_text_matches_the_standard_encoder():
    cases = [{}, [], {"a": {}, "b": []}, [[], {}, 1], {"k": [{"a": [1, {"b": 2.5, "c": None}]}], "s": "é\n\u2028"},
             {1: [1], 2.5: {"x": True}, None: [], False: "f"}, [1.0e300, -0.0, 10**30, "x"], (1, (2, 3))]
    for case in cases:
        assert dumps(case) == json.dumps(case, indent=2, ensure_ascii=False, allow_nan=False)
    for bad in (float("nan"), {"a": [float("inf")]}):
        with pytest.raises(ValueError):
            dumps(bad)
    with pytest.raises(TypeError):
        dumps({"a": [object()]})


def test_streamed_json_text_is_the_whole_text():
    # chunks() gives dumps()'s text piece by piece, whatever the chunk size, random nestings included
    import random

    rng = random.Random(3)

    def value(depth: int):
        if depth > 4 or rng.random() < 0.3:
            return rng.choice([1, 2.5, -0.0, "x\u00e9\"\n", None, True, False, 10**20, 1e-300, [], {}])
        if rng.random() < 0.5:
            return [value(depth + 1) for _ in range(rng.randrange(4))]
        return {rng.choice(["a", "b", 1, 2.5, None, True]): value(depth + 1) for _ in range(rng.randrange(4))}

    for _ in range(400):
        case = value(0)
        whole = json.dumps(case, indent=2, ensure_ascii=False, allow_nan=False)
        for size in (1, 10, 1 << 20):
            assert "".join(chunks(case, size)) == whole
    assert len(list(chunks({"tasks": [{"a": k} for k in range(1000)]}, 100))) > 10  # streamed, not one string
    with pytest.raises(ValueError):
        "".join(chunks({"a": [1, float("nan")]}))



def test_the_mapper_starts_from_the_kept_plans_heft_schedule_not_a_second_heft_run(monkeypatch):
    from mapper.engine import memory
    from mapper.mapping import placer

    tables: list[object] = []  # the cost table of each list-scheduling pass
    real_init = placer.Placer.__init__

    def counted_init(self, cost, *args, **kwargs):
        tables.append(cost)
        real_init(self, cost, *args, **kwargs)

    monkeypatch.setattr(placer.Placer, "__init__", counted_init)
    peaks = _record_calls(monkeypatch, memory, "_peak_memory")
    c = compile_graph(lower(parse(BLOCK, "<test>")), load_platform("dgx-a100"), train="adam", parallel="data")
    # one HEFT pass per scored plan; the default mapper on the kept plan reused the pass that scored it
    assert len(tables) == c.parallel.to_json()["plans_scored"]
    assert sum(t is c.cost for t in tables) == 1
    assert c.result.schedule.makespan <= c.parallel.best.step_time
    assert len(peaks) == len({id(s) for s in peaks})  # each schedule's peaks computed once
    assert validate(c.result.schedule) == []


def test_reused_heft_schedule_gives_the_same_result_as_a_fresh_run(monkeypatch):
    from mapper.mapping import heft

    class Forgetful(list):  # keeps nothing: every HEFT call runs afresh
        def __setitem__(self, key, value) -> None:
            pass

    def report() -> str:
        c = compile_graph(lower(parse(BLOCK, "<test>")), load_platform("dgx-a100"), train="adam", parallel="data")
        return dumps({"parallel": c.parallel.to_json(), "makespan": c.result.schedule.makespan,
                      "slots": [(s.device, s.start, s.end) for s in c.result.schedule.slots]})

    kept = report()
    assert report() == kept  # same inputs, same bytes
    monkeypatch.setattr(heft, "_last", Forgetful())
    assert report() == kept  # and the same as when the mapper runs HEFT again


def _pinned(n: int, seed: int = 3):
    """A random ``n``-task graph whose every task can run on one device only (random devices)."""
    from randdag import random_instance

    from mapper.mapping.exact.incumbent import pinned

    cost = random_instance(seed, n, shape="layered", n_devices=3, infeasible=1.0)
    assert pinned(cost)
    return cost


def test_a_large_pinned_graph_runs_no_lns_and_says_so(monkeypatch):
    windows = _count_windows(monkeypatch)
    cost = _pinned(120)
    best, _ = incumbent.best_heuristic(cost, MapOptions())
    assert best is not None
    result = lns.map_large(cost, MapOptions(time_limit=10), best, (), time.perf_counter())
    assert windows == []  # no probe, no window: nothing is searched
    assert lns.PINNED_NOTE.format("heft") in result.notes
    assert not any(n.startswith("LNS from") or "coarsened" in n for n in result.notes)
    assert result.schedule is best.schedule and result.status in ("heuristic", "optimal")
    assert result.lower_bound is not None and result.gap is not None
    assert validate(result.schedule) == []


def test_a_large_graph_with_a_free_task_still_runs_lns(monkeypatch):
    from randdag import random_instance

    windows = _count_windows(monkeypatch)
    cost = random_instance(3, 120, shape="layered", n_devices=3)
    best, _ = incumbent.best_heuristic(cost, MapOptions())
    result = lns.map_large(cost, MapOptions(time_limit=2), best, (), time.perf_counter())
    assert windows and lns.PINNED_NOTE.format("heft") not in result.notes
    assert validate(result.schedule) == []


def test_a_pinned_graph_s_result_is_deterministic():
    def text() -> str:
        cost = _pinned(120)
        best, _ = incumbent.best_heuristic(cost, MapOptions())
        r = lns.map_large(cost, MapOptions(time_limit=10), best, (), time.perf_counter())
        return dumps({"notes": list(r.notes), "value": r.objective_value, "bound": r.lower_bound,
                      "slots": [(s.device, s.start, s.end) for s in r.schedule.slots]})

    assert text() == text()


def test_plans_are_built_and_the_json_report_written_with_the_collector_paused(monkeypatch, tmp_path):
    import gc

    from mapper.report import json_report

    seen: list[tuple[str, bool]] = []
    real_build, real_chunks = search.build, json_report.json_text.chunks

    def build(*args, **kwargs):
        seen.append(("build", gc.isenabled()))
        return real_build(*args, **kwargs)

    def chunks_(*args, **kwargs):
        seen.append(("json", gc.isenabled()))
        return real_chunks(*args, **kwargs)

    monkeypatch.setattr(search, "build", build)
    monkeypatch.setattr(json_report.json_text, "chunks", chunks_)
    assert gc.isenabled()
    c = compile_graph(lower(parse(BLOCK, "<test>")), load_platform("dgx-a100"), mapper="heft", train="adam",
                      parallel="data")
    assert gc.isenabled()  # restored after the plan choice
    json_report.write_json(c.result, tmp_path / "r.json", parallel=c.parallel.to_json())
    assert gc.isenabled()  # and after the report
    assert seen and {name for name, _ in seen} == {"build", "json"} and not any(on for _, on in seen)
    assert (tmp_path / "r.json").read_text() == json_report.to_json(c.result, parallel=c.parallel.to_json())


def test_retask_is_dataclasses_replace():
    import dataclasses

    from mapper.core.graph import Placement, Task, TensorType, retask

    task = Task(3, "x", "matmul", flops=2.0, output=TensorType("f16", (4, 4)), placement=Placement(allow=("gpu0",)))
    for changes in ({}, {"index": 7}, {"name": "y", "backward": True, "memory": None, "parts": (task,)}):
        copy = retask(task, **changes)
        assert copy == dataclasses.replace(task, **changes) and type(copy) is Task and copy is not task
    with pytest.raises(TypeError):
        retask(task, nonsense=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        retask(task).name = "z"  # type: ignore[misc]


def test_device_classes_are_found_once_per_table(monkeypatch):
    from randdag import random_instance

    from mapper.mapping import orders

    real = orders._device_classes
    found = _record_calls(monkeypatch, orders, "_device_classes")
    a, b = random_instance(1, 20, n_devices=5), random_instance(2, 20, n_devices=5)
    first = orders.identical_device_classes(a)
    assert orders.identical_device_classes(a) == first and found == [a]  # asked again: not recomputed
    assert orders.identical_device_classes(b) == real(b) and found == [a, b]
    assert orders.identical_device_classes(a) == first and found == [a, b, a]  # another table in between


def test_a_schedule_is_checked_once_however_often_it_is_validated(monkeypatch):
    import dataclasses

    from mapper.engine import validate as validator

    checked = _record_calls(monkeypatch, validator._Checker, "run")
    cost = _chain(30, 2.0)
    sched = get_mapper("heft").map(cost).schedule
    assert validate(sched) == [] and validate(sched) == [] and len(checked) == 1
    broken = dataclasses.replace(sched, makespan=sched.makespan * 2)  # another schedule: checked afresh
    assert [v.kind for v in validate(broken)] == ["makespan"] and len(checked) == 2
    first = validate(broken)
    first.clear()  # a caller's list is its own
    assert [v.kind for v in validate(broken)] == ["makespan"] and len(checked) == 2


def test_a_one_shot_process_freezes_the_kept_plan_and_the_api_leaves_the_heap_alone(monkeypatch):
    from mapper.core import heap

    frozen: list[bool] = []
    monkeypatch.setattr(heap.gc, "freeze", lambda: frozen.append(heap.gc.isenabled()))
    block = lower(parse(BLOCK, "<test>"))
    monkeypatch.setattr(heap, "_one_shot", [False])  # as the API leaves it (a CLI test may have run main)
    compile_graph(block, load_platform("dgx-a100"), mapper="heft", train="adam", parallel="data")
    assert frozen == []  # the Python API: its caller's heap is the collector's
    monkeypatch.setattr(heap, "_one_shot", [True])
    compile_graph(block, load_platform("dgx-a100"), mapper="heft", train="adam", parallel="data")
    assert frozen and frozen[0] is False  # frozen at the end of the paused plan choice

"""Deadlines: the DSL's ``deadline``, ``--objective deadline`` (exact against brute
force on small cases), the validator's deadline check and the JSON report's figures."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest
from randdag import make_cost, make_graph, make_platform, random_edges
from test_milp import _brute

from mapper.cli import main
from mapper.engine.validate import deadline_misses, validate
from mapper.frontend.importers.wfcommons import import_wfcommons
from mapper.frontend.load import load_graph
from mapper.mapping import get_mapper
from mapper.mapping.base import MapOptions
from mapper.mapping.exact.cpsat_model import solve_cpsat
from mapper.mapping.exact.incumbent import serial_upper_bound
from mapper.mapping.objectives import lateness, objective_value
from mapper.mapping.ranks import edf_order, effective_deadlines

PROGRAM = """\
graph g deadline = 8 ms {
  task a cost { cpu: 2 ms, gpu: 1 ms }
  task b cost { cpu: 3 ms, gpu: 2 ms } deadline 2 ms
  task c cost { cpu: 2 ms, gpu: 1 ms }
  task d cost { cpu: 2 ms, gpu: 2 ms }
  a -> b
  a -> c
}
"""


def test_task_and_graph_deadlines_lower_to_seconds(tmp_path):
    path = tmp_path / "g.tg"
    path.write_text(PROGRAM)
    g = load_graph(str(path))
    got = {t.name: t.deadline for t in g.tasks}
    # the graph's deadline is every sink's; a sink's own earlier one wins; a task with successors keeps none
    assert got == {"a": None, "b": pytest.approx(0.002), "c": pytest.approx(0.008), "d": pytest.approx(0.008)}


@pytest.mark.parametrize("text, where, message", [
    ("task a cost { cpu: 2 ms } deadline -1 ms", "2:38", "must be >= 0"),
    ("task a cost { cpu: 2 ms } deadline 3", "2:38", "needs a time unit"),
    ("task a cost { cpu: 2 ms } deadline 3 parsecs", "2:40", "unknown time unit"),
    ("task a cost { cpu: 2 ms } deadline 0 s", "2:38", "must be positive"),
    ("task a cost { cpu: 2 ms } deadline 1 s deadline 2 s", "2:42", "given twice"),
])
def test_bad_deadlines_exit_2_with_the_place(tmp_path, capsys, text, where, message):
    path = tmp_path / "bad.tg"
    path.write_text("graph g {\n  " + text + "\n}\n")
    assert main(["compile", str(path), "--platform", "cpu-gpu-fpga", "-q"]) == 2
    err = capsys.readouterr().err
    assert f"bad.tg:{where}:" in err and message in err and "Traceback" not in err


def test_a_bad_graph_deadline_names_the_header(tmp_path, capsys):
    path = tmp_path / "bad.tg"
    path.write_text("graph g deadline 0 s {\n  task a cost { cpu: 2 ms }\n}\n")
    assert main(["compile", str(path), "--platform", "cpu-gpu-fpga", "-q"]) == 2
    assert "bad.tg:1:18:" in capsys.readouterr().err


def test_the_deadline_objective_needs_a_deadline(tmp_path, capsys):
    path = tmp_path / "g.tg"
    path.write_text("graph g {\n  task a cost { cpu: 2 ms }\n}\n")
    assert main(["compile", str(path), "--platform", "cpu-gpu-fpga", "--objective", "deadline", "-q"]) == 2
    assert "needs a deadline" in capsys.readouterr().err


def _instance(seed: int):
    """At most 6 tasks, whole times on 2 or 3 heterogeneous devices, whole transfers, and
    whole deadlines on about half the tasks: some instances feasible, some not."""
    rng = random.Random(seed)
    n = rng.randint(3, 6)
    nd = 2 + seed % 2
    edges = [(u, v, 0.0, float(rng.randint(0, 3))) for u, v in random_edges(rng, n, "random")]
    graph = make_graph(n, edges, name=f"dl{seed}")
    times = [[float(rng.randint(1, 8)) for _ in range(nd)] for _ in range(n)]
    finish = [0.0] * n  # earliest finish with the fastest times and no transfers
    for t in graph.topo_order:
        finish[t] = min(times[t]) + max((finish[graph.edges[e].src] for e in graph.preds[t]), default=0.0)
    tasks = tuple(replace(t, deadline=finish[t.index] + rng.randint(0, 2)) if rng.random() < 0.5
                  or not graph.succs[t.index] else t for t in graph.tasks)
    graph = replace(graph, tasks=tasks)
    links = [(a, b, 1.0, 0.0) for a in range(nd) for b in range(a + 1, nd)]
    return make_cost(graph, make_platform(["cpu", "gpu", "fpga"][:nd], links), times)


@pytest.mark.parametrize("mapper", ["cpsat", "milp"])
def test_deadline_feasibility_is_decided_exactly(mapper):
    # every device assignment and every order (brute force) against the exact engines:
    # the least largest tardiness, so feasibility (0) is decided exactly, and the schedule
    # passes the validator with its deadline checks exactly when it is feasible
    outcomes = set()
    for seed in range(16):
        cost = _instance(seed)
        best = _brute(cost, "deadline")
        result = get_mapper(mapper).map(cost, MapOptions(objective="deadline", time_limit=20, seed=seed))
        assert result.status == "optimal", seed
        assert result.objective_value == pytest.approx(best, abs=1e-9), seed
        assert not validate(result.schedule)
        assert bool(validate(result.schedule, deadlines=True)) == (best > 0), seed
        outcomes.add(best == 0)
        if mapper == "cpsat":  # the model alone, without a heuristic's start, proves the same
            solved = solve_cpsat(cost, "deadline", serial_upper_bound(cost), memory=False, area=False,
                                 makespan_bound=None, hint=None, time_limit=20, seed=seed)
            assert solved.status == "optimal" and solved.objective == pytest.approx(best), seed
    assert outcomes == {True, False}  # both kinds of instance were decided


def test_heft_orders_by_effective_deadline():
    cost = _instance(3)
    w = [min(row) for row in cost.time]
    dl = effective_deadlines(cost, w)
    g = cost.graph
    for e in g.edges:  # a task's effective deadline leaves its successor its minimum time
        assert dl[e.src] <= dl[e.dst] - w[e.dst] + 1e-12
    order = edf_order(cost, w, [0.0] * cost.n_tasks)
    assert sorted(order) == list(range(cost.n_tasks))
    pos = {t: k for k, t in enumerate(order)}
    assert all(pos[e.src] < pos[e.dst] for e in g.edges)
    result = get_mapper("heft").map(cost, MapOptions(objective="deadline"))
    assert result.objective_value == objective_value(result.schedule, "deadline") >= 0
    assert any("EDF" in n for n in result.notes)


def test_the_report_gives_lateness_and_misses(tmp_path, capsys):
    path = tmp_path / "g.tg"
    path.write_text(PROGRAM)
    out = tmp_path / "r.json"
    assert main(["compile", str(path), "--platform", "cpu-gpu-fpga", "--objective", "deadline",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["objective"] == "deadline" and report["deadlines_met"] is False
    late = {t["name"]: t["lateness"] for t in report["tasks"] if "lateness" in t}
    assert set(late) == {"b", "c", "d"} and late["b"] > 0
    assert report["max_lateness"] == max(late.values()) == report["objective_value"]
    assert [v["kind"] for v in report["violations"]] == ["deadline"]
    assert "violation" in text and "wcrt bound" in text
    assert report["response_bound"]["bound"] >= report["makespan"] - 1e-12
    # under another objective a miss is a note, not a violation
    assert main(["compile", str(path), "--platform", "cpu-gpu-fpga", "--json", str(out), "-q"]) == 0
    report = json.loads(out.read_text())
    assert "violations" not in report
    assert report["deadlines_met"] == (not any(t["lateness"] > 0 for t in report["tasks"] if "lateness" in t))
    assert report["deadlines_met"] or any("deadline missed" in n for n in report["notes"])


def test_lateness_and_misses_agree():
    cost = _instance(5)
    result = get_mapper("heft").map(cost, MapOptions(objective="deadline"))
    late = dict(lateness(result.schedule))
    assert {v.tasks[0] for v in deadline_misses(result.schedule)} == {t for t, x in late.items() if x > 1e-9}


def test_wfcommons_deadlines_import_and_round_trip(tmp_path, capsys):
    doc = json.loads((Path(__file__).parent / "data" / "wfcommons" / "blast-48.json").read_text())
    doc["workflow"]["deadline"] = "2 s"
    doc["workflow"]["specification"]["tasks"][0]["deadline"] = "500 ms"
    src = tmp_path / "w.json"
    src.write_text(json.dumps(doc))
    g = import_wfcommons(src)
    first = g.tasks[0]
    assert first.deadline == pytest.approx(0.5)
    sinks = [t for t in g.tasks if not g.succs[t.index]]
    assert sinks and all(t.deadline == pytest.approx(min(2.0, t.deadline)) for t in sinks)
    assert all(t.deadline is None for t in g.tasks if g.succs[t.index] and t.index != 0)
    out = tmp_path / "w.tg"
    assert main(["import", "wfcommons", str(src), "-o", str(out)]) == 0
    assert [t.deadline for t in load_graph(str(out)).tasks] == [t.deadline for t in g.tasks]
    doc["workflow"]["specification"]["tasks"][3]["deadline"] = "5 parsecs"
    src.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["import", "wfcommons", str(src)]) == 2
    err = capsys.readouterr().err
    assert "$.workflow.specification.tasks[3].deadline" in err and "with a unit" in err

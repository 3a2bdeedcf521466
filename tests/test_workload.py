"""Several models at once: apps.json (Band's workload format), JSON ``apps``, and bad workload files."""

from __future__ import annotations

import json

import pytest

from mapper.cli import main

PROGRAM = """
graph {name} {{
  input x : f32[256, 256]
  a = relu(x)
  b = softmax(a)
  output b
}}
"""


@pytest.fixture
def workdir(tmp_path):
    for name in ("small", "big"):
        (tmp_path / f"{name}.tg").write_text(PROGRAM.format(name=name))
    return tmp_path


def _apps(workdir, models) -> str:
    path = workdir / "apps.json"
    path.write_text(json.dumps({"models": models}))
    return str(path)


def test_apps_json_reports_each_model(workdir):
    apps = _apps(workdir, [{"file": "small.tg", "period_ms": 10, "slo_ms": 5},
                           {"file": "big.tg", "period_ms": 50, "slo_ms": 1e-6}])
    out = workdir / "out.json"
    assert main(["compile", apps, "--platform", "sd8gen3", "--delegate", "greedy", "--json", str(out), "-q"]) == 0
    d = json.loads(out.read_text())
    small, big = d["apps"]["models"]
    assert small["name"] == "small" and small["file"] == "small.tg" and small["slo_met"] and small["misses"] == 0
    assert not big["slo_met"] and big["misses"] == 20  # every request of one second at 50 ms
    assert small["latency"] == max(t["end"] for t in d["tasks"] if t["name"].startswith("small."))
    assert set(d["apps"]["loads"]) == {"kryo_perf", "kryo_prime", "kryo_eff", "adreno", "hexagon"}
    assert {s["device"] for s in d["delegation"]["subgraphs"]} == {"hexagon"}


def test_an_overloaded_processor_misses_every_request(workdir):
    apps = _apps(workdir, [{"file": "small.tg", "period_ms": 1e-6, "slo_ms": 1000}])
    out = workdir / "out.json"
    assert main(["compile", apps, "--platform", "sd8gen3", "--mapper", "heft", "--json", str(out), "-q"]) == 0
    (model,) = json.loads(out.read_text())["apps"]["models"]
    assert not model["slo_met"] and model["misses"] > 0


@pytest.mark.parametrize("doc, where, says", [
    ({"models": []}, "$.models", "expected 1 to 64 models"),
    ({"modles": []}, "$.modles", "unknown key 'modles'"),
    ({"models": [{"file": "small.tg", "period_ms": 10}]}, "$.models[0].slo_ms", "missing key 'slo_ms'"),
    ({"models": [{"file": "small.tg", "period_ms": 0, "slo_ms": 5}]}, "$.models[0].period_ms",
     "expected a positive number of milliseconds"),
    ({"models": [{"file": "nope.tg", "period_ms": 10, "slo_ms": 5}]}, "$.models[0].file", "no such model file"),
    ({"models": [{"file": "small.tg", "period_ms": "10", "slo_ms": 5}]}, "$.models[0].period_ms",
     "expected a number"),
    ({"models": [{"file": "small.tg", "period_ms": 10, "slo_ms": 5, "prio": 1}]}, "$.models[0].prio",
     "unknown key 'prio'"),
])
def test_bad_workload_exits_2_naming_the_place(workdir, capsys, doc, where, says):
    path = workdir / "apps.json"
    path.write_text(json.dumps(doc))
    assert main(["compile", str(path), "--platform", "sd8gen3", "-q"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: {where}" in err and says in err and "Traceback" not in err


def test_invalid_json_exits_2_with_line_and_column(workdir, capsys):
    path = workdir / "apps.json"
    path.write_text('{"models": [\n  {"file": }]}')
    assert main(["compile", str(path), "--platform", "sd8gen3", "-q"]) == 2
    assert "apps.json:2:" in capsys.readouterr().err


def test_mapped_meets_more_slos_than_greedy(workdir):
    """Band's objective: greedy queues both models on the NPU, each invocation 200 us, so the second
    misses a 300 us SLO; mapped moves one off the NPU and meets both."""
    apps = _apps(workdir, [{"file": "small.tg", "period_ms": 10, "slo_ms": 0.3},
                           {"file": "big.tg", "period_ms": 10, "slo_ms": 0.3}])
    met = {}
    for mode in ("greedy", "mapped"):
        out = workdir / f"{mode}.json"
        assert main(["compile", apps, "--platform", "sd8gen3", "--delegate", mode, "--json", str(out), "-q"]) == 0
        d = json.loads(out.read_text())
        met[mode] = sum(m["slo_met"] for m in d["apps"]["models"])
        for m in d["apps"]["models"]:  # the sinks carry the SLO as their deadline
            sinks = [t for t in d["tasks"] if t["name"].startswith(m["name"] + ".")]
            assert m["latency"] == max(t["end"] for t in sinks)
    assert met == {"greedy": 1, "mapped": 2}


def test_merge_gives_each_models_sinks_its_slo(workdir):
    from mapper.frontend.load import load_graph
    from mapper.frontend.workload import merge

    g = merge([("a", load_graph(str(workdir / "small.tg"))), ("b", load_graph(str(workdir / "big.tg")))], "apps",
              [0.001, 0.002])
    due = {t.name: t.deadline for t in g.tasks}
    assert due == {"a.a": None, "a.b": 0.001, "b.a": None, "b.b": 0.002}

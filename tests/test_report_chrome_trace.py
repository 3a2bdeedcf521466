"""Chrome / Perfetto trace: a Trace Event Format schema check."""

from __future__ import annotations

import json
import os
from collections import defaultdict

import pytest
from test_report_common import XSS, Rec, random_result, small_result

from mapper.report import chrome_trace
from mapper.report.chrome_trace import to_chrome_trace_json, write_chrome_trace

REQUIRED = {
    "M": {"name": str, "ph": str, "pid": int, "tid": int, "args": dict},
    "X": {"name": str, "cat": str, "ph": str, "ts": float, "dur": float, "pid": int, "tid": int, "args": dict},
    "s": {"name": str, "cat": str, "ph": str, "id": int, "ts": float, "pid": int, "tid": int},
    "f": {"name": str, "cat": str, "ph": str, "id": int, "ts": float, "pid": int, "tid": int, "bp": str},
}


def check_schema(obj: dict) -> dict:
    """Validate the trace; return {(pid, tid): track name}."""
    assert set(obj) == {"traceEvents", "displayTimeUnit", "otherData"}
    events = obj["traceEvents"]
    names: dict[tuple[int, int], str] = {}
    procs: dict[int, str] = {}
    seen_non_meta = False
    last_ts: dict[tuple[int, int], float] = defaultdict(lambda: -1.0)
    busy_until: dict[tuple[int, int], float] = defaultdict(lambda: 0.0)
    flows: dict[int, dict[str, float]] = defaultdict(dict)
    for ev in events:
        ph = ev["ph"]
        assert ph in REQUIRED, ev
        for key, typ in REQUIRED[ph].items():
            assert key in ev, (key, ev)
            assert isinstance(ev[key], typ) and not isinstance(ev[key], bool), (key, ev)
        if ph == "M":
            assert not seen_non_meta, "metadata comes first"
            assert ev["name"] in ("process_name", "process_sort_index", "thread_name", "thread_sort_index")
            if ev["name"] == "process_name":
                procs[ev["pid"]] = ev["args"]["name"]
            if ev["name"] == "thread_name":
                names[(ev["pid"], ev["tid"])] = ev["args"]["name"]
            continue
        seen_non_meta = True
        track = (ev["pid"], ev["tid"])
        assert track in names and ev["pid"] in procs, f"event on an unnamed track {track}"
        assert ev["ts"] >= 0 and ev["ts"] >= last_ts[track], "timestamps monotonic per track"
        last_ts[track] = ev["ts"]
        if ph == "X":
            assert ev["dur"] >= 0
            if ev["cat"] == "transfer":  # complete events on one thread must nest: transfers never overlap
                assert ev["ts"] >= busy_until[track] - 1e-6, f"overlapping transfers on {names[track]}"
                busy_until[track] = ev["ts"] + ev["dur"]
        else:
            assert ph not in flows[ev["id"]], f"flow {ev['id']} has two {ph!r} events"
            flows[ev["id"]][ph] = ev["ts"]
    for fid, ends in flows.items():  # every flow start has a finish, not before it
        assert set(ends) == {"s", "f"} and ends["s"] <= ends["f"], f"flow {fid}: {ends}"
    return names


def test_schema_small():
    res = small_result(XSS)
    obj = json.loads(to_chrome_trace_json(res))
    names = check_schema(obj)
    evs = obj["traceEvents"]
    procs = [e["args"]["name"] for e in evs if e["name"] == "process_name"]
    assert procs == ["cpu0 (cpu)", "gpu0 (gpu)", "fpga0 (fpga)", "links"]
    assert names[(4, 1)] == "cpu0->gpu0"
    tasks = [e for e in evs if e["ph"] == "X" and e["cat"] == "task"]
    assert sorted(e["args"]["task"] for e in tasks) == list(range(6))
    (qkv,) = [e for e in tasks if e["name"] == "qkv"]
    s = res.schedule.slots[1]
    assert qkv["pid"] == 2 and qkv["ts"] == pytest.approx(s.start * 1e6) and qkv["dur"] == pytest.approx(2000.0)
    assert qkv["args"]["op"] == "matmul" and qkv["args"]["flops"] == 2e9 and qkv["args"]["bytes"] == 3e6
    assert any(e["name"] == XSS for e in tasks)  # JSON carries the raw name; viewers escape it
    # one flow per transfer; the relayed one as X slices on both of its links
    assert sum(1 for e in evs if e["ph"] == "s") == len(res.schedule.transfers)
    relayed = [e for e in evs if e["ph"] == "X" and e["cat"] == "transfer" and e["args"]["edge"] == 2]
    assert sorted(names[(e["pid"], e["tid"])] for e in relayed) == ["cpu0->fpga0", "gpu0->cpu0"]
    assert relayed[0]["args"]["bytes"] == 1e6


def test_flow_endpoints_are_inside_their_slices():
    res = random_result(60, seed=5)
    evs = json.loads(to_chrome_trace_json(res))["traceEvents"]
    slices = defaultdict(list)
    for e in evs:
        if e["ph"] == "X":
            slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for e in evs:
        if e["ph"] in "sf":
            inside = [(a, b) for a, b in slices[(e["pid"], e["tid"])] if a < e["ts"] < b or a == e["ts"] == b]
            assert len(inside) == 1, "a flow end lies inside exactly one slice of its track"


def test_run_track():
    res = small_result()
    run = [Rec(s.task, s.device, s.start, s.end, 1e-3, None) for s in res.schedule.slots]
    obj = json.loads(to_chrome_trace_json(res, run=run))
    names = check_schema(obj)
    assert names[(1, 2)].startswith("run")
    runs = [e for e in obj["traceEvents"] if e.get("cat") == "run"]
    assert len(runs) == 6 and all(e["dur"] == 1000.0 and e["tid"] == 2 for e in runs)


def test_schema_random_and_deterministic(tmp_path):
    check_schema(json.loads(to_chrome_trace_json(random_result(200, seed=7))))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_chrome_trace(random_result(40, seed=8), a)
    write_chrome_trace(random_result(40, seed=8), b)
    assert a.read_bytes() == b.read_bytes()


def test_atomic_on_error(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("x")

    monkeypatch.setattr(chrome_trace, "link_tracks", boom)
    with pytest.raises(RuntimeError):
        write_chrome_trace(small_result(), tmp_path / "t.json")
    assert os.listdir(tmp_path) == []


def test_concurrent_transfers_on_one_link_get_their_own_threads():
    # Jacobi on the DGX: several halo transfers share a link at once
    from pathlib import Path

    from mapper.costing.cost import build_cost_table
    from mapper.frontend.load import load_graph
    from mapper.mapping import get_mapper
    from mapper.platform.loader import load_platform

    root = Path(__file__).resolve().parents[1]
    cost = build_cost_table(load_graph(root / "examples" / "jacobi2d.tg"), load_platform("dgx-a100"))
    obj = json.loads(to_chrome_trace_json(get_mapper("heft").map(cost)))
    names = check_schema(obj)
    assert any(name.endswith(" #2") for name in names.values())

"""Terminal tables and the JSON contract."""

from __future__ import annotations

import json

import pytest
from test_report_common import random_result, small_result

from mapper.engine.schedule import ScheduleOptions
from mapper.errors import MapperError
from mapper.report.json_report import to_json, to_json_dict, write_json
from mapper.report.text import schedule_table, summary_table


def test_summary_table_contents():
    res = small_result()
    out = summary_table(res)
    lines = out.splitlines()
    assert lines[0].split() == ["device", "kind", "tasks", "busy", "util", "peak", "mem"]
    cpu = next(ln for ln in lines if ln.startswith("cpu0"))
    assert cpu.split()[:3] == ["cpu0", "cpu", "3"]
    assert "1.75 ms" in cpu  # embed 1 + norm 0.5 + out 0.25
    assert "makespan" in out and "ms" in out
    assert "lower bound" in out and "gap" in out and "20.0 %" in out
    assert "status       heuristic" in out and "mapper       heft" in out
    assert "options      none (delay model)" in out
    assert "note         hand-built schedule" in out
    assert summary_table(res) == out


def test_summary_table_options_and_objective():
    res = small_result(options=ScheduleOptions(contention=True, memory=True))
    out = summary_table(res)
    assert "contention, memory" in out


def test_schedule_table_start_order():
    res = small_result()
    lines = schedule_table(res).splitlines()
    names = [ln.split()[0] for ln in lines[2:]]
    slots = res.schedule.slots
    order = sorted(range(6), key=lambda t: (slots[t].start, t))
    assert names == [res.schedule.cost.graph.tasks[t].name for t in order]
    assert lines[2].split()[:3] == ["embed", "cpu0", "0"]


def test_json_contract_keys_and_values():
    res = small_result()
    d = to_json_dict(res)
    assert list(d) == [
        "makespan", "mapper", "status", "objective", "objective_value", "lower_bound", "gap",
        "graph", "platform", "options", "tasks", "transfers", "devices", "notes", "response_bound",
    ]  # fmt: skip
    timed = to_json_dict(res, timings=True)
    assert list(timed).index("solve_time") == list(timed).index("gap") + 1
    assert timed["solve_time"] == 0.0125
    s = res.schedule
    assert abs(d["makespan"] - s.makespan) <= 1e-11 * s.makespan
    assert d["status"] in ("optimal", "feasible", "heuristic")
    assert [t["name"] for t in d["tasks"]] == ["embed", "qkv", "attn", "spec", "norm", "out"]
    assert set(d["tasks"][0]) >= {"name", "device", "start", "end"}
    assert d["tasks"][1]["device"] == "gpu0"
    tr = next(t for t in d["transfers"] if t["edge"] == 2)
    assert (tr["src"], tr["dst"], tr["from"], tr["to"]) == ("qkv", "spec", "gpu0", "fpga0")
    assert tr["links"] == ["gpu0->cpu0", "cpu0->fpga0"] and tr["bytes"] == 1e6
    assert {"edge", "src", "dst", "from", "to", "start", "end", "bytes"} <= set(tr)
    assert [x["name"] for x in d["devices"]] == ["cpu0", "gpu0", "fpga0"]
    assert set(d["devices"][0]) == {"name", "kind", "tasks", "busy", "utilisation", "peak_memory"}
    assert 0 <= d["devices"][1]["utilisation"] <= 1


def test_json_byte_identical_and_rounded(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_json(random_result(60, seed=1), a)
    write_json(random_result(60, seed=1), b)
    assert a.read_bytes() == b.read_bytes()
    text = a.read_text()
    assert text.endswith("}\n") and text.startswith('{\n  "makespan": ')
    parsed = json.loads(text)
    for t in parsed["tasks"]:  # at most 12 significant digits
        assert float(f"{t['end']:.12g}") == t["end"]
    assert to_json(random_result(60, seed=1)) == text


def test_streamed_json_file_equals_the_text_and_fails_whole(tmp_path, monkeypatch):
    # write_json streams chunks to the file: the bytes are to_json's, and a failure part way
    # leaves neither the target nor a temporary behind
    from mapper.report import json_text

    res = random_result(300, seed=4)
    path = tmp_path / "r.json"
    monkeypatch.setattr(json_text, "CHUNK_CHARS", 64)
    write_json(res, path)
    assert path.read_bytes() == to_json(res).encode()

    def broken(obj, size=64):
        yield "{"
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(json_text, "chunks", broken)
    with pytest.raises(MapperError, match="space"):
        write_json(res, tmp_path / "s.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_json_none_bounds():
    res = small_result()
    import dataclasses

    res = dataclasses.replace(res, lower_bound=None, gap=None)
    d = json.loads(to_json(res))
    assert d["lower_bound"] is None and d["gap"] is None


def test_write_report_dispatch(tmp_path):
    import pytest

    from mapper.errors import OptionsError
    from mapper.report import format_for, write_report

    res = small_result()
    assert write_report(res, tmp_path / "r.json") == "json"
    assert json.loads((tmp_path / "r.json").read_text())["mapper"] == "heft"
    assert write_report(res, tmp_path / "t.json", "trace") == "trace"
    assert "traceEvents" in json.loads((tmp_path / "t.json").read_text())
    assert write_report(res, tmp_path / "r.txt") == "text"
    assert (tmp_path / "r.txt").read_text().startswith("device")
    assert write_report(res, tmp_path / "r.dot") == "dot"
    assert format_for("x.HTML") == "html"
    with pytest.raises(OptionsError):
        format_for("x.pdf")
    with pytest.raises(OptionsError):
        format_for("x.json", "svg")


def test_zero_length_schedule_all_formats(tmp_path):
    from test_report_common import build_result

    from mapper.report import write_report

    res = build_result([("a", "add"), ("b", "add")], [(0, 1, 0)], [0, 0], [0.0, 0.0])
    for name, fmt in (("r.json", None), ("r.html", None), ("r.dot", None), ("r.txt", None), ("t.json", "trace")):
        write_report(res, tmp_path / name, fmt)
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["makespan"] == 0.0 and [x["utilisation"] for x in d["devices"]] == [0.0, 0.0, 0.0]


def test_compare_table():
    from mapper.report.text import compare_table

    a, b = small_result(), random_result(5, seed=1)
    lines = compare_table([a, b]).splitlines()
    assert lines[0].split()[:4] == ["mapper", "status", "makespan", "vs"]
    assert lines[2].startswith("heft") and "7.57 ms" in lines[2]
    ratio = a.schedule.makespan / b.schedule.makespan
    assert f"{ratio:.3f}x" in lines[2] and "1.000x" in lines[3]

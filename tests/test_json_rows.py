"""The JSON report's rows written as text (mapper.report.json_rows) are the bytes the general
encoder writes for the report's dicts: random schedules, links, deadlines, odd names, and every
example program mapped with HEFT."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_report_common import random_result, small_result

from mapper.engine.schedule import ScheduleOptions
from mapper.mapping.base import MapOptions
from mapper.pipeline import compile_graph
from mapper.report import json_rows, json_text
from mapper.report.json_report import to_json, to_json_dict, write_json

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def general(res, **kw) -> str:
    return json.dumps(to_json_dict(res, **kw), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def same_bytes(res, tmp_path, **kw) -> None:
    want = general(res, **kw)
    assert to_json(res, **kw) == want
    write_json(res, tmp_path / "r.json", **kw)
    assert (tmp_path / "r.json").read_bytes() == want.encode()


@pytest.mark.parametrize("seed", range(4))
def test_random_schedules(tmp_path, seed, monkeypatch):
    monkeypatch.setattr(json_rows, "BATCH", 7)  # rows split over batches and chunks
    monkeypatch.setattr(json_text, "CHUNK_CHARS", 300)
    same_bytes(random_result(40 + 17 * seed, seed=seed), tmp_path, timings=seed % 2 == 1)


def test_links_odd_names_and_empty_lists(tmp_path):
    routed = small_result(options=ScheduleOptions(contention=True))
    assert '"links": [\n' in to_json(routed)
    same_bytes(routed, tmp_path)
    same_bytes(small_result('o\u00e9"\\\n\x01\u2028ut'), tmp_path)  # escapes, non-ASCII kept as is
    (tmp_path / "one.tg").write_text("graph one {\n  task a cost { cpu: 2 ms, gpu: 1 ms }\n}\n")
    one = compile_graph(tmp_path / "one.tg", "cpu-gpu-fpga", mapper="heft").result
    assert one.schedule.transfers == ()
    same_bytes(one, tmp_path)  # "transfers": []


def test_deadlines(tmp_path):
    (tmp_path / "g.tg").write_text("graph g deadline = 8 ms {\n  task a cost { cpu: 2 ms, gpu: 1 ms }\n"
                                   "  task b cost { cpu: 3 ms, gpu: 2 ms } deadline 2 ms\n"
                                   "  task c cost { cpu: 2 ms, gpu: 1 ms }\n  a -> b\n  a -> c\n}\n")
    for objective in ("makespan", "deadline"):
        res = compile_graph(tmp_path / "g.tg", "cpu-gpu-fpga", mapper="heft",
                            mapping=MapOptions(objective=objective)).result
        assert '"lateness"' in to_json(res)
        same_bytes(res, tmp_path)


#: The platform an example names (explicit costs, FPGA streams); dgx-a100 for the others.
PLATFORMS = {"heft_paper": ("heft3", ScheduleOptions()),
             "sensor_fusion": ("cpu-gpu-fpga", ScheduleOptions(streaming=True)),
             "stream_stencil": ("cpu-gpu-fpga", ScheduleOptions(streaming=True, contention=True))}


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.tg")), ids=lambda p: p.stem)
def test_every_example(tmp_path, path):
    plat, opts = PLATFORMS.get(path.stem, ("dgx-a100", ScheduleOptions(contention=True)))
    same_bytes(compile_graph(path, plat, mapper="heft", mapping=MapOptions(schedule=opts)).result, tmp_path)


def test_numbers_are_round_sig_as_json():
    from mapper.report.common import round_sig

    xs = [0, 0.0, -0.0, 1, -3, 2 ** 70, 0.1 + 0.2, 1 / 3, -1e-320, 5e-324, 1.7976931348623157e308, 123456789.123456789,
          float("inf"), float("-inf"), float("nan"), 1e16, 1e-5, 0.000123456789012345]
    num = json_rows.Numbers()
    for x in xs:
        assert num[x] == json.dumps(round_sig(x)), x

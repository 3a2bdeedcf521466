"""The HTML report in a real browser: headless Chromium renders BERT-base
mapped with HEFT on cpu-gpu-fpga, with one task renamed to a script tag.

Skipped when Chromium is not installed.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import struct
import subprocess

import pytest
from test_report_common import XSS
from test_report_html import Dom

from mapper.report.html import write_html

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser")) if p), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars",
)  # fmt: skip


def chromium(args: list[str], user_dir, timeout: float = 60.0) -> str:
    """Run headless Chromium in its own process group; kill the group on timeout."""
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={user_dir}", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        # an alert() dialog (say, from an injected script) blocks headless Chromium
        pytest.fail(f"chromium did not finish in {timeout} s")
    return out


def bert_with_script_name():
    """BERT-base, HEFT, cpu-gpu-fpga; task 5 renamed to a script tag."""
    from mapper.core.graph import TaskGraph
    from mapper.costing.cost import build_cost_table
    from mapper.frontend.load import load_graph
    from mapper.mapping import get_mapper
    from mapper.platform.loader import load_platform

    here = os.path.dirname(os.path.abspath(__file__))
    graph = load_graph(os.path.join(here, "..", "examples", "bert_base.tg"))
    result = get_mapper("heft").map(build_cost_table(graph, load_platform("cpu-gpu-fpga")))
    tasks = list(graph.tasks)
    tasks[5] = dataclasses.replace(tasks[5], name=XSS)
    renamed = TaskGraph(graph.name, tuple(tasks), graph.edges, graph.inputs, graph.outputs)
    cost = dataclasses.replace(result.schedule.cost, graph=renamed)
    return dataclasses.replace(result, schedule=dataclasses.replace(result.schedule, cost=cost))


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser")
    result = bert_with_script_name()
    page = tmp / "report.html"
    write_html(result, page)
    shot = tmp / "shot.png"
    chromium([f"--screenshot={shot}", "--window-size=1400,900", page.as_uri()], tmp / "profile")
    # the test's own probe, last in a copy of the page: did any injected script run before it?
    probe = tmp / "probe.html"
    text = page.read_text(encoding="utf-8")
    assert text.count("<script") == 1  # the page ships one script of its own, and no test hooks
    probe.write_text(text.replace("</body>", "<script>document.body.setAttribute('data-xss', "
                                              "String(!!window.__xss));</script></body>"), encoding="utf-8")
    dom = chromium(["--dump-dom", probe.as_uri()], tmp / "profile")
    return result, shot, dom


def test_screenshot_is_a_real_image(rendered):
    _, shot, _ = rendered
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1400, 900)
    assert len(data) > 20_000  # a blank page compresses to a few KB


def test_scripts_ran_and_no_injection(rendered):
    _, _, dom_text = rendered
    dom = Dom(dom_text)
    (body,) = dom.find("body")
    assert body["attrs"]["data-report-script"] == "ran"  # the page's own script ran ...
    assert body["attrs"]["data-xss"] == "false"  # ... and no injected one before the probe
    assert len(dom.find("script")) == 2  # the page's and the probe's
    assert "&lt;script&gt;window.__xss=1;alert(1)&lt;/script&gt;" in dom_text
    assert any(XSS in el["text"] for el in dom.find("title"))


def test_one_lane_per_device(rendered):
    result, _, dom_text = rendered
    dom = Dom(dom_text)
    (svg,) = dom.find("svg", id="gantt")
    lanes = [el for el in dom.find("g", cls="lane") if "data-device" in el["attrs"]]
    assert [el["attrs"]["data-device"] for el in lanes] == [d.name for d in result.schedule.cost.platform.devices]
    assert len(dom.find("g", cls="task")) == len(result.schedule.slots)

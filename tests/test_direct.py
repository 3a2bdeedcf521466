"""The direct reader (text straight to a graph) makes the graph the parser and lowerer make,
spans included, and the same reports; on any error it declines and the message names the place."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from test_fastparse import program

from mapper.errors import DslError
from mapper.frontend.direct import _Decline, _Reader, direct_graph
from mapper.frontend.lines import MIN_LINES
from mapper.frontend.load import graph_from_text
from mapper.frontend.lowering.program import lower
from mapper.frontend.parse import parse
from mapper.pipeline import compile_graph
from mapper.report.json_report import to_json

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from huge import write_graph, write_platform  # noqa: E402

#: A task's trailing annotations, which the direct reader leaves to the parser.
_EXTRA = re.compile(r" (memory \d(?: MiB| GB)?|colocate c\d|backward)")


def plain(seed: int) -> str:
    """:func:`test_fastparse.program` (varied spellings) without trailing annotations."""
    return _EXTRA.sub("", program(seed))


def old(text: str, file: str = "big.tg"):
    return lower(parse(text, file))


def same(a, b) -> bool:
    return a == b and a.tasks == b.tasks and a.edges == b.edges and [t.span for t in a.tasks] == [
        t.span for t in b.tasks]


@pytest.mark.parametrize("seed", range(8))
def test_direct_graph_equals_the_lowered_program(seed):
    text = plain(seed)
    graph = direct_graph(text, "big.tg")
    assert graph is not None
    assert same(graph, old(text))


@pytest.mark.parametrize("shape", ["layered", "workflow"])
def test_generated_huge_graphs_read_alike(tmp_path, shape):
    path = tmp_path / "g.tg"
    write_graph(str(path), shape, 3000, 5)
    text = path.read_text()
    graph = direct_graph(text, str(path))
    assert graph is not None and same(graph, old(text, str(path)))


def test_examples_read_alike_or_decline():
    """Every shipped example: the direct reader (below its size threshold too) makes the same
    graph or declines."""
    for path in sorted((ROOT / "examples").glob("*.tg")):
        text = path.read_text()
        try:
            graph = _Reader(str(path)).read(text)
        except _Decline:
            continue
        assert same(graph, old(text, str(path))), path


def test_compile_reports_are_byte_identical(tmp_path):
    path, plat = tmp_path / "g.tg", tmp_path / "p.toml"
    write_graph(str(path), "workflow", 1500, 4)
    write_platform(str(plat), 4)
    text = path.read_text()
    assert direct_graph(text, str(path)) is not None
    new = compile_graph(str(path), str(plat), mapper="heft")
    before = compile_graph(old(text, str(path)), str(plat), mapper="heft")
    assert to_json(new.result) == to_json(before.result)


def test_small_programs_and_other_forms_decline():
    assert direct_graph(program(1, tasks=5), "f.tg") is None  # below MIN_LINES
    assert direct_graph(program(3), "f.tg") is None  # trailing memory / colocate / backward
    text = plain(2)
    for change in ("  param X = 3\n", "  y = relu(x)\n", "  task q cost { p1: 1 ms } @p1\n",
                   "  task r work { flops: 1 }\n"):
        lines = text.split("\n")
        assert direct_graph("\n".join([*lines[:5], change, *lines[5:]]), "f.tg") is None, change


def _errors() -> list[tuple[str, str]]:
    """(a line to add after the tasks, a word of the message) for mistakes of each kind."""
    return [("  t1 -> nowhere", "undefined name"),
            ("  t1 -> t1", "itself"),
            ("  task t2 cost { p1: 1 ms }", "already defined"),
            ("  task z cost { p1: 1 ms, p1: 2 ms }", "given twice"),
            ("  task z cost { p1: 1 parsec }", "unknown time unit"),
            ("  task z cost { p1: 1e40 s }", "too large"),
            ("  t5 -> t9 comm 1e-30 s", "resolution"),
            ("  t5 -> t9 bytes 3 parsec", "unknown size unit")]


def test_errors_decline_and_name_their_line():
    lines = ["graph big {"] + [f"  task t{i} cost {{ p1: {i + 1} ms }}" for i in range(MIN_LINES + 10)]
    for extra, word in _errors():
        at = len(lines) + 1
        text = "\n".join([*lines, extra, "}", ""])
        assert direct_graph(text, "f.tg") is None, extra
        with pytest.raises(DslError) as info:
            graph_from_text(text, "f.tg")
        assert word in str(info.value) and f"f.tg:{at}:" in str(info.value), (extra, str(info.value))


def test_a_cycle_declines_and_is_reported_at_its_edge():
    lines = ["graph big {"] + [f"  task t{i} cost {{ p1: 1 ms }}" for i in range(MIN_LINES + 10)]
    lines += ["  t1 -> t2", "  t2 -> t3", "  t3 -> t1", "}"]
    text = "\n".join(lines)
    assert direct_graph(text, "f.tg") is None
    with pytest.raises(DslError, match="cycle") as info:
        graph_from_text(text, "f.tg")
    assert f"f.tg:{len(lines) - 1}:" in str(info.value)


def test_plain_cost_rows_equal_the_priced_ones(tmp_path, monkeypatch):
    """The cost table's rows read off plain explicit costs (mapper.costing.cost._PlainRows) equal
    those priced device by device, on a platform with powers and memories and with a graph whose
    costs name devices in another order, leave one out or name a kind."""
    from mapper.costing import cost as C
    from mapper.platform.loader import parse_platform

    plat = parse_platform('name = "p"\n' + "".join(
        f'[[device]]\nname = "p{d}"\nkind = "cpu"\npower_active_w = {10 + d}\nmemory_gib = {d + 1}\n'
        for d in range(4)))
    lines = ["graph g {"] + [f"  task t{i} cost {{ p0: {i + 1} ms, p1: {i + 2} ms, p2: 3 ms, p3: 4 ms }}"
                             for i in range(MIN_LINES)]
    lines += ["  task a cost { p3: 1 ms, p2: 2 ms, p1: 3 ms, p0: 4 ms }", "  task b cost { p1: 1 ms }",
              "  task c cost { cpu: 2 ms, p0: 1 ms }", "  t1 -> a comm 1 ms", "  a -> b bytes 3 GiB", "}"]
    graph = graph_from_text("\n".join(lines), "g.tg")
    fast = C.build_cost_table(graph, plat)
    assert C._PlainRows(plat, fast.memory_capacity).row(graph.tasks[0], 0.0) is not None
    monkeypatch.setattr(C._PlainRows, "row", lambda self, task, footprint: None)
    slow = C.build_cost_table(graph, plat)
    for field in ("time", "energy", "bound", "area", "reasons", "footprint"):
        assert getattr(fast, field) == getattr(slow, field), field


@pytest.mark.parametrize("form", ["1.5e", "1e", "1.e3", "07", "1.5E+2ms", "2e3ms", "1.5e3 ms", "3 e2 ms", "1..5",
                                  "1.5msx", "1:2", "1.5 ms,", "0x10", "1e-3e2",
                                  "1.5E+2", "2e3", "12.75", "0"])
def test_costs_with_one_layout_and_numbers_of_any_form_read_alike_or_decline(form):
    # the reader keeps a cost's shape by the text around its numbers: lines with the same text and
    # numbers of every spelling, then one line with ``form`` in that layout
    nums = ["1", "2.5", "3e2", "4.0E-1", "5.25e+1", "06"]
    lines = ["graph big {"] + [f"  task t{i} cost {{ p1: {nums[i % 6]} ms, p2: {nums[(i + 1) % 6]}ms }}"
                               for i in range(MIN_LINES + 10)]
    lines += [f"  task odd cost {{ p1: {form} ms, p2: {form}ms }}", "  t1 -> odd", "}"]
    text = "\n".join(lines)
    graph = direct_graph(text, "f.tg")
    try:
        want = old(text, "f.tg")
    except DslError:
        assert graph is None
        return
    assert graph is None or same(graph, want)
    base = direct_graph("\n".join([*lines[:-3], "}"]), "f.tg")
    assert base is not None and same(base, old("\n".join([*lines[:-3], "}"]), "f.tg"))

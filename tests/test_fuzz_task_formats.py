"""Fuzzing ``mapper import dot|gxl`` as the other importers are fuzzed: mutated files end in a
MapperError or in a program that lowers, never in another exception; hostile node names read
back as DSL names."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mapper.errors import MapperError
from mapper.frontend.importers.task_formats import parse_dot, parse_gxl, weighted_dsl
from mapper.frontend.load import graph_from_text

DATA = Path(__file__).resolve().parent / "data" / "weighted"
SOURCES = {"dot": (DATA / "Nodes_7_OutTree.dot").read_text(), "gxl": (DATA / "Nodes_7_OutTree.gxl").read_text()}
SETTINGS = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
CHARS = st.sampled_from(list('<>/="\'{}[];,-#\n\t 0123456789abcWeight') + ["\x00", "\x1b", "\u202e", "\udcff",
                                                                          "&", "<!ENTITY", "->", "--", "1e309"])


@st.composite
def mutated(draw, fmt: str):
    text = list(SOURCES[fmt])
    for _ in range(draw(st.integers(1, 8))):
        i = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["insert", "delete", "copy"]))
        if kind == "insert":
            text[i:i] = [draw(CHARS)]
        elif kind == "delete" and text:
            del text[min(i, len(text) - 1)]
        else:
            j = draw(st.integers(0, len(text)))
            text[i:i] = text[j:j + draw(st.integers(1, 30))]
    return "".join(text)


def _lowers_or_refuses(parse, text: str) -> None:
    try:
        graph_from_text(weighted_dsl(parse(text, "fuzz")), "fuzz.tg")
    except MapperError:
        pass


@SETTINGS
@given(mutated("dot"))
def test_mutated_dot_files_end_cleanly(text):
    _lowers_or_refuses(parse_dot, text)


@SETTINGS
@given(mutated("gxl"))
def test_mutated_gxl_files_end_cleanly(text):
    _lowers_or_refuses(parse_gxl, text)


@pytest.mark.parametrize("name", ["a\nb", 'q"uote', "\x1b[2J", "\u202eevil", "graph", "task", "0", "x" * 300,
                                  "}\ngraph h {", "# comment"])
def test_hostile_node_names_read_back(name):
    quoted = name.replace("\\", "\\\\").replace('"', '\\"')
    g = parse_dot(f'digraph g {{ "{quoted}" [Weight=1]; b [Weight=2]; "{quoted}" -> b [Weight=3]; }}', "n.dot")
    back = graph_from_text(weighted_dsl(g), "n.tg")
    assert len(back.tasks) == 2 and len(back.edges) == 1


def test_a_declared_encoding_is_not_followed():
    text = SOURCES["gxl"].replace('encoding="UTF-8"', 'encoding="no-such-codec"')
    assert len(parse_gxl(text, "e.gxl").nodes) == 7

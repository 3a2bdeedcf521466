"""Graphviz DOT of the task graph: structure, escaping, colours."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from test_report_common import random_result, small_result

from mapper.report.dot import dot_quote, to_dot, write_dot

TOKEN = re.compile(r'"((?:[^"\\]|\\.)*)"|(->|[{}\[\];=,])|([A-Za-z_0-9.#]+)|(\s+)', re.S)


def tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        m = TOKEN.match(text, pos)
        assert m, f"bad DOT at {text[pos:pos + 30]!r}"
        pos = m.end()
        if m.group(1) is not None:
            raw = m.group(1)
            out.append(("str", re.sub(r"\\(.)", lambda k: "\n" if k.group(1) == "n" else k.group(1), raw)))
        elif m.group(2):
            out.append(("punct", m.group(2)))
        elif m.group(3):
            out.append(("id", m.group(3)))
    return out


def parse(text: str) -> dict:
    """Nodes {id: attrs}, edges [(a, b, attrs)], clusters [names] of a flat DOT digraph."""
    toks = tokens(text)
    assert toks[0] == ("id", "digraph") and toks[2] == ("punct", "{") and toks[-1] == ("punct", "}")
    nodes, edges, clusters, depth = {}, [], [], 0
    i = 3

    def attrs(i):
        out = {}
        if i < len(toks) and toks[i] == ("punct", "["):
            i += 1
            while toks[i] != ("punct", "]"):
                key, eq, val = toks[i], toks[i + 1], toks[i + 2]
                assert eq == ("punct", "=")
                out[key[1]] = val[1]
                i += 3
                if toks[i] == ("punct", ","):
                    i += 1
            i += 1
        return out, i

    while i < len(toks) - 1:
        kind, val = toks[i]
        if (kind, val) == ("id", "subgraph"):
            clusters.append(toks[i + 1][1])
            assert toks[i + 2] == ("punct", "{")
            depth += 1
            i += 3
        elif (kind, val) == ("punct", "}"):
            depth -= 1
            i += 1
        elif (kind, val) == ("punct", ";"):
            i += 1
        elif toks[i + 1] == ("punct", "="):  # graph attribute inside a subgraph
            i += 3
        elif toks[i + 1] == ("punct", "->"):
            a, b = val, toks[i + 2][1]
            at, i = attrs(i + 3)
            edges.append((a, b, at))
        else:
            at, i = attrs(i + 1)
            if val not in ("graph", "node", "edge"):
                nodes[val] = at
    assert depth == 0
    return {"nodes": nodes, "edges": edges, "clusters": clusters}


def test_structure_and_colours():
    res = small_result()
    d = parse(to_dot(res))
    g = res.schedule.cost.graph
    tasks = {k: v for k, v in d["nodes"].items() if k.startswith("t")}
    assert sorted(tasks) == sorted(f"t{i}" for i in range(6))
    assert tasks["t1"]["label"] == "qkv\nmatmul"
    assert sorted((a, b) for a, b, _ in d["edges"]) == sorted((f"t{e.src}", f"t{e.dst}") for e in g.edges)
    # colour by device, with a legend naming each device's colour
    assert d["clusters"] == ["cluster_legend"]
    legend = {v["label"]: v["fillcolor"] for k, v in d["nodes"].items() if k.startswith("legend_")}
    assert set(legend) == {"cpu0 (cpu)", "gpu0 (gpu)", "fpga0 (fpga)"}
    devs = res.schedule.cost.platform.devices
    for s in res.schedule.slots:
        dev = devs[s.device]
        assert tasks[f"t{s.task}"]["fillcolor"] == legend[f"{dev.name} ({dev.kind})"]
    # cross-device edges are dashed; the critical path is red
    dashed = {(a, b) for a, b, at in d["edges"] if at.get("style") == "dashed"}
    assert ("t1", "t2") not in dashed and ("t1", "t3") in dashed
    assert tasks["t5"].get("penwidth") == "2.5" and "penwidth" not in tasks["t3"]


def test_escaping_roundtrip():
    name = 'a "quoted" \\ name\nline2 <b>'
    d = parse(to_dot(small_result(name)))
    assert d["nodes"]["t5"]["label"] == name + "\nrelu"
    assert dot_quote('x"y') == '"x\\"y"'


def test_bare_graph_and_deterministic(tmp_path):
    g = small_result().schedule.cost.graph
    d = parse(to_dot(g))
    assert "legend_0" not in d["nodes"] and len(d["edges"]) == len(g.edges)
    a, b = tmp_path / "a.dot", tmp_path / "b.dot"
    write_dot(random_result(30, seed=1), a)
    write_dot(random_result(30, seed=1), b)
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz is not installed")
def test_graphviz_renders(tmp_path):
    path = tmp_path / "g.dot"
    write_dot(small_result('x "<script>" \\'), path)
    out = subprocess.run(["dot", "-Tsvg", str(path)], capture_output=True, text=True, timeout=60, check=True)
    assert "Warning" not in out.stderr, out.stderr  # e.g. a colour graphviz does not know
    assert "<svg" in out.stdout and out.stdout.count("class=\"node\"") == 9  # 6 tasks + 3 legend
    assert "&lt;script&gt;" in out.stdout

"""``mapper import dot|gxl``: weighted task graphs of the optimal-scheduling benchmarks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mapper.cli import main
from mapper.errors import InputError
from mapper.frontend.importers.task_formats import parse_dot, parse_gxl, weighted_dsl

DATA = Path(__file__).parent / "data" / "weighted"
#: Nodes_7_OutTree of the set: optimal makespans 28 on 2 and 22 on 4 processors, as independent
#: optimal schedulers of the set report them.
OPTIMA = {2: 28.0, 4: 22.0}


@pytest.mark.parametrize("fmt", ["dot", "gxl"])
@pytest.mark.parametrize("procs", sorted(OPTIMA))
def test_import_and_prove_the_known_optimum(tmp_path, capsys, fmt, procs):
    tg, toml = tmp_path / "g.tg", tmp_path / "p.toml"
    assert main(["import", fmt, str(DATA / f"Nodes_7_OutTree.{fmt}"), "-o", str(tg), "--procs", str(procs),
                 "--platform-out", str(toml)]) == 0
    assert f"{procs} processors" in capsys.readouterr().out
    assert main(["compile", str(tg), "--platform", str(toml), "-q", "--json", str(tmp_path / "r.json")]) == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["makespan"] == OPTIMA[procs] and doc["status"] == "optimal"


def test_dot_and_gxl_give_the_same_program():
    dot = parse_dot((DATA / "Nodes_7_OutTree.dot").read_text(), "a")
    gxl = parse_gxl((DATA / "Nodes_7_OutTree.gxl").read_text(), "a")
    assert dot.nodes == gxl.nodes and dot.edges == gxl.edges
    assert weighted_dsl(dot) == weighted_dsl(gxl)


def test_dot_syntax_variants():
    g = parse_dot('''strict digraph G { // a comment
        /* block
           comment */
        rankdir = LR; node [shape=circle];
        "a b" [Weight="2.5", label=x]; c [weight=1]
        "a b" -> c -> d [Weight=3]; d [Weight=0];
    }''', "v.dot")
    assert g.nodes == (("a b", 2.5), ("c", 1.0), ("d", 0.0))
    assert g.edges == (("a b", "c", 3.0), ("c", "d", 3.0))
    assert "task a_b cost { cpu: 2.5 }" in weighted_dsl(g)


@pytest.mark.parametrize("text, where, needle", [
    ("graph g { a [Weight=1]; }", (1, 1), "undirected"),
    ("digraph g { a [Weight=1]; b [Weight=2]; a -- b [Weight=1]; }", (1, 43), "undirected edge"),
    ("digraph g {\n a [Weight=1];\n b;\n a -> b [Weight=1];\n}", (3, 2), "node 'b' has no Weight"),
    ("digraph g {\n a [Weight=1];\n a [Weight=2];\n}", (3, 2), "given twice"),
    ("digraph g { a [Weight=1]; a -> a [Weight=1]; }", (1, 27), "itself"),
    ("digraph g { a [Weight=1]; b [Weight=1]; a -> b [Weight=1]; b -> a [Weight=1]; }", (1, 13), "cycle"),
    ("digraph g { a [Weight=-1]; }", (1, 23), "from 0"),
    ("digraph g { a [Weight=1e400]; }", (1, 23), "from 0"),
    ("digraph g { a [Weight=x1]; }", (1, 23), "expected a number"),
    ('digraph g { a [Weight="1]; }', (1, 23), "not closed"),
    ("digraph g { a [Weight=1]; } extra", (1, 29), "after the graph"),
    ("digraph g { a [Weight=1]; ", (1, 26), "expected '}'"),
    ("digraph g { subgraph s { a } }", (1, 13), "subgraphs"),
    ("digraph g { a [Weight=1] \x01 }", (1, 26), "U+0001"),
    ("digraph g { }", (1, 1), "no nodes"),
])
def test_bad_dot(text, where, needle):
    with pytest.raises(InputError) as err:
        parse_dot(text, "bad.dot")
    assert needle in err.value.message and (err.value.span.line, err.value.span.col) == where


@pytest.mark.parametrize("text, line, needle", [
    ("<gxl><graph><node id='a'><attr name='Weight'><int>1</int></attr></node></graph>", 1, "not well-formed"),
    ("<!DOCTYPE x [<!ENTITY a 'aaaa'>]><gxl/>", 1, "entity"),
    ("<gxl><graph edgemode='undirected'/></gxl>", 1, "directed"),
    ("<gxl><graph>\n<node><attr name='Weight'><int>1</int></attr></node></graph></gxl>", 2, "without an id"),
    ("<gxl><graph><node id='a'><attr name='Weight'><int>1</int></attr></node>\n<edge from='a'/></graph></gxl>", 2,
     "without from and to"),
    ("<gxl><graph>\n<node id='a'/></graph></gxl>", 2, "no Weight"),
    ("<gxl><graph><node id='a'>\n<attr name='Weight'><float>-2</float></attr></node></graph></gxl>", 2, "from 0"),
])
def test_bad_gxl(text, line, needle):
    with pytest.raises(InputError) as err:
        parse_gxl(text, "bad.gxl")
    assert needle in err.value.message and err.value.span.line == line


def test_cli_errors_exit_2_and_write_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.dot"
    bad.write_text("digraph g {\n a [Weight=1];\n b;\n}\n")
    out, plat = tmp_path / "o.tg", tmp_path / "p.toml"
    assert main(["import", "dot", str(bad), "-o", str(out), "--procs", "2", "--platform-out", str(plat)]) == 2
    err = capsys.readouterr().err
    assert "bad.dot:3:2" in err and "Traceback" not in err
    assert not out.exists() and not plat.exists()
    good = str(DATA / "Nodes_7_OutTree.dot")
    for argv, needle in ((["--procs", "2"], "go together"), (["--platform-out", str(plat)], "go together"),
                         (["--procs", "0", "--platform-out", str(plat)], "from 1 to")):
        assert main(["import", "dot", good, *argv]) == 2
        assert needle in capsys.readouterr().err
    assert main(["import", "wfcommons", good, "--procs", "2"]) == 2
    assert "--procs applies to dot and gxl" in capsys.readouterr().err


def test_identical_cpus_without_links_share_memory(tmp_path, capsys):
    """A plain edge between two of N identical processors costs nothing (P|prec|Cmax); an explicit
    comm still counts; a GPU or a CPU unlike the others keeps needing a route."""
    from mapper.pipeline import compile_graph
    from mapper.platform.loader import parse_platform

    plat = parse_platform('name = "p"\n[[device]]\nname = "p"\ncount = 2\nkind = "cpu"\n'
                          'peak_gflops = { f64 = 10.0 }\n')
    assert plat.route(0, 1) == () and plat.shares_memory(0, 1)
    prog = ("graph g {\n  task a cost { cpu: 5 }\n  task b cost { cpu: 5 }\n  task c cost { cpu: 5 }\n"
            "  a -> b bytes 1e12\n  a -> c BYTES\n}\n")
    tg = tmp_path / "g.tg"
    tg.write_text(prog.replace("BYTES", "bytes 1e12"))
    r = compile_graph(str(tg), plat)
    assert r.result.schedule.makespan == 10.0  # b and c side by side after a: data moves for free
    tg.write_text(prog.replace("bytes 1e12", "comm 7").replace("BYTES", "comm 7"))
    assert compile_graph(str(tg), plat).result.schedule.makespan == 15.0  # a transfer takes 7: one CPU
    other = parse_platform('name = "p"\n[[device]]\nname = "p0"\nkind = "cpu"\npeak_gflops = { f64 = 10.0 }\n'
                           '[[device]]\nname = "p1"\nkind = "cpu"\npeak_gflops = { f64 = 20.0 }\n')
    assert other.route(0, 1) is None

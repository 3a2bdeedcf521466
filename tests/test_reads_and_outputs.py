"""Outputs against every file a run reads, outputs written all or none, a Constant's external
data never read from the working folder, and the smaller round-4 classes (issue: hostile
input round 4, part 2). Sizes of the text imports are timed in benchmarks/task_formats_scale.py."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from mapper.cli import main
from mapper.core import files
from mapper.errors import InputError, OptionsError, format_error
from mapper.frontend.importers.task_formats import MAX_STRING, parse_dot, parse_gxl

HOSTILE = Path(__file__).resolve().parent / "data" / "hostile"
WEIGHTED = Path(__file__).resolve().parent / "data" / "weighted"


def _victim(tmp_path: Path) -> tuple[Path, Path]:
    part = tmp_path / "inc_part.tg"
    part.write_text("param N = 64\n")
    main_tg = tmp_path / "inc_main.tg"
    main_tg.write_text('include "inc_part.tg"\ngraph g {\n  input x : f32[N, N]\n  y = relu(x)\n  output y\n}\n')
    return main_tg, part


@pytest.mark.parametrize("command", ["compile", "run"])
@pytest.mark.parametrize("option", ["--json", "--html", "--trace"])
def test_an_output_over_an_included_file_is_refused(tmp_path, capsys, command, option):
    main_tg, part = _victim(tmp_path)
    before = part.read_bytes()
    extra = ["-q"] if command == "compile" else ["--repeats", "1", "--backend", "numpy"]
    good = tmp_path / "good.json"
    others = ["--json", str(good)] if option != "--json" else []
    assert main([command, str(main_tg), "--platform", "dev-vm", "--mapper", "heft", *extra, *others,
                 option, str(part)]) == 2
    err = capsys.readouterr().err
    assert option in err and repr(str(part)) in err and "this command reads" in err
    assert part.read_bytes() == before and not good.exists()  # nothing written, the good output neither
    assert not list(tmp_path.glob(".*.tmp"))


def test_an_output_over_an_included_file_by_another_name_names_both(tmp_path, capsys):
    main_tg, part = _victim(tmp_path)
    (tmp_path / "alias").symlink_to(tmp_path, target_is_directory=True)
    other = tmp_path / "alias" / "inc_part.tg"
    assert main(["compile", str(main_tg), "--platform", "dev-vm", "--mapper", "heft", "-q", "--json",
                 str(other)]) == 2
    err = capsys.readouterr().err
    assert str(other) in err and "the same file as" in err and "inc_part.tg" in err


def test_an_output_over_a_cluster_node_file_is_refused(tmp_path, capsys):
    node = tmp_path / "r4b_node.toml"
    node.write_text((HOSTILE / "r4b_node.toml").read_text())
    cluster = tmp_path / "c.toml"
    cluster.write_text((HOSTILE / "r4b_cluster.toml").read_text())
    before = node.read_bytes()
    assert main(["compile", str(HOSTILE / "ok.tg"), "--platform", str(cluster), "--mapper", "heft", "-q",
                 "--json", str(node)]) == 2
    assert "this command reads" in capsys.readouterr().err and node.read_bytes() == before


def test_an_output_over_external_data_is_refused(tmp_path, capsys):
    model = tmp_path / "m.onnx"
    model.write_bytes((HOSTILE / "onnx_ext_ok.onnx").read_bytes())
    data = tmp_path / "onnx_ext_data.bin"
    data.write_bytes((HOSTILE / "onnx_ext_data.bin").read_bytes())
    before = data.read_bytes()
    for argv in (["compile", str(model), "--platform", "dev-vm", "--mapper", "heft", "-q", "--json", str(data)],
                 ["import", "onnx", str(model), "-o", str(data)]):
        assert main(argv) == 2
        assert "this command reads" in capsys.readouterr().err and data.read_bytes() == before


def test_the_record_lists_what_was_read(tmp_path):
    main_tg, part = _victim(tmp_path)
    from mapper.frontend.load import load_graph

    with files.recording() as record:
        load_graph(str(main_tg))
        assert files.files_read() == (str(main_tg), str(part))
    assert record and files.files_read() == ()  # nothing recorded outside a command
    load_graph(str(main_tg))
    assert files.files_read() == ()


def _full_disk_on(monkeypatch, nth: int) -> None:
    """Make the ``nth`` output file written raise ENOSPC, as a file system that fills."""
    real = os.fdopen
    count = {"n": 0}

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    def fdopen(fd, mode="r", *args, **kwargs):
        fh = real(fd, mode, *args, **kwargs)
        if mode == "wb":
            count["n"] += 1
            if count["n"] == nth:
                return Full(fh)
        return fh

    monkeypatch.setattr(os, "fdopen", fdopen)


def test_a_pair_of_outputs_is_all_or_none_on_a_full_disk(tmp_path, capsys, monkeypatch):
    out, plat = tmp_path / "a.tg", tmp_path / "p.toml"
    _full_disk_on(monkeypatch, 2)
    assert main(["import", "gxl", str(WEIGHTED / "Nodes_7_OutTree.gxl"), "-o", str(out), "--procs", "2",
                 "--platform-out", str(plat)]) == 2
    assert "No space left" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    plat.write_text("kept\n")  # an existing output stays as it was
    _full_disk_on(monkeypatch, 2)
    assert main(["compile", str(HOSTILE / "ok.tg"), "--platform", "dev-vm", "--mapper", "heft", "-q",
                 "--json", str(out), "--html", str(plat)]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.toml"] and plat.read_text() == "kept\n"


def test_serve_writes_its_json_and_html_all_or_none_on_a_full_disk(tmp_path, capsys, monkeypatch):
    out, page = tmp_path / "s.json", tmp_path / "s.html"
    model = Path(__file__).resolve().parents[1] / "examples" / "llama.tg"
    _full_disk_on(monkeypatch, 2)
    assert main(["serve", str(model), "--platform", "dgx-a100", "--param", "LAYERS=2", "--workload",
                 "isl=64,osl=8,requests=4", "--rate", "inf", "-q", "--json", str(out), "--html", str(page)]) == 2
    assert "No space left" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_failed_rename_puts_back_what_was_replaced(tmp_path, monkeypatch):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text("old a\n")
    real = os.replace
    calls = {"n": 0}

    def replace(src, dst):
        if str(dst) == str(b):
            calls["n"] += 1
            raise OSError(errno.EIO, "Input/output error")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError):
        with files.outputs_together({"--json": str(a), "--html": str(b)}):
            files.atomic_write(str(a), "new a\n")
            files.atomic_write(str(b), "new b\n")
    assert calls["n"] == 1 and a.read_text() == "old a\n" and sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_outputs_together_writes_standard_output_last(tmp_path, capsys):
    with files.outputs_together({"-o": "-"}):
        files.atomic_write("-", "text\n")
        assert capsys.readouterr().out == ""
    assert capsys.readouterr().out == "text\n"


AUDIT = """
import sys
opened = []
def hook(event, args):
    if event == "open" and args and isinstance(args[0], (str, bytes)) and "secret.bin" in str(args[0]):
        opened.append(str(args[0]))
sys.addaudithook(hook)
from mapper.cli import main
code = main(["import", "onnx", sys.argv[1]])
print("OPENED", opened, file=sys.stderr)
sys.exit(code)
"""


def _constant_model(folder: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper

    c = TensorProto(name="c", data_type=TensorProto.FLOAT, dims=[2, 4], data_location=TensorProto.EXTERNAL)
    c.external_data.add(key="location", value="secret.bin")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    nodes = [helper.make_node("Constant", [], ["c"], value=c), helper.make_node("Add", ["x", "c"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    folder.mkdir()
    onnx.save(model, str(folder / "ext_const_rel.onnx"))
    return folder / "ext_const_rel.onnx"


def _audited(model: Path, cwd: Path) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-c", AUDIT, str(model)], cwd=cwd, capture_output=True, text=True,
                          timeout=120)
    return proc.returncode, proc.stderr


def test_a_constants_external_data_is_never_read_from_the_working_folder(tmp_path):
    model = _constant_model(tmp_path / "m")
    (tmp_path / "secret.bin").write_bytes(np.arange(8, dtype=np.float32).tobytes())
    code, err = _audited(model, tmp_path)
    assert code == 2 and "not in the model's folder" in err and "OPENED []" in err, err
    assert "Traceback" not in err


def test_a_constants_external_data_beside_the_model_is_read_from_there(tmp_path):
    model = _constant_model(tmp_path / "m")
    (tmp_path / "secret.bin").write_bytes(b"\xff" * 32)  # never this one
    (tmp_path / "m" / "secret.bin").write_bytes(np.arange(8, dtype=np.float32).tobytes())
    code, err = _audited(model, tmp_path)
    opened = err[err.index("OPENED"):]
    assert code == 0 and str(tmp_path / "m" / "secret.bin") in opened
    assert f"'{tmp_path / 'secret.bin'}'" not in opened and "'secret.bin'" not in opened


def test_a_segmented_initializer_is_input_error(capsys):
    assert main(["import", "onnx", str(HOSTILE / "onnx_r4b_segment.onnx")]) == 2
    err = capsys.readouterr().err
    assert "segments" in err and "bug" not in err


@pytest.mark.parametrize("value, ok", [("1e300", False), ("9.3e18", False), ("-1e19", False), ("0.5", False),
                                       ("16000", True), ("-9e18", True)])
def test_input_values_are_range_checked(capsys, value, ok):
    code = main(["import", "onnx", str(HOSTILE / "onnx_r4b_int_mode.onnx"), "--input-value", f"sr={value}"])
    err = capsys.readouterr().err
    assert code == (0 if ok else 2), err
    assert "internal error" not in err


def test_a_float_input_value_beyond_float32_is_refused(tmp_path, capsys):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    model = helper.make_model(helper.make_graph([helper.make_node("Add", ["x", "s"], ["y"])], "g", [x, s], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(tmp_path / "f.onnx"))
    assert main(["import", "onnx", str(tmp_path / "f.onnx"), "--input-value", "s=1e300"]) == 2
    assert "out of the range" in capsys.readouterr().err


def test_no_cpus_gives_no_cpu_costs_and_refuses_a_node_no_accelerator_holds(tmp_path, capsys):
    from mapper.frontend.importers.dnn_partitioning import parse_instance

    doc = json.loads((HOSTILE / "dp_r4b_too_big_no_cpus.json").read_text())
    with pytest.raises(InputError) as err:
        parse_instance(json.dumps(doc), "i.json")
    assert "$.nodes[0].size" in format_error(err.value) and "maxCPUs is 0" in err.value.message
    doc["nodes"][0]["size"] = 1
    (tmp_path / "i.json").write_text(json.dumps(doc))
    out, plat = tmp_path / "i.tg", tmp_path / "i.toml"
    assert main(["import", "dnn-partitioning", str(tmp_path / "i.json"), "-o", str(out), "--platform-out",
                 str(plat)]) == 0
    assert "cpu" not in out.read_text().split("graph", 1)[1]
    assert main(["compile", str(out), "--platform", str(plat), "--objective", "throughput", "-q"]) == 0


def test_subnormal_weights_are_refused_without_a_warning(tmp_path, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["import", "gxl", str(HOSTILE / "gxl_r4b_denormal.gxl")]) == 2
        tg = tmp_path / "d.tg"
        tg.write_text("graph d {\n  task a cost { cpu: 1e-320 }\n  task b cost { cpu: 1 }\n  a -> b comm 1e-320\n}\n")
        assert main(["compile", str(tg), "--platform", "dev-vm", "-q"]) == 2
    err = capsys.readouterr().err
    assert "RuntimeWarning" not in err and "at least 1e-15" in err


def test_the_load_bound_of_times_far_apart_warns_nothing():
    from mapper.costing.cost import build_cost_table
    from mapper.frontend.load import graph_from_text
    from mapper.mapping.bounds import fractional_load_bound
    from mapper.platform.loader import parse_platform

    plat = parse_platform('name = "p"\n[[device]]\nname = "p"\ncount = 2\nkind = "cpu"\n')
    g = graph_from_text("graph g {\n  task a cost { cpu: 1e-15 }\n  task b cost { cpu: 1e12 }\n}\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bound = fractional_load_bound(build_cost_table(g, plat))
    assert 0 < bound <= 1e12


@pytest.mark.parametrize("weight", ["１２", "١٢", "1_000", "0x10", "inf", "nan", "+1", " 1e-320"])
def test_gxl_weights_take_ascii_decimal_numbers_only(weight):
    text = f'<gxl><graph id="g"><node id="a"><attr name="Weight"><float>{weight}</float></attr></node></graph></gxl>'
    with pytest.raises(InputError):
        parse_gxl(text, "w.gxl")


@pytest.mark.parametrize("text, needle", [
    ('<gxl><graph id="a"><node id="n"><attr name="Weight"><int>1</int></attr></node></graph>'
     '<graph id="b"><node id="m"><attr name="Weight"><int>1</int></attr></node></graph></gxl>', "second <graph>"),
    ('<gxl><graph id="g"><node id="n"><attr name="Weight"><int>1</int></attr>'
     '<attr name="weight"><int>2</int></attr></node></graph></gxl>', "given twice"),
    ('<gxl><graph id="g"><node id="n"><attr name="Weight"><int>1</int><int>2</int></attr></node></graph></gxl>',
     "more than one value"),
    ('<gxl><graph id="g"><node id="n"><attr name="Weight"><int>' + "1" * (MAX_STRING + 1) + "</int></attr>"
     "</node></graph></gxl>", f"{MAX_STRING:,} characters"),
    ('<gxl><graph id="g"><node id="n"><attr name="Weight"><int>1\n\n2</int></attr></node></graph></gxl>',
     "ASCII digits"),
    ('<gxl><graph id="g"><node id="' + "n" * (MAX_STRING + 1) + '"/></graph></gxl>', f"{MAX_STRING:,}"),
])
def test_bad_gxl_structure(text, needle):
    with pytest.raises(InputError) as err:
        parse_gxl(text, "g.gxl")
    assert needle in err.value.message


@pytest.mark.parametrize("text, needle", [
    ("digraph g { a [Weight=1, weight=2]; }", "given twice"),
    ('digraph g { a [Weight=1, label="' + "x" * (MAX_STRING + 1) + '"]; }', f"limit is {MAX_STRING:,}"),
    ("digraph g { " + "n" * (MAX_STRING + 1) + " [Weight=1]; }", f"limit is {MAX_STRING:,}"),
    ('digraph g { a [Weight="１"]; }', "ASCII digits"),
])
def test_bad_dot_limits(text, needle):
    with pytest.raises(InputError) as err:
        parse_dot(text, "g.dot")
    assert needle in err.value.message


def test_node_and_edge_counts_are_limited(monkeypatch):
    from mapper.frontend.importers import task_formats

    monkeypatch.setattr(task_formats, "MAX_NODES", 3)
    with pytest.raises(InputError) as err:
        parse_dot("digraph g { a [Weight=1]; b [Weight=1]; c [Weight=1]; d [Weight=1]; }")
    assert "more than 3 nodes" in err.value.message
    monkeypatch.setattr(task_formats, "MAX_EDGES", 1)
    with pytest.raises(InputError) as err:
        parse_gxl('<gxl><graph id="g"><edge from="a" to="b"/><edge from="b" to="c"/></graph></gxl>')
    assert "more than 1 edges" in err.value.message


def test_dot_strings_keep_their_escapes():
    g = parse_dot(r'digraph g { "a \"q\" \\" [Weight=1]; "b\n" [Weight=2]; "a \"q\" \\" -> "b\n" [Weight=3]; }')
    assert [n for n, _ in g.nodes] == ['a "q" \\\\', "b\\n"]


def test_an_output_refused_by_the_record_is_an_options_error(tmp_path):
    src = tmp_path / "in.tg"
    src.write_text("x")
    with files.recording():
        files.read_text(src)
        with pytest.raises(OptionsError) as err:
            files.atomic_write(str(src), "y", "--json")
    assert err.value.obj == "--json" and src.read_text() == "x"


def test_a_weight_wrapped_in_megabytes_of_white_space_is_read():
    text = ('<gxl><graph id="g"><node id="n"><attr name="Weight"><int>' + "\n" * 2_000_000 + "3" + " \n" * 1000
            + "</int></attr></node></graph></gxl>")
    assert parse_gxl(text, "w.gxl").nodes == (("n", 3.0),)


def test_a_subnormal_latency_is_refused_at_its_json_path():
    from mapper.frontend.importers.dnn_partitioning import parse_instance

    doc = json.loads((HOSTILE / "dp_no_cpus.json").read_text()) | {"maxCPUs": 1}
    doc["nodes"][0]["cpuLatency"] = 1e-320
    with pytest.raises(InputError) as err:
        parse_instance(json.dumps(doc), "i.json")
    assert "$.nodes[0].cpuLatency" in format_error(err.value) and "at least 1e-12 ms" in err.value.message


def _tree_dot(n: int, head: str = 'digraph "t" {', node: str = "\tn{i}\t [Weight={w}];",
              edge: str = "\tn{a} -> n{b}\t [Weight={w}];") -> str:
    lines = [head]
    for i in range(n):
        lines.append(node.format(i=i, w=i % 7 + 1))
        if i:
            lines.append(edge.format(a=(i - 1) // 2, b=i, w=i % 5))
    return "\n".join(lines + ["}", ""])


@pytest.mark.parametrize("text", [
    _tree_dot(300),
    _tree_dot(300, head="strict digraph g{", node='  "{i}" [weight="{w}.5"]', edge="{a}->{b}[WEIGHT = {w}e0];"),
    _tree_dot(300, head="digraph {\r", node="n{i} [Weight={w}];\r"),
])
def test_the_line_path_of_dot_reads_what_the_token_path_reads(text):
    from mapper.frontend.importers.task_formats import _DotParser, _plain_dot

    fast = _plain_dot(text, "t.dot")
    assert fast is not None and fast == _DotParser(text, "t.dot").parse()


@pytest.mark.parametrize("change, needle", [
    (lambda t: t.replace("n7\t [Weight=1]", "n7\t [Weight=x]"), "expected a number"),
    (lambda t: t.replace("n7\t [Weight=1]", "n7\t [Weight=1, label=x]"), None),
    (lambda t: t.replace("n7\t [Weight=1]", "node\t [Weight=1]"), "has no Weight"),
    (lambda t: t.replace("n7\t [Weight=1];", "n7\t [Weight=1];\n\tn7 [Weight=2];"), "given twice"),
    (lambda t: t.replace("n3 -> n7", "n7 -> n3 -> n7"), "cycle"),
    (lambda t: t + "extra", "after the graph"),
])
def test_the_line_path_of_dot_leaves_anything_else_to_the_token_path(change, needle):
    from mapper.frontend.importers.task_formats import _DotParser

    text = change(_tree_dot(300))
    try:
        want = _DotParser(text, "t.dot").parse()
    except InputError as err:
        with pytest.raises(InputError) as got:
            parse_dot(text, "t.dot")
        assert (got.value.message, got.value.span) == (err.message, err.span) and needle in err.message
    else:
        assert needle is None and parse_dot(text, "t.dot") == want

"""Semantic errors: message, span, source line and hint, and the CLI's exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from mapper.cli import main
from mapper.errors import DslError, format_error
from mapper.frontend.load import graph_from_text
from mapper.frontend.lowering.program import MAX_TASKS, OP_TASK_WEIGHT, TASK_LIMITS


def err_of(text: str, file: str = "e.tg") -> DslError:
    with pytest.raises(DslError) as info:
        graph_from_text(text, file)
    err = info.value
    assert err.span is not None and err.span.file
    assert err.source_line is not None
    return err


def where(err: DslError) -> tuple[int, int]:
    return err.span.line, err.span.col


G = "graph g {\n  input x : f32[4, 8]\n  input v : f32[8]\n%s\n}"


@pytest.mark.parametrize("body, message, pos, hint", [
    ("  y = rleu(x)", "unknown op or template 'rleu'", (4, 7), "did you mean 'relu'?"),
    ("  y = matmul(x, x)", "inner dimensions differ", (4, 17), None),
    ("  y = relu(z)", "undefined name 'z'", (4, 12), None),
    ("  y = relu(xx)", "undefined name 'xx'", (4, 12), "did you mean 'x'?"),
    ("  y = softmax(x, axsi = 0)", "unknown attribute 'axsi'", (4, 18), "did you mean 'axis'?"),
    ("  y = softmax(x, axis = 1.5)", "axis must be an integer", (4, 18), None),
    ("  y = softmax(x, axis = 5)", "out of range", (4, 18), None),
    ("  y = attention(x, heads = 2)", "missing required attribute 'seq'", (4, 7), None),
    ("  y = softmax(x, axis = 0, axis = 1)", "attribute 'axis' is given twice", (4, 28), None),
    ("  y = relu(x, v)", "takes 1 operand", (4, 15), None),
    ("  for i in 0..2.5 { }", "a loop bound must be an integer, got 2.5", (4, 15), None),
    ("  y = relu(x)\n  y = relu(x)", "'y' is already defined", (5, 3), "first defined at e.tg:4:3"),
    ("  x = relu(v)", "'x' is already defined", (4, 3), None),
    ("  input w : f31[2]", "unknown dtype 'f31'", (4, 13), "did you mean 'f32'?"),
    ("  input w : f32[0]", "a dimension must be >= 1", (4, 17), None),
    ("  input w : f32[7 / 2]", "division not exact: 7 / 2", (4, 17), "use // to round down"),
    ("  input w : f32[7 // 0]", "division by zero", (4, 17), None),
    ("  input w : f32[2 ** 70]", "integer too large", (4, 17), None),
    ("  input w : f32[2 ** -1]", "negative integer exponent", (4, 17), None),
    ("  input w : f32[N]", "undefined name 'N'", (4, 17), None),
    ("  input w : f32[4] csr(nnz = 2)", "csr tensor must be 2-D", (4, 13), None),
    ("  input w : f32[4, 4] csr(nz = 2)", "unknown csr argument 'nz'", (4, 27), None),
    ("  input w : f32[4, 4] csr(nnz = 17)", "exceeds the matrix size", (4, 27), None),
    ("  y = relu(x) @gpu @!gpu", "'gpu' is both allowed and denied", (4, 15), None),
    ("  y = relu(x) parallel 1.5", "parallel must be between 0 and 1", (4, 24), None),
    ("  y = relu(x) streamable 0", "streamable must be >= 1", (4, 26), None),
    ("  y = relu(x) parallel 0.5 parallel 0.5", "'parallel' is given twice", (4, 28), None),
    ("  y = relu(x) work { flop 3 }", "unknown work key 'flop'", (4, 22), "did you mean 'flops'?"),
    ("  y = relu(x) work { bytes 3 MIB }", "unknown size unit 'MIB'", (4, 30), "did you mean 'MiB'?"),
    ("  y = relu(x) work { flops -3 }", "flops must be >= 0", (4, 28), None),
    ("  task t cost { p1: 3 mss }", "unknown time unit 'mss'", (4, 23), "did you mean 'ms'?"),
    ("  task t cost { p1: 3, p1: 4 }", "device 'p1' is given twice", (4, 24), None),
    ("  task t parallel 0.5", "task 't' needs a cost { ... } or a work { ... }", (4, 3), None),
    ("  task t work { flops 1 }\n  y = relu(t)", "'t' is a task without an output tensor", (5, 12), None),
    ("  y = relu(x)\n  x -> y", "'x' is a graph input, not a task", (5, 3), None),
    ("  y = relu(x)\n  z = relu(y)\n  y -> z", "duplicates the data dependency", (6, 3), None),
    ("  task a work { flops 1 }\n  task b work { flops 1 }\n  a -> b\n  a -> b comm 3",
     "duplicate edge 'a -> b'", (7, 3), "first at e.tg:6:3"),
    ("  task a work { flops 1 }\n  task b work { flops 1 }\n  task c work { flops 1 }\n"
     "  a -> b\n  b -> c\n  c -> a\n  c -> b",
     "edge 'c -> a' makes a cycle: a -> b -> c -> a", (9, 3), None),
    ("  task a work { flops 1 }\n  a -> a", "cannot depend on itself", (5, 3), None),
    ("  y = relu(x)\n  output y, y", "'y' is already an output", (5, 13), None),
    ("  output x", "'x' is a graph input, not a task's output", (4, 10), None),
    ("  return x", "'return' outside a template", (4, 3), None),
    ("  param Q = 3", "'param' belongs at the top level", (4, 3), None),
    ("  y = relu(x)\n  for y in 0..2 { }", "loop variable 'y' has the name of a tensor", (5, 7), None),
    ("  for i in 0..2 { for i in 0..2 { } }", "hides a param or an outer loop variable", (4, 23), None),
    ("  y{-1} = relu(x)", "a name index must be >= 0", (4, 5), None),
    ("  y = relu(x) @gpu @gpu", "'gpu' appears twice", (4, 20), None),
    ("  for i in 0..10**12 { y{i} = relu(x) }", "too large", (4, 3), None),
    ("  for i in 0..1000000 { for j in 0..1000000 { y{i}{j} = relu(x) } }", "too large", (4, 3), None),
])
def test_semantic_errors(body, message, pos, hint):
    err = err_of(G % body)
    assert message in err.message, err.message
    assert where(err) == pos, format_error(err)
    if hint is not None:
        assert err.hint is not None and hint in err.hint
    assert format_error(err).startswith(f"e.tg:{pos[0]}:{pos[1]}: error: ")


def test_shape_mismatch_shows_both_shapes():
    err = err_of(G % "  y = add(x, v)\n  z = matmul(x, y)")
    assert "f32[4, 8]" in err.message and "inner dimensions differ" in err.message


def test_template_errors():
    t = "template blk(h, k = 2) {\n  y = relu(h)\n  return y\n}\n"
    assert "takes 1 tensor argument, got 2" in err_of(t + G % "  y = blk(x, v)").message
    e = err_of(t + G % "  y = blk(x, kk = 3)")
    assert "no value parameter 'kk'" in e.message and "did you mean 'k'" in e.hint
    e = err_of(t + G % "  y = blk(x) work { flops 1 }")
    assert "only placement annotations" in e.message
    e = err_of("template a(x) {\n  y = b(x)\n  return y\n}\ntemplate b(x) {\n  y = a(x)\n  return y\n}\n"
               + G % "  y = a(x)")
    assert "recursive template: a -> b -> a" in e.message and e.span.line == 6
    e = err_of("template a(x) {\n  y = relu(z)\n  return y\n}\n" + G % "  z = relu(x)\n  y = a(x)")
    assert e.span.line == 2 and "undefined name 'z'" in e.message
    e = err_of("template a(x) {\n  y = relu(x)\n}\n" + G % "")
    assert "must end with 'return NAME'" in e.message
    e = err_of("template a(x) {\n  input q : f32[2]\n  return x\n}\n" + G % "  y = a(x)")
    assert "'input' inside a template" in e.message
    e = err_of("template relu(x) {\n  return x\n}\n" + G % "")
    assert "has the name of an op" in e.message
    e = err_of(G % "  template t(x) { return x }\n  for i in 0..1 { template u(x) { return x } }")
    assert "top level or directly in the graph" in e.message


def test_undefined_name_inside_template_says_why():
    e = err_of("template a(h) {\n  y = relu(q)\n  return y\n}\n" + G % "  y = a(x)")
    assert "undefined name 'q'" in e.message and "only its parameters" in e.hint


def test_program_level_errors():
    assert "no graph" in err_of("param A = 1\n").message
    assert "empty graph: 'g' has no tasks" in err_of("graph g {\n  input x : f32[2]\n}").message
    e = err_of("graph g {\n  task t work { flops 1 }\n}\ngraph h {\n  task t work { flops 1 }\n}")
    assert "a second graph 'h'" in e.message and e.span.line == 4
    e = err_of("param A = 1\nparam A = 2\ngraph g { task t work { flops 1 } }")
    assert "param 'A' is already defined" in e.message and where(e) == (2, 7)


def test_include_errors(tmp_path):
    (tmp_path / "a.tg").write_text('include "b.tg"\n')
    (tmp_path / "b.tg").write_text('param X = 1\ninclude "a.tg"\n')
    main_file = tmp_path / "main.tg"
    main_file.write_text('include "a.tg"\ngraph g { task t work { flops 1 } }\n')
    e = err_of(main_file.read_text(), str(main_file))
    assert "include cycle: a.tg -> b.tg -> a.tg" in e.message
    assert e.span.file.endswith("b.tg") and e.span.line == 2
    e = err_of('include "missing.tg"\ngraph g { task t work { flops 1 } }', str(tmp_path / "m.tg"))
    assert "cannot read included file" in e.message and "missing.tg" in e.message


def test_too_large_fails_fast():
    t0 = time.perf_counter()
    e = err_of(G % "  for i in 0..10**12 { for j in 0..10 { } }")
    assert "too large" in e.message
    e = err_of(f"param N = {MAX_TASKS // OP_TASK_WEIGHT + 1}\n" + G % "  for i in 0..N { y{i} = relu(x) }")
    assert "too large" in e.message and TASK_LIMITS in e.message
    e = err_of(f"param N = {MAX_TASKS + 1}\n" + G % "  for i in 0..N { task t{i} cost { cpu0: 1 ms } }")
    assert "too large" in e.message and f"{MAX_TASKS:,} with explicit costs" in e.message
    assert time.perf_counter() - t0 < 5


def test_exponential_template_nesting_fails_fast():
    levels = ["template t0(x) {\n  y = relu(x)\n  return y\n}"]
    for i in range(1, 31):
        levels.append(f"template t{i}(x) {{\n  a = t{i - 1}(x)\n  b = t{i - 1}(a)\n  return b\n}}")
    t0 = time.perf_counter()
    e = err_of("\n".join(levels) + "\n" + G % "  y = t30(x)")
    assert "too large: this call makes more tasks" in e.message and e.span.line == 158  # the graph's call
    assert time.perf_counter() - t0 < 5


def test_deep_expression_is_an_error_not_a_crash():
    deep = "1" + " + 1" * 20000
    err = err_of(f"param A = {deep}\ngraph g {{ task t work {{ flops A }} }}")
    assert "nested too deeply" in err.message


def test_cli_check_bad_input_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.tg"
    bad.write_text("graph g {\n  input x : f32[4]\n  y = rleu(x)\n}\n")
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3:7: error: unknown op or template 'rleu'" in err
    assert "      y = rleu(x)\n          ^~~~" in err and "hint: did you mean 'relu'?" in err
    assert "Traceback" not in err
    assert main(["check", str(tmp_path / "none.tg")]) == 2
    assert "none.tg" in capsys.readouterr().err


def test_cli_check_subprocess_no_traceback(tmp_path):
    bad = tmp_path / "bad.tg"
    bad.write_text("graph g { y = relu(x }\n")
    r = subprocess.run([sys.executable, "-m", "mapper", "check", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr and ":1:22: error: unexpected '}'" in r.stderr


def test_cli_check_summary(tmp_path, capsys):
    f = tmp_path / "ok.tg"
    f.write_text("graph g {\n  input x : f32[64, 64]\n  a = matmul(x, x)\n  b = relu(x)\n"
                 "  c = add(a, b)\n  output c\n}\n")
    assert main(["check", str(f), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert (s["graph"], s["tasks"], s["edges"]) == ("g", 3, 2)
    assert s["flops"] == 2 * 64**3 + 64 * 64 + 64 * 64
    assert s["bytes"] == (3 * 16384) + (2 * 16384) + (3 * 16384)
    assert s["ops"] == {"add": 1, "matmul": 1, "relu": 1}
    assert s["critical_path"] == {"tasks": ["a", "c"], "flops": 2 * 64**3 + 64 * 64}
    assert main(["check", str(f)]) == 0
    out = capsys.readouterr().out
    assert "tasks    3" in out and "GFLOP" in out and "bytes    128 KiB" in out and "a -> c" in out
    assert main(["check", str(f)]) == 0
    assert capsys.readouterr().out == out  # deterministic


def test_cli_check_dump(tmp_path, capsys):
    f = tmp_path / "ok.tg"
    f.write_text("graph g {\n  input x : f32[2]\n  y = relu(x) @gpu\n  output y\n}\n")
    assert main(["check", str(f), "--dump"]) == 0
    assert capsys.readouterr().out == (
        "graph g\ninput x : f32[2]\n"
        "task 0 y = relu(input x) -> f32[2] flops 2 read 8 written 8 @gpu\noutput y\n")

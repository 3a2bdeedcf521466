"""Lowering: names, params, loops, templates, includes, annotations, edges."""

from __future__ import annotations

import pytest

from mapper.core.graph import TensorType
from mapper.dump import dump_graph
from mapper.errors import InputError
from mapper.frontend.load import graph_from_text, load_graph, read_source

BERT = """
param B = 2, S = 8, H = 16, L = 3
graph enc {
  input x : f32[B*S, H]
  template block(h) {
    qkv = matmul(h, weight f32[H, 3*H])
    att = attention(qkv, heads = 2, seq = S)
    out = layernorm(add(h, att))
    return out
  }
  h0 = x
  for l in 0..L { h{l+1} = block(h{l}) }
  output h{L}
}
"""


def names(g):
    return [t.name for t in g.tasks]


def test_template_loop_names_and_order():
    g = graph_from_text(BERT)
    assert g.name == "enc"
    assert names(g)[:4] == ["h1.qkv", "h1.att", "h1.out.add", "h1.out"]
    assert len(g.tasks) == 12 and names(g)[-1] == "h3.out"
    assert g.outputs == ("h3.out",)
    assert g.inputs == (("x", TensorType("f32", (16, 16))),)
    assert list(g.topo_order) == list(range(12))  # source order is topological


def test_operands_and_inline_weights_per_instance():
    g = graph_from_text(BERT)
    q1, q2 = g.tasks[0], g.tasks[4]
    assert [(o.kind, o.name) for o in q1.operands] == [("input", "x"), ("weight", "h1.qkv.w0")]
    assert [(o.kind, o.name, o.producer) for o in q2.operands] == [
        ("task", "h1.out", 3), ("weight", "h2.qkv.w0", None)]
    assert q1.operands[1].type == TensorType("f32", (16, 48))
    assert q1.output == TensorType("f32", (16, 48))
    assert q1.flops == 2 * 16 * 16 * 48  # matmul M*N*K multiply-adds


def test_attrs_are_normalised_and_sorted():
    g = graph_from_text(BERT)
    att = g.tasks[1]
    assert att.attrs == (("cache", 0), ("causal", 0), ("fused", 1), ("heads", 2), ("kv_heads", None), ("seq", 8), ("window", 0))
    assert att.attr("heads") == 2


def test_data_edges_one_per_pair_with_producer_bytes():
    g = graph_from_text("""graph g {
      input x : f32[4, 4]
      a = relu(x)
      b = add(a, a)
      c = add(b, a)
    }""")
    pairs = [(e.src, e.dst, e.bytes, e.tensor) for e in g.edges]
    assert pairs == [(0, 1, 64.0, "a"), (0, 2, 64.0, "a"), (1, 2, 64.0, "b")]
    assert [e.index for e in g.edges] == [0, 1, 2]


def test_nested_calls_become_tasks_in_text_order():
    g = graph_from_text("""graph g {
      input x : f32[4]
      out = mul(add(x, x), add(relu(x), x))
    }""")
    assert names(g) == ["out.add", "out.relu", "out.add.2", "out"]
    assert [o.name for o in g.tasks[3].operands] == ["out.add", "out.add.2"]


def test_alias_and_indexed_names():
    g = graph_from_text("""graph g {
      input x : f32[4]
      for i in 0..2 { for j in 1..3 { a{i}{j} = relu(x) } }
      b = a{1}{2}
      c = relu(b)
    }""")
    assert names(g) == ["a0_1", "a0_2", "a1_1", "a1_2", "c"]
    assert g.tasks[4].operands[0].name == "a1_2"


def test_params_integer_arithmetic():
    g = graph_from_text("""param A = 7, B = (A + 1) / 4 * 3, C = 2 ** 3 ** 2 // 100, D = -A % 3
    graph g { input x : f32[B, C, D] \n y = relu(x) }""")
    assert g.inputs[0][1].shape == (6, 5, 2)


def test_annotations():
    g = graph_from_text("""graph g {
      input x : f32[8]
      y = relu(x) @gpu @cpu0 @!fpga work { flops 2e9, bytes 1 MiB } parallel 0.25 streamable 4
      z = relu(y) work { bytes_read 10, bytes_written 2 KiB }
      w = relu(z) work { flops 5 } cost { p2: 3 ms, p1: 2 us }
    }""")
    y, z, w = g.tasks
    assert (y.placement.allow, y.placement.deny) == (("gpu", "cpu0"), ("fpga",))
    assert (y.flops, y.bytes_read, y.bytes_written) == (2e9, 1048576.0, 0.0)
    assert (y.parallel, y.streamable) == (0.25, 4)
    assert (z.flops, z.bytes_read, z.bytes_written) == (8.0, 10.0, 2048.0)  # flops from the op
    assert w.flops == 5.0 and w.bytes_read == 32.0  # bytes from the op
    assert w.explicit_cost == (("p1", 2e-6), ("p2", 3e-3))


def test_explicit_cost_graph_and_edges():
    g = graph_from_text("""graph heft {
      task n1 cost { p1: 14, p2: 16, p3: 9 }
      task n2 cost { p1: 13, p2: 19, p3: 18 }
      task n3 cost { p1: 11, p2: 13, p3: 19 } @!p3
      task n4 work { flops 2e9, bytes 1e8 } parallel 0.5
      n1 -> n3 bytes 4 MiB
      n1 -> n2 comm 18
      n2 -> n4 comm 500 us
      n3 -> n4
    }""")
    assert [t.op for t in g.tasks] == ["task"] * 4
    assert g.tasks[0].explicit_cost == (("p1", 14.0), ("p2", 16.0), ("p3", 9.0))
    assert g.tasks[0].output is None and g.tasks[2].placement.deny == ("p3",)
    assert (g.tasks[3].flops, g.tasks[3].bytes_read, g.tasks[3].bytes_written) == (2e9, 1e8, 0.0)
    got = [(e.src, e.dst, e.bytes, e.comm) for e in g.edges]
    # ordered by (consumer, producer)
    assert got == [(0, 1, 0.0, 18.0), (0, 2, 4194304.0, None), (1, 3, 0.0, 5e-4), (2, 3, 0.0, None)]


def test_explicit_edge_backwards_is_fine_without_cycle():
    g = graph_from_text("""graph g {
      task a work { flops 1 }
      task b work { flops 1 }
      b -> a bytes 10 KB
    }""")
    assert [(e.src, e.dst, e.bytes) for e in g.edges] == [(1, 0, 1e4)]
    assert g.topo_order == (1, 0)


def test_template_value_params_and_placement_inheritance():
    g = graph_from_text("""param D = 4
    template mlp(x, width = 8, act = "tanh") {
      h = matmul(x, weight f32[D, width])
      y = elementwise(h, fn = act) @!fpga
      return y
    }
    template two(x) {
      a = mlp(x) @gpu
      b = mlp(x, width = 4, act = "exp")
      return b
    }
    graph g {
      input x : f32[2, D]
      r = two(x) @!cpu
    }""")
    assert names(g) == ["r.a.h", "r.a.y", "r.b.h", "r.b.y"]
    assert g.tasks[0].output.shape == (2, 8) and g.tasks[2].output.shape == (2, 4)
    assert g.tasks[1].attr("fn") == "tanh" and g.tasks[3].attr("fn") == "exp"
    assert (g.tasks[0].placement.allow, g.tasks[0].placement.deny) == (("gpu",), ("cpu",))
    assert (g.tasks[1].placement.allow, g.tasks[1].placement.deny) == (("gpu",), ("cpu", "fpga"))
    assert (g.tasks[2].placement.allow, g.tasks[2].placement.deny) == ((), ("cpu",))


def test_template_weights_and_returning_a_parameter():
    g = graph_from_text("""template lin(x) {
      weight w : f32[4, 4]
      y = matmul(x, w)
      return y
    }
    template ident(x) { return x }
    graph g {
      input x : f32[4, 4]
      a = lin(x)
      b = ident(a)
      c = relu(lin(b))
    }""")
    assert names(g) == ["a.y", "c.lin.y", "c"]
    assert g.tasks[0].operands[1].name == "a.w"
    assert g.tasks[1].operands[0].name == "a.y"


def test_sparse_and_scientific_ops():
    g = graph_from_text("""param N = 100
    graph cg {
      input A : f64[N, N] csr(nnz = 5*N)
      input p : f64[N]
      q = spmv(A, p)
      a = dot(p, q)
    }""")
    a = g.inputs[0][1]
    assert (a.layout, a.nnz) == ("csr", 500)
    assert g.tasks[0].output == TensorType("f64", (100,))
    assert g.tasks[1].output.shape == ()


def test_include_relative_and_once(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "sizes.tg").write_text("param H = 4\n")
    (tmp_path / "lib" / "layers.tg").write_text('include "sizes.tg"\ntemplate act(x) { y = relu(x)\n return y }\n')
    main = tmp_path / "main.tg"
    main.write_text('include "lib/sizes.tg"\ninclude "lib/layers.tg"\n'
                    "graph g {\n  input x : f32[H]\n  a = act(x)\n}\n")
    g = load_graph(main)
    assert names(g) == ["a.y"] and g.inputs[0][1].shape == (4,)
    assert g.tasks[0].span.file.endswith("layers.tg")


def test_load_graph_missing_file_names_it(tmp_path):
    path = tmp_path / "nope.tg"
    with pytest.raises(InputError) as info:
        load_graph(path)
    assert info.value.obj == str(path) and "no such file" in info.value.message


def test_read_source_names_an_unreadable_file(tmp_path):
    with pytest.raises(InputError) as info:
        read_source(tmp_path)
    assert info.value.obj == str(tmp_path) and "directory" in info.value.message
    (tmp_path / "a.tg").write_text("graph g { }")
    assert read_source(tmp_path / "a.tg") == "graph g { }"


def test_load_graph_not_utf8(tmp_path):
    path = tmp_path / "bin.tg"
    path.write_bytes(b"\xff\xfe\x00graph")
    with pytest.raises(InputError) as info:
        load_graph(path)
    assert "UTF-8" in info.value.message


def test_spans_point_at_the_call():
    g = graph_from_text("graph g {\n  input x : f32[2]\n  y = relu(x)\n}", "s.tg")
    sp = g.tasks[0].span
    assert (sp.file, sp.line, sp.col) == ("s.tg", 3, 7)


def test_lowering_is_deterministic():
    a = dump_graph(graph_from_text(BERT))
    b = dump_graph(graph_from_text(BERT))
    assert a == b
    assert graph_from_text(BERT) == graph_from_text(BERT)


def test_loop_with_zero_or_negative_trip_count_runs_nothing():
    g = graph_from_text("graph g { input x : f32[2]\n for i in 5..2 { y{i} = relu(x) }\n z = relu(x) }")
    assert names(g) == ["z"]


def test_float_attributes_and_params():
    g = graph_from_text("param E = 1e-3\ngraph g { input x : f32[2, 3]\n y = layernorm(x, eps = E * 2) }")
    assert g.tasks[0].attr("eps") == pytest.approx(2e-3)


def test_crlf_line_ends_and_byte_order_mark(tmp_path):
    g = graph_from_text("param A = 2\r\ngraph g {\r\n  input x : f32[A]\r\n  y = relu(x)\r\n}\r\n")
    assert [t.name for t in g.tasks] == ["y"]
    path = tmp_path / "bom.tg"
    path.write_text("graph g {\n  task t work { flops 1 }\n}\n", encoding="utf-8-sig")
    assert load_graph(path).tasks[0].name == "t"


def test_lowering_leaves_no_cycle_holding_the_syntax_tree():
    """The lowerer's own reference cycle is broken when it returns: a huge graph's heap is
    frozen right after (mapper.core.heap), where an uncollected cycle would keep the syntax
    tree and the text's lines for the rest of the compile."""
    import gc

    from mapper.frontend.lowering.program import lower
    from mapper.frontend.parse import parse

    program = parse(BERT, "bert.tg")
    gc.collect()
    gc.disable()
    try:
        graph = lower(program)
        del program
        left = [o for o in gc.get_objects() if type(o).__name__ in ("_Lowerer", "Program")]
    finally:
        gc.enable()
    assert graph.tasks and left == []


def test_literal_times_take_the_checked_path_when_out_of_range():
    """A literal time is converted without the evaluator's calls only within its limits; outside
    them (or with another unit) the evaluator gives the same message as before."""
    from mapper.errors import SourceSpan
    from mapper.frontend.lowering.values import literal_seconds
    from mapper.frontend.syntax import Num

    sp = SourceSpan("f.tg", 1, 1, None)
    assert literal_seconds(Num(40, sp), "us") == 40 / 1e6
    assert literal_seconds(Num(2, sp), None) == 2.0 and literal_seconds(Num(0, sp), "ms") == 0.0
    for value, unit in ((1e-20, "s"), (1e13, None), (-1.0, "ms"), (3.0, "min"), (float("nan"), None)):
        assert literal_seconds(Num(value, sp), unit) is None


def test_only_the_command_line_freezes_the_heap(monkeypatch):
    """mapper.core.heap: the Python API leaves a caller's heap alone; the one-shot command line freezes."""
    import gc

    from mapper.core import heap

    frozen: list[bool] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    monkeypatch.setattr(heap, "_one_shot", [False])
    heap.settle(heap.SETTLE_TASKS)
    assert not frozen
    heap.one_shot()
    heap.settle(heap.SETTLE_TASKS - 1)
    assert not frozen
    heap.settle(heap.SETTLE_TASKS)
    assert frozen == [True]

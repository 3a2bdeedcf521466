"""The parser: AST shapes, spans, statement separation, syntax errors."""

from __future__ import annotations

import re

import pytest

from mapper.errors import DslError, format_error
from mapper.frontend import syntax as S
from mapper.frontend.parse import KEYWORDS, parse


def graph_body(text: str) -> tuple:
    prog = parse(text, "t.tg")
    (g,) = [i for i in prog.items if isinstance(i, S.GraphDef)]
    return g.body


def test_top_level_items_in_order():
    prog = parse('include "a.tg"\nparam A = 1, B = A + 2\ntemplate t(x) { return x }\ngraph g { }\n', "f.tg")
    kinds = [type(i).__name__ for i in prog.items]
    assert kinds == ["Include", "ParamDecl", "TemplateDef", "GraphDef"]
    assert prog.items[0].path == "a.tg"
    assert [b.name for b in prog.items[1].binds] == ["A", "B"]
    assert prog.file == "f.tg"


def test_expression_precedence_and_associativity():
    (p,) = parse("param A = 1 + 2 * 3 ** 2 ** 2 - -4 // 5 % 6 / 7").items
    e = p.binds[0].value
    # ((1 + (2 * (3 ** (2 ** 2)))) - ((((-4) // 5) % 6) / 7))
    assert isinstance(e, S.BinOp) and e.op == "-"
    assert e.left.op == "+" and e.left.right.op == "*"
    power = e.left.right.right
    assert power.op == "**" and power.right.op == "**"  # right associative
    assert e.right.op == "/" and e.right.left.op == "%" and e.right.left.left.op == "//"
    assert isinstance(e.right.left.left.left, S.Neg)


def test_numbers_and_ranges_lex_correctly():
    (f,) = graph_body("graph g { for i in 0..10 { } }")
    assert isinstance(f, S.ForStmt) and f.lo.value == 0 and f.hi.value == 10
    (p,) = parse("param A = 1.5e3, B = 2e-2, C = 7").items
    values = [b.value.value for b in p.binds]
    assert values == [1500.0, 0.02, 7] and isinstance(values[2], int)


def test_call_statement_parts():
    (st,) = graph_body('graph g { y = f(a, g(b), weight f32[2, 3], k = 1, s = "x", l = [1, -2]) @gpu @!fpga }')
    assert isinstance(st, S.CallStmt) and st.target.base == "y"
    c = st.call
    assert c.func == "f"
    assert [type(a).__name__ for a in c.args] == ["Name", "Call", "InlineWeight"]
    assert [a.key for a in c.attrs] == ["k", "s", "l"]
    assert isinstance(c.attrs[1].value, S.Str) and c.attrs[1].value.value == "x"
    assert isinstance(c.attrs[2].value, S.ListValue) and len(c.attrs[2].value.items) == 2
    assert [(p.target, p.deny) for p in st.annotations] == [("gpu", False), ("fpga", True)]


def test_annotations_all_kinds():
    (st,) = graph_body("graph g { y = relu(x) work { flops 2e9, bytes 1 MiB } parallel 0.9 streamable 4 "
                       "cost { cpu0: 3 ms } }")
    kinds = [type(a).__name__ for a in st.annotations]
    assert kinds == ["Work", "Parallel", "Streamable", "Cost"]
    work = st.annotations[0]
    assert [(m.key, m.unit) for m in work.items] == [("flops", None), ("bytes", "MiB")]
    assert st.annotations[3].items[0].unit == "ms"


def test_explicit_cost_form():
    body = graph_body("""graph heft {
      task n1 cost { p1: 14, p2: 16, p3: 9 }
      task n2 work { flops 2e9 }
      n1 -> n2 comm 18 ms
      n1 -> n3 bytes 4 MiB
      n1 -> n4
    }""")
    assert [type(s).__name__ for s in body] == ["TaskStmt", "TaskStmt", "EdgeStmt", "EdgeStmt", "EdgeStmt"]
    assert (body[2].kind, body[2].unit) == ("comm", "ms")
    assert (body[3].kind, body[3].unit) == ("bytes", "MiB")
    assert body[4].kind is None and body[4].value is None


def test_indexed_names():
    (st,) = graph_body("graph g { h{l+1}{2} = relu(h{l}) }")
    assert st.target.base == "h" and len(st.target.indices) == 2
    assert st.call.args[0].indices[0].name == "l"


def test_csr_type():
    (st,) = graph_body("graph g { input a : f64[N, N] csr(nnz = 5*N) }")
    assert st.type.dtype == "f64" and st.type.layout.name == "csr"
    assert st.type.layout.args[0].key == "nnz"


def test_template_params_with_defaults():
    (t,) = parse("template blk(x, y, heads = 12, kind = \"sum\") { return x }").items
    assert [(p.name, p.default is None) for p in t.params] == [
        ("x", True), ("y", True), ("heads", False), ("kind", False)]


@pytest.mark.parametrize("text", [
    "graph g {\n  y = f(a,\n        b,\n        k = 1)\n}",
    "graph g {\n  y = relu(x)\n    @gpu\n    parallel 0.5\n}",
    "graph g { task t cost {\n  p1: 1,\n  p2: 2,\n}\n}",
    "graph g { y = relu(x); z = relu(y) }",
    "\n\n# c\ngraph g {\n\n  # only a comment\n\n  y = relu(x)   # trailing\n\n}\n\n",
    "param A = 1 +\n  2\ngraph g { }",
    "param A = 1, \\\n  B = 2\ngraph g { }",
])
def test_newlines_where_statements_continue(text):
    parse(text)


def test_spans_are_one_based_with_end_column():
    (st,) = graph_body("graph g {\n  y = relu(x)\n}")
    assert (st.span.line, st.span.col) == (2, 3)
    assert (st.call.func_span.col, st.call.func_span.end_col) == (7, 11)
    assert st.call.args[0].span.col == 12


@pytest.mark.parametrize("text, where, words", [
    ("graph g { y = relu(x }", (1, 22), ["unexpected '}'", "')'"]),
    ("graph g { y = relu(x) z = relu(y) }", (1, 23), ["unexpected 'z'", "a newline"]),
    ("graph g {\n  input in : f32[3]\n}", (2, 9), ["unexpected 'in'", "a name"]),
    ("graph g { y = $ }", (1, 15), ["unexpected character '$'"]),
    ("graph g { y = relu(x)\n\n", (1, 22), ["unexpected end of file", "'}'"]),
    ("param = 3", (1, 7), ["unexpected '='", "expected a name"]),
    ("graph g {\n  input x f32[2]\n}", (2, 11), ["unexpected 'f32'; expected ':' or '{'"]),
    ("graph g { for i 0..3 { } }", (1, 17), ["unexpected '0'; expected 'in'"]),
    ("graph g { task t cost { p1 3 } }", (1, 28), ["unexpected '3'; expected ':'"]),
    ('graph g { y = f(x, k = "ab\n") }', (1, 24), ["unexpected character '\"'"]),
])
def test_syntax_errors_are_readable(text, where, words):
    with pytest.raises(DslError) as info:
        parse(text, "bad.tg")
    err = info.value
    assert err.span is not None and err.span.file == "bad.tg"
    if where is not None:
        assert (err.span.line, err.span.col) == where
    for w in words:
        assert w in err.message
    assert err.source_line is not None
    rendered = format_error(err)
    assert rendered.startswith(f"bad.tg:{err.span.line}:{err.span.col}: error: ")
    assert "^" in rendered


def test_expected_lists_only_what_can_follow():
    with pytest.raises(DslError) as info:
        parse("graph g { y = relu(x)")
    msg = info.value.message
    assert "'}'" in msg and "a newline" in msg and "')'" not in msg and "','" not in msg


def test_reserved_word_hint():
    with pytest.raises(DslError) as info:
        parse("graph g { output = relu(x) }")
    assert "reserved word" in (info.value.hint or "")
    assert "output" in KEYWORDS


def test_missing_separator_hint():
    with pytest.raises(DslError) as info:
        parse("graph g { y = relu(x) z = relu(y) }")
    assert "newlines" in info.value.hint


def test_parse_is_deterministic_and_ast_is_frozen():
    text = "param A = 2\ngraph g { y = relu(x) @gpu }"
    a, b = parse(text), parse(text)
    assert a == b
    with pytest.raises(AttributeError):
        a.items[0].span = None  # type: ignore[misc]


def test_keywords_match_the_grammar():
    from mapper.frontend.lark_parse import _parser

    words = {t.pattern.value for t in _parser().terminals
             if t.pattern.type == "str" and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", t.pattern.value)}
    assert words == set(KEYWORDS)

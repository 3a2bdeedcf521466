"""The DSL's Lark parser (the only Lark user): text -> :class:`mapper.frontend.syntax.Program`.

The grammar is ``mapper/grammar/mapper.lark`` (LALR(1) after DeRemer, 1969; basic lexer, so
keywords are reserved words). Statements end at a newline; :class:`_Newlines`
drops the newlines that cannot end a statement. Every Lark exception becomes a
:class:`~mapper.errors.DslError` with a span and a readable "expected ..." list.
:func:`mapper.frontend.parse.parse` calls it for everything the fast path declines.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import lark
from lark import Lark, Token
from lark.visitors import Transformer_NonRecursive, v_args

from mapper.errors import DslError, SourceSpan
from mapper.frontend import syntax as S
from mapper.frontend.syntax import KEYWORDS

_PARSER: Lark | None = None

# a newline after one of these continues the statement
_CONTINUES = frozenset("{ , ( [ = : -> .. + - * / // % ** ;".split())
# a newline before one of these continues the statement
_CONTINUED_BY = frozenset({"RBRACE", "PLACE", "WORK", "COST", "PARALLEL", "STREAMABLE", "MEMORY", "COLOCATE",
                           "BACKWARD", "DEADLINE", "$END"})

_WORDS = {
    "NAME": "a name",
    "INT": "an integer",
    "FLOAT": "a number",
    "STRING": 'a string ("...")',
    "PLACE": "a placement (@device)",
    "_SEP": "a newline",
    "$END": "end of file",
}


class _Newlines:
    """Post-lexer: keep only the newlines (and ';') that end a statement.

    Dropped: newlines inside ( ) or [ ], repeated ones, those after a token
    that needs a continuation (``{ , = + ...``) and those before ``}``, an
    annotation, or the end of the file.
    """

    always_accept = ()

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        depth = 0
        prev: Token | None = None
        pending: Token | None = None
        for tok in stream:
            if tok.type == "_SEP":
                if pending is None and depth == 0 and prev is not None and not _continues(prev):
                    pending = tok
                continue
            if pending is not None:
                if tok.type not in _CONTINUED_BY:
                    yield pending
                pending = None
            if tok.type in ("LPAR", "LSQB"):
                depth += 1
            elif tok.type in ("RPAR", "RSQB") and depth > 0:
                depth -= 1
            prev = tok
            yield tok


def _continues(tok: Token) -> bool:
    return tok.type not in ("NAME", "INT", "FLOAT", "STRING", "PLACE") and tok.value in _CONTINUES


def _parser() -> Lark:
    global _PARSER
    if _PARSER is None:
        _PARSER = Lark.open_from_package(
            "mapper.grammar",
            "mapper.lark",
            parser="lalr",
            lexer="basic",
            propagate_positions=True,
            maybe_placeholders=True,
            postlex=_Newlines(),
        )
    return _PARSER


def parse_with_lark(text: str, file: str) -> S.Program:
    """Parse ``text`` (the contents of ``file``) with Lark; a syntax error raises :class:`DslError`."""
    parser = _parser()
    try:
        tree = parser.parse(text)
    except lark.exceptions.LarkError as exc:
        raise _translate(exc, text, file, parser) from None
    try:
        return _ToAst(file, text).transform(tree)
    except RecursionError:  # pragma: no cover - guarded by the iterative transformer
        raise DslError("the program is nested too deeply", span=SourceSpan(file, 1, 1),
                       source_line=_line(text, 1)) from None


# -- AST construction --------------------------------------------------------------


@v_args(meta=True)
class _ToAst(Transformer_NonRecursive):
    """Parse tree -> syntax dataclasses."""

    def __init__(self, file: str, text: str) -> None:
        super().__init__()
        self.file = file
        self.text = text

    # spans
    def _span(self, meta: Any) -> SourceSpan:
        if getattr(meta, "empty", True):
            return SourceSpan(self.file, 1, 1)
        end = meta.end_column if meta.end_line == meta.line else None
        return SourceSpan(self.file, meta.line, meta.column, end)

    def _tok(self, tok: Token) -> SourceSpan:
        end = tok.end_column if tok.end_line == tok.line else None
        return SourceSpan(self.file, tok.line or 0, tok.column or 0, end)

    # top level
    def start(self, meta, items):
        return S.Program(self.file, tuple(items), self.text)

    def include(self, meta, c):
        return S.Include(c[0][1:-1], self._span(meta))

    def param_decl(self, meta, c):
        return S.ParamDecl(tuple(c), self._span(meta))

    def param_bind(self, meta, c):
        return S.ParamBind(str(c[0]), c[1], self._span(meta))

    def graph_def(self, meta, c):
        return S.GraphDef(str(c[0]), c[2], self._span(meta), c[1])

    def template_def(self, meta, c):
        params = tuple(p for p in c[1:-1] if p is not None)
        return S.TemplateDef(str(c[0]), params, c[-1], self._span(meta))

    def tparam(self, meta, c):
        return S.TemplateParam(str(c[0]), c[1], self._span(meta))

    def block(self, meta, c):
        return tuple(c)

    # statements
    def input_stmt(self, meta, c):
        return S.InputStmt(c[0], c[1], self._span(meta))

    def weight_stmt(self, meta, c):
        return S.WeightStmt(c[0], c[1], self._span(meta))

    def call_stmt(self, meta, c):
        return S.CallStmt(c[0], c[1], tuple(c[2:]), self._span(meta))

    def alias_stmt(self, meta, c):
        return S.AliasStmt(c[0], c[1], self._span(meta))

    def output_stmt(self, meta, c):
        return S.OutputStmt(tuple(c), self._span(meta))

    def return_stmt(self, meta, c):
        return S.ReturnStmt(c[0], self._span(meta))

    def for_stmt(self, meta, c):
        return S.ForStmt(str(c[0]), c[1], c[2], c[3], self._span(meta), self._tok(c[0]))

    def task_stmt(self, meta, c):
        return S.TaskStmt(c[0], tuple(c[1:]), self._span(meta))

    def edge_stmt(self, meta, c):
        src, dst, spec = c
        if spec is None:
            return S.EdgeStmt(src, dst, None, None, None, self._span(meta), None)
        kind, value, unit = spec
        return S.EdgeStmt(src, dst, str(kind), value, None if unit is None else str(unit),
                          self._span(meta), None if unit is None else self._tok(unit))

    def edge_spec(self, meta, c):
        return tuple(c)

    # tensor expressions
    def call(self, meta, c):
        args: list[Any] = []
        attrs: list[S.Attr] = []
        for a in c[1:]:
            if a is None:
                continue
            (attrs if isinstance(a, S.Attr) else args).append(a)
        return S.Call(str(c[0]), tuple(args), tuple(attrs), self._span(meta), self._tok(c[0]))

    def inline_weight(self, meta, c):
        return S.InlineWeight(c[0], self._span(meta))

    def kwarg(self, meta, c):
        return S.Attr(str(c[0]), c[1], self._span(meta), self._tok(c[0]))

    def name(self, meta, c):
        return S.Name(str(c[0]), tuple(c[1:]), self._span(meta))

    def type(self, meta, c):
        layout = c[-1]
        dims = tuple(d for d in c[1:-1] if d is not None)
        return S.TypeExpr(str(c[0]), dims, layout, self._span(meta), self._tok(c[0]))

    def layout(self, meta, c):
        rest = [x for x in c[1:] if x is not None]
        args = []
        for key, value in zip(rest[::2], rest[1::2]):
            span = self._tok(key)
            args.append(S.Attr(str(key), value, span, span))
        return S.Layout(str(c[0]), tuple(args), self._span(meta))

    # annotations
    def place(self, meta, c):
        text = str(c[0])
        deny = text.startswith("@!")
        return S.Place(text[2:] if deny else text[1:], deny, self._tok(c[0]))

    def work(self, meta, c):
        return S.Work(tuple(x for x in c if x is not None), self._span(meta))

    def cost(self, meta, c):
        return S.Cost(tuple(x for x in c if x is not None), self._span(meta))

    def parallel(self, meta, c):
        return S.Parallel(c[0], self._span(meta))

    def streamable(self, meta, c):
        return S.Streamable(c[0], self._span(meta))

    def memory(self, meta, c):
        value, unit = c
        return S.Memory(value, None if unit is None else str(unit), self._span(meta),
                        None if unit is None else self._tok(unit))

    def deadline(self, meta, c):
        value, unit = c
        return S.Deadline(value, None if unit is None else str(unit), self._span(meta),
                          None if unit is None else self._tok(unit))

    def colocate(self, meta, c):
        return S.Colocate(str(c[0]), self._span(meta))

    def backward(self, meta, c):
        return S.Backward(self._tok(c[0]))

    def work_item(self, meta, c):
        return self._measure(meta, c)

    def cost_item(self, meta, c):
        return self._measure(meta, c)

    def _measure(self, meta, c):
        key, value, unit = c
        return S.Measure(str(key), value, None if unit is None else str(unit), self._span(meta),
                         None if unit is None else self._tok(unit))

    # values
    def string(self, meta, c):
        return S.Str(c[0][1:-1], self._tok(c[0]))

    def list(self, meta, c):
        return S.ListValue(tuple(x for x in c if x is not None), self._span(meta))

    def int(self, meta, c):
        return S.Num(int(c[0]), self._tok(c[0]))

    def float(self, meta, c):
        return S.Num(float(c[0]), self._tok(c[0]))

    def var(self, meta, c):
        return S.Var(str(c[0]), self._tok(c[0]))

    def neg(self, meta, c):
        return S.Neg(c[0], self._span(meta))

    @staticmethod
    def _binop(op: str) -> Callable[[Any, Any, Sequence[Any]], S.BinOp]:
        def method(self: Any, meta: Any, c: Sequence[Any]) -> S.BinOp:
            return S.BinOp(op, c[0], c[1], self._span(meta))

        return method

    add = _binop("+")
    sub = _binop("-")
    mul = _binop("*")
    truediv = _binop("/")
    floordiv = _binop("//")
    mod = _binop("%")
    pow = _binop("**")


# -- error translation ----------------------------------------------------------------


def _line(text: str, line: int) -> str | None:
    lines = text.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else None


def _end_of_text(text: str) -> tuple[int, int]:
    """Line and column just after the last non-blank character."""
    lines = text.rstrip().splitlines() or [""]
    return len(lines), len(lines[-1]) + 1


def _word_before(line: str, col: int) -> str | None:
    m = re.search(r"([A-Za-z_][A-Za-z0-9_]*)\s*$", line[: col - 1])
    return m.group(1) if m else None


def _describe(name: str, parser: Lark) -> str:
    if name in _WORDS:
        return _WORDS[name]
    try:
        term = parser.get_terminal(name)
    except KeyError:
        return name.lower()
    if term.pattern.type == "str":
        return repr(term.pattern.value)
    return name.lower()


def _expected(names: Any, parser: Lark) -> str:
    # words ("a name") before punctuation, each group sorted
    words = sorted({_describe(n, parser) for n in names}, key=lambda w: (w[0] in "'\"", w))
    if not words:
        return ""
    if len(words) > 12:
        words = words[:12] + ["..."]
    if len(words) == 1:
        return f"; expected {words[0]}"
    return f"; expected {', '.join(words[:-1])} or {words[-1]}"


def _acceptable(exc: Any) -> Any:
    """The terminals the parser could really take here (LALR's ``expected`` set
    has extra lookaheads from merged states); falls back to ``expected``."""
    ip = getattr(exc, "interactive_parser", None)
    if ip is not None:
        try:
            return ip.accepts()
        except lark.exceptions.LarkError:  # pragma: no cover - defensive
            pass
    return exc.expected


def _token_text(tok: Token) -> str:
    if tok.type == "$END":
        return "end of file"
    if tok.type == "_SEP":
        return "end of line" if tok.value != ";" else "';'"
    return repr(str(tok))


def _translate(exc: Exception, text: str, file: str, parser: Lark) -> DslError:
    hint = None
    if isinstance(exc, lark.exceptions.UnexpectedToken):
        tok = exc.token
        line, col = exc.line, exc.column
        if tok.type == "$END" or not isinstance(line, int) or line < 1:
            line, col = _end_of_text(text)
        end = tok.end_column if tok.type not in ("$END", "_SEP") and tok.end_line == tok.line else None
        acc = _acceptable(exc)
        msg = f"unexpected {_token_text(tok)}{_expected(acc, parser)}"
        before = _word_before(_line(text, line) or "", col)
        if tok.value in KEYWORDS and tok.type == tok.value.upper():
            hint = f"'{tok.value}' is a reserved word and cannot be used as a name"
        elif tok.value in ("=", "->", "{") and before in KEYWORDS:
            hint = f"'{before}' is a reserved word and cannot be used as a name"
        elif tok.type == "_SEP" and "RPAR" in acc:
            hint = "a call is missing its closing ')'"
        elif tok.type not in ("_SEP", "$END") and "_SEP" in acc:
            hint = "statements are separated by newlines or ';'"
    elif isinstance(exc, lark.exceptions.UnexpectedCharacters):
        line, col, end = exc.line, exc.column, exc.column + 1
        pos = exc.pos_in_stream
        ch = text[pos] if pos is not None and 0 <= pos < len(text) else ""
        msg = f"unexpected character {ch!r}"
        if ch == '"':
            hint = "strings end on the same line and cannot contain '\"' or '\\'"
    elif isinstance(exc, lark.exceptions.UnexpectedEOF):
        (line, col), end = _end_of_text(text), None
        msg = f"unexpected end of file{_expected(exc.expected, parser)}"
    else:
        line, col, end = 1, 1, None
        msg = f"syntax error: {exc}"
    return DslError(msg, span=SourceSpan(file, line, col, end), source_line=_line(text, line), hint=hint)

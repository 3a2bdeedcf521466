"""Fuzzing the front end: whatever the text, only MapperError comes out.

Two generators, 1,000 programs each: mutations of valid programs (token
deletions, insertions, swaps, number and name replacements), and programs
built from the DSL's structure (params, inputs, op calls with random operands
and attributes, loops, templates, annotations, explicit tasks and edges).
Every DslError must carry a span (and its source line when it has one).
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mapper.core.graph import TaskGraph
from mapper.core.ops import OPS
from mapper.errors import DslError, MapperError
from mapper.frontend.load import graph_from_text

GOLDEN = Path(__file__).parent / "data" / "golden"
SEEDS = [p.read_text() for p in sorted(GOLDEN.glob("*.tg"))] + [
    "param A = 3, B = A * 2 // 1\ngraph g {\n  input x : f32[A, B]\n  y = relu(x) @gpu\n  output y\n}\n",
    "graph g {\n  input x : f32[4]\n  for i in 0..3 { h{i} = relu(x) }\n  task t work { flops 1 }\n"
    "  h{2} -> t bytes 3 KiB\n}\n",
]
TOKENS = [
    "graph", "template", "param", "input", "weight", "output", "return", "for", "in", "task", "work",
    "cost", "comm", "bytes", "parallel", "streamable", "include", "{", "}", "(", ")", "[", "]", ",",
    ";", "\n", "=", "->", "..", ":", "+", "-", "*", "/", "//", "%", "**", "@gpu", "@!fpga", "x", "h{1}",
    "f32", "i32", "c64", "csr(nnz = 3)", '"s"', "1", "0", "-1", "2.5", "1e308", "10**12", "2**63",
    "relu", "matmul(", "flops", "ms", "MiB", "#", "\\\n", "\t", "\"", "\x00", "é",
]
NUMBERS = ["0", "1", "2", "3", "5", "64", "1000", "-1", "10**12", "2**63", "1.5", "1e308", "0.0"]
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+(?:\.[0-9]+)?|\S")
TMP = Path(tempfile.mkdtemp(prefix="fuzz-frontend-"))  # includes resolve here, never in the repo
FILE = str(TMP / "fuzz.tg")


def check(text: str) -> None:
    try:
        g = graph_from_text(text, FILE)
    except DslError as err:
        assert err.span is not None, f"no span: {err!r}"
        assert err.span.line >= 1 and err.span.col >= 1
        assert err.message
    except MapperError as err:
        assert err.message and (err.span is not None or err.obj is not None)
    else:
        assert isinstance(g, TaskGraph) and g.tasks


@st.composite
def mutated(draw) -> str:
    tokens = WORD.findall(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        if not tokens:
            break
        i = draw(st.integers(0, len(tokens) - 1))
        kind = draw(st.sampled_from(["delete", "insert", "swap", "number", "name", "dup"]))
        if kind == "delete":
            del tokens[i: i + draw(st.integers(1, 3))]
        elif kind == "insert":
            tokens.insert(i, draw(st.sampled_from(TOKENS)))
        elif kind == "swap":
            j = draw(st.integers(0, len(tokens) - 1))
            tokens[i], tokens[j] = tokens[j], tokens[i]
        elif kind == "number":
            nums = [k for k, t in enumerate(tokens) if t[0].isdigit()]
            if nums:
                tokens[draw(st.sampled_from(nums))] = draw(st.sampled_from(NUMBERS))
        elif kind == "name":
            names = [k for k, t in enumerate(tokens) if t[0].isalpha()]
            if names:
                tokens[draw(st.sampled_from(names))] = draw(st.sampled_from(tokens))
        else:
            j = min(len(tokens), i + draw(st.integers(1, 12)))
            tokens[j:j] = tokens[i:j]
    sep = draw(st.sampled_from([" ", "\n"]))
    return sep.join(tokens)


OP_NAMES = sorted(OPS)
DTYPES = ["f32", "f64", "f16", "c64", "i32", "bool", "bf16"]


@st.composite
def structured(draw) -> str:
    """A program with the DSL's structure and random (often ill-typed) contents.

    The structure comes from one drawn ``random.Random`` (cheap to generate).
    """
    rnd = draw(st.randoms(use_true_random=True))
    pick = rnd.choice
    tame = rnd.random() < 0.5  # half the programs stay close to valid
    lines = [f"param P = {rnd.randint(1, 6)}, Q = P * {rnd.randint(1, 6)}"]
    names: list[str] = []

    def expr() -> str:
        if not tame and rnd.random() < 0.05:  # now and then an invalid dimension or bound
            return pick(["3 / 2", "1.5", "0", "-P", "2 ** 70", "R"])
        return pick(["P", "Q", "2", "P + 1", "Q // 2", "4", "P * Q"])

    def tensor_type() -> str:
        if tame:
            return "f32[P, P]"
        ndim = rnd.randint(0, 4)
        dims = ", ".join(expr() for _ in range(ndim))
        csr = " csr(nnz = P)" if ndim == 2 and rnd.random() < 0.2 else ""
        dtype = "f32" if rnd.random() < 0.5 else pick(DTYPES)
        return f"{dtype}[{dims}]{csr}"

    def operand(depth: int) -> str:
        choice = rnd.randint(0, 5)
        if choice == 0 and depth < 2:
            return call(depth + 1)
        if choice == 1:
            return f"weight {tensor_type()}"
        return pick(names) if names else "x0"

    def call(depth: int = 0) -> str:
        op = pick(TAME_OPS if tame else OP_NAMES + ["blk"] + TAME_OPS)
        spec = OPS.get(op)
        if spec is None and tame:  # the template blk(h)
            count = 1
        elif spec is not None and (tame or rnd.random() < 0.9):  # mostly the right operand count
            count = rnd.randint(spec.min_operands, spec.max_operands or spec.min_operands + 1)
        else:
            count = rnd.randint(0, 3)
        args = [operand(depth) for _ in range(count)]
        for key, _ in (spec.attrs if spec else ()):
            if rnd.random() < (0.05 if tame else 0.5):
                args.append(f"{key} = {pick(ATTR_VALUES)}")
        return f"{op}({', '.join(args)})"

    def annotations() -> str:
        parts = list(dict.fromkeys(pick(ANNOTATIONS[:-1] if tame else ANNOTATIONS)
                                   for _ in range(rnd.randint(0, 3))))
        return " " + " ".join(parts) if parts else ""

    lines.append("template blk(h, k = 2) {\n  t = relu(h)\n  return t\n}")
    lines.append(f"graph g{rnd.randint(1, 6)} {{")
    for i in range(rnd.randint(1, 3)):
        lines.append(f"  input x{i} : {tensor_type()}")
        names.append(f"x{i}")
    for i in range(rnd.randint(1, 8)):
        kind = rnd.randint(0, 9)
        if kind <= 5:
            lines.append(f"  v{i} = {call()}{annotations()}")
            names.append(f"v{i}")
        elif kind == 6:
            lines.append(f"  for j in 0..{expr()} {{ w{i}{{j}} = {call()} }}")
            names.append(f"w{i}{{0}}")
        elif kind == 7:
            body = pick(["work { flops 5 }", "cost { p1: 2 }", ""])
            lines.append(f"  task k{i} {body}{annotations()}")
            names.append(f"k{i}")
        elif kind == 8 and len(names) >= 2:
            spec = pick(["", " comm 3 ms", " bytes 4 MiB"] + ([] if tame else [" comm 1 parsec"]))
            ends = [n for n in names if n[0] == "k"] if tame else names
            if len(ends) >= 2:
                a, b = rnd.sample(ends, 2)
                lines.append(f"  {a} -> {b}{spec}")
        else:
            lines.append(f"  a{i} = {pick(names)}")
            names.append(f"a{i}")
    if names and rnd.random() < 0.5:
        lines.append(f"  output {pick(names)}")
    lines.append("}")
    return "\n".join(lines) + "\n"


TAME_OPS = ["relu", "gelu", "add", "mul", "matmul", "softmax", "layernorm", "blk"]
ATTR_VALUES = ["1", "2", "-1", "0.5", '"sum"', '"exp"', "[P, -1]", "[1, 0]", "P"]
ANNOTATIONS = ["@gpu", "@!fpga", "@cpu0", "parallel 0.5", "streamable 2", "work { flops 1e3, bytes 2 KiB }",
               "cost { cpu0: 3 ms }", "parallel 2"]


FUZZ = settings(max_examples=1000, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(mutated())
def test_mutated_programs_raise_only_mapper_errors(text):
    check(text)


@FUZZ
@given(structured())
def test_structured_programs_raise_only_mapper_errors(text):
    check(text)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=40).map(" ".join))
def test_token_soup(text):
    check(text)


def test_structured_programs_sometimes_lower():
    """The structured generator is not all errors: a fixed sample contains valid graphs."""
    ok = 0

    @settings(max_examples=100, deadline=None, derandomize=True, database=None)
    @given(structured())
    def count(text):
        nonlocal ok
        try:
            graph_from_text(text, FILE)
            ok += 1
        except MapperError:
            pass

    count()
    assert ok >= 20

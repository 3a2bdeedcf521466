"""The explicit-cost fast path of the parser builds exactly the program Lark builds, spans
included, or declines; it never accepts a text Lark rejects."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mapper.errors import DslError
from mapper.frontend import lark_parse as L
from mapper.frontend import parse as P
from mapper.frontend.fastparse import MIN_LINES, _Reader, fast_parse


def lark(text: str, file: str = "big.tg"):
    return L._ToAst(file, text).transform(L._parser().parse(text))


def program(seed: int, tasks: int = MIN_LINES + 20) -> str:
    """An explicit-cost graph in varied but valid spellings: units, trailing commas, comments,
    tabs, exponents, a unit glued to its number, edges with and without a spec."""
    rng = random.Random(seed)
    lines = ["# a profiled graph", "graph big {"]
    for i in range(tasks):
        items = []
        for d in range(rng.randint(1, 4)):
            num = rng.choice([str(rng.randint(0, 99)), f"{rng.uniform(0, 9):.3f}", f"{rng.randint(1, 9)}e{rng.randint(-3, 3)}",
                              f"{rng.uniform(1, 9):.2f}E+2"])
            unit = rng.choice(["", " ms", " us", "ms", " s"])
            if unit == "ms" and "e" in num.lower():
                unit = " ms"
            items.append(f"p{d + 1}{rng.choice([':', ' :', ': '])} {num}{unit}")
        tail = rng.choice(["", ",", ", "])
        sep = rng.choice(["  ", "\t", " "])
        comment = rng.choice(["", "  # measured", "#x"])
        extra = rng.sample([f" memory {rng.randint(0, 9)}{rng.choice(['', ' MiB', ' GB'])}",
                            f" colocate c{rng.randint(0, 9)}", " backward"], rng.randint(0, 3))
        if rng.random() < 0.5:
            extra = []
        lines.append(f"{sep}task t{i} cost {{ " + ", ".join(items) + f"{tail} }}" + "".join(extra) + comment)
    for i in range(tasks - 1):
        j = rng.randint(i + 1, tasks - 1)
        spec = rng.choice(["", f" comm {rng.randint(1, 9)}", f" comm {rng.uniform(0, 2):.2f} us", f" bytes {rng.randint(1, 99)} MiB",
                           f" bytes {rng.randint(1, 9)}KiB"])
        lines.append(f"  t{i}{rng.choice(['->', ' -> ', '  ->  '])}t{j}{spec}")
        if rng.random() < 0.05:
            lines.append("")
    lines += ["}", "# the end", ""]
    return "\n".join(lines)


def test_the_fast_path_builds_larks_program_spans_included():
    for seed in range(6):
        text = program(seed)
        fast = fast_parse(text, "big.tg")
        assert fast is not None
        assert fast == lark(text)
        assert P.parse(text, "big.tg") == fast


def test_small_and_unusual_programs_take_lark():
    base = program(1)
    assert fast_parse(program(1, tasks=5), "f.tg") is None  # below MIN_LINES
    for change in ("param N = 3\n", "include \"a.tg\"\n", "graph two {\n}\n"):
        assert fast_parse(change + base if "graph two" not in change else base + change, "f.tg") is None
    lines = base.split("\n")
    for bad in ("  task task cost { p1: 1 }", "  t1 -> t2; t2 -> t3", "  task a cost { p1: 1 } @gpu",
                "  task a cost {", "  task a cost { p1: -1 }", "  task a cost { comm: 1 }", "  t1 -> t2 comm 1 bytes",
                "  t1 -> t2 flops 3", "  tâ -> t2", "  y = relu(x)", "  task a work { flops 1 }"):
        assert fast_parse("\n".join([*lines[:5], bad, *lines[5:]]), "f.tg") is None, bad


def test_errors_read_the_same_either_way():
    text = program(2).replace("task t7 cost", "task t3 cost", 1)  # a duplicate task name
    messages = []
    for prog in (P.parse(text, "big.tg"), lark(text)):
        try:
            from mapper.frontend.lowering.program import lower

            lower(prog)
        except DslError as err:
            messages.append((err.message, err.span, err.hint))
    assert len(messages) == 2 and messages[0] == messages[1]
    assert "'t3' is already defined" in messages[0][0]


def test_one_line_readers_agree_with_the_token_path():
    reader = _Reader("", "f.tg")
    for line in ("  task a cost { p1: 1.5 ms, p2: 3 }", "\ttask a cost {p1:2,p2 : 3 us ,}  # c",
                 "  a -> b comm 3 us", "  a->b", "a -> b bytes 1e3 MiB  # c",
                 "  task a cost { p1: 1 } memory 3 MiB colocate c2 backward"):
        toks = P_tokens(line)
        line_reader = reader.task_line(line, 3) if "task" in line else reader.edge_line(line, 3)
        token_reader = reader.task(toks, 3) if toks[0][0] == "task" else reader.edge(toks, 3)
        assert line_reader is None or line_reader == token_reader, line
    for line in ("  task t0 cost { p0: 8.5998ms, p1: 12.8997ms }", "  t0 -> t1 comm 1.5ms",
                 "  task a cost { p1: 2us , p2: 3 }", "  a -> b bytes 1e3MiB"):
        # a unit right after its number (the generated benchmarks' form) takes the one-line reader too
        toks = P_tokens(line)
        line_reader = reader.task_line(line, 3) if "task" in line else reader.edge_line(line, 3)
        token_reader = reader.task(toks, 3) if toks[0][0] == "task" else reader.edge(toks, 3)
        assert line_reader is not None and line_reader == token_reader, line


def P_tokens(line: str):
    """The tokenizer of the token path."""
    from mapper.frontend.fastparse import _tokens

    return _tokens(line)


MUTATIONS = ["", "task", "->", "{", "}", ",", ":", "1", "-1", "1e", "ms", "comm", "bytes", ";", "@gpu", "#", "\t",
             " memory 3", " colocate", " backward", "memory", "colocate c",
             "x", "é", "\\", "graph g {", "param", "\"s\"", "1.5", "(", "[", "**"]


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 5), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 200), st.sampled_from(MUTATIONS)),
                                   min_size=1, max_size=3))
@pytest.mark.slow
def test_the_fast_path_never_accepts_what_lark_rejects(seed, edits):
    lines = program(seed).split("\n")
    for where, col, text in edits:
        k = where % len(lines)
        line = lines[k]
        c = col % (len(line) + 1)
        lines[k] = line[:c] + text + line[c:]
    text = "\n".join(lines)
    fast = fast_parse(text, "big.tg")
    if fast is None:
        return
    assert fast == lark(text)  # Lark accepts it too, as the same program


def test_a_large_explicit_cost_compile_does_not_import_lark(tmp_path):
    # the fast path needs no parse tree: Lark, the split search and the training
    # step stay unimported, which is most of a whole-process compile's start
    import subprocess
    import sys

    lines = [f"  task t{i} cost {{ p1: {i % 7 + 1}, p2: {i % 5 + 1}, p3: {i % 3 + 1} }}" for i in range(MIN_LINES)]
    lines += [f"  t{i} -> t{i + 1 + i % 3} comm 2" for i in range(MIN_LINES - 3)]
    (tmp_path / "big.tg").write_text("graph big {\n" + "\n".join(lines) + "\n}\n")
    code = ("import sys; from mapper.pipeline import compile_graph; "
            f"compile_graph({str(tmp_path / 'big.tg')!r}, 'heft3', mapper='heft'); "
            "print(sorted(m for m in ('lark', 'mapper.frontend.lark_parse', 'mapper.parallel.search', 'mapper.costing.training') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_fast_node_builders_make_the_dataclasses_objects():
    """mapper.frontend.nodes builds nodes equal to (same hash, repr, fields) the dataclasses' own."""
    from mapper.errors import SourceSpan
    from mapper.frontend import nodes as N
    from mapper.frontend import syntax as S

    sp = SourceSpan("f.tg", 3, 4, 9)
    for make, cls, args in ((N.span, SourceSpan, ("f.tg", 3, 4, None)), (N.num, S.Num, (2.5, sp)),
                            (N.measure, S.Measure, ("gpu", S.Num(1, sp), "ms", sp, None)),
                            (N.name, S.Name, ("t1", (), sp))):
        built, ref = make(*args), cls(*args)
        assert type(built) is cls and built == ref and hash(built) == hash(ref) and repr(built) == repr(ref)
    with pytest.raises(TypeError):
        N.span("f.tg", 1)  # every field is given

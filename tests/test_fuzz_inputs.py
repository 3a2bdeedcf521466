"""Fuzzing platform files and option values: whatever the text or the value, only a
MapperError comes out (a clean message and exit 2 or 3 on the command line).

Platform files are mutations of the shipped ones (values replaced by edge cases of TOML
and of float, keys deleted, renamed or duplicated, sections dropped); option values are
drawn for every numeric and named option of ``mapper compile``.
"""

from __future__ import annotations

import math
import re
from importlib import resources

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mapper.cli import main
from mapper.costing.cost import build_cost_table
from mapper.errors import MapperError
from mapper.frontend.load import graph_from_text
from mapper.mapping import get_mapper
from mapper.platform.loader import Platform, parse_platform

SHIPPED = {p.name: p.read_text(encoding="utf-8") for p in resources.files("mapper.platforms").iterdir()
           if p.name.endswith(".toml")}
VALUES = ["0", "-1", "1e308", "1e-320", "5e-324", "nan", "inf", "-inf", '"10"', '"x"', "true", "[]", "{}",
          "1" + "0" * 400, "0.0", "1e15", "1e16", "1e-9", "1e-10", '"\\u001b[2J"', "2024-01-01", "{ f32 = 0 }",
          "{ f32 = nan }", "{ m = 1e308, n = 1, k = 1 }", '"cpu0"', '"gpu"', '"fpga"']
KEY_LINE = re.compile(r"^([A-Za-z_\"][^=\n]*?)\s*=\s*(.+)$", re.M)
GRAPH = graph_from_text("graph g {\n  input x : f32[64, 64]\n  y = matmul(relu(x), weight f32[64, 64])\n"
                        "  output y\n}\n", "fuzz.tg")
SETTINGS = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def mutated_platform(draw) -> str:
    text = draw(st.sampled_from(sorted(SHIPPED.values())))
    lines = text.split("\n")
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(lines) - 1))
        match = KEY_LINE.match(lines[i])
        kind = draw(st.sampled_from(("value", "value", "delete", "rename", "duplicate", "section")))
        if kind == "value" and match:
            lines[i] = f"{match.group(1)} = {draw(st.sampled_from(VALUES))}"
        elif kind == "delete":
            del lines[i]
        elif kind == "rename" and match:
            key = match.group(1)
            lines[i] = f"{key[:-1] if len(key) > 1 else key + '_'} = {match.group(2)}"
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        elif kind == "section":
            lines.insert(i, draw(st.sampled_from(("[[device]]", "[[link]]", "[device]", "[x]"))))
        if not lines:
            lines = [""]
    return "\n".join(lines)


@SETTINGS
@given(mutated_platform())
def test_mutated_platforms_raise_only_mapper_errors(text):
    try:
        plat = parse_platform(text, "fuzz.toml")
    except MapperError as err:
        assert err.message and err.obj
        return
    assert isinstance(plat, Platform) and plat.devices
    for d in plat.devices:  # every number the model divides by is a sane positive number
        for _, rate in d.peak_gflops:
            assert 1e-9 <= rate <= 1e15
    try:
        cost = build_cost_table(GRAPH, plat)
        result = get_mapper("heft").map(cost)
    except MapperError as err:
        assert err.message
        return
    assert math.isfinite(result.schedule.makespan)


OPTION_VALUES = ["0", "-0", "-1", "1", "nan", "inf", "-inf", "1e308", "1e-308", "2.5", "x", "", " ", "10**3",
                 "9" * 40, "0x10", "\x1b[2J", "-", "--json"]
OPTIONS = ["--time-limit", "--makespan-bound", "--seed", "--mapper", "--compare", "--objective", "--platform",
           "--dump-after"]


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(OPTIONS), st.sampled_from(OPTION_VALUES)), min_size=1, max_size=3))
def test_option_values_end_in_a_clean_exit(capsys, tmp_path_factory, options):
    src = tmp_path_factory.mktemp("opts") / "g.tg"
    src.write_text("graph g {\n  input x : f32[16, 16]\n  y = relu(x)\n  output y\n}\n")
    argv = ["compile", str(src), "--platform", "workstation", "--mapper", "heft", "-q"]
    for flag, value in options:
        argv += [flag, value]
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own usage errors
        code = exit_.code
    err = capsys.readouterr().err
    assert code in (0, 2, 3), err
    assert "Traceback" not in err and "internal error" not in err
    assert "\x1b" not in err

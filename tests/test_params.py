"""``--param NAME=VALUE``: a DSL program's top-level params replaced on every command."""

from __future__ import annotations

import json

import pytest

from mapper.cli import main
from mapper.errors import OptionsError
from mapper.frontend.load import graph_from_text
from mapper.frontend.sources import ModelFile, parse_params, program_source

PROGRAM = """
param B = 4, H = 64, T = B * 2
graph g {
  input x : f32[T, H]
  y = relu(matmul(x, weight f32[H, H]))
  output y
}
"""


def test_override_replaces_the_value_and_derived_params_follow():
    g = graph_from_text(PROGRAM, "p.tg", {"B": 8, "H": 32})
    assert g.inputs[0][1].shape == (16, 32)
    assert graph_from_text(PROGRAM, "p.tg").inputs[0][1].shape == (8, 64)


def test_unknown_param_lists_the_params():
    with pytest.raises(OptionsError) as err:
        graph_from_text(PROGRAM, "p.tg", {"HH": 3})
    assert "B, H, T" in err.value.message and err.value.hint == "did you mean 'H'?"


@pytest.mark.parametrize("item", ["B", "=3", "B=", "B=x", "B=nan", "B=inf", "1B=3", "B=" + "9" * 30])
def test_bad_items(item):
    with pytest.raises(OptionsError):
        parse_params([item])


def test_values_keep_their_type():
    assert parse_params(["A=3", "B=-2", "C=0.5"]) == (("A", 3), ("B", -2), ("C", 0.5))


def test_a_param_given_twice_is_refused_not_last_wins():
    with pytest.raises(OptionsError, match="--param A is given twice"):
        parse_params(["A=3", "B=-2", "A=4"])


def test_program_source_carries_params_for_dsl_only(tmp_path):
    assert program_source("a.tg") == "a.tg"
    assert program_source("a.tg", params=["B=2"]) == ModelFile("a.tg", params=(("B", 2),))
    with pytest.raises(OptionsError):
        program_source("a.onnx", params=["B=2"])


@pytest.mark.parametrize("command", [["check"], ["cost", "--platform", "workstation"],
                                     ["compile", "--platform", "workstation", "-q", "--json", "-"],
                                     ["run", "--platform", "workstation"]])
def test_every_command_takes_param(tmp_path, capsys, command):
    f = tmp_path / "p.tg"
    f.write_text(PROGRAM)
    assert main([command[0], str(f), *command[1:], "--param", "B=2"]) == 0
    out = capsys.readouterr().out
    if "--json" in command:
        assert json.loads(out)["graph"]["tasks"] >= 1
    assert main([command[0], str(f), *command[1:], "--param", "Q=2"]) == 2
    assert "its params: B, H, T" in capsys.readouterr().err


def test_param_value_is_checked_like_the_files(tmp_path, capsys):
    f = tmp_path / "p.tg"
    f.write_text(PROGRAM)
    assert main(["check", str(f), "--param", "B=0.5"]) == 2
    assert "error" in capsys.readouterr().err

"""Every subcommand's ``--help``: options in titled groups, FILE described as what it takes (.tg
and .onnx), no word broken across lines, and ``import FORMAT`` showing that format's options only."""

from __future__ import annotations

import re

import pytest

from mapper.cli import PARALLEL_HELP, build_parser


def _parser(*argv: str):
    parser = build_parser()
    for name in argv:  # the subparser of each word in turn
        action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        parser = action.choices[name]  # type: ignore[union-attr]
    return parser


def _help(monkeypatch, *argv: str, columns: int = 80) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))
    return _parser(*argv).format_help()


def _groups(text: str) -> list[str]:
    """The titles of the help's option groups (a line of its own, ending in ':', not indented)."""
    return [line[:-1] for line in text.splitlines() if re.fullmatch(r"[a-z][a-z ]*:", line)]


def _section(text: str, title: str) -> str:
    """The lines of one group of the help."""
    out, inside = [], False
    for line in text.splitlines():
        if re.fullmatch(r"[a-z][a-z ]*:", line):
            inside = line == f"{title}:"
        elif inside:
            out.append(line)
    return "\n".join(out)


def test_compile_help_groups_its_options(monkeypatch):
    text = _help(monkeypatch, "compile")
    assert _groups(text) == ["options", "input", "platform", "mapping", "limits", "parallel and training",
                             "inference", "reports", "examples"]
    assert "--dim" in _section(text, "input") and "--platform" in _section(text, "platform")
    assert "--time-limit" in _section(text, "limits") and "--mapper" in _section(text, "mapping")
    assert "--parallel" in _section(text, "parallel and training") and "--max-tpot" in _section(text, "inference")
    assert "--html" in _section(text, "reports")
    assert _section(text, "options").count("--") == 1  # -h, --help only: every option has its group
    usage = text.split("\n\n")[0]
    assert usage.index("--param") < usage.index("--dim")  # the DSL's option before the ONNX ones


@pytest.mark.parametrize("command", ["compile", "run", "cost", "check"])
def test_file_takes_an_onnx_model_too(monkeypatch, command):
    text = " ".join(_section(_help(monkeypatch, command), "input").split())
    assert "FILE a task-graph DSL program (.tg), or an ONNX model (.onnx" in text


@pytest.mark.parametrize("argv", [("compile",), ("run",), ("cost",), ("check",), ("import", "onnx"),
                                  ("import", "wfcommons"), ("import", "dot"), ("calibrate",)])
@pytest.mark.parametrize("columns", [60, 80, 100])
def test_no_word_is_broken_across_lines(monkeypatch, argv, columns):
    text = " ".join(_help(monkeypatch, *argv, columns=columns).split())
    for action in _parser(*argv)._actions:
        if action.help and action.help != "==SUPPRESS==":
            # wrapped between words only: not --input-\nshape, micro-\nbatch, or a long layout cut anywhere
            assert " ".join(action.help.split()) in text, action.option_strings


def test_parallel_help_says_mode_or_layout(monkeypatch):
    text = " ".join(_section(_help(monkeypatch, "compile"), "parallel and training").split())
    assert "a MODE when the text has no '=', a LAYOUT when it has" in text
    assert " ".join(PARALLEL_HELP.split()) in text  # whole, not cut inside a word
    run = " ".join(_section(_help(monkeypatch, "run"), "mapping").split())
    assert "--parallel MODE|LAYOUT" in run and "(text with '=')" in run


def test_run_and_cost_group_their_options(monkeypatch):
    assert _groups(_help(monkeypatch, "run")) == ["options", "input", "platform", "mapping", "execution", "reports"]
    assert _groups(_help(monkeypatch, "cost")) == ["options", "input", "platform", "mapping", "training", "reports"]


def test_import_onnx_help_shows_no_wfcommons_options(monkeypatch):
    text = _help(monkeypatch, "import", "onnx")
    assert "--dim" in text and "--input-shape" in text
    for other in ("--parallel", "--gflops-per-core", "--procs", "--platform-out", "--param"):
        assert other not in text
    wf = _help(monkeypatch, "import", "wfcommons")
    assert "--parallel P" in wf and "Amdahl" in wf and "--dim" not in wf
    dot = _help(monkeypatch, "import", "dot")
    assert "--procs" in dot and "--parallel" not in dot


def test_another_formats_option_is_refused_by_name(capsys):
    from mapper.cli import main

    assert main(["import", "onnx", "model.onnx", "--parallel", "0.5"]) == 2
    assert "--parallel applies to wfcommons imports only" in capsys.readouterr().err
    assert main(["import", "wfcommons", "w.json", "--dim", "batch=1"]) == 2
    assert "--dim applies to onnx imports only" in capsys.readouterr().err

"""Malformed platform files: each gives one one-line PlatformError naming the key.

Every file in tests/data/platforms_bad/ starts with ``# expect: KEY | TEXT``:
KEY is the key path the error must name (``@LINE:COL`` for TOML syntax
errors) and TEXT a fragment of the message.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mapper.cli import main
from mapper.errors import PlatformError, format_error
from mapper.platform.loader import load_platform

BAD = Path(__file__).parent / "data" / "platforms_bad"
FILES = sorted(BAD.glob("*.toml"))


def _expect(path: Path) -> tuple[str, str]:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), path
    key, text = first[len("# expect: "):].split(" | ", 1)
    return key, text


def test_there_are_at_least_twenty_bad_files():
    assert len(FILES) >= 20


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_bad_platform_file(path):
    key, text = _expect(path)
    with pytest.raises(PlatformError) as info:
        load_platform(str(path))
    err = info.value
    rendered = format_error(err)
    assert "\n" not in rendered and "\n" not in str(err)
    assert text in err.message
    if key.startswith("@"):
        line, col = (int(x) for x in key[1:].split(":"))
        assert err.span is not None and (err.span.line, err.span.col) == (line, col)
        assert rendered.startswith(f"{path}:{line}:{col}: error: TOML syntax error")
    else:
        assert err.obj == f"{path}: {key}"
        assert rendered.startswith(f"{path}: {key}: error: ")


def test_missing_file_and_unknown_name():
    with pytest.raises(PlatformError, match="no such platform file") as info:
        load_platform("no/such/dir/plat.toml")
    assert info.value.obj == "no/such/dir/plat.toml"
    with pytest.raises(PlatformError, match="unknown platform 'nosuch'; shipped: .*workstation"):
        load_platform("nosuch")


def test_cli_reports_a_bad_platform_in_one_line_with_exit_2(tmp_path, capsys):
    graph = tmp_path / "g.tg"
    graph.write_text("graph g {\n  task a cost { p1: 1 }\n}\n")
    bad = BAD / "negative_link_bandwidth.toml"
    code = main(["cost", str(graph), "--platform", str(bad)])
    err = capsys.readouterr().err
    assert code == 2
    assert err == f"{bad}: link[0].bandwidth_gbs: error: expected a positive number in GB/s, got -25.0\n"


def test_cli_subprocess_has_no_traceback(tmp_path):
    graph = tmp_path / "g.tg"
    graph.write_text("graph g {\n  task a cost { p1: 1 }\n}\n")
    bad = BAD / "toml_syntax_error.toml"
    proc = subprocess.run(
        [sys.executable, "-m", "mapper", "cost", str(graph), "--platform", str(bad)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "TOML syntax error" in proc.stderr

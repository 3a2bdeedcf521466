"""The status line of long searches (mapper.core.progress): on a terminal it shows each search
phase (the mappers', the parallel plan search's, run's kernels); with ``-q`` or when stderr is
not a terminal it prints nothing. Terminals are pseudo-terminals (the pty module); the delay
before the line appears is set to 0 so that every report is drawn, whatever the machine's speed."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import mapper.core.progress as progress
from mapper.cli import main
from mapper.core.progress import Progress, StatusLine

TINY = """graph tiny {
  input x : f32[64, 256]
  h = relu(matmul(x, weight f32[256, 256]))
  y = matmul(h, weight f32[256, 256])
  output y
}
"""


@pytest.fixture
def at_once(monkeypatch):
    """The status line shows from the first report, and every report."""
    monkeypatch.setattr(progress, "DELAY", 0.0)
    monkeypatch.setattr(progress, "REDRAW", 0.0)


@pytest.fixture
def tiny(tmp_path) -> Path:
    path = tmp_path / "tiny.tg"
    path.write_text(TINY)
    return path


class Terminal:
    """A pseudo-terminal whose slave side stands in for stderr; what reaches it is read on a thread
    (so that a full buffer never blocks the writer)."""

    def __init__(self) -> None:
        self.master, slave = pty.openpty()
        self.stream = os.fdopen(slave, "w", buffering=1, encoding="utf-8")
        self.chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 4096)
            except OSError:  # the slave side closed
                return
            if not data:
                return
            self.chunks.append(data)

    def close(self) -> str:
        self.stream.close()
        self._reader.join(timeout=30)
        os.close(self.master)
        return b"".join(self.chunks).decode()


def _on_terminal(argv: list[str]) -> tuple[int, str]:
    term = Terminal()
    stderr, sys.stderr = sys.stderr, term.stream
    try:
        code = main(argv)
    finally:
        sys.stderr = stderr  # back before the terminal closes
    return code, term.close()


def test_the_parallel_plan_search_shows_progress_on_a_terminal(at_once, tiny, capsys):
    code, shown = _on_terminal(["compile", str(tiny), "--platform", "dgx-a100", "--parallel", "auto",
                                             "--mapper", "heft"])
    assert code == 0
    assert "\r  [" in shown and "parallel plans: 1 of " in shown  # a search that printed nothing before
    assert "pricing every task" in shown  # the pipeline's stages between searches
    assert shown.endswith("\r" + " " * progress.WIDTH + "\r")  # erased at the end
    assert "parallel auto" in capsys.readouterr().out  # the report itself is on stdout as before


def test_run_shows_its_kernels_running_on_a_terminal(at_once, tiny, capsys):
    code, shown = _on_terminal(["run", str(tiny), "--platform", "workstation", "--repeats", "1",
                                             "--backend", "numpy"])
    assert code == 0
    assert "running the kernels" in shown and "mapping" in shown


def test_quiet_prints_nothing_on_a_terminal(at_once, tiny, capsys):
    code, shown = _on_terminal(["compile", str(tiny), "--platform", "dgx-a100", "--parallel", "auto",
                                             "--mapper", "heft", "-q"])
    assert code == 0 and shown == ""
    code, shown = _on_terminal(["run", str(tiny), "--platform", "workstation", "--repeats", "1",
                                             "--backend", "numpy", "-q"])
    assert code == 0 and shown == ""


def test_nothing_is_printed_when_stderr_is_not_a_terminal(at_once, tiny, capsys):
    assert main(["compile", str(tiny), "--platform", "dgx-a100", "--parallel", "auto", "--mapper", "heft"]) == 0
    assert main(["run", str(tiny), "--platform", "workstation", "--repeats", "1", "--backend", "numpy"]) == 0
    assert capsys.readouterr().err == ""


def test_piped_from_a_subprocess_stderr_stays_empty(tiny):
    out = subprocess.run([sys.executable, "-m", "mapper", "compile", str(tiny), "--platform", "dgx-a100",
                          "--parallel", "auto", "--mapper", "heft"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stderr == ""


def test_the_line_waits_for_the_delay_and_is_erased(monkeypatch):
    monkeypatch.setattr(progress, "DELAY", 3600.0)
    term = Terminal()
    with StatusLine(term.stream, lambda p: "") as line:
        line(Progress(0.0, None, None, "searching"))
    assert term.close() == ""  # a command quicker than the delay prints nothing
    monkeypatch.setattr(progress, "DELAY", 0.0)
    term = Terminal()
    with StatusLine(term.stream, lambda p: f"best {p.incumbent}") as line:
        line(Progress(0.0, 2.0, None, "searching"))
    shown = term.close()
    assert "] searching: best 2.0" in shown and shown.endswith("\r" + " " * progress.WIDTH + "\r")


def test_verbose_logs_search_phases_as_lines_when_not_a_terminal():
    out = io.StringIO()
    with StatusLine(out, lambda p: f"best {p.incumbent}", lines=True) as line:
        line(Progress(0.5, None, None, "lowering"))  # no figures: not logged
        line(Progress(1.0, 3.0, None, "CP-SAT"))
        line(Progress(1.1, 2.5, None, "CP-SAT"))  # the same phase within EVERY seconds
        line(Progress(1.2, 2.5, None, "done"))
    assert out.getvalue() == "CP-SAT: 1.0 s, best 3.0\ndone: 1.2 s, best 2.5\n"


def test_a_warning_erases_the_line_first(at_once):
    term = Terminal()
    with StatusLine(term.stream, lambda p: "") as line:
        line(Progress(0.0, None, None, "searching"))
        progress.erase_status()
        term.stream.write("warning: something\n")
    shown = term.close()
    assert "searching" + " " * 10 in shown
    assert "\r" + " " * progress.WIDTH + "\rwarning: something" in shown.replace("\r\n", "\n")

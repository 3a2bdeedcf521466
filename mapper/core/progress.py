"""Progress of a long search, and the one status line that shows it on a terminal.

Searches (the mappers' exact and LNS searches, the parallel plan search, the
cluster and serving layout searches) and the pipeline's stages hand a
:class:`Progress` to a callback now and then; they never print. The command
line hands them a :class:`StatusLine`, which shows the latest report on
stderr:

- on a terminal, one line rewritten in place (``\\r``) about four times a
  second by a background thread, so the elapsed time moves even while a stage
  reports nothing; it appears only once the command has worked for
  :data:`DELAY` seconds (a quick command prints nothing) and is erased when the
  command ends;
- not on a terminal (a pipe, a log file): nothing, unless ``lines`` is set
  (``--verbose``): then one line per new search phase and at most one every
  :data:`EVERY` seconds, for reports that carry a schedule or a bound;
- with ``-q``: nothing (the CLI does not make one).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

#: Seconds a command works before its status line appears on a terminal.
DELAY = 2.0
#: Seconds between redraws of the status line.
REDRAW = 0.25
#: Seconds between progress lines when the output is not a terminal (``--verbose``).
EVERY = 2.0
#: Width of the status line.
WIDTH = 78


@dataclass(frozen=True, slots=True)
class Progress:
    """One progress report: seconds since the search began, the best objective found and the
    proven bound so far (None when not known), and what the search is doing."""

    elapsed: float
    incumbent: float | None
    bound: float | None
    phase: str = ""  # "heuristics", "LNS", "exact MILP", "parallel plans 3 of 40", a pipeline stage, "done"


#: What a search calls with its reports.
ProgressFn = Callable[[Progress], None]


def erase_status() -> None:
    """Erase the status line on show, if any, so that a warning or message starts on a clean line."""
    for line in list(_ACTIVE):
        line.erase()


class StatusLine:
    """A :data:`ProgressFn` that shows the latest report on ``stream`` (module docstring).

    ``describe(report)`` renders a report's figures (the incumbent and bound, with their
    unit); use it as a context manager around the work. A report is drawn at once when the
    line is due (the searches' own thread), and the background thread redraws it between
    reports.
    """

    def __init__(self, stream: TextIO, describe: Callable[[Progress], str], *, lines: bool = False) -> None:
        self.stream, self.describe = stream, describe
        self.live = stream.isatty()
        self.lines = lines and not self.live
        self._lock = threading.RLock()  # re-entrant: a signal handler (Ctrl-C) may erase the line mid-draw
        self._latest: Progress | None = None
        self._shown = False
        self._start = time.perf_counter()
        self._drawn_at = -math.inf
        self._drawn = ""
        self._last_phase: str | None = None
        self._last_line = -math.inf
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, report: Progress) -> None:
        with self._lock:
            self._latest = report
        if self.live:
            self._draw(force=False)
        elif self.lines and (report.incumbent is not None or report.bound is not None):
            now = time.perf_counter()
            if report.phase != self._last_phase or now - self._last_line >= EVERY:
                self._last_phase, self._last_line = report.phase, now
                self.stream.write(f"{report.phase or 'mapping'}: {report.elapsed:.1f} s, {self.describe(report)}\n")
                self.stream.flush()

    def text(self) -> str | None:
        """The status line now (None before the first report)."""
        with self._lock:
            report = self._latest
        if report is None:
            return None
        figures = self.describe(report)
        total = time.perf_counter() - self._start
        return f"[{total:.0f} s] {report.phase or 'working'}{': ' + figures if figures else ''}"

    def _draw(self, force: bool) -> None:
        """Write the line if the command has run :data:`DELAY` seconds and (unless ``force``) the
        last draw is :data:`REDRAW` seconds old."""
        now = time.perf_counter()
        if now - self._start < DELAY or not (force or now - self._drawn_at >= REDRAW):
            return
        text = self.text()
        if text is None:
            return
        with self._lock:
            if self._done.is_set() or text == self._drawn:  # cleared, or nothing new to show
                return
            self._drawn_at, self._drawn = now, text
            self.stream.write("\r  " + text[: WIDTH - 2].ljust(WIDTH - 2))
            self.stream.flush()
            self._shown = True

    def _loop(self) -> None:
        if self._done.wait(max(0.0, DELAY - (time.perf_counter() - self._start))):
            return
        while True:
            self._draw(force=True)
            if self._done.wait(max(REDRAW, 0.05)):
                return

    def erase(self) -> None:
        """Erase the line (before another message takes its place); the next draw puts it back."""
        with self._lock:
            if self._drawn:
                self.stream.write("\r" + " " * WIDTH + "\r")
                self.stream.flush()
                self._drawn = ""

    def __enter__(self) -> StatusLine:
        _ACTIVE.append(self)
        if self.live:
            self._thread = threading.Thread(target=self._loop, name="mapper-status-line", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self._shown:
                self.stream.write("\r" + " " * WIDTH + "\r")
                self.stream.flush()


#: The status lines in use (at most one: a command shows one).
_ACTIVE: list[StatusLine] = []

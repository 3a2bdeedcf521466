"""Signals that reach a compile while it is mapping, by construction rather than by timing.

:func:`signal_while_mapping` reads a ``--verbose`` compile's progress lines on
stderr until the exact search reports (a ``CP-SAT:`` line: the map stage is
under way and the solver has a first schedule), stops the process
(SIGSTOP), queues the signal, and lets it go on (SIGCONT): the signal is
handled while the process is mapping however fast or slow the machine is.
Give the compile a graph the search cannot prove in the first second
(:func:`randdag.slow_to_prove_dsl` with ``n=100``) so the phase line comes
before the end.
"""

from __future__ import annotations

import signal
import subprocess

#: The progress line that says the exact search is running (mapper/cli/compile.py's printer).
SEARCHING = "CP-SAT:"


def signal_while_mapping(proc: subprocess.Popen[str], signum: int) -> list[str]:
    """Deliver ``signum`` to ``proc`` while it maps; the stderr lines read before it.

    Raises AssertionError when the compile ends before reporting a search.
    """
    assert proc.stderr is not None
    seen: list[str] = []
    for line in proc.stderr:
        seen.append(line)
        if line.startswith(SEARCHING):
            proc.send_signal(signal.SIGSTOP)
            proc.send_signal(signum)
            proc.send_signal(signal.SIGCONT)
            return seen
        assert not line.startswith("done:"), f"the compile ended before its search was seen: {seen}"
    raise AssertionError(f"the compile ended before its search was seen: {seen}")

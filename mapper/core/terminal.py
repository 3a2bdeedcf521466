"""Text on its way to a terminal: control characters shown escaped.

Names and lines from user files (DSL source, platform names, TOML keys,
include paths) reach the terminal in messages and tables. Raw, an ANSI or
OSC escape sequence in them could move the cursor, retitle the window or
hide text, and bidirectional controls could reorder what is shown (the
"Trojan Source" attack, Boucher and Anderson, USENIX Security 2023). The CLI
writes through :class:`EscapingStream`, which shows every such character as
a Python-style escape (``\\x1b``, ``\\u202e``); tabs, newlines and carriage
returns pass.
"""

from __future__ import annotations

import re
from typing import TextIO

#: C0 and C1 controls (less tab, newline, carriage return), DEL, and the
#: Unicode bidirectional and invisible formatting controls.
_UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """``text`` with every control character but ``\\t``, ``\\n``, ``\\r`` escaped."""
    return _UNSAFE.sub(_escape, text)


class EscapingStream:
    """A text stream that escapes control characters before writing to ``inner``."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write(escape_controls(text))
        return len(text)

    def writelines(self, lines: list[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self.inner.flush()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()

    def __getattr__(self, name: str) -> object:  # encoding, buffer, ...
        return getattr(self.inner, name)

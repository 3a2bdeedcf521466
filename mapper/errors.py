"""Errors raised by mapper, and their compiler-style rendering.

Every error a user can cause derives from :class:`MapperError`. The CLI maps
them to exit codes: :class:`InputError` (bad DSL, platform or option) -> 2,
:class:`InfeasibleError` (no valid mapping exists) -> 3, anything else -> 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from mapper.core.terminal import escape_controls


@dataclass(frozen=True, slots=True)
class SourceSpan:
    """A position in a source file: 1-based line and column.

    ``end_col`` (exclusive, same line) widens the caret when known.
    """

    file: str
    line: int
    col: int
    end_col: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class MapperError(Exception):
    """Root of every error mapper raises on purpose."""

    exit_code = 1

    def __init__(
        self,
        message: str,
        *,
        span: SourceSpan | None = None,
        hint: str | None = None,
        source_line: str | None = None,
        obj: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.span = span
        self.hint = hint
        self.source_line = source_line
        self.obj = obj

    def __str__(self) -> str:  # one line, for logs and pytest
        where = f"{self.span}: " if self.span else (f"{self.obj}: " if self.obj else "")
        return f"{where}{self.message}"


class InputError(MapperError):
    """Bad user input: DSL source, platform file, or command-line option."""

    exit_code = 2


class DslError(InputError):
    """A syntax or semantic error in a DSL program; carries a span."""


class PlatformError(InputError):
    """A malformed platform file; ``obj`` names the file and key path."""


class OptionsError(InputError):
    """A bad command-line option or API argument."""


class InfeasibleError(MapperError):
    """No valid mapping exists; the message names the constraint at fault."""

    exit_code = 3


class InputWarning(UserWarning):
    """Something an input left out or mapper guessed (an imported op priced from its
    shape, weights not read); the CLI prints it as ``warning: ...``."""


#: The most characters of a source line an error shows.
MAX_SHOWN = 160


def format_error(err: MapperError) -> str:
    """Render ``err`` as ``file:line:col: error: message``, source line, caret, hint."""
    if err.span is not None:
        head = f"{err.span}: error: {err.message}"
    elif err.obj is not None:
        head = f"{err.obj}: error: {err.message}"
    else:
        head = f"error: {err.message}"
    lines = [head]
    if err.span is not None and err.source_line is not None:
        text = err.source_line.rstrip("\n")
        col = max(err.span.col - 1, 0)
        width = 1
        if err.span.end_col is not None and err.span.end_col > err.span.col:
            width = err.span.end_col - err.span.col
        if len(text) > MAX_SHOWN:  # a window around the column, not a whole megabyte-long line
            first = max(0, min(col - MAX_SHOWN // 2, len(text) - MAX_SHOWN))
            lead, trail = ("..." if first > 0 else ""), ("..." if first + MAX_SHOWN < len(text) else "")
            text = lead + text[first:first + MAX_SHOWN] + trail
            col = col - first + len(lead)
            width = max(1, min(width, MAX_SHOWN - (col - len(lead))))
        lines.append(f"    {escape_controls(text)}")
        # keep tabs so the caret lines up under the source text
        pad = "".join(ch if ch == "\t" else " " for ch in escape_controls(text[:col]))
        lines.append(f"    {pad}{'^' + '~' * (width - 1)}")
    if err.hint:
        lines.append(f"hint: {err.hint}")
    return "\n".join(lines)

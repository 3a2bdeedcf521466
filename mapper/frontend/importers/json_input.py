"""Reading JSON inputs of other tools: bounded numbers, typed access, and
errors that name the file and the JSON path (``$.nodes[3].id``)."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from mapper.errors import InputError, SourceSpan

#: JSON integers longer than this are refused (the largest id or size fits in 20 digits).
MAX_INT_DIGITS = 30


def load_json(text: str, file: str) -> Any:
    """The document of ``text``; :class:`InputError` with line and column for invalid JSON,
    and for integers of more than :data:`MAX_INT_DIGITS` digits, infinities and NaN."""
    try:
        return json.loads(text, parse_int=_bounded_int, parse_float=_finite_float, parse_constant=_no_constant)
    except RecursionError:
        raise InputError(f"the JSON is nested more than {sys.getrecursionlimit()} levels deep", obj=file) from None
    except ValueError as err:
        if not isinstance(err, json.JSONDecodeError):  # _bounded_int
            raise InputError(str(err), obj=file) from None
        lines = text.splitlines()
        line = lines[err.lineno - 1] if 0 < err.lineno <= len(lines) else None
        raise InputError(f"invalid JSON: {err.msg}", span=SourceSpan(file, err.lineno, err.colno),
                         source_line=line) from None


def read_json_file(path: str, what: str) -> Any:
    """The JSON document in file ``path`` (``what`` names it in the error when unreadable)."""
    from mapper.core.files import Unreadable, read_text

    try:
        text = read_text(path)
    except Unreadable as err:
        raise InputError(f"cannot read {what}: {err.why}", obj=path) from None
    return load_json(text, path)


class JsonReader:
    """Typed access to a parsed JSON document; failures name file and JSON path."""

    def __init__(self, file: str) -> None:
        self.file = file

    def fail(self, path: str, message: str) -> InputError:
        return InputError(message, obj=f"{self.file}: {path}")

    def get(self, obj: dict, key: str, path: str, kind: str, default: Any = ...) -> Any:
        if key not in obj:
            if default is not ...:
                return default
            raise self.fail(f"{path}.{key}", f"missing key {key!r}")
        return self.check(obj[key], f"{path}.{key}", kind)

    def check(self, value: Any, path: str, kind: str) -> Any:
        ok = {
            "object": isinstance(value, dict),
            "array": isinstance(value, list),
            "string": isinstance(value, str),
            "number": isinstance(value, (int, float)) and not isinstance(value, bool),
        }[kind]
        if not ok:
            raise self.fail(path, f"expected {'an' if kind[0] in 'ao' else 'a'} {kind}, "
                                  f"got {type(value).__name__} {str(value)[:40]!r}")
        if kind == "number" and not (math.isfinite(value) and value >= 0):
            raise self.fail(path, f"expected a finite number >= 0, got {value!r}")
        return value

    def deadline(self, obj: dict, path: str) -> float | None:
        """An optional ``"deadline"``: a string with a time unit (``"5 ms"``; ns, us, ms, s),
        in seconds; None when absent."""
        if "deadline" not in obj:
            return None
        text = self.check(obj["deadline"], f"{path}.deadline", "string")
        num, _, unit = text.strip().partition(" ")
        scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}.get(unit.strip())
        try:
            value = float(num)
        except ValueError:
            value = math.nan
        if scale is None or not (math.isfinite(value) and value > 0):
            raise self.fail(f"{path}.deadline", f"expected a positive time with a unit, as \"5 ms\" "
                                                f"(ns, us, ms, s), got {text[:40]!r}")
        return value * scale

    def strings(self, obj: dict, key: str, path: str) -> tuple[str, ...]:
        items = self.get(obj, key, path, "array", [])
        return tuple(self.check(x, f"{path}.{key}[{i}]", "string") for i, x in enumerate(items))



def _bounded_int(text: str) -> int:
    """A JSON integer; ValueError (with a message for the user) when it is absurdly long."""
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"a JSON integer of {len(text.lstrip('-'))} digits is too large "
                         f"(at most {MAX_INT_DIGITS})")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the JSON number {text[:20]} is too large")
    return value


def _no_constant(text: str) -> float:
    raise ValueError(f"{text} is not a JSON number")

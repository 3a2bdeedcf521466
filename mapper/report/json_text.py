"""JSON text as ``json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False)``
writes it, byte for byte, in a fraction of its time.

With an indent, the standard library encodes in Python, one generator step
per token; without one it uses its C encoder. Here each run of scalar
members of a container (a report's task and transfer rows, but for their
nested lists) goes through the C encoder in one call, its item separator
carrying the newline and the indent; only the containers are walked in Python.
:func:`chunks` gives the same text in pieces, for writing it as it is made.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

_SCALARS = (str, int, float, bool, type(None))
#: The exact types of a row of scalars and of its keys (subclasses take the general path).
_FLAT = frozenset(_SCALARS)
_KEYS = frozenset((str,))
_EMPTY = frozenset((list, dict))
_FLAT_OR_EMPTY = _FLAT | _EMPTY
_INDENT = "  "
#: Containers this deep or less are streamed member by member (a report's task and transfer lists are at 1).
STREAM_DEPTH = 2
#: About this many characters a chunk of :func:`chunks`.
CHUNK_CHARS = 1 << 20


class Rows:
    """A list given as its members' JSON text (each as it stands at ``depth + 1``), written as is.

    ``make()`` gives the members in lists (a report's rows, :mod:`mapper.report.json_rows`); it is
    called each time the list is written."""

    __slots__ = ("depth", "make")

    def __init__(self, depth: int, make: Callable[[], Iterable[list[str]]]) -> None:
        self.depth = depth
        self.make = make

    def pieces(self, depth: int) -> Iterator[str]:
        if depth != self.depth:
            raise ValueError(f"rows written for depth {self.depth} placed at depth {depth}")
        pad = "\n" + _INDENT * (depth + 1)
        sep = "[" + pad
        for batch in self.make():
            if batch:
                yield sep + ("," + pad).join(batch)
                sep = "," + pad
        yield "[]" if sep[0] == "[" else f"\n{_INDENT * depth}]"


def _refuse(obj: Any) -> Any:
    raise TypeError(f"Object of type {obj.__class__.__name__} is not JSON serializable")


class _Runs:
    """C encoders for the runs of scalars at each depth (separators carry that depth's indent)."""

    def __init__(self) -> None:
        self._by_depth: dict[int, Any] = {}
        self._scalar = json.JSONEncoder(ensure_ascii=False, allow_nan=False)

    def _encoder(self, depth: int) -> Any:
        sep = ",\n" + _INDENT * (depth + 1)
        make = json.encoder.c_make_encoder  # type: ignore[attr-defined]
        if make is None:  # no C accelerator: the standard encoder, one call per run
            return json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(sep, ": ")).encode
        c = make(None, _refuse, json.encoder.encode_basestring, None, ": ", sep, False, False, False)
        return lambda run: "".join(c(run, 0))

    def items(self, run: dict | list, depth: int) -> str:
        """``run``'s members as they stand inside a container at ``depth``, without its brackets."""
        enc = self._by_depth.get(depth)
        if enc is None:
            enc = self._by_depth[depth] = self._encoder(depth)
        return enc(run)[1:-1]

    def scalar(self, obj: Any) -> str:
        return self._scalar.encode(obj)


def _key(key: Any, runs: _Runs) -> str:
    """A dict key as json writes it (non-string scalars become strings)."""
    if isinstance(key, str):
        return runs.scalar(key)
    if isinstance(key, float):
        return runs.scalar(runs.scalar(key) if key != key or key in (float("inf"), float("-inf"))
                           else float.__repr__(key))
    if isinstance(key, _SCALARS):
        return runs.scalar(runs.scalar(key))
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _members(obj: dict | list | tuple, depth: int, runs: _Runs) -> Iterator[tuple[str, Any, bool]]:
    """``obj``'s members in order: ``(text, None, False)`` for a run of scalars, ``(key prefix, value,
    True)`` for a container member."""
    if isinstance(obj, dict):
        run: dict = {}
        for k, v in obj.items():
            if isinstance(v, _SCALARS) and isinstance(k, str):
                run[k] = v
                continue
            if run:
                yield runs.items(run, depth), None, False
                run = {}
            yield f"{_key(k, runs)}: ", v, True
        if run:
            yield runs.items(run, depth), None, False
        return
    items: list = []
    for v in obj:
        if isinstance(v, _SCALARS):
            items.append(v)
            continue
        if items:
            yield runs.items(items, depth), None, False
            items = []
        yield "", v, True
    if items:
        yield runs.items(items, depth), None, False


def _flat(values: Any) -> bool:
    """Whether ``values`` are scalars or empty lists and dicts, which the C encoder writes as the
    indented encoder does (``[]``, ``{}``)."""
    types = set(map(type, values))
    if types <= _FLAT:
        return True
    return types <= _FLAT_OR_EMPTY and not any(v for v in values if type(v) in _EMPTY)  # a transfer's []


def _brackets(obj: Any) -> str:
    return "{}" if isinstance(obj, dict) else "[]"


def _encode(obj: Any, depth: int, runs: _Runs) -> str:
    if type(obj) is Rows:
        return "".join(obj.pieces(depth))
    if isinstance(obj, _SCALARS) or not isinstance(obj, (dict, list, tuple)):
        return runs.scalar(obj)  # raises TypeError for other types, as json.dumps does
    if type(obj) is dict and obj and _KEYS.issuperset(map(type, obj)) and _flat(obj.values()):
        # a row of scalars (a report's task or transfer): one run, one call of the C encoder
        return f"{{\n{_INDENT * (depth + 1)}{runs.items(obj, depth)}\n{_INDENT * depth}}}"
    if type(obj) is list and obj and _FLAT.issuperset(map(type, obj)):  # a transfer's links, say
        return f"[\n{_INDENT * (depth + 1)}{runs.items(obj, depth)}\n{_INDENT * depth}]"
    parts = [text + _encode(value, depth + 1, runs) if nested else text
             for text, value, nested in _members(obj, depth, runs)]
    brackets = _brackets(obj)
    if not parts:
        return brackets
    pad = "\n" + _INDENT * (depth + 1)
    return f"{brackets[0]}{pad}{(',' + pad).join(parts)}\n{_INDENT * depth}{brackets[1]}"


def _pieces(obj: Any, depth: int, runs: _Runs) -> Iterator[str]:
    """:func:`_encode`'s text in pieces: the members of the containers down to :data:`STREAM_DEPTH`
    one by one."""
    if type(obj) is Rows:
        yield from obj.pieces(depth)
        return
    if depth >= STREAM_DEPTH or not isinstance(obj, (dict, list, tuple)) or not obj:
        yield _encode(obj, depth, runs)
        return
    brackets = _brackets(obj)
    pad = "\n" + _INDENT * (depth + 1)
    sep = brackets[0] + pad
    for text, value, nested in _members(obj, depth, runs):
        yield sep + text
        if nested:
            yield from _pieces(value, depth + 1, runs)
        sep = "," + pad
    yield f"\n{_INDENT * depth}{brackets[1]}"


def dumps(obj: Any) -> str:
    """``json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False)``, the same text."""
    return _encode(obj, 0, _Runs())


def chunks(obj: Any, size: int | None = None) -> Iterator[str]:
    """:func:`dumps`'s text in chunks of about ``size`` characters (default :data:`CHUNK_CHARS`),
    encoded as they are written: a report of a million tasks is never one string."""
    size = CHUNK_CHARS if size is None else size
    buf: list[str] = []
    held = 0
    for piece in _pieces(obj, 0, _Runs()):
        buf.append(piece)
        held += len(piece)
        if held >= size:
            yield "".join(buf)
            buf, held = [], 0
    if buf:
        yield "".join(buf)

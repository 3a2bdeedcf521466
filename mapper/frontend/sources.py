"""What a program is read from: a DSL file (with params set by ``--param``), or a model file with
the sizes of its open dimensions.

A ``.tg`` file is read as it is. An ONNX model (``.onnx``) is imported, and
may leave dimensions open: named ones (``batch``, ``seq``) take a size from
``--dim NAME=SIZE``, and an input whose dimensions are unnamed or ``-1`` takes
its whole shape from ``--input-shape NAME=D1,D2,...``. :class:`ModelFile`
carries a path with those sizes to every command and API call that reads a
program; :func:`parse_dims` and :func:`parse_input_shapes` read the options.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mapper.errors import OptionsError

#: The largest size one dimension may be given.
MAX_DIM = 2**31
#: File name endings of model files (imported, not parsed as DSL).
MODEL_SUFFIXES = (".onnx",)


@dataclass(frozen=True, slots=True)
class ModelFile:
    """A model file and the sizes its open dimensions take."""

    path: str
    dims: tuple[tuple[str, int], ...] = ()  # named dimension -> size
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()  # input -> its whole shape
    params: tuple[tuple[str, int | float], ...] = ()  # top-level param -> the value that replaces the program's
    input_values: tuple[tuple[str, tuple[float, ...]], ...] = ()  # input -> the values that make it a constant

    def __fspath__(self) -> str:
        return self.path


def is_model(path: str | os.PathLike[str]) -> bool:
    """True for a file mapper imports rather than parses (an ONNX model)."""
    return os.fspath(path).lower().endswith(MODEL_SUFFIXES)


def _size(text: str, item: str, flag: str) -> int:
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise OptionsError(f"expected a positive integer size, got {item!r}", obj=flag)
    if int(text) > MAX_DIM:
        raise OptionsError(f"the size {text} in {item!r} is too large (at most {MAX_DIM:,})", obj=flag)
    return int(text)


def _once(name: str, given: Mapping[str, object], flag: str) -> None:
    """An OptionsError when ``flag`` names ``name`` a second time (the last would silently win)."""
    if name in given:
        raise OptionsError(f"{flag} {name} is given twice; give each once", obj=flag)


def parse_dims(items: Sequence[str]) -> tuple[tuple[str, int], ...]:
    """``["batch=8", ...]`` as ``(("batch", 8), ...)``; OptionsError naming --dim otherwise."""
    dims: dict[str, int] = {}
    for item in items:
        name, sep, size = item.partition("=")
        if not sep or not name.strip():
            raise OptionsError(f"expected NAME=SIZE with a positive integer size, got {item!r}", obj="--dim")
        _once(name.strip(), dims, "--dim")
        dims[name.strip()] = _size(size, item, "--dim")
    return tuple(dims.items())


def parse_input_shapes(items: Sequence[str]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """``["x=1,3,224,224", ...]`` as ``(("x", (1, 3, 224, 224)), ...)``; OptionsError naming
    --input-shape otherwise."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, sep, dims = item.rpartition("=")
        if not sep or not name.strip() or not dims.strip():
            raise OptionsError(f"expected NAME=D1,D2,... with positive integer sizes, got {item!r}",
                               obj="--input-shape")
        _once(name.strip(), shapes, "--input-shape")
        shapes[name.strip()] = tuple(_size(d, item, "--input-shape") for d in dims.split(","))
    return tuple(shapes.items())


def parse_input_values(items: Sequence[str]) -> tuple[tuple[str, tuple[float, ...]], ...]:
    """``["sr=16000", ...]`` as ``(("sr", (16000.0,)), ...)``; OptionsError naming --input-value
    otherwise."""
    values: dict[str, tuple[float, ...]] = {}
    for item in items:
        name, sep, text = item.partition("=")
        numbers = []
        for part in text.split(",") if sep else ():
            try:
                number = float(part.strip()) if part.strip().isascii() else float("nan")
            except ValueError:
                number = float("nan")
            numbers.append(number)
        if not sep or not name.strip() or not numbers or any(n != n or abs(n) == float("inf") for n in numbers):
            raise OptionsError(f"expected NAME=V1,V2,... with finite numbers, got {item!r}", obj="--input-value")
        _once(name.strip(), values, "--input-value")
        values[name.strip()] = tuple(numbers)
    return tuple(values.items())


def parse_params(items: Sequence[str]) -> tuple[tuple[str, int | float], ...]:
    """``["LAYERS=96", "LR=0.5", ...]`` as ``(("LAYERS", 96), ("LR", 0.5), ...)``; OptionsError
    naming --param otherwise (an integer stays an integer, as the DSL's params)."""
    params: dict[str, int | float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name.isidentifier() or not name.isascii():
            raise OptionsError(f"expected NAME=VALUE with a param name, got {item!r}", obj="--param")
        _once(name, params, "--param")
        if value.isascii() and (value.isdigit() or (value[:1] == "-" and value[1:].isdigit())):
            if len(value) > 19:
                raise OptionsError(f"the value in {item!r} is too large", obj="--param")
            params[name] = int(value)
            continue
        try:
            number = float(value) if value.isascii() else float("nan")
        except ValueError:
            number = float("nan")
        if number != number or number in (float("inf"), float("-inf")):
            raise OptionsError(f"expected a finite number as the value, got {item!r}", obj="--param")
        params[name] = number
    return tuple(params.items())


def program_source(path: str, dims: Sequence[str] = (), input_shapes: Sequence[str] = (),
                   params: Sequence[str] = (), input_values: Sequence[str] = ()) -> str | ModelFile:
    """What a command given ``path`` and the --dim / --input-shape / --input-value / --param
    options reads: the path itself, or a :class:`ModelFile`; OptionsError for options that do
    not apply."""
    given = parse_dims(dims), parse_input_shapes(input_shapes), parse_input_values(input_values)
    values = parse_params(params)
    if not is_model(path):
        for flag, value in zip(("--dim", "--input-shape", "--input-value"), given):
            if value:
                raise OptionsError(f"{flag} applies to model files (.onnx) only", obj=flag)
        return ModelFile(path, params=values) if values else path
    if values:
        raise OptionsError("--param sets a DSL program's params; a model file's sizes are set with --dim",
                           obj="--param")
    return ModelFile(path, given[0], given[1], input_values=given[2])

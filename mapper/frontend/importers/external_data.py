"""ONNX tensors stored outside the model file, found and read without trusting the file.

An ONNX tensor may keep its bytes in another file: its ``external_data``
entries give a ``location`` relative to the model's folder, and an optional
``offset`` and ``length`` in bytes (ONNX IR specification, "External Tensor
Data"). A model is input like any other: a location is accepted only when
it is relative, has no ``..`` part, and leads through no symbolic link to a
regular file inside the model's folder, large enough for the tensor; any
other location is refused, naming the tensor and the location, before
anything is opened. The current directory plays no part.

Mapping needs shapes and dtypes, not weights: :func:`resolve` checks a
location without opening it, and :func:`read_bytes` reads the few tensors
whose values the importer does use (shape arithmetic, scalars).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass

from mapper.core.files import note_read
from mapper.errors import InputError

#: The external-data keys of the ONNX IR specification.
KEYS = ("location", "offset", "length", "checksum", "basepath")


@dataclass(frozen=True, slots=True)
class ExternalRef:
    """Where a tensor's bytes are: ``location`` in the model's folder, from ``offset``, ``length`` bytes."""

    tensor: str
    location: str
    offset: int
    length: int | None


def parse_ref(tensor: str, entries: Iterable[tuple[str, str]], model: str) -> ExternalRef:
    """The reference in a tensor's ``external_data`` entries (key, value)."""
    values: dict[str, str] = {}
    for key, value in entries:
        if key not in KEYS:
            raise _bad(tensor, model, f"has an unknown external-data key {key!r}")
        values[key] = value
    location = values.get("location", "")
    if not location:
        raise _bad(tensor, model, "is stored externally but names no location")
    offset = _count(values.get("offset", "0"), "offset", tensor, model)
    length = _count(values["length"], "length", tensor, model) if "length" in values else None
    return ExternalRef(tensor, location, offset, length)


def resolve(ref: ExternalRef, model: str) -> str | None:
    """The path of ``ref``'s file inside the model's folder, checked without opening
    it; None when no such file is there. InputError for a location that leaves the
    folder (absolute, ``..``, a symbolic link) or names something not a regular file."""
    loc = ref.location
    if "\0" in loc or "\\" in loc:
        raise _bad_location(ref, model, "is not a plain relative path")
    if os.path.isabs(loc) or (len(loc) > 1 and loc[1] == ":"):
        raise _bad_location(ref, model, "is an absolute path; external data must lie beside the model")
    parts = [p for p in loc.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise _bad_location(ref, model, "leaves the model's folder")
    path = os.path.dirname(os.path.abspath(model))
    for k, part in enumerate(parts):
        path = os.path.join(path, part)
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return None
        except OSError as err:
            raise _bad_location(ref, model, f"cannot be examined ({err.strerror or err})") from None
        if stat.S_ISLNK(mode):
            raise _bad_location(ref, model, "passes through a symbolic link; external data must lie in "
                                            "the model's folder itself")
        last = k == len(parts) - 1
        if last and not stat.S_ISREG(mode):
            raise _bad_location(ref, model, "is not a regular file")
        if not last and not stat.S_ISDIR(mode):
            raise _bad_location(ref, model, "is not a path to a file")
    note_read(path)  # an input of the command from here on, read or not
    return path


def check_size(ref: ExternalRef, path: str, nbytes: int, model: str) -> None:
    """InputError unless the file at ``path`` holds ``nbytes`` bytes at ``ref``'s offset."""
    if ref.length is not None and ref.length != nbytes:
        raise _bad(ref.tensor, model, f"declares {ref.length:,} bytes of external data at "
                                      f"{ref.location!r}, but its shape needs {nbytes:,}")
    size = os.lstat(path).st_size
    if ref.offset + nbytes > size:
        raise _bad(ref.tensor, model, f"needs {nbytes:,} bytes at offset {ref.offset:,} of {ref.location!r}, "
                                      f"which has {size:,}")


def read_bytes(ref: ExternalRef, path: str, nbytes: int, model: str) -> bytes:
    """Exactly ``nbytes`` of ``ref`` from ``path`` (checked by :func:`resolve` and
    :func:`check_size`); the file is opened without following links."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        raise _bad_location(ref, model, f"cannot be read ({err.strerror or err})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced since it was checked
            raise _bad_location(ref, model, "is not a regular file")
        data = os.pread(fd, nbytes, ref.offset)
    except OSError as err:
        raise _bad_location(ref, model, f"cannot be read ({err.strerror or err})") from None
    finally:
        os.close(fd)
    if len(data) != nbytes:
        raise _bad(ref.tensor, model, f"needs {nbytes:,} bytes at offset {ref.offset:,} of {ref.location!r}, "
                                      f"which has fewer")
    return data


def _count(text: str, key: str, tensor: str, model: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        raise _bad(tensor, model, f"has an external-data {key} that is not a byte count: {text[:40]!r}")
    return int(text)


def _bad(tensor: str, model: str, what: str) -> InputError:
    return InputError(f"tensor {tensor!r} {what}", obj=model)


def _bad_location(ref: ExternalRef, model: str, what: str) -> InputError:
    return InputError(f"tensor {ref.tensor!r}: its external data location {ref.location!r} {what}", obj=model)

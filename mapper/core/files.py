"""Reading users' files with limits, and writing outputs without harming inputs.

Inputs are read only from regular files (a FIFO, a device such as
``/dev/zero`` or a directory is refused before it is opened) and only up to
:data:`MAX_INPUT_BYTES`. Outputs are written atomically (a temporary file in
the same folder, fsynced, renamed over the target), never over one of the
command's inputs, never over something that is not a regular file (a
directory, a device, a FIFO, a symbolic link), and ``-`` means standard
output.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from collections.abc import Iterable, Mapping

from mapper.errors import OptionsError

#: The largest file read as a program, a platform or an imported workflow.
MAX_INPUT_BYTES = 64 * 2**20
#: The output path that means standard output.
STDOUT = "-"


class Unreadable(Exception):
    """A file that cannot be read as text; ``why`` says why, in words."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a regular file"


def read_text(path: str | os.PathLike[str], limit: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of the regular file at ``path`` (a leading BOM dropped).

    Raises :class:`Unreadable` for a missing or special file, one larger
    than ``limit`` bytes, or one that is not UTF-8.
    """
    file = os.fspath(path)
    try:
        info = os.stat(file)
    except FileNotFoundError:
        raise Unreadable("no such file") from None
    except OSError as err:
        raise Unreadable(err.strerror or str(err)) from None
    if not stat.S_ISREG(info.st_mode):
        raise Unreadable(f"it is {_kind(info.st_mode)}, not a regular file")
    if info.st_size > limit:
        raise Unreadable(f"it is {info.st_size:,} bytes, more than the limit of {limit:,}")
    try:
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):  # replaced since the check
                raise Unreadable("it is not a regular file")
            data = fh.read(limit + 1)
    except OSError as err:
        raise Unreadable(err.strerror or str(err)) from None
    if len(data) > limit:
        raise Unreadable(f"it is more than the limit of {limit:,} bytes")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise Unreadable("it is not UTF-8 text") from None


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_outputs(outputs: Mapping[str, str | os.PathLike[str] | None],
                  inputs: Iterable[str | os.PathLike[str]] = ()) -> None:
    """Refuse outputs that would harm a file before anything is written.

    ``outputs`` maps each option (``--json``) to its path (None: not given);
    ``inputs`` are the files the command reads. Two outputs on one path, an
    output over an input, and an output over anything but a regular file
    are :class:`OptionsError` naming the option.
    """
    given = [(opt, os.fspath(p)) for opt, p in outputs.items() if p is not None]
    in_files = [os.fspath(p) for p in inputs]
    for i, (opt, path) in enumerate(given):
        for other, other_path in given[:i]:
            if path == other_path or (path != STDOUT and other_path != STDOUT and _same_file(path, other_path)):
                raise OptionsError(f"{other} and {opt} both write {path!r}; give each its own file", obj=opt)
        if path == STDOUT:
            continue
        check_output_path(path, opt)
        for source in in_files:
            if os.path.lexists(path) and _same_file(path, source):
                raise OptionsError(f"{path!r} is an input of this command; refusing to write over it", obj=opt)


def existing(*paths: str | os.PathLike[str] | None) -> list[str]:
    """Those of ``paths`` that name something on disk (inputs given by name or by path)."""
    return [os.fspath(p) for p in paths if p is not None and os.path.lexists(os.fspath(p))]


def check_output_path(path: str, opt: str) -> None:
    """Raise :class:`OptionsError` (naming ``opt``) when ``path`` cannot take an output."""
    if not path:
        raise OptionsError("the output path is empty", obj=opt)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    except OSError as err:
        raise OptionsError(f"cannot write {path!r}: {err.strerror}", obj=opt) from None
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise OptionsError(f"{path!r} is {_kind(info.st_mode)}; refusing to write over it", obj=opt)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise OptionsError(f"cannot write {path!r}: no such directory {folder!r}", obj=opt)
    try:
        longest = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        longest = 255
    if len(os.fsencode(os.path.basename(path))) > longest - 16:  # room for the temporary name
        raise OptionsError(f"cannot write {path!r}: the file name is longer than this file system allows",
                           obj=opt)


def atomic_write(path: str | os.PathLike[str], data: str | bytes, opt: str | None = None) -> None:
    """Write ``data`` to ``path`` atomically (``-``: standard output).

    The data goes to a temporary file in the same folder, is flushed and
    fsynced, then renamed over ``path``; on any error, interruption or
    termination the temporary file is removed and ``path`` is left as it was.
    """
    file = os.fspath(path)
    if file == STDOUT:
        if isinstance(data, bytes):
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
        else:
            sys.stdout.write(data)
        sys.stdout.flush()
        return
    where = opt or file
    check_output_path(file, where)
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    folder = os.path.dirname(os.path.abspath(file))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(file)[:32]}.", suffix=".tmp", dir=folder)
    except OSError as err:
        raise OptionsError(f"cannot write {file!r}: {err.strerror}", obj=where) from None
    try:
        os.chmod(tmp, _file_mode(file))
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, file)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EACCES, errno.EROFS, errno.EISDIR,
                                                       errno.ENAMETOOLONG, errno.EDQUOT, errno.EPERM):
            raise OptionsError(f"cannot write {file!r}: {err.strerror}", obj=where) from None
        raise


def _file_mode(path: str) -> int:
    """The existing file's mode, else 0o666 less the umask (what ``open`` gives)."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        mask = os.umask(0o022)
        os.umask(mask)
        return 0o666 & ~mask

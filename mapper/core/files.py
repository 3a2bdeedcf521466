"""Reading users' files with limits, and writing outputs without harming inputs.

Inputs are read only from regular files (a FIFO, a device such as
``/dev/zero`` or a directory is refused before it is opened) and only up to
:data:`MAX_INPUT_BYTES`. Outputs are written atomically (a temporary file in
the same folder, fsynced, renamed over the target), never over one of the
command's inputs, never over something that is not a regular file (a
directory, a device, a FIFO, a symbolic link), and ``-`` means standard
output.

A command records every file it reads (:func:`recording`: the program, the
files it includes, a model's external data, platform files and the node
files they name) and :func:`atomic_write` refuses an output over any of
them. Inside :func:`outputs_together` a command's outputs are written all or
none: each goes to its temporary file, and only when every one is written
are they renamed over their targets; on a failure the temporaries are
removed and targets already replaced are put back.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from mapper.errors import OptionsError

#: The largest file read as a program, a platform or an imported workflow: room for a program of a
#: million explicit-cost tasks (the lowering's task limit) on 16 devices, about 400 bytes a task.
MAX_INPUT_BYTES = 512 * 2**20
#: The output path that means standard output.
STDOUT = "-"


class Unreadable(Exception):
    """A file that cannot be read as text; ``why`` says why, in words."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


#: The files the running command has read (absolute paths, in order); None: not recording.
_READ: ContextVar[list[str] | None] = ContextVar("files_read", default=None)


@contextmanager
def recording() -> Iterator[list[str]]:
    """Record the files read inside the block (:func:`note_read`); outputs are refused over them."""
    record: list[str] = []
    token = _READ.set(record)
    try:
        yield record
    finally:
        _READ.reset(token)


def note_read(path: str | os.PathLike[str]) -> None:
    """Note that the running command reads ``path`` (nothing when no record is kept)."""
    record = _READ.get()
    if record is not None:
        file = os.path.abspath(os.fspath(path))
        if file not in record:
            record.append(file)


def files_read() -> tuple[str, ...]:
    """The files the running command has read so far (absolute paths)."""
    return tuple(_READ.get() or ())


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
    note_read(file)
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
        refuse_inputs(path, opt)
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


def atomic_write(path: str | os.PathLike[str], data: str | bytes | Iterable[str], opt: str | None = None) -> None:
    """Write ``data`` to ``path`` atomically (``-``: standard output); ``data`` may be an iterable of
    text chunks, written as they come (a huge report is never one string).

    The data goes to a temporary file in the same folder, is flushed and
    fsynced, then renamed over ``path``; on any error, interruption or
    termination the temporary file is removed and ``path`` is left as it was.
    A path that is one of the files the command has read (:func:`recording`)
    is refused. Inside :func:`outputs_together` the rename waits for the others.
    """
    file = os.fspath(path)
    batch = _BATCH.get()
    if file == STDOUT:
        whole = data if isinstance(data, (str, bytes)) else "".join(data)
        if batch is not None:
            batch.stdout.append(whole)
        else:
            _to_stdout(whole)
        return
    where = opt or (batch.options.get(file) if batch is not None else None) or file
    check_output_path(file, where)
    refuse_inputs(file, where)
    pieces: Iterable[bytes]
    if isinstance(data, str):
        pieces = (data.encode("utf-8"),)
    elif isinstance(data, (bytes, bytearray, memoryview)):
        pieces = (bytes(data),)
    else:
        pieces = (chunk.encode("utf-8") for chunk in data)
    folder = os.path.dirname(os.path.abspath(file))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(file)[:32]}.", suffix=".tmp", dir=folder)
    except OSError as err:
        raise OptionsError(f"cannot write {file!r}: {err.strerror}", obj=where) from None
    try:
        os.chmod(tmp, _file_mode(file))
        with os.fdopen(fd, "wb") as fh:
            for piece in pieces:
                fh.write(piece)
            fh.flush()
            os.fsync(fh.fileno())
        if batch is not None:
            batch.staged.append((tmp, file, where))
        else:
            os.replace(tmp, file)
    except BaseException as err:
        _unlink(tmp)
        error = _write_error(err, file, where)
        if error is err:
            raise
        raise error from None


def refuse_inputs(path: str, opt: str) -> None:
    """OptionsError (naming ``opt``, ``path`` and the input) when ``path`` is a file the command has read."""
    if not os.path.lexists(path):
        return
    for source in files_read():
        if _same_file(path, source):
            shown = os.path.relpath(source) if not os.path.isabs(path) else source
            same = "" if os.path.abspath(path) == source else f" is the same file as {shown!r}, which"
            raise OptionsError(f"{path!r}{same or ' is a file'} this command reads; refusing to write over it",
                               obj=opt)


@dataclass
class _Batch:
    """Outputs written together: the option of each path, the temporaries waiting to be renamed
    (temporary, target, option) and what goes to standard output once they are."""

    options: dict[str, str]
    staged: list[tuple[str, str, str]] = field(default_factory=list)
    stdout: list[str | bytes] = field(default_factory=list)


_BATCH: ContextVar[_Batch | None] = ContextVar("outputs_together", default=None)


@contextmanager
def outputs_together(outputs: Mapping[str, str | os.PathLike[str] | None] | None = None) -> Iterator[None]:
    """Write every :func:`atomic_write` inside the block all or none; ``outputs`` maps each
    option to its path (to name the option in messages). On any error in the block the
    temporaries are removed and no target is touched."""
    batch = _Batch({os.fspath(p): opt for opt, p in (outputs or {}).items() if p is not None})
    for path, opt in batch.options.items():  # every clash with a file read, before any output is begun
        if path != STDOUT:
            refuse_inputs(path, opt)
    token = _BATCH.set(batch)
    try:
        yield
    except BaseException:
        for tmp, _, _ in batch.staged:
            _unlink(tmp)
        raise
    finally:
        _BATCH.reset(token)
    _commit(batch.staged)
    for data in batch.stdout:
        _to_stdout(data)


def _commit(staged: list[tuple[str, str, str]]) -> None:
    """Rename every temporary over its target; on a failure put back what was replaced
    (from a hard link made before) and remove what was new."""
    done: list[tuple[str, bool, str | None]] = []  # target, existed, its backup
    try:
        for tmp, target, _ in staged:
            existed = os.path.lexists(target)
            done.append((target, existed, _backup(target) if existed else None))
            os.replace(tmp, target)
    except BaseException as err:
        for target, existed, backup in reversed(done):
            try:
                if backup is not None:
                    os.replace(backup, target)
                elif not existed:
                    os.unlink(target)
            except OSError:
                pass
        for tmp, _, _ in staged:
            _unlink(tmp)
        failed = staged[max(len(done) - 1, 0)]
        error = _write_error(err, failed[1], failed[2])
        if error is err:
            raise
        raise error from None
    for _, _, backup in done:
        if backup is not None:
            _unlink(backup)


def _backup(target: str) -> str | None:
    """A second name (a hard link) for ``target`` in its folder; None where links cannot be made."""
    folder, base = os.path.split(os.path.abspath(target))
    for _ in range(8):
        name = os.path.join(folder, f".{base[:32]}.{os.urandom(4).hex()}.tmp")
        try:
            os.link(target, name, follow_symlinks=False)
            return name
        except FileExistsError:
            continue
        except OSError:
            return None
    return None


def _write_error(err: BaseException, file: str, where: str) -> BaseException:
    """An OSError while writing ``file`` as the user's error where it is one (a full disk)."""
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EACCES, errno.EROFS, errno.EISDIR,
                                                   errno.ENAMETOOLONG, errno.EDQUOT, errno.EPERM):
        return OptionsError(f"cannot write {file!r}: {err.strerror}", obj=where)
    return err


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _to_stdout(data: str | bytes) -> None:
    if isinstance(data, bytes):
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
    else:
        sys.stdout.write(data)
    sys.stdout.flush()


def _file_mode(path: str) -> int:
    """The existing file's mode, else 0o666 less the umask (what ``open`` gives)."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        mask = os.umask(0o022)
        os.umask(mask)
        return 0o666 & ~mask

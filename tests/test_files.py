"""Reading users' files with limits and writing outputs without harming inputs (mapper.core.files)."""

from __future__ import annotations

import os
import socket

import pytest

from mapper.core import files
from mapper.errors import OptionsError


def test_read_text_of_a_regular_file_drops_the_bom(tmp_path):
    p = tmp_path / "a.tg"
    p.write_bytes(b"\xef\xbb\xbfgraph g {}\n")
    assert files.read_text(p) == "graph g {}\n"


@pytest.mark.parametrize("make, why", [
    (lambda d: d, "a directory"),
    (lambda d: (os.mkfifo(d / "f"), d / "f")[1], "a FIFO"),
    (lambda d: "/dev/zero", "a device"),
    (lambda d: d / "missing.tg", "no such file"),
])
def test_read_text_refuses_what_is_not_a_regular_file(tmp_path, make, why):
    with pytest.raises(files.Unreadable, match=why):
        files.read_text(make(tmp_path))


def test_read_text_refuses_a_socket(tmp_path):
    path = str(tmp_path / "s")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(path)
        with pytest.raises(files.Unreadable, match="a socket"):
            files.read_text(path)


def test_read_text_limits_size_and_encoding(tmp_path):
    big = tmp_path / "big.tg"
    big.write_bytes(b"#" * 2000)
    with pytest.raises(files.Unreadable, match="more than the limit of 1,000"):
        files.read_text(big, limit=1000)
    bad = tmp_path / "bad.tg"
    bad.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(files.Unreadable, match="not UTF-8"):
        files.read_text(bad)


def test_atomic_write_ok_and_replace(tmp_path):
    p = tmp_path / "r.txt"
    files.atomic_write(p, "one")
    files.atomic_write(p, b"two")
    assert p.read_bytes() == b"two"
    assert os.listdir(tmp_path) == ["r.txt"]


def test_atomic_write_failure_leaves_nothing(tmp_path, monkeypatch):
    p = tmp_path / "r.txt"

    def boom(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", boom)
    with pytest.raises(OptionsError, match="No space left on device"):
        files.atomic_write(p, "data")
    assert os.listdir(tmp_path) == []


def test_atomic_write_interrupted_leaves_nothing(tmp_path, monkeypatch):
    p = tmp_path / "r.txt"
    p.write_text("before")

    def interrupted(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        files.atomic_write(p, "after")
    assert os.listdir(tmp_path) == ["r.txt"] and p.read_text() == "before"


def test_atomic_write_missing_folder_and_long_name(tmp_path):
    with pytest.raises(OptionsError, match="no such directory"):
        files.atomic_write(tmp_path / "nope" / "r.txt", "x")
    with pytest.raises(OptionsError, match="[Ff]ile name (too long|is longer than)"):
        files.atomic_write(tmp_path / ("n" * 300), "x")


def test_atomic_write_dash_is_standard_output(capsys):
    files.atomic_write("-", "to stdout\n")
    assert capsys.readouterr().out == "to stdout\n"


def test_outputs_never_replace_inputs_or_special_files(tmp_path):
    src = tmp_path / "in.tg"
    src.write_text("graph g {}\n")
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "target.json")
    with pytest.raises(OptionsError, match="input of this command") as err:
        files.check_outputs({"--json": str(src)}, [str(src)])
    assert err.value.obj == "--json"
    with pytest.raises(OptionsError, match="a directory"):
        files.check_outputs({"--html": str(tmp_path)})
    with pytest.raises(OptionsError, match="a device"):
        files.check_outputs({"--json": "/dev/null"})
    with pytest.raises(OptionsError, match="a symbolic link"):
        files.check_outputs({"--trace": str(link)})
    with pytest.raises(OptionsError, match="--json and --html both write"):
        files.check_outputs({"--json": str(tmp_path / "x"), "--html": str(tmp_path / "x")})
    files.check_outputs({"--json": str(tmp_path / "a.json"), "--html": "-"}, [str(src)])
    assert src.read_text() == "graph g {}\n" and not (tmp_path / "target.json").exists()

"""The matplotlib Gantt PNG (skipped without matplotlib)."""

from __future__ import annotations

import builtins
import os
import struct

import pytest
from test_report_common import random_result, small_result

from mapper.errors import OptionsError
from mapper.report import png


def test_png_written(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "g.png"
    png.write_png(small_result(), out, width_in=8.0, dpi=100)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    width, height = struct.unpack(">II", data[16:24])
    assert width == 800 and 200 < height < 800
    assert b"matplotlib" not in data  # no version metadata: stable bytes
    assert png.render_png(small_result(), width_in=8.0, dpi=100) == data


def test_png_large_graph_and_atomicity(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    assert len(png.render_png(random_result(150, seed=2), dpi=72)) > 10_000

    def boom(*a, **k):
        raise RuntimeError("x")

    monkeypatch.setattr(png, "link_tracks", boom)
    with pytest.raises(RuntimeError):
        png.write_png(small_result(), tmp_path / "g.png")
    assert os.listdir(tmp_path) == []


def test_missing_matplotlib_is_a_clear_error(monkeypatch, tmp_path):
    real_import = builtins.__import__

    def fake(name, *a, **k):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(OptionsError, match=r"mapper\[plot\]"):
        png.write_png(small_result(), tmp_path / "g.png")
    assert os.listdir(tmp_path) == []

"""benchmarks/blackwell_residual.py: the MXFP8 cast fit and the release-drift table, by hand."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from mapper.costing.precision import CAST_MEMORY_SHARE

BENCH = runpy.run_path(str(Path(__file__).resolve().parents[1] / "benchmarks" / "blackwell_residual.py"))


def test_the_cast_share_is_the_one_fitted_timing():
    """272,629,760 bytes in 52.34 - 3 us at 8,000 GB/s: 0.6907, the share mapper declares."""
    item, rows, cols, us, _, role = next(c for c in BENCH["CASTS"] if c[5] == "fit")
    assert (item, rows, cols, us) == (2, 8192, 8192, 52.34)
    share = rows * cols * (2 + 2 * 33 / 32) / ((us - 3.0) * 1e-6 * 8000e9)
    assert share == pytest.approx(0.6907, abs=1e-4)
    assert CAST_MEMORY_SHARE["mxfp8"] == pytest.approx(share, abs=5e-4)


def test_release_drift_of_qwen3_30b_on_gb200():
    """Qwen3-30B-A3B on 8 GB200s, MXFP8, EP8 MBS4: 23,723 tokens/s/GPU in 25.09, 40,960 in 26.06.01."""
    lines = [line for ratio, line in BENCH["drift"]() if "qwen3_30b" in line and "gb200" in line]
    assert len(lines) == 1
    assert "25.09 23,723" in lines[0] and "26.06.01 40,960" in lines[0]
    assert f"{40960 / 23723:.2f}x" in lines[0]

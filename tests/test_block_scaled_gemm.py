"""Block-scaled GEMMs (MXFP8, NVFP4) at small M: the 128-row MMA of tcgen05 and no split-K
(mapper/costing/work.py), against hand-worked tiles, grids and seconds."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mapper.costing.latency import estimate
from mapper.costing.work import MMA_ROWS, SCALED_MMA_ROWS, gemm_dims, gemm_grid, gemm_tile, mma_rows
from mapper.frontend.load import graph_from_text
from mapper.platform.loader import load_platform


def _gemm(m: int, n: int, k: int, precision: str = ""):
    g = graph_from_text(f"graph g {{\n input x : bf16[{m}, {k}]\n y = matmul(x, weight bf16[{k}, {n}])\n"
                        "  output y\n}\n")
    return replace(g.tasks[0], precision=precision)


def _b200():
    return next(d for d in load_platform("dgx-b200").devices if d.kind == "gpu")


def test_block_scaled_formats_issue_128_row_mmas():
    assert mma_rows(_gemm(8, 128, 128, "nvfp4")) == SCALED_MMA_ROWS == 128
    assert mma_rows(_gemm(8, 128, 128, "mxfp8")) == 128
    assert mma_rows(_gemm(8, 128, 128, "fp8")) == mma_rows(_gemm(8, 128, 128)) == MMA_ROWS == 16
    tile = (128, 128, 32)
    assert gemm_tile(tile, 8) == (16, 128, 32)  # 8 rows round up to one 16-row MMA
    assert gemm_tile(tile, 40) == (48, 128, 32)
    assert gemm_tile(tile, 8, 128) == (128, 128, 32)  # a block-scaled decode GEMM pays 128 rows
    assert gemm_tile(tile, 300, 128) == (128, 128, 32)
    assert gemm_tile((64, 128, 32), 8, 128) == (64, 128, 32)  # never past the device's own tile


@pytest.mark.parametrize("precision, blocks, split, waves", [
    # M 16, N 6,144, K 4,096 on 148 SMs in 128 x 128 x 32 tiles, up to 8 K slices:
    ("", 48, 3, 1),  # 16-row tiles: 48 blocks, 148 // 48 = 3 slices, 144 blocks in one wave
    ("fp8", 48, 3, 1),
    ("nvfp4", 48, 1, 1),  # 128-row tiles, the same 48 blocks, not split (persistent data-parallel)
    ("mxfp8", 48, 1, 1),
])
def test_block_scaled_grid_is_not_split_along_k(precision, blocks, split, waves):
    task = _gemm(16, 6144, 4096, precision)
    dims = gemm_dims(task)
    assert dims == (1, 16, 6144, 4096)
    assert gemm_grid(task, dims, (128, 128, 32), 148, 8) == (16 * 6144, blocks, split, waves)


def test_small_m_nvfp4_gemm_pays_a_whole_128_row_tile_on_b200():
    dev = _b200()
    assert dev.gemm_tile == (128, 128, 32) and dev.compute_units == 148 and dev.cache_bandwidth_gbs is None
    rate = 9_000_000e9 * dict(dev.efficiency)["gemm:nvfp4"]  # nvfp4 tensor peak x its GEMM share
    one_tile = 2 * 128 * 128 * 4096 / (rate / 148)  # one wave of 48 blocks, each 128 x 128 x 4,096
    assert one_tile == pytest.approx(4.013e-6, rel=1e-3)
    for m in (8, 16, 64, 128):  # (one row is a matrix-vector product, priced without tiles)
        assert estimate(_gemm(m, 6144, 4096, "nvfp4"), "gemm", dev).t_parallel == pytest.approx(one_tile)
    # 256 rows: two blocks of rows, 96 blocks, still one wave
    assert estimate(_gemm(256, 6144, 4096, "nvfp4"), "gemm", dev).t_parallel == pytest.approx(one_tile)
    # 16-bit at 16 rows: 16-row tiles split three ways, 43 K blocks of 32 each, at the bf16 rate
    bf16 = 2_250_000e9 * dict(dev.efficiency)["gemm"]
    assert estimate(_gemm(16, 6144, 4096), "gemm", dev).t_parallel == pytest.approx(
        2 * 16 * 128 * 43 * 32 / (bf16 / 148))


def test_large_m_block_scaled_gemm_is_unchanged_by_the_row_floor():
    dev = _b200()
    big = _gemm(4096, 4096, 4096, "nvfp4")
    assert gemm_grid(big, gemm_dims(big), (128, 128, 32), 148, 8)[1:] == (1024, 1, 7)  # 32 x 32 tiles, 7 waves
    rate = 9_000_000e9 * dict(dev.efficiency)["gemm:nvfp4"]
    assert estimate(big, "gemm", dev).t_parallel == pytest.approx(7 * 2 * 128 * 128 * 4096 / (rate / 148))

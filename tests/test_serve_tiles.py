"""A serving step's GEMMs at whole tiles (:mod:`mapper.serving.iteration`, ``TILED_UP_TO``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mapper.frontend.sources import ModelFile
from mapper.serving.iteration import TILED_UP_TO, Batch
from mapper.serving.runtimes import RUNTIMES
from mapper.serving.serve import server_for

ROOT = Path(__file__).resolve().parent.parent
LLAMA = str(ROOT / "examples" / "llama.tg")
L70B = (("LAYERS", 80), ("HIDDEN", 8192), ("HEADS", 64), ("KV_HEADS", 8), ("FFN", 28672))


@pytest.fixture(scope="module")
def b200():
    server = server_for(ModelFile(LLAMA, params=L70B), "dgx-b200", RUNTIMES["trtllm"], "auto", "nvfp4", "fp8")
    return server, server.step_model(1, 1, 8192)


def _gemm_seconds(server, tokens: int) -> float:
    """The GEMM kernels of one decode step of ``tokens`` rows, each priced alone by the cost model."""
    prof = server.prices.profile(tokens)
    return sum(seconds for b in range(len(prof.blocks))
               for seconds, ops, _ in server.prices.cost(prof, b, 1).kernels if "matmul" in ops)


def test_points_are_every_tile_up_to_the_limit(b200):
    _, model = b200
    assert TILED_UP_TO == 1024 and model.tiled == (128, 1024)  # NVFP4: 128-row block-scaled MMAs
    assert model.points == (1, 8, 32, 128, 256, 384, 512, 640, 768, 896, 1024, 2048, 8192)


def test_a_step_between_tiles_pays_the_next_tile(b200):
    server, model = b200
    gemms = [sum(model.gemms[b][j] for b in range(len(model.gemms))) for j in range(len(model.points))]
    at = dict(zip(model.points, gemms))
    # 385 rows are four 128-row tiles: priced as 512, as the cost model prices 385 rows alone
    assert model._tiles(gemms, 385) == at[512]
    assert model._tiles(gemms, 385) == pytest.approx(_gemm_seconds(server, 385), rel=0.01)
    assert model._tiles(gemms, 384) == at[384] < at[512]
    assert model._tiles(gemms, 129) == at[256]
    # a line from 128 to 512 would price 385 rows at 83 % of their tiles (the step model before)
    line = at[128] + (at[512] - at[128]) * (385 - 128) / (512 - 128)
    assert line / at[512] == pytest.approx(0.834, abs=0.002)
    # below the tile and past the limit the curve stays linear between its points
    assert model._tiles(gemms, 20) == model._at(gemms, 20)
    assert model._tiles(gemms, 1500) == model._at(gemms, 1500)
    assert at[128] < model._tiles(gemms, 1500) and model._at(gemms, 1500) < at[2048]


def test_the_other_kernels_stay_linear(b200):
    _, model = b200
    others = [sum(model.curve[b][j] for b in range(len(model.curve))) for j in range(len(model.points))]
    at = dict(zip(model.points, others))
    assert model._at(others, 448) == pytest.approx((at[384] + at[512]) / 2)
    # a decode step of 385 sequences: GEMMs of four tiles, the rest at 385 rows, attention over the caches
    step = model.step(Batch(385, 385, 385 * 1152.0, 0.0, 385))
    assert step == pytest.approx(sum(model._base(385, 385, 1)) + 80 * (model.alpha + model.beta_decode * 385 * 1152))


def test_only_block_scaled_gemms_step_by_tiles():
    """16-bit and FP8 GEMMs issue 16-row MMAs: their curve stays the line between the points."""
    for precision in (None, "fp8"):
        server = server_for(ModelFile(LLAMA, params=L70B), "dgx-b200", RUNTIMES["trtllm"], "auto", precision)
        model = server.step_model(1, 1, 8192)
        assert model.tiled == (0, 0) and model.points == (1, 8, 32, 128, 512, 2048, 8192)
        gemms = [sum(model.gemms[b][j] for b in range(len(model.gemms))) for j in range(len(model.points))]
        assert model._tiles(gemms, 385) == model._at(gemms, 385)

"""A GPU GEMM from tiles, waves and bandwidth: the block tile it runs, how many waves of blocks
its units take, and whether the call is bound by its tiles' arithmetic or by streaming its
operands from memory.

NVIDIA, "Matrix Multiplication Background User's Guide" (Deep Learning Performance
documentation): a GEMM's output is cut into thread-block tiles, one per SM at a time, run in
whole waves of as many tiles as the GPU has SMs, so a GEMM pays for whole tiles (tile
quantization) and whole waves (wave quantization). Where there are fewer tiles than SMs, ``K``
is split into slices run side by side and summed (split-K; CUTLASS ``GemmSplitKParallel``;
Osama et al., "Stream-K", PPoPP 2023, section 2).

The time of a GEMM call (:func:`tile_time`, used by :mod:`mapper.costing.latency`):

* **tile**: the device's ``gemm_tile`` (CUTLASS's default 128 x 128 x 32 on the shipped GPUs),
  its rows cut to the GEMM's rounded up to whole MMA steps when the GEMM has fewer
  (:func:`mapper.costing.work.gemm_tile`: the libraries' small-M kernels, 16 x 128 to 64 x 128
  for a decode batch);
* **tile time**: a block computes ``2 tm tn kslice`` FLOPs (``kslice`` whole K blocks) at its
  unit's share ``rate / units`` of the achievable tensor rate (peak times the device's GEMM
  efficiency), and, where the device declares a cache bandwidth, loads its ``(tm + tn) kslice``
  operand elements at its share of that bandwidth (the tiles a wave's blocks share come from
  L2): the longer of the two;
* **tiles**: ``waves`` times the tile time, ``waves = ceil(blocks split / units)``;
* **the call**: the longer of the tiles and streaming its operands once from memory (the
  roofline's memory side). A multistage mainloop (CUTLASS ``kStages``) overlaps loads with
  multiply-adds; what it cannot hide is its fill (the loads before the first multiply and the
  store after the last, :func:`mapper.costing.work.pipeline_fill_time`) and, where the device
  declares an ``overlap_exponent``, the imperfect overlap of the mainloop's share outside its
  steady state (:func:`overlap_share`): all of a short mainloop, almost none of a long one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mapper.core.graph import DTYPE_BYTES, Task
from mapper.costing.work import gemm_grid, gemm_tile, mma_rows
from mapper.platform.loader import Device


@dataclass(frozen=True, slots=True)
class TilePlan:
    """A GEMM's grid on a GPU: the block tile it runs (rows cut to the GEMM's, :func:`gemm_tile`),
    its blocks, K slices and waves, and the seconds of one block and of all waves."""

    tile: tuple[int, int, int]
    blocks: int
    split: int
    waves: int
    t_tile: float
    t_tiles: float
    iterations: int  # K blocks each tile's mainloop runs
    useful: float  # seconds the GEMM's own FLOPs take at the rate, without quantization

    @property
    def efficiency(self) -> float:
        """Useful arithmetic over what the waves pay for (tile and wave quantization)."""
        return 1.0 if self.t_tiles <= 0 else min(1.0, self.useful / self.t_tiles)



def tile_time(task: Task, dims: tuple[int, int, int, int], device: Device, rate: float) -> TilePlan:
    """The GEMM's :class:`TilePlan` on ``device`` (its ``gemm_tile``, ``compute_units`` and
    ``gemm_split_k``) at ``rate`` FLOP/s for the whole GPU (module docstring)."""
    assert device.gemm_tile is not None and device.compute_units is not None
    batch, m, n, k = dims
    useful = 2.0 * batch * m * n * k / rate if rate > 0 else 0.0
    return _plan(task, dims, device.gemm_tile, device, rate, useful)


def overlap_share(plan: TilePlan, stages: int) -> float:
    """The share of a tile's mainloop that runs outside the pipeline's steady state, where loads
    and multiply-adds overlap imperfectly: its ``stages`` K blocks in flight over its K blocks,
    at most 1. A device's ``overlap_exponent`` law applies to this share
    (:mod:`mapper.costing.latency`); a long mainloop (a 12,288-deep K in 32-deep blocks: 384)
    overlaps its loads all but entirely."""
    if stages <= 0 or plan.iterations <= 0:
        return 1.0
    return min(1.0, stages / plan.iterations)


def _plan(task: Task, dims: tuple[int, int, int, int], tile: tuple[int, int, int], device: Device,
          rate: float, useful: float) -> TilePlan:
    """The plan of one candidate tile, split as :func:`mapper.costing.work.gemm_grid` splits."""
    units = device.compute_units or 1
    _, blocks, split, waves = gemm_grid(task, dims, tile, units, device.gemm_split_k)
    tm, tn, tk = gemm_tile(tile, dims[1], mma_rows(task))
    iterations = math.ceil(math.ceil(dims[3] / split) / tk)
    t_tile = 2.0 * tm * tn * iterations * tk / (rate / units) if rate > 0 else 0.0
    if device.cache_bandwidth_gbs:
        item = float(DTYPE_BYTES.get(task.dtype, 2))
        t_tile = max(t_tile, (tm + tn) * iterations * tk * item / (device.cache_bandwidth_gbs * 1e9 / units))
    return TilePlan((tm, tn, tk), blocks, split, waves, t_tile, waves * t_tile, iterations, useful)

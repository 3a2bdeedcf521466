"""TorchRec's embedding perf estimator, reproduced, so mapper's plan and TorchRec's compare on the same numbers.

The formulas and constants are those of TorchRec (BSD) at commit
a48cef79ebc333da92af1311c04b041ee21a8e75: ``EmbeddingPerfEstimator.perf_func_emb_wall_time``
and its ``_get_tw/_rw/_twrw/_dp_sharding_perf`` (torchrec/distributed/planner/shard_estimators.py),
``kernel_bw_lookup`` and the constants (planner/constants.py), ``BasicCommsBandwidths.get_bw``
(planner/types.py). Bandwidths are in bytes per millisecond, as TorchRec gives them, so times
come out in TorchRec's units. Covered: pooled, unweighted, unquantised tables for training or
inference on CUDA, kernels ``dense``, ``fused``, ``fused_uvm`` and ``fused_uvm_caching``, and the
sharding types ``table_wise``, ``column_wise``, ``table_column_wise``, ``row_wise``,
``table_row_wise``, ``grid_shard`` and ``data_parallel``; cache statistics (prefetch) are not.
:func:`torchrec_options` re-rates mapper's sharding options with it (a shard's perf summed over
its four parts, TorchRec's ``Perf.total``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from mapper.core.graph import DTYPE_BYTES
from mapper.parallel.embedding_plan import Option, Table

GIB = 1024.0**3
#: planner/constants.py (bytes/ms and empirical factors).
HBM_MEM_BW = 897 * GIB / 1000
DDR_MEM_BW = 51 * GIB / 1000
HBM_TO_DDR_MEM_BW = 32 * GIB / 1000
INTRA_NODE_BANDWIDTH = 600 * GIB / 1000
CROSS_NODE_BANDWIDTH = 12.5 * GIB / 1000
UVM_CACHING_RATIO = 0.2
BIGINT_DTYPE = 8
BATCHED_COPY_PERF_FACTOR = 2.455
FULL_BLOCK_EMB_DIM = 128
HALF_BLOCK_PENALTY = 1.15
QUARTER_BLOCK_PENALTY = 1.75
BWD_COMPUTE_MULTIPLIER = 2.0
DP_ELEMENTWISE_KERNELS_PERF_FACTOR = 9.22


@dataclass(frozen=True, slots=True)
class Perf:
    """TorchRec's ``Perf`` (prefetch left out)."""

    fwd_compute: float
    fwd_comms: float
    bwd_compute: float
    bwd_comms: float

    @property
    def total(self) -> float:
        return self.fwd_compute + self.fwd_comms + self.bwd_compute + self.bwd_comms


@dataclass(frozen=True, slots=True)
class Topo:
    """The parts of TorchRec's ``Topology`` the estimator reads."""

    world_size: int
    local_world_size: int
    intra_host_bw: float = INTRA_NODE_BANDWIDTH
    inter_host_bw: float = CROSS_NODE_BANDWIDTH

    def bw(self, world: int, local: int, collective: str) -> float:
        """``BasicCommsBandwidths.get_bw``."""
        if collective == "all_reduce":
            return self.inter_host_bw * local
        return self.intra_host_bw if world <= local else self.inter_host_bw


def kernel_bw(kernel: str, caching_ratio: float | None = None) -> float:
    """``kernel_bw_lookup`` on CUDA."""
    ratio = UVM_CACHING_RATIO if caching_ratio is None else caching_ratio
    return {
        "dense": 0.5 * HBM_MEM_BW,
        "fused": HBM_MEM_BW,
        "fused_uvm": HBM_TO_DDR_MEM_BW / 10,
        "fused_uvm_caching": (ratio * HBM_MEM_BW + (1 - ratio) * HBM_TO_DDR_MEM_BW) / 10,
    }[kernel]


def shard_perf(sharding: str, kernel: str, rows: int, dim: int, batch: int, pooling: float, topo: Topo,
               elem: int = 4, inference: bool = False) -> Perf:
    """One shard's perf (``rows x dim``; ``batch`` samples per rank, ``pooling`` ids per sample)."""
    device_bw = kernel_bw(kernel)
    w, lw = topo.world_size, topo.local_world_size
    inputs = pooling * batch
    outputs = float(batch)
    if sharding in ("table_wise", "column_wise", "table_column_wise"):
        read = math.ceil(inputs * w * BIGINT_DTYPE)
        lookup = inputs * w * max(dim, 32) * elem
        out = outputs * w * dim * elem
        penalty = 1.0 if dim >= FULL_BLOCK_EMB_DIM else (HALF_BLOCK_PENALTY if dim >= 64 else QUARTER_BLOCK_PENALTY)
        bw = topo.bw(w, lw, "all_to_all")
        fwd = (read + lookup + out) * penalty / device_bw
        if inference:
            return Perf(fwd, out / bw, 0.0, 0.0)
        return Perf(fwd, out / bw, fwd * BWD_COMPUTE_MULTIPLIER, out / bw)
    if sharding in ("row_wise", "table_row_wise", "grid_shard"):
        group = w if sharding == "row_wise" else lw
        inputs /= group
        read = math.ceil(inputs * w * BIGINT_DTYPE)
        lookup = inputs * w * dim * elem
        out = outputs * w * dim * elem
        fwd = (read + lookup + out) / device_bw
        fwd_comms = out / topo.bw(group if sharding != "row_wise" else w, lw, "reduce_scatter")
        bwd_comms = out / topo.bw(group if sharding != "row_wise" else w, lw, "all_gather")
        if sharding != "row_wise" and w > lw:
            inter = outputs * (w / lw) * dim * elem / topo.bw(int(w / lw), 1, "all_to_all")
            fwd_comms += inter
            bwd_comms += inter
        if inference:
            return Perf(fwd, fwd_comms, 0.0, 0.0)
        return Perf(fwd, fwd_comms, fwd * BWD_COMPUTE_MULTIPLIER,
                    bwd_comms + out * BATCHED_COPY_PERF_FACTOR / device_bw)
    if sharding == "data_parallel":
        read = math.ceil(inputs * BIGINT_DTYPE)
        fwd = (read + inputs * dim * elem + outputs * dim * elem) / device_bw
        table = rows * dim * elem
        nodes = min(w / lw, 2)
        all_reduce = table * (2 * nodes - 1) / nodes / topo.bw(w, lw, "all_reduce")
        if w > 2 * lw:
            all_reduce *= 2
        return Perf(fwd, 0.0, fwd * BWD_COMPUTE_MULTIPLIER,
                    all_reduce + table * DP_ELEMENTWISE_KERNELS_PERF_FACTOR / device_bw)
    raise ValueError(f"unknown sharding type {sharding!r}")


#: mapper's (sharding, tier) -> TorchRec's compute kernel.
KERNELS = {("data_parallel", "hbm"): "dense", ("table_wise", "host"): "fused_uvm_caching"}


def torchrec_options(table: Table, opts: Sequence[Option], gpus: int) -> list[Option]:
    """``opts`` with each shard's load replaced by TorchRec's perf (ms) of that shard."""
    topo = Topo(gpus, gpus)
    batch = table.bags // gpus
    out = []
    for o in opts:
        kernel = KERNELS.get((o.sharding, o.tier), "fused")
        load = [0.0] * gpus
        for s in o.shards:
            load[s.device] += shard_perf(o.sharding, kernel, s.rows, s.cols, batch, table.pooling, topo,
                                         elem=DTYPE_BYTES[table.dtype]).total
        out.append(replace(o, load=tuple(load)))
    return out


_A2A = 6.357828776041667e-05
#: TorchRec's own expected values (torchrec/distributed/planner/tests/test_shard_estimators.py at the
#: commit above, ``test_1_table_perf`` of ``TestEmbeddingPerfEstimator`` (default bandwidths) and of
#: ``TestEmbeddingPerfEstimatorWithGeneralizedComms`` (intra-host 300, inter-host 40 GB/s)): one
#: table of 100 x 10 f32, 2 GPUs on one host, batch 512 per rank, pooling 1. Rows:
#: (bandwidths, sharding, kernel, shard rows, (fwd_compute, fwd_comms, bwd_compute, bwd_comms)).
_TW = ("table_wise", "column_wise", "table_column_wise")
_RW = ("row_wise", "table_row_wise", "grid_shard")
_FWD = {"fused": (0.000327460077428233, 0.000654920154856466),
        "fused_uvm": (0.09179115295410156, 0.18358230590820312),
        "fused_uvm_caching": (0.01432837509527439, 0.02865675019054878)}
_RW_FWD = {"fused": (6.804365245261984e-05, 0.0001360873049052397, 0.00016798276699240525,
                     0.00016798276699240525 + _A2A),
           "fused_uvm": (0.019073486328125, 0.03814697265625, 0.029329458872477215, 0.02939303716023763),
           "fused_uvm_caching": (0.0029773246951219513, 0.0059546493902439025, 0.004631910866838161,
                                 0.004695489154598577)}
PUBLISHED_CASES: tuple[tuple[str, str, str, int, tuple[float, float, float, float]], ...] = (
    ("default", "data_parallel", "dense", 100, (9.356002212235228e-05, 0.0, 0.00018712004424470456,
                                                0.000225593945387348)),
    ("generalized", "data_parallel", "dense", 100, (9.356002212235228e-05, 0.0, 0.00018712004424470456,
                                                    0.00012314846217964537)),
    *((bws, st, k, 100, (f, _A2A * m, b, _A2A * m)) for bws, m in (("default", 1), ("generalized", 2))
      for st in _TW for k, (f, b) in _FWD.items()),
    *((bws, st, k, 50, (v[0], _A2A * m, v[1], v[2] if bws == "default" else v[3]))
      for bws, m in (("default", 1), ("generalized", 2)) for st in _RW for k, v in _RW_FWD.items()),
)
#: The two topologies of those tests.
TOPOLOGIES = {"default": Topo(2, 2),
              "generalized": Topo(2, 2, intra_host_bw=300.0 * GIB / 1000, inter_host_bw=40.0 * GIB / 1000)}


def parity() -> list[tuple[str, float]]:
    """Every published case with the worst relative error of its four parts."""
    out = []
    for bws, sharding, kernel, rows, want in PUBLISHED_CASES:
        got = shard_perf(sharding, kernel, rows, 10, 512, 1.0, TOPOLOGIES[bws])
        parts = (got.fwd_compute, got.fwd_comms, got.bwd_compute, got.bwd_comms)
        err = max(abs(g - w) / abs(w) if w else abs(g) for g, w in zip(parts, want))
        out.append((f"{bws} {sharding} {kernel}", err))
    return out

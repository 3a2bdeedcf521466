"""The device-latency model of one task on one device (:func:`estimate`): a
roofline (Williams, Waterman, Patterson, "Roofline", CACM 52(4), 2009) with a
launch overhead, whose compute side follows Amdahl's law (Amdahl, AFIPS
1967): the serial fraction runs at one lane's rate, as in the heterogeneous
cost model of Wilhelm et al., arXiv:2208.06321. The memory side is
cache-aware (Ilic, Pratas, Sousa, "Cache-aware roofline model", IEEE CAL
13(1), 2014): a working set that fits the device's declared cache moves at
the cache's bandwidth. docs/cost_model.md gives every term."""

from __future__ import annotations

import math
from dataclasses import dataclass

from mapper.core.graph import Task
from mapper.core.ops import ATTENTION_OPS
from mapper.costing.eager import eager_kernels
from mapper.costing.efficiency import (
    EFF_COMPUTE,
    EFF_MEMORY,
    EFF_MEMORY_GEMM,
    backward_share,
    fitted_keys,
    lookup,
    model_keys,
    rate_dtype,
)
from mapper.costing.precision import CAST_MEMORY_SHARE, STATIC, cast_bytes, gemm_bytes, rate_format
from mapper.costing.tiles import TilePlan, overlap_share, tile_time
from mapper.costing.work import (
    attention_wave_efficiency,
    cold_bytes,
    fits_cache,
    gemm_cold,
    gemm_dims,
    gemm_pack_time,
    gemm_shape_factor,
    im2col_bytes,
    in_cache_bytes,
    kernel_flops,
    pipeline_fill_time,
    vector_length,
    working_set,
)
from mapper.platform.loader import Device

INF = math.inf
#: Op classes whose kernels run on a device's matrix units (``tensor_gflops``) where it has them.
MATRIX_CLASSES = frozenset({"gemm", "conv", "attention"})
#: How the reason of a device without any rates begins.
NO_RATES = "no rates"
MIB = float(2**20)


@dataclass(frozen=True, slots=True)
class Estimate:
    """One task on one device: seconds, what bounds it, and the roofline parts."""

    time: float
    bound: str
    reason: str = ""  # why it is infeasible
    t_parallel: float = 0.0  # parallel compute time at the device's effective peak
    t_serial: float = 0.0  # serial compute time at one lane's rate
    t_memory: float = 0.0  # memory time at the effective bandwidth
    cached: bool = False  # the working set fits the cache: t_memory is at the cache's bandwidth
    t_overhead: float = 0.0  # the device's fixed time per call of this op (Hockney's t0), beyond launch
    t_copy: float = 0.0  # a GEMM's packing (gemm_pack_ns) and conv2d's im2col copy (im2col_gbs); 0 without


def _streams_weight(task: Task, cls: str, dims: tuple[int, int, int, int] | None, device: Device) -> bool:
    """A GEMM whose rows fit one of the device's tiles (or a matrix-vector product): the libraries'
    small-M kernels stream its weight once, through one row of tiles
    (:data:`~mapper.costing.efficiency.EFF_MEMORY_GEMM`).
    Unfused attention in a decode step (fewer queries than the tile) is two such batched GEMMs,
    streaming the cached keys and then the values."""
    out = task.output
    if task.op in ATTENTION_OPS and not task.attr("fused", 1) and device.gemm_tile is not None:
        return 0 < int(task.attr("seq") or 0) < device.gemm_tile[0]
    if cls != "gemm" or task.op != "matmul" or out is None or len(out.shape) < 2:
        return False
    if dims is None:  # the device has no GEMM model, or a matrix-vector product
        return math.prod(out.shape[:-1]) == 1 or out.shape[-1] == 1
    return device.gemm_tile is not None and dims[1] <= device.gemm_tile[0]


def infeasible_estimate(reason: str) -> Estimate:
    """An estimate that rules the device out, saying why."""
    return Estimate(INF, "infeasible", reason)


def estimate(task: Task, cls: str, device: Device) -> Estimate:
    """Model time of ``task`` (op class ``cls``) on ``device``, ignoring explicit costs.

    ``T = launch + t0 + max(Tc, Tm)`` with ``Tc = p F / (e_c P) + (1 - p) F / S`` and
    ``Tm = B / (e_m BW)`` (docs/cost_model.md), where ``F`` is
    :func:`kernel_flops`, ``t0`` the device's fixed time for the task
    (Hockney's two-parameter model, "The science of computer benchmarking",
    SIAM 1996: a fixed time per call beside the asymptotic rate): its
    ``overhead_us`` entry plus its ``overhead_us_per_mib`` entry times the
    :func:`working_set` in MiB (a kernel that copies or first-touches its
    tensors once per call; 0 when none), ``e_c`` is scaled by Hockney's
    ``n / (n + n_1/2)`` where the device has a ``half_length`` entry ``n_1/2``
    for the task and :func:`vector_length` gives ``n``, and ``BW`` is the cache's
    bandwidth when the working set fits the device's cache
    (:func:`fits_cache`; Ilic et al., IEEE CAL 2014), else the memory's. ``e_c`` and ``e_m`` are the
    device's own ``efficiency`` / ``memory_efficiency`` (for example measured
    by ``mapper calibrate``) where it declares them (for ``e_c``, ``t0`` and a
    per-op ``memory_efficiency`` table the most specific of :func:`model_keys`),
    else the tables above. An op in PyTorch's composite form (``fused = 0``) moves the bytes of
    the kernels PyTorch launches for it and pays a launch for each (:mod:`mapper.costing.eager`).
    """
    kind = device.kind
    gemm_model = (device.gemm_half_lengths is not None or device.gemm_pack_ns is not None
                  or device.gemm_tile is not None)
    dims = gemm_dims(task) if gemm_model else None
    if dims is not None:
        cls = "gemm"  # the device models conv2d's GEMM as a GEMM (its im2col copy is t_copy)
    keys = model_keys(task, cls)
    fitted = fitted_keys(device, keys)
    e_c = lookup(device.efficiency, fitted)  # not a class's rate past an op's own (streaming) entry
    if e_c is None:
        e_c = EFF_COMPUTE[kind].get(cls)
    if e_c is None:
        return infeasible_estimate(f"op {task.op} ({cls}) has no {kind} implementation in the model")
    e_c *= backward_share(device, task, fitted)
    t_copy = fill = 0.0
    plan: TilePlan | None = None
    tiled = dims is not None and device.gemm_tile is not None and device.compute_units is not None
    if dims is not None:
        if device.gemm_half_lengths is not None:
            e_c *= gemm_shape_factor(dims, device.gemm_half_lengths)
        if device.gemm_pack_ns is not None:
            t_copy = gemm_pack_time(dims, device.gemm_pack_ns, device.gemm_pack_cold_ns, gemm_cold(task))
        if device.im2col_gbs:
            t_copy += im2col_bytes(task) / (device.im2col_gbs * 1e9)
    else:
        half, n = lookup(device.half_length, fitted), vector_length(task)
        if half and n:
            e_c *= n / (n + half)
        if task.op in ATTENTION_OPS and device.gemm_tile is not None and device.compute_units is not None:
            e_c *= attention_wave_efficiency(task, device.gemm_tile[0], device.compute_units)
    flops, nbytes = kernel_flops(task), gemm_bytes(task)
    eager = eager_kernels(task)  # PyTorch's composite form: its kernels' traffic and launches
    if eager is not None:
        nbytes = eager[1]
    if (flops > 0 or nbytes > 0) and not device.has_rates:
        return infeasible_estimate(f"{NO_RATES}: the device declares no peak_gflops or mem_bandwidth_gbs")
    t_par = t_ser = t_mem = 0.0
    if flops > 0:
        fmt = rate_format(task.precision) if cls in MATRIX_CLASSES else ""  # a GEMM's epilogue gradient keeps 16-bit
        tensor = device.tensor_peak(fmt or task.dtype) if cls in MATRIX_CLASSES else None
        if fmt and tensor is None and task.precision in STATIC:  # an integer array without tensor cores
            tensor = device.peak(fmt)
        if fmt and tensor is None and fmt != "bf16":
            return infeasible_estimate(f"no {fmt} rate in tensor_gflops")
        rd = rate_dtype(device, task.dtype)
        if rd is None and tensor is None:
            return infeasible_estimate(f"no {task.dtype} rate in peak_gflops")
        peak = e_c * (tensor or device.peak(rd or "") or 0.0) * 1e9
        if tiled and dims is not None and peak > 0:  # tiles, waves and split-K (mapper.costing.tiles)
            plan = tile_time(task, dims, device, peak)
            peak *= plan.efficiency
            fill = pipeline_fill_time(task, dims, plan.tile, device.compute_units or 1, plan.split,
                                      device.gemm_stages, device.mem_bandwidth_gbs or 0.0)
        p = min(max(float(task.parallel), 0.0), 1.0)
        serial = device.serial_gflops * 1e9 if device.serial_gflops is not None else peak
        t_par = p * flops / peak
        t_ser = (1.0 - p) * flops / serial
    cached = nbytes > 0 and fits_cache(task, device)
    if nbytes > 0:
        bandwidth = device.cache_bandwidth_gbs if cached else device.mem_bandwidth_gbs
        if bandwidth is None:
            return infeasible_estimate("no mem_bandwidth_gbs for a task that moves bytes")
        e_m = lookup(device.memory_efficiency_ops, keys)
        if e_m is None:
            e_m = device.memory_efficiency
        if e_m is None:
            e_m = EFF_MEMORY_GEMM.get(kind, EFF_MEMORY[kind]) if _streams_weight(task, cls, dims, device) \
                else EFF_MEMORY[kind]
        loads = nbytes if eager is not None else in_cache_bytes(task)
        if cached and device.mem_bandwidth_gbs:  # weights and graph inputs from memory, the rest from the cache
            cold = cold_bytes(task)
            t_mem = ((loads - cold) / bandwidth + cold / device.mem_bandwidth_gbs) / (e_m * 1e9)
        else:
            t_mem = (loads if cached else nbytes) / (e_m * bandwidth * 1e9)
    launch = device.launch_us / 1e6 * (eager[0] if eager is not None else 1)
    cast = cast_bytes(task)  # a training step's quantisation kernel, run before the GEMM: not under it
    share = CAST_MEMORY_SHARE.get(task.precision or "", EFF_MEMORY[kind])  # a measured quantiser's share
    t_cast = launch + cast / (share * device.mem_bandwidth_gbs * 1e9) if cast > 0 and device.mem_bandwidth_gbs else 0.0
    per_mib = lookup(device.overhead_us_per_mib, fitted) or 0.0
    overhead = ((lookup(device.overhead_us, fitted) or 0.0) + per_mib * working_set(task) / MIB) / 1e6 + fill
    t_comp = t_par + t_ser + t_copy
    q = device.overlap_exponent
    body = max(t_comp, t_mem)
    if q is not None:  # imperfect overlap; a tiled GEMM's only outside its pipeline's steady state
        share = overlap_share(plan, device.gemm_stages) if plan is not None else 1.0
        body += share * ((t_comp ** q + t_mem ** q) ** (1.0 / q) - body)
    if body == 0.0 or launch + overhead >= body:
        bound = "launch"
    elif t_comp >= t_mem:
        bound = "serial" if t_ser > t_par else "compute"
    else:
        bound = "memory"
    return Estimate(launch + overhead + body + t_cast, bound, "", t_par, t_ser, t_mem, cached, overhead, t_copy)

"""Calibrate the CPU model of this machine: measure rates, write a platform file.

:func:`calibrate` measures, with the project's own kernels
(:mod:`mapper.kernels`) so that the model describes what the executor runs:

- the achievable GFLOP/s per dtype (f32, f64): matmul at a few sizes, the best
  of short, time-bounded runs (the roofline's compute ceiling, Williams,
  Waterman, Patterson, "Roofline", CACM 52(4), 2009);
- the single-thread rate (``serial_gflops``, Amdahl's serial part): the same
  matmul in a child process limited to one thread;
- the memory bandwidth: an ``add`` of two arrays larger than the last-level
  cache (a STREAM-style kernel, McCalpin, IEEE TCCA newsletter, 1995);
- the launch overhead: a kernel call on one-element arrays, from Python;
- the GEMM model (:func:`gemm_fit`): packing costs per operand, or Hockney's
  half-performance lengths per dimension, fitted on matmul probes, and
  conv2d's im2col rate;
- per op class, the fraction of the peak a probe task reaches (compute
  classes, the ``efficiency`` table) or of the bandwidth (streaming
  classes, a ``memory_efficiency`` table), where the model's default does
  not explain the probe, with a fixed time per call (``overhead_us``,
  Hockney's ``t0``) where a kernel was probed at several amounts of work
  (:func:`model_entries`).

Every probe time is the median of its calls spread over passes (the
executor's statistic); :func:`calibrate` takes a ``between`` callback so that
a caller can interleave its own measurements with the calibration's.

:func:`platform_toml` writes the result in the schema of docs/platforms.md,
with comments saying when and how each number was measured. Rates are
stored divided by the cost model's efficiency factors (``mapper.cost``) so
that the model reproduces the measured rates.
"""

from __future__ import annotations

import json
import math
import os
import platform as pyplatform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Callable

import numpy as np

from mapper.cost import (
    EFF_COMPUTE, EFF_MEMORY, build_cost_table, gemm_cold, gemm_dims, gemm_shape_factor, im2col_bytes, in_cache_bytes,
    kernel_flops, op_class,
    rate_dtype, vector_length, working_set,
)
from mapper.errors import MapperError, OptionsError
from mapper.ops import OP_CLASSES
from mapper.platform import MAX_STREAM_FRACTION, Platform, parse_platform

#: Threading knobs set to 1 in the serial-rate child process.
_ONE_THREAD = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


@dataclass(frozen=True, slots=True)
class Settings:
    """Sizes and time budgets of one calibration (``quick`` for tests)."""

    rounds: int = 3  # the rate measurements repeat in rounds; the best round counts
    gemm_sizes: tuple[int, ...] = (256, 512, 1024)
    gemm_budget: float = 0.4  # seconds per dtype and round
    serial_size: int = 512
    serial_budget: float = 1.0
    measure_serial: bool = True
    stream_mib: int = 0  # per array; 0: 2 x LLC, clamped to [64, 256] MiB
    stream_budget: float = 0.8  # seconds per round
    launch_calls: int = 2000
    probes: bool = True
    probe_passes: int = 9  # timed passes over the probes, one call of each per pass; the median counts
    cache_sizes_mib: tuple[float, ...] = (0.5, 1, 2, 4, 8, 16, 32, 64)  # per array, for the cache sweep
    cache_budget: float = 1.5  # seconds for the whole sweep (at least 5 calls per size)

    @staticmethod
    def quick() -> Settings:
        return Settings(
            rounds=1, gemm_sizes=(128, 256), gemm_budget=0.25, measure_serial=False, stream_mib=64,
            stream_budget=0.4, launch_calls=200, probes=False, cache_sizes_mib=(1, 4, 16, 64), cache_budget=0.5,
        )


@dataclass(frozen=True, slots=True)
class Rate:
    """One measured quantity: the measured ``value``, the ``stored`` value
    (after dividing by the model's efficiency factor), and how it was measured."""

    key: str
    value: float
    stored: float
    how: str


@dataclass(frozen=True, slots=True)
class Probe:
    """One op class checked against the calibrated model: a probe task's
    fastest timed call, the model's time (``ratio`` = model / measured), and
    the rates the kernel achieved net of the launch overhead."""

    op_class: str
    task: str
    measured: float
    model: float
    bound: str
    flops: float = 0.0
    bytes: float = 0.0
    launch: float = 0.0  # seconds, the platform's launch overhead
    rate_dtype: str = "f32"  # the dtype whose peak rates the task
    feeds: str = ""  # a key (``reduce.max``, ``elementwise:f64``) this probe alone feeds; "" for its class and op
    working_set: float = 0.0  # bytes of the distinct tensors the task touches (mapper.cost.working_set)
    vector: int = 0  # Hockney's vector length n of the task (mapper.cost.vector_length; 0: none)
    gemm: tuple[int, ...] = ()  # (batch, M, N, K) of the task's GEMM (mapper.cost.gemm_dims; () for none)
    copy_bytes: float = 0.0  # bytes conv2d's im2col writes (mapper.cost.im2col_bytes)
    gemm_cold: tuple[bool, ...] = ()  # whether the GEMM's A and B come from memory (mapper.cost.gemm_cold)
    cache_bytes: float = 0.0  # bytes moved when the working set is in cache (mapper.cost.in_cache_bytes; 0: bytes)

    @property
    def op(self) -> str:
        """The probe task's op (the first word of ``task``)."""
        return self.task.split(" ", 1)[0]

    @property
    def ratio(self) -> float:
        return self.model / self.measured if self.measured > 0 else float("inf")

    @property
    def gflops(self) -> float | None:
        """FLOP rate net of the launch overhead; None when the call took no longer than a launch."""
        body = self.measured - self.launch
        return self.flops / body / 1e9 if body > 0 else None

    @property
    def gbs(self) -> float | None:
        """Byte rate net of the launch overhead; None when the call took no longer than a launch."""
        body = self.measured - self.launch
        return self.bytes / body / 1e9 if body > 0 else None


@dataclass(frozen=True, slots=True)
class Calibration:
    """What :func:`calibrate` measured on this machine."""

    name: str
    when: str  # ISO 8601 UTC
    threads: int
    peak_gflops: tuple[Rate, ...]  # per dtype, key "f32"/"f64"
    serial_gflops: Rate
    mem_bandwidth_gbs: Rate
    launch_us: Rate
    memory_gib: float
    probes: tuple[Probe, ...] = ()
    seconds: float = 0.0
    blas_threads: int | None = None  # the BLAS pool's limit while measuring; None: not controlled
    cache_mib: Rate | None = None  # the cache roofline's step (None: no cache effect measured)
    cache_bandwidth_gbs: Rate | None = None
    cache_sweep: tuple[tuple[float, float], ...] = ()  # (working set MiB, GB/s net of launch)

    def platform(self) -> Platform:
        """The calibrated platform, as :func:`mapper.platform.load_platform` reads the file."""
        return parse_platform(platform_toml(self), f"<calibration {self.name}>")


# -- timing -------------------------------------------------------------------------------
def timed_calls(fn: Callable[[], Any], budget: float, min_runs: int = 3, max_runs: int = 50) -> list[float]:
    """Wall times of ``fn`` after one warm-up call: at least ``min_runs``
    calls, more while ``budget`` seconds last (at most ``max_runs``)."""
    fn()
    out: list[float] = []
    stop = time.perf_counter() + budget
    while len(out) < min_runs or (len(out) < max_runs and time.perf_counter() < stop):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def best_time(fn: Callable[[], Any], budget: float, min_runs: int = 3, max_runs: int = 50) -> tuple[float, int]:
    """Best wall time of :func:`timed_calls`: (seconds, runs)."""
    times = timed_calls(fn, budget, min_runs, max_runs)
    return min(times), len(times)


def median_time(fn: Callable[[], Any], budget: float, min_runs: int = 3, max_runs: int = 50) -> tuple[float, int]:
    """Median wall time of :func:`timed_calls`, the statistic the executor
    reports per task: (seconds, runs)."""
    times = timed_calls(fn, budget, min_runs, max_runs)
    return statistics.median(times), len(times)


def measure_gemm(dtype: str, sizes: tuple[int, ...], budget: float) -> tuple[float, int, int]:
    """Matmul GFLOP/s of the median call, best over square ``sizes``: (gflops, size, runs)."""
    from mapper.kernels import registry as k

    rng = np.random.default_rng(0)
    best = (0.0, 0, 0)
    for n in sizes:
        a, b = k.make_tensor(dtype, (n, n), rng), k.make_tensor(dtype, (n, n), rng)
        secs, runs = median_time(lambda: k.run_kernel("matmul", [a, b], {}), budget / len(sizes))
        rate = 2.0 * n**3 / secs / 1e9
        if rate > best[0]:
            best = (rate, n, runs)
    return best


def measure_serial(dtype: str, size: int, budget: float) -> tuple[float, int, int]:
    """:func:`measure_gemm` in a child process with every thread pool at one thread."""
    env = dict(os.environ)
    env.update({k: "1" for k in _ONE_THREAD})
    cmd = [sys.executable, "-m", "mapper.calibrate", "--serial-probe", dtype, str(size), str(budget)]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120 + 10 * budget, check=False)
    except subprocess.TimeoutExpired:
        raise MapperError("the single-thread calibration run timed out", obj="calibrate") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise MapperError(f"the single-thread calibration run failed: {tail[0]}", obj="calibrate")
    rate, n, runs = json.loads(done.stdout.strip().splitlines()[-1])
    return float(rate), int(n), int(runs)


def llc_bytes() -> int | None:
    """The last-level cache size in bytes, from sysfs or sysconf, when the OS says."""
    best: tuple[int, int] | None = None
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        entries = []
    for entry in entries:
        try:
            with open(os.path.join(base, entry, "level")) as fh:
                level = int(fh.read())
            with open(os.path.join(base, entry, "size")) as fh:
                text = fh.read().strip().upper()
        except (OSError, ValueError):
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit() and (best is None or level > best[0]):
            best = (level, int(digits) * scale)
    if best is not None:
        return best[1]
    for name in ("SC_LEVEL3_CACHE_SIZE", "SC_LEVEL2_CACHE_SIZE"):
        try:
            size = os.sysconf(name)
        except (ValueError, OSError):
            continue
        if size and size > 0:
            return int(size)
    return None


def stream_mib(settings: Settings) -> int:
    """Array size of the bandwidth run: twice the LLC, within [64, 256] MiB.

    The cap bounds the run's time and memory; where the OS reports a larger
    LLC (a VM seeing its host's whole L3), three 256 MiB arrays per call are
    still several times the cache share a guest gets.
    """
    if settings.stream_mib:
        return settings.stream_mib
    llc = llc_bytes() or 32 * 2**20
    return int(min(max(2 * llc // 2**20, 64), 256))


def stream_arrays(mib: float) -> tuple[np.ndarray, np.ndarray]:
    """Two f64 arrays of ``mib`` MiB for :func:`measure_bandwidth`."""
    n = int(mib * 2**20) // 8
    return np.full(n, 1.5), np.full(n, 2.5)


def measure_bandwidth(a: np.ndarray, b: np.ndarray, budget: float) -> tuple[float, int]:
    """GB/s of ``add`` of ``a`` and ``b`` into a new array (3 arrays' bytes move),
    median call: (gbs, runs)."""
    from mapper.kernels import registry as k

    secs, runs = median_time(lambda: k.run_kernel("add", [a, b], {}), budget, min_runs=3)
    return 3 * a.nbytes / secs / 1e9, runs


def cache_sweep(sizes_mib: tuple[float, ...], launch: float, budget: float) -> tuple[tuple[float, float], ...]:
    """``add`` of two f64 arrays of each size in ``sizes_mib`` into a new one:
    ``(working set MiB, GB/s)`` per size, the median call net of ``launch``
    seconds, working set = 3 arrays (two read, one written)."""
    out = []
    for mib in sizes_mib:
        a, b = stream_arrays(mib)
        secs, _ = median_time(lambda: _add(a, b), budget / len(sizes_mib), min_runs=5)
        body = secs - launch
        if body > 0:
            out.append((3 * a.nbytes / 2**20, 3 * a.nbytes / body / 1e9))
    return tuple(out)


def _add(a: np.ndarray, b: np.ndarray) -> Any:
    from mapper.kernels import registry as k

    return k.run_kernel("add", [a, b], {})


def cache_level(sweep: tuple[tuple[float, float], ...], dram_gbs: float) -> tuple[float, float] | None:
    """``(cache_mib, cache_gbs)`` from a :func:`cache_sweep`, or None when no
    working set ran clearly (25 %) faster than ``dram_gbs``.

    The step of a cache-aware roofline (Ilic, Pratas, Sousa, IEEE CAL 2014):
    sizes whose rate is above the geometric mean of the fastest rate and the
    memory's count as in cache, from the fastest size up to the first that is
    not; the cache size is the largest such working set (the real boundary
    lies between it and the next size), the bandwidth their median rate.
    """
    if not sweep:
        return None
    top = max(range(len(sweep)), key=lambda i: (sweep[i][1], -i))
    if sweep[top][1] < 1.25 * dram_gbs:
        return None
    cut = math.sqrt(sweep[top][1] * dram_gbs)
    last = top
    while last + 1 < len(sweep) and sweep[last + 1][1] >= cut:
        last += 1
    rates = [r for w, r in sweep[: last + 1] if r >= cut]
    return sweep[last][0], statistics.median(rates)


def measure_launch(calls: int) -> float:
    """Seconds per kernel call (``add``) on one-element arrays, from Python: the
    median of ``calls`` individually timed calls (the distribution has a long
    tail of thread wake-ups on a busy machine, which a mean would follow)."""
    from mapper.kernels import registry as k

    a, b = np.ones(1), np.ones(1)
    k.run_kernel("add", [a, b], {})
    per = []
    for _ in range(max(calls, 1)):
        t0 = time.perf_counter()
        k.run_kernel("add", [a, b], {})
        per.append(time.perf_counter() - t0)
    return statistics.median(per)


def memory_gib() -> float:
    """Physical memory in GiB."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    except (ValueError, OSError):
        return 0.0


def threads() -> int:
    """Threads the kernels use: ``NUMBA_NUM_THREADS`` when set, else the CPUs
    this process may run on."""
    env = os.environ.get("NUMBA_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


# -- op-class probes ------------------------------------------------------------------------
#: GEMM shapes ``(M, N, K)`` of the matmul probes: a small design over 48 to
#: 3072 in each dimension (each dimension short in some probes while the
#: others are long), for :func:`gemm_fit`, and three shapes with a short
#: ``N`` that is not a multiple of 16 (25, 41, 100; ResNet-50's last stage
#: has N = 49, and without these its 1x1 and 3x3 layers there were 5-7 %
#: under, with them -3 to +10 %). Each does at least 50 MFLOP, so
#: that no probe is mostly launch overhead (a 3072 x 48 x 48 probe of 14 MFLOP,
#: a fifth of a millisecond, pulled the half-length fit's N and K lengths to 0
#: and ResNet's 49-pixel layers to -45 %).
GEMM_PROBE_SHAPES: tuple[tuple[int, int, int], ...] = (
    (48, 1536, 384), (96, 3072, 96), (384, 3072, 48), (1536, 384, 96), (384, 48, 1536), (1536, 96, 384),
    (96, 384, 1536), (384, 384, 384), (1536, 1536, 192), (192, 1536, 1536), (768, 768, 768), (1536, 48, 1536),
    (1024, 41, 1024), (768, 100, 512), (2048, 25, 768),
)

#: ``(tokens, sequence length)`` of the attention probes (12 heads of 64): one
#: to four sequences of 64 to 512 tokens, so that :func:`_fit` can tell a
#: fixed time per call from the short sequences' lower rate.
ATTENTION_PROBES: tuple[tuple[int, int], ...] = ((128, 64), (256, 64), (512, 128), (256, 256), (512, 512))

#: Probe tasks per op class (moderate sizes: milliseconds each), as
#: ``(class, op variant or dtype key, body)``. The GEMM shapes above run as
#: ``matmul(input, weight)`` and as ``matmul(weight, input)`` (the weight, read
#: from memory, as ``B`` and as ``A``, as conv2d calls its GEMM); conv2d has
#: seven layers (3x3, 1x1, 7x7 stride 2, 1x1 stride 2, batch 1) for the im2col
#: rate beside the GEMM model. Classes with a fixed cost per call have the
#: same kernel at two or more amounts of work (stencil: 1 and 8 sweeps on two
#: grids; attention: :data:`ATTENTION_PROBES`, unmasked and causal; fft:
#: rows of 1024 to 32768 points and a small 4 x 4096; add, layernorm,
#: batchnorm and relu at two sizes each, the smaller one well under a
#: millisecond, where a parallel loop's fixed cost shows), so that
#: :func:`model_entries` can fit
#: Hockney's fixed time beside the rate. Classes with several kernels (norm:
#: layernorm, batchnorm; fft: fft, ifft) have a probe per kernel, and each op
#: its own entry. A probe keyed by an op variant (``reduce.max``, a different
#: loop from ``sum``; ``attention.causal``, masked scores) or a dtype
#: (``elementwise:f64``: Numba loops do not run at half the rate in f64 as
#: the BLAS peaks do) feeds only that key's entry.
#: The sizes form a small grid chosen around typical uses, not the benchmark
#: examples' shapes.
PROBES: tuple[tuple[str, str], ...] = (
    *(("gemm", f"input a : f32[{m}, {k}]\n  y = matmul(a, weight f32[{k}, {n}])") for m, n, k in GEMM_PROBE_SHAPES),
    *(("gemm", f"input b : f32[{k}, {n}]\n  y = matmul(weight f32[{m}, {k}], b)") for m, n, k in GEMM_PROBE_SHAPES),
    ("conv", "input x : f32[1, 3, 160, 160]\n  y = conv2d(x, weight f32[32, 3, 7, 7], stride = 2, padding = 3)"),
    ("conv", "input x : f32[1, 256, 28, 28]\n  y = conv2d(x, weight f32[512, 256, 1, 1], stride = 2)"),
    ("conv", "input x : f32[1, 64, 56, 56]\n  y = conv2d(x, weight f32[64, 64, 3, 3], padding = 1)"),
    ("conv", "input x : f32[1, 128, 28, 28]\n  y = conv2d(x, weight f32[128, 128, 3, 3], padding = 1)"),
    ("conv", "input x : f32[1, 512, 28, 28]\n  y = conv2d(x, weight f32[128, 512, 1, 1])"),
    ("conv", "input x : f32[1, 256, 16, 16]\n  y = conv2d(x, weight f32[256, 256, 3, 3], padding = 1)"),
    ("conv", "input x : f32[1, 256, 9, 9]\n  y = conv2d(x, weight f32[256, 256, 3, 3], padding = 1)"),
    *(("attention", f"input x : f32[{t}, 2304]\n  y = attention(x, heads = 12, seq = {seq})")
      for t, seq in ATTENTION_PROBES),
    *(("attention.causal", f"input x : f32[{t}, 2304]\n  y = attention(x, heads = 12, seq = {seq}, causal = 1)")
      for t, seq in ATTENTION_PROBES),
    ("activation", "input x : f32[1024, 1024]\n  y = gelu(x)"),
    ("relu", "input x : f32[1, 256, 56, 56]\n  y = relu(x)"),
    ("relu", "input x : f32[1, 1024, 14, 14]\n  y = relu(x)"),
    ("elementwise", "input a : f32[1024, 1024]\n  input b : f32[1024, 1024]\n  y = add(a, b)"),
    ("elementwise", "input a : f32[256, 512]\n  input b : f32[256, 512]\n  y = add(a, b)"),
    ("elementwise:f64", "input a : f64[1024, 1024]\n  input b : f64[1024, 1024]\n  y = add(a, b)"),
    ("elementwise:c64", "input a : c64[256, 4096]\n  input b : c64[1, 4096]\n  y = mul(a, b)"),
    ("norm", "input x : f32[1024, 1024]\n  y = layernorm(x)"),
    ("norm", "input x : f32[128, 768]\n  y = layernorm(x)"),
    ("norm", "input x : f32[1, 256, 56, 56]\n  y = batchnorm(x)"),
    ("norm", "input x : f32[1, 128, 28, 28]\n  y = batchnorm(x)"),
    ("pool", "input x : f32[8, 64, 56, 56]\n  y = maxpool(x, kernel = 2)"),
    ("pool", "input x : f32[4, 64, 64, 64]\n  y = maxpool(x, kernel = 3, stride = 2, padding = 1)"),
    ("pool", "input x : f32[1, 16, 224, 224]\n  y = maxpool(x, kernel = 3, stride = 2, padding = 1)"),
    ("reduction", "input x : f32[4194304]\n  y = reduce(x, kind = \"sum\")"),
    ("reduction:f64", "input x : f64[2097152]\n  y = reduce(x, kind = \"sum\")"),
    ("reduce.max", "input x : f32[1048576]\n  y = reduce(x, kind = \"max\")"),
    ("reduce.max", "input x : f32[4194304]\n  y = reduce(x, kind = \"max\")"),
    ("reduce.max:f64", "input x : f64[2097152]\n  y = reduce(x, kind = \"max\")"),
    ("stencil", "input x : f64[512, 512]\n  y = stencil(x, points = 5, steps = 1)"),
    ("stencil", "input x : f64[512, 512]\n  y = stencil(x, points = 5, steps = 8)"),
    ("stencil", "input x : f64[896, 896]\n  y = stencil(x, points = 5, steps = 1)"),
    ("stencil", "input x : f64[896, 896]\n  y = stencil(x, points = 5, steps = 8)"),
    ("sparse", "weight A : f64[262144, 262144] csr(nnz = 1310720)\n  input x : f64[262144]\n  y = spmv(A, x)"),
    ("fft", "input x : c64[256, 1024]\n  y = fft(x)"),
    ("fft", "input x : c64[32, 8192]\n  y = fft(x)"),
    ("fft", "input x : c64[4, 4096]\n  y = fft(x)"),
    ("fft", "input x : c64[8, 32768]\n  y = fft(x)"),
    ("fft", "input x : c64[256, 1024]\n  y = ifft(x)"),
)


def run_probes(plat: Platform, passes: int = 9, between: Callable[[], None] | None = None) -> tuple[Probe, ...]:
    """Time each probe task with the kernels and predict it with the model on
    ``plat``. After an untimed warm-up call of each, the probes run in
    ``passes`` passes; in each, every probe's inputs are read (a reduction
    over each) and then the probe is called and timed. So its inputs are in
    the cache, as in a graph, where a task's inputs were written just before
    by its producers, and its weights are not, as a graph's weights, last
    used a pass earlier, are not (the other probes evicted them): probes with
    everything cold ran memory-bound kernels up to 2x slower than inside the
    examples, probes called twice in a row (weights hot) ran GEMMs 10-17 %
    faster. Probes of streaming classes (:data:`MEMORY_CLASSES`, which have
    no weights) are called once untimed instead, so that their output buffer,
    recycled from the call before, is in the cache too, as a buffer a graph's
    consumer has just freed is (with only their inputs read first, the
    examples' elementwise tasks ran 15-60 % faster than predicted). The passes spread a probe's timed calls over the whole
    measurement, as the executor's passes do
    (:class:`mapper.execute.Execution`). A probe's time is the median of its
    calls, the statistic the executor reports. ``between``, when given, is
    called after each pass."""
    from mapper.execute import TensorStore, time_call
    from mapper.kernels import registry as k
    from mapper.lower import graph_from_text

    dev = plat.devices[0]
    setup = []
    for i, (key, body) in enumerate(PROBES):
        graph = graph_from_text(f"graph probe_{i} {{\n  {body}\n  output y\n}}\n", f"<probe {key}>")
        task = graph.tasks[-1]
        setup.append((graph, task, TensorStore(graph, 0, k).operands(task), dict(task.attrs)))
    calls = [(lambda task=task, args=args, attrs=attrs: k.run_kernel(task.op, args, attrs))
             for _, task, args, attrs in setup]
    inputs = [[a for op, a in zip(task.operands, args) if op.kind == "input" and isinstance(a, np.ndarray)]
              for _, task, args, _ in setup]
    for call in calls:
        call()  # warm-up: compile
    samples: list[list[float]] = [[] for _ in PROBES]
    streaming = [streams(task.op) for _, task, _, _ in setup]
    for _ in range(max(passes, 1)):
        for i, call in enumerate(calls):
            if streaming[i]:
                call()  # inputs and a recycled output buffer in the cache, as in a graph
            else:
                for a in inputs[i]:  # inputs into the cache, as a producer leaves them; weights stay cold
                    np.add.reduce(a, axis=None)
            samples[i].append(time_call(call)[1])
        if between is not None:
            between()
    out = []
    for (key, _), (graph, task, _, _), times in zip(PROBES, setup, samples):
        cost = build_cost_table(graph, plat)
        shape = ", ".join(str(x) for x in task.output.shape)
        dims = gemm_dims(task)
        out.append(Probe(op_class(task.op), f"{task.op} -> [{shape}]", statistics.median(times),
                         cost.time[task.index][0], cost.bound[task.index][0], kernel_flops(task), task.bytes,
                         dev.launch_us * 1e-6, rate_dtype(dev, task.dtype) or task.dtype,
                         "" if key in OP_CLASSES else key, working_set(task), vector_length(task) or 0,
                         dims or (), im2col_bytes(task), gemm_cold(task) if dims else (), in_cache_bytes(task)))
    return tuple(out)


# -- the calibration -------------------------------------------------------------------------
def calibrate(settings: Settings = Settings(), name: str = "host", log: Callable[[str], None] | None = None,
              between: Callable[[], None] | None = None) -> Calibration:
    """Measure this machine; see the module docstring. ``log`` gets progress lines.

    ``between``, when given, is called after each round of the rate
    measurements and after each pass of the probes: a caller that measures
    something else (``benchmarks/prediction.py`` runs a pass of every
    example) interleaves it with the calibration, so that both see the
    machine at the same times (a shared machine's speed drifts by tens of
    per cent within a minute).

    Runs with the thread pools and the heap policy as :func:`mapper.execute.execute`
    runs tasks (:func:`mapper.execute.one_compute_pool`: BLAS limited to one
    thread; :func:`mapper.heap.steady_heap`), so that the rates describe the
    executor's kernels.
    """
    from mapper.execute import one_compute_pool
    from mapper.heap import steady_heap

    if not name.strip():
        raise OptionsError("the platform name must not be empty", obj="--name")
    with one_compute_pool() as blas_threads, steady_heap():
        return _measure(settings, name, log or (lambda _: None), blas_threads, between)


def _measure(settings: Settings, name: str, say: Callable[[str], None], blas_threads: int | None,
             between: Callable[[], None] | None = None) -> Calibration:
    """The body of :func:`calibrate`, run inside the thread-pool limit.

    Every rate is that of the median call (the statistic the executor
    reports); the rounds spread the samples over time and the median round
    counts, so a burst of load from other processes moves none of them far.
    """
    t_start = time.perf_counter()
    when = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    eff_gemm = EFF_COMPUTE["cpu"]["gemm"]
    eff_mem = EFF_MEMORY["cpu"]
    nthreads = threads()
    sizes = ", ".join(str(n) for n in settings.gemm_sizes)
    rounds = max(settings.rounds, 1)
    mib = stream_mib(settings)
    arrays = stream_arrays(mib)
    gemm: dict[str, list[tuple[float, int, int]]] = {"f32": [], "f64": []}  # per round (rate, n, runs)
    stream: list[tuple[float, int]] = []
    for r in range(rounds):
        for dt in gemm:
            gemm[dt].append(measure_gemm(dt, settings.gemm_sizes, settings.gemm_budget))
        stream.append(measure_bandwidth(*arrays, settings.stream_budget))
        say(f"round {r + 1}/{rounds}: matmul f32 {gemm['f32'][-1][0]:.1f}, f64 {gemm['f64'][-1][0]:.1f} GFLOP/s; "
            f"add {stream[-1][0]:.2f} GB/s")
        if between is not None:
            between()
    del arrays
    peaks = []
    for dt, per_round in gemm.items():
        rate, n, _ = _median_round(per_round)
        runs = sum(x[2] for x in per_round)
        peaks.append(Rate(
            dt, rate, rate / eff_gemm,
            f"{dt} matmul n x n x n, n in ({sizes}): {rate:.1f} GFLOP/s at n = {n}, the median call of the best "
            f"size in the median of {rounds} rounds ({runs} runs), BLAS on {blas_threads or nthreads} threads; "
            f"stored / {eff_gemm:.2f} (gemm efficiency)"))
    if settings.measure_serial:
        rate, n, runs = measure_serial("f64", settings.serial_size, settings.serial_budget)
        serial = Rate("serial_gflops", rate, rate,
                      f"f64 matmul n = {n} in a process limited to one thread, median of {runs} runs")
    else:
        gemm_threads = blas_threads or nthreads  # the threads the matmul above ran on
        rate = peaks[1].value / gemm_threads
        serial = Rate("serial_gflops", rate, rate,
                      f"estimated (--quick, not measured): f64 matmul rate / {gemm_threads} threads")
    say(f"serial: {serial.value:.1f} GFLOP/s")
    llc = llc_bytes()
    llc_text = f"the OS reports an LLC of {llc / 2**20:.0f} MiB" if llc else "LLC size unknown"
    gbs = _median_round(stream)[0]
    bandwidth = Rate("mem_bandwidth_gbs", gbs, gbs / eff_mem,
                     f"add of two {mib} MiB f64 arrays into a new one ({llc_text}): {gbs:.2f} GB/s, median call "
                     f"of the median of {rounds} rounds ({sum(x[1] for x in stream)} runs), counting 3 arrays "
                     f"moved; stored / {eff_mem:.2f} (memory efficiency)")
    launch = measure_launch(settings.launch_calls) * 1e6
    launch_rate = Rate("launch_us", launch, launch,
                       f"median of {max(settings.launch_calls, 1)} timed kernel calls (add, 1-element arrays) "
                       "from Python, argument checks included")
    say(f"launch: {launch:.1f} us")
    sweep = cache_sweep(settings.cache_sizes_mib, launch * 1e-6, settings.cache_budget)
    level = cache_level(sweep, gbs)
    cache_mib_rate = cache_rate = None
    points = ", ".join(f"{w:.3g} MiB {r:.3g}" for w, r in sweep)
    if level is not None:
        cmib, cgbs = level
        cache_mib_rate = Rate("cache_mib", cmib, cmib,
                              f"the largest working set of the add sweep below that ran at cache speed "
                              f"(the next size did not); {llc_text}")
        cache_rate = Rate("cache_bandwidth_gbs", cgbs, cgbs / eff_mem,
                          f"median GB/s net of launch_us of the add sweep's sizes up to cache_mib; stored / "
                          f"{eff_mem:.2f} (memory efficiency); sweep (working set, GB/s): {points}")
        say(f"cache: working sets up to {cmib:.3g} MiB at {cgbs:.2f} GB/s")
    else:
        say(f"cache: no working set ran 25 % faster than memory ({points})")
    cal = Calibration(name, when, nthreads, tuple(peaks), serial, bandwidth, launch_rate, memory_gib(),
                      blas_threads=blas_threads, cache_mib=cache_mib_rate, cache_bandwidth_gbs=cache_rate,
                      cache_sweep=sweep)
    probes: tuple[Probe, ...] = ()
    if settings.probes:
        probes = run_probes(cal.platform(), settings.probe_passes, between)
        for p in probes:
            say(f"probe {p.op_class} {p.task}: measured {p.measured * 1e3:.3f} ms, model {p.model * 1e3:.3f} ms")
        fit = gemm_fit(replace(cal, probes=probes))
        if fit is not None and fit.raw > 1.0:
            # the probes' GEMMs ran faster than the square matmuls above: their
            # asymptotic rate is the better compute ceiling (f32: the probes' dtype)
            cal = replace(cal, peak_gflops=tuple(
                replace(r, value=r.value * fit.raw, stored=r.stored * fit.raw,
                        how=f"{r.how}; raised x{fit.raw:.3f} to the asymptotic rate of the GEMM shape fit "
                            f"over {fit.probes} matmul probes")
                if r.key == "f32" else r for r in cal.peak_gflops))
    return replace(cal, probes=probes, seconds=time.perf_counter() - t_start)


def _median_round(rounds: list[Any]) -> Any:
    """The round whose rate (first item) is the median (the upper one of an even count)."""
    ordered = sorted(rounds, key=lambda x: x[0])
    return ordered[len(ordered) // 2]


# -- the platform file ---------------------------------------------------------------------------
def _num(x: float) -> str:
    return f"{x:.4g}" if x < 1e4 else f"{x:.0f}"


def platform_toml(cal: Calibration) -> str:
    """The platform file for ``cal``, with a comment on every number."""
    peaks = ", ".join(f"{r.key} = {_num(r.stored)}" for r in cal.peak_gflops)
    lines = [
        f"# CPU model of this machine, written by `mapper calibrate` on {cal.when}",
        f"# ({pyplatform.python_implementation()} {pyplatform.python_version()}, NumPy {np.__version__}, "
        f"{cal.threads} threads, {_blas_text(cal.blas_threads)}, the mapper.kernels kernels;",
        "# the median call of short bounded runs unless said otherwise). Rates are stored divided by the cost model's",
        "# cpu efficiency factors (docs/cost_model.md) so that the model reproduces the measured rates.",
        f'name = "{cal.name}"',
        f'description = "this machine, calibrated {cal.when[:10]} ({cal.threads} threads)"',
        "",
        "[[device]]",
        'name = "cpu0"',
        'kind = "cpu"',
    ]
    lines += [f"# {r.how}" for r in cal.peak_gflops]
    lines.append(f"peak_gflops = {{ {peaks} }}")
    for r in (cal.serial_gflops, cal.mem_bandwidth_gbs, cal.launch_us):
        lines.append(f"# {r.how}")
        lines.append(f"{r.key} = {_num(r.stored)}")
    lines.append("# physical memory (sysconf SC_PHYS_PAGES x SC_PAGE_SIZE)")
    lines.append(f"memory_gib = {cal.memory_gib:.2f}")
    for r in (cal.cache_mib, cal.cache_bandwidth_gbs):
        if r is not None:
            lines.append(f"# {r.how}")
            lines.append(f"{r.key} = {_num(r.stored)}")
    if cal.cache_mib is None and cal.cache_sweep:
        lines.append("# no cache keys: no working set of the add sweep ran 25 % faster than memory; sweep "
                     "(working set, GB/s): " + ", ".join(f"{w:.3g} MiB {r:.3g}" for w, r in cal.cache_sweep))
    fit = gemm_fit(cal)
    entries = _model_entries(cal, fit)
    if entries:
        lines.append("# per op class, op or op variant: the fraction of the stored peak that its probe tasks (listed")
        lines.append("# below) reached net of launch_us, median call; replaces the cost model's default. Where one")
        lines.append("# kernel was probed at several amounts of work, Hockney's fit t = t0 + w / e (overhead_us = t0)")
        lines.append("# or t = t0 MiB + w / e (overhead_us_per_mib = t0, MiB the working set), or t = w / e (1 + n_1/2 / n)")
        lines.append("# (half_length = n_1/2, n the op's vector length), whichever fits best (with four or more probes")
        lines.append("# also t0 and n_1/2 together where that halves the worst error), else the geometric mean")
        lines.append("# over the probes; n = probes: " + ", ".join(
            f"{e.key} n={e.probes}" + (f" t0={e.overhead * 1e6:.4g} us" if e.overhead > 0 else "")
            + (f" t0={e.per_mib * 1e6:.4g} us/MiB" if e.per_mib > 0 else "")
            + (f" n_1/2={e.half:.4g}" if e.half > 0 else "") for e in entries))
        compute = [e for e in entries if e.efficiency > 0]
        if compute:
            lines.append("efficiency = { " + ", ".join(f"{_toml_key(e.key)} = {e.efficiency:.3g}" for e in compute) + " }")
        streaming = [e for e in entries if e.memory > 0]
        if streaming:
            lines.append("# streaming op classes and ops (" + ", ".join(MEMORY_CLASSES + STREAMING_OPS) + "): the fraction of the bandwidth (the cache's where")
            lines.append("# the working set fits it) their probes reached, net of launch_us, geometric mean over each key's probes")
            lines.append("memory_efficiency = { " + ", ".join(
                f"{_toml_key(e.key)} = {e.memory:.3g}" for e in streaming) + " }")
        fixed = [e for e in entries if e.overhead > 0]
        if fixed:
            lines.append("# fixed time per call beyond launch_us (Hockney's t0, microseconds), from the fits above")
            lines.append("overhead_us = { " + ", ".join(
                f"{_toml_key(e.key)} = {e.overhead * 1e6:.4g}" for e in fixed) + " }")
        halves = [e for e in entries if e.half > 0]
        if halves:
            lines.append("# Hockney's half-performance length n_1/2: the rate is e n / (n + n_1/2), n the op's vector length")
            lines.append("# (matmul, conv2d: the smallest GEMM dimension; attention: sequence), from the fits above")
            lines.append("half_length = { " + ", ".join(f"{_toml_key(e.key)} = {e.half:.4g}" for e in halves) + " }")
        if fit is not None:
            lines.append(f"# GEMM model (matmul and conv2d's im2col GEMM), fitted on {fit.probes} matmul probes of 48 to 3072 per")
            if fit.form == "pack":
                lines.append("# dimension: t = F / (gemm efficiency x peak) + (a M K + b K N + c M N) ns, the packing of A and B and")
                lines.append("# the update of C (Goto and van de Geijn 2008), least squares on the relative error, coefficients >= 0;")
            else:
                lines.append("# dimension: rate = gemm efficiency x peak x prod n / (n + n_1/2) over M, N, K (Hockney's law per")
                lines.append("# dimension), least squares on log time;")
            lines.append(f"# rms log error {fit.rms * 100:.1f} %, worst probe error {fit.worst * 100:.1f} % (the better of the two forms)")
            if fit.pack is not None:
                lines.append("gemm_pack_ns = { " + ", ".join(f"{d} = {h:.4g}" for d, h in zip("abc", fit.pack)) + " }")
            if fit.pack_cold is not None:
                lines.append("# the same for an A or B operand read from memory (a weight; the probes read their inputs first)")
                lines.append("gemm_pack_cold_ns = { " + ", ".join(
                    f"{d} = {h:.4g}" for d, h in zip("ab", fit.pack_cold)) + " }")
            if fit.half is not None:
                lines.append("gemm_half_lengths = { " + ", ".join(f"{d} = {h:.4g}" for d, h in zip("mnk", fit.half)) + " }")
            if fit.im2col_gbs is not None:
                lines.append(f"# conv2d's im2col, bytes moved (matrix written, input read at the stride) per second, fitted on {fit.conv_probes} conv probes")
                lines.append(f"# beside their GEMMs' model times; worst conv probe error {fit.conv_worst * 100:.1f} %")
                lines.append(f"im2col_gbs = {_num(fit.im2col_gbs)}")
        scaled = [e for e in entries if e.per_mib > 0]
        if scaled:
            lines.append("# fixed time per call per MiB of working set (Hockney's t0 in proportion to the data the")
            lines.append("# kernel copies or first-touches once per call), microseconds per MiB, from the fits above")
            lines.append("overhead_us_per_mib = { " + ", ".join(
                f"{_toml_key(e.key)} = {e.per_mib * 1e6:.4g}" for e in scaled) + " }")
    if cal.probes:
        peaks_by = {r.key: r.stored for r in cal.peak_gflops}
        bw = cal.mem_bandwidth_gbs.stored
        lines += [
            "",
            "# Op-class probes (median call of each probe task): measured, the model's time with the",
            "# default efficiencies, model/measured, and the rates reached net of launch_us as fractions of the",
            "# stored peak and bandwidth. Streaming classes get a `memory_efficiency` entry above; other",
            "# classes slower than the model, or compute-bound in it, get an `efficiency` entry; a class",
            "# faster than the model's memory term (cache-aware) gets none, since only a bandwidth could",
            "# describe it (probes keyed by an op variant or a dtype always count, and Hockney's fits take",
            "# all of a group's probes).",
        ]
        for p in cal.probes:
            peak = peaks_by.get(p.rate_dtype, 0.0)
            head = (f"#   {p.feeds or p.op_class:<11} {p.task:<28} {p.measured * 1e3:9.3f} ms {p.model * 1e3:9.3f} ms "
                    f"{p.ratio:6.2f} ({p.bound})")
            if p.gflops is None or p.gbs is None:
                lines.append(f"{head} no faster than one launch: no rates")
            else:
                frac = f" = {p.gflops / peak:.3f} of peak" if peak else ""
                lines.append(f"{head} {p.gflops:.3g} GFLOP/s{frac}, {p.gbs:.3g} GB/s = {p.gbs / bw:.3f} of bandwidth")
    return "\n".join(lines) + "\n"


def _toml_key(key: str) -> str:
    """``key`` as a TOML key: quoted when it has a dot or a colon (an op variant, a dtype)."""
    return f'"{key}"' if "." in key or ":" in key else key


def _blas_text(blas_threads: int | None) -> str:
    return "BLAS pool not controlled" if blas_threads is None else f"BLAS pool at {blas_threads}"


@dataclass(frozen=True, slots=True)
class Entry:
    """One key of the calibrated ``efficiency`` / ``overhead_us`` tables: an
    op class, op or op variant, the compute efficiency, the fixed time per
    call (Hockney's ``t0``, seconds; 0 when not fitted) or per MiB of the
    working set, and how many probes gave it."""

    key: str
    efficiency: float
    overhead: float = 0.0
    probes: int = 1
    per_mib: float = 0.0  # fixed seconds per MiB of working set (the other form of t0; 0 when not fitted)
    half: float = 0.0  # Hockney's n_1/2 in the op's vector length (0 when not fitted)
    memory: float = 0.0  # fraction of the bandwidth (a MEMORY_CLASSES key: then efficiency is 0)


#: Op classes whose kernels stream their operands: their probes give a
#: per-op fraction of the bandwidth (``memory_efficiency``), so that the model's
#: time follows their bytes (``sub`` moves 3 arrays, ``abs`` 2), not their FLOPs.
#: A stencil's sweeps reuse cache lines that its byte count charges each sweep,
#: so its fraction may exceed 1 (up to ``MAX_STREAM_FRACTION``).
MEMORY_CLASSES = ("elementwise", "norm", "reduction", "stencil")

#: Ops of other classes whose kernels stream their operands too (``relu``, one
#: compare per element, beside ``gelu``'s tanh in the activation class): each
#: gets its own ``memory_efficiency`` entry from its own probes, and the cost
#: model then leaves its class's fitted compute efficiency alone
#: (:func:`mapper.cost.fitted_keys`). Priced at gelu's rate, a relu was
#: predicted 3-6x slower than it ran.
STREAMING_OPS = ("relu",)


def streams(op: str) -> bool:
    """Whether ``op``'s probes give a fraction of the bandwidth
    (:data:`MEMORY_CLASSES`, :data:`STREAMING_OPS`) rather than of the peak."""
    return op_class(op) in MEMORY_CLASSES or op in STREAMING_OPS


#: A fixed time per call (or a half-performance length) is fitted only where
#: the probes show it beyond this machine's noise: the rate alone leaves a
#: probe off by more than this fraction, and the fit at least halves the
#: worst error. Two probes always fit two parameters exactly, so they need
#: this much; three or more, where the fit has a residual to show, half.
FIT_NOISE = 0.25


def model_entries(cal: Calibration) -> tuple[Entry, ...]:
    """The per-op-class model entries that make the model reproduce the probes.

    Per probe, ``w = F / peak`` (its compute time at full efficiency) and
    ``t = measured - launch``. A group of probes of one kernel at two or
    more amounts of work (``w`` differing by 10 % or more) gets Hockney's
    two-parameter fit (Hockney, "The science of computer benchmarking",
    SIAM 1996) ``t = t0 + w / e``: least squares on the relative error, with
    ``t0 >= 0`` and ``e <= 1`` (:func:`hockney_fit`), where it passes the
    :data:`FIT_NOISE` test. Any other group gets ``t0 = 0`` and ``e`` the
    geometric mean of ``min(w / t, 1)`` over its counting probes (the factor
    that minimises the squared log errors).

    Groups: each class (its probes keyed by the class), each op of a class
    probed with several ops (norm: layernorm and batchnorm; the class entry
    then covers its other ops, with no fixed time; an op named as its class,
    fft, gives the class key its own fit), and each op variant
    (``reduce.max``, fed only by its own probes). A probe counts where it ran
    slower than the model with the default efficiencies (the kernel is below
    the model's roofline; the compute term then explains the time) or where
    the model calls it compute-bound; a group with no counting probe gets no
    entry, and the geometric mean leaves out probes faster than the model's
    memory term. Hockney's fit takes all the group's probes: the fast large
    ones are what separates the fixed time from the rate. A probe no longer
    than a launch counts for nothing.
    """
    return _model_entries(cal, gemm_fit(cal))


def _model_entries(cal: Calibration, fit: GemmFit | None) -> tuple[Entry, ...]:
    """:func:`model_entries` with the GEMM fit already made (None: none)."""
    peaks = {r.key: r.stored for r in cal.peak_gflops}
    groups: dict[str, list[tuple[str, float, float, bool, float, int]]] = {}  # key -> (op, w, t, counts, MiB, n)
    ops_of: dict[str, set[str]] = {}
    streamed: dict[str, list[tuple[str, float, float]]] = {}  # streaming key -> (op, w at the bandwidth, t)
    for p in cal.probes:
        peak = peaks.get(p.rate_dtype)
        body = p.measured - p.launch
        if streams(p.op):
            if body > 0 and p.bytes > 0:
                bw, cached = model_bandwidth(cal, p.working_set)
                moved = p.cache_bytes or p.bytes if cached else p.bytes  # as the model counts them
                for key in (p.feeds,) if p.feeds else dict.fromkeys((p.op_class, p.op)):  # stencil: op = class
                    streamed.setdefault(key, []).append((p.op, moved / (bw * 1e9), body))
            continue
        if body <= 0 or not peak or p.flops <= 0:
            continue
        counts = bool(p.feeds) or p.ratio < 1.0 or p.bound in ("compute", "serial")
        point = (p.op, p.flops / (peak * 1e9), body, counts, p.working_set / 2**20, p.vector)
        if p.feeds:
            groups.setdefault(p.feeds, []).append(point)
            continue
        groups.setdefault(p.op_class, []).append(point)
        ops_of.setdefault(p.op_class, set()).add(p.op)
    for cls, ops in ops_of.items():
        if len(ops) > 1:
            points = list(groups[cls])
            for op in sorted(ops, key=lambda o: [q[0] for q in points].index(o)):
                groups[op] = [x for x in points if x[0] == op]  # an op named as its class (fft) takes the key
    stream_ops = {c: {p.op for p in cal.probes if p.op_class == c and not p.feeds} for c in MEMORY_CLASSES}
    out = [_stream_entry(key, v) for key, v in streamed.items()
           if key in OP_CLASSES or key in STREAMING_OPS or ":" in key or "." in key
           or any(key in ops and len(ops) > 1 for ops in stream_ops.values())]  # an op key where its class has several
    if fit is not None:  # the GEMM shape model prices matmul and conv2d (see platform_toml)
        out.append(Entry("gemm", fit.efficiency, probes=fit.probes))
    for key, points in groups.items():
        if fit is not None and key in ("gemm", "conv"):
            continue
        if not any(p[3] for p in points):
            continue
        e, t0, per_mib, half = _fit(points)
        out.append(Entry(key, float(f"{e:.3g}"), float(f"{t0:.3g}"), len(points), float(f"{per_mib:.3g}"),
                         float(f"{half:.3g}")))
    return tuple(out)


def _beyond_noise(worst_rate: float, worst: float, probes: int) -> bool:
    """The :data:`FIT_NOISE` test of a fixed time or half-length: the rate
    alone leaves a probe off by more than the noise (half of it for three or
    more probes, where the fit has a residual to show) and the fit at least
    halves the worst error."""
    noise = FIT_NOISE if probes <= 2 else FIT_NOISE / 2
    return worst_rate > noise and worst <= worst_rate / 2


def _stream_entry(key: str, probes: list[tuple[str, float, float]]) -> Entry:
    """The entry of a streaming key from its probes' ``(op, w, t)``, ``w`` the
    time at the full (stored) bandwidth and ``t`` the measured time net of
    the launch: the fraction of the bandwidth (geometric mean of ``w / t``,
    at most :data:`mapper.platform.MAX_STREAM_FRACTION`), or, where probes of
    one kernel at two or more amounts of data show a fixed time per call
    beyond the noise (:data:`FIT_NOISE`, as for compute classes), Hockney's
    ``t = t0 + w / e``."""
    points = [(w, t) for _, w, t in probes]
    e = _geomean_raw([min(w / t, MAX_STREAM_FRACTION) for w, t in points])
    t0 = 0.0
    ws = [w for w, _ in points]
    if len({op for op, _, _ in probes}) == 1 and len(points) >= 2 and max(ws) >= 1.1 * min(ws):
        worst_rate = max(abs(w / e / t - 1.0) for w, t in points)
        e2, c = hockney_fit(points, None, MAX_STREAM_FRACTION)
        worst = max(abs((c + w / e2) / t - 1.0) for w, t in points)
        if c > 0 and _beyond_noise(worst_rate, worst, len(points)):
            e, t0 = e2, c
    return Entry(key, 0.0, float(f"{t0:.3g}"), len(points), memory=float(f"{e:.3g}"))


def model_bandwidth(cal: Calibration, working_set: float) -> tuple[float, bool]:
    """The stored bandwidth (GB/s) the model uses for a task touching
    ``working_set`` bytes, and whether that is the cache's: the cache's where
    it fits (the cache-aware roofline of :func:`mapper.cost.estimate`), else
    the memory's."""
    if cal.cache_mib is not None and cal.cache_bandwidth_gbs is not None and working_set <= cal.cache_mib.stored * 2**20:
        return cal.cache_bandwidth_gbs.stored, True
    return cal.mem_bandwidth_gbs.stored, False


def _fit(points: list[tuple[str, float, float, bool, float, int]]) -> tuple[float, float, float, float]:
    """``(e, t0, t0 per MiB, n_1/2)`` for one group of :func:`model_entries`:
    the best of the three forms of Hockney's model (a fixed time per call, one
    in proportion to the working set, a half-performance vector length,
    ``t = w / e (1 + n_1/2 / n)``, fitted as ``t = c w / n + w / e`` with
    ``n_1/2 = c e``) that passes the :data:`FIT_NOISE` test, else the rate
    alone; with four or more probes also a fixed time and a half-length
    together (:func:`hockney_fit_both`), where it at least halves the worst
    error of the best single form (attention: a call's fixed time on the
    worker threads, and short sequences' small GEMMs and short softmax rows)."""
    ws = [x[1] for x in points]
    mean = _geomean_raw([min(w / t, 1.0) for _, w, t, counts, _, _ in points if counts])
    best: tuple[float, float, float, float, float] | None = None  # (worst error, e, t0, per MiB, n_1/2)
    if len({x[0] for x in points}) == 1 and max(ws) >= 1.1 * min(ws):
        worst_rate = max(abs(w / mean / t - 1.0) for _, w, t, *_ in points)
        ns = [x[5] for x in points]
        forms = [("t0", [1.0] * len(points))]
        if all(x[4] > 0 for x in points):
            forms.append(("mib", [x[4] for x in points]))
        halves = all(n > 0 for n in ns) and max(ns) >= 1.1 * min(ns)
        if halves:
            forms.append(("half", [w / n for w, n in zip(ws, ns)]))
        for form, scale in forms:
            e, c = hockney_fit([(w, t) for _, w, t, *_ in points], scale)
            worst = max(abs((c * k + x[1] / e) / x[2] - 1.0) for x, k in zip(points, scale))
            if c > 0 and _beyond_noise(worst_rate, worst, len(points)) and (best is None or worst < best[0]):
                best = (worst, e, c if form == "t0" else 0.0, c if form == "mib" else 0.0,
                        c * e if form == "half" else 0.0)
        if halves and len(points) >= 4:
            e, t0, half = hockney_fit_both([(w, t, n) for (_, w, t, *_), n in zip(points, ns)])
            worst = max(abs((t0 + w / e * (1.0 + half / n)) / t - 1.0) for (_, w, t, *_), n in zip(points, ns))
            bar = best[0] if best is not None else worst_rate
            if t0 > 0 and half > 0 and _beyond_noise(worst_rate, worst, len(points)) and worst <= bar / 2:
                best = (worst, e, t0, 0.0, half)
    return (mean, 0.0, 0.0, 0.0) if best is None else best[1:]


def hockney_fit_both(points: list[tuple[float, float, int]]) -> tuple[float, float, float]:
    """``(e, t0, n_1/2)`` of ``t = t0 + w / e (1 + n_1/2 / n)`` over ``(w, t,
    n)`` points: Hockney's fixed time and half-performance length together,
    least squares on the relative error (linear in ``t0``, ``1 / e`` and
    ``n_1/2 / e``) with every coefficient >= 0 (:func:`nonneg_least_squares`)
    and ``e <= 1``."""
    a = np.array([[1.0 / t, w / t, w / n / t] for w, t, n in points])
    t0, inv_e, c = nonneg_least_squares(a, np.ones(len(points)))
    if inv_e < 1.0:  # e above 1: hold it at 1 and refit the rest
        inv_e = 1.0
        t0, c = nonneg_least_squares(a[:, [0, 2]], 1.0 - a[:, 1])
    return 1.0 / inv_e, float(t0), float(c / inv_e)


def hockney_fit(points: list[tuple[float, float]], scale: list[float] | None = None,
                e_max: float = 1.0) -> tuple[float, float]:
    """``(e, t0)`` minimising ``sum((t0 k + w / e) / t - 1)^2`` over ``(w, t)``
    points with scales ``k`` (default 1; the working set in MiB for a fixed
    time per MiB), with ``t0 >= 0`` and ``e <= e_max``: Hockney's fixed time per
    call and asymptotic fraction of the peak (Hockney, SIAM 1996;
    ``r_inf = e P``, ``n_1/2 = t0 e P``). Where the free fit breaks a bound,
    the bound holds and the other parameter is refitted."""
    ks = scale or [1.0] * len(points)
    u = [k / t for (_, t), k in zip(points, ks)]
    x = [w / t for w, t in points]
    suu, sux, sxx = sum(a * a for a in u), sum(a * b for a, b in zip(u, x)), sum(b * b for b in x)
    su, sx = sum(u), sum(x)
    det = suu * sxx - sux * sux
    t0, a = (0.0, 0.0) if det <= 0 else ((su * sxx - sx * sux) / det, (suu * sx - sux * su) / det)
    if det <= 0 or t0 < 0:
        t0, a = 0.0, sx / sxx
    if a < 1.0 / e_max:
        a = 1.0 / e_max
        t0 = max((su - a * sux) / suu, 0.0)
    return 1.0 / a, t0


@dataclass(frozen=True, slots=True)
class GemmFit:
    """The GEMM model fitted to the matmul probes, and conv2d's im2col rate.

    ``form`` is ``"pack"`` (the compute time plus per-element costs of
    packing A and B and updating C, ``pack`` = ns per element of A, B, C) or
    ``"half"`` (Hockney's half-performance factor per dimension, ``half`` =
    ``n_1/2`` of ``M, N, K``), whichever leaves the smaller root-mean-square
    log error on the probes (``rms``; ``worst`` the largest relative error).
    ``efficiency`` is the asymptotic fraction of the stored peak (``raw``
    before the cap at 1; above 1 the peak is raised). ``im2col_gbs`` (None when
    the conv probes show no copy time) is the rate of conv2d's im2col (fitted
    with the pack form, or on the conv probes beside their GEMMs' model times
    for the half form); ``conv_worst`` the largest relative error on those
    probes.
    """

    efficiency: float
    half: tuple[float, float, float] | None
    probes: int
    worst: float
    im2col_gbs: float | None = None
    conv_probes: int = 0
    conv_worst: float = 0.0
    raw: float = 1.0
    pack: tuple[float, float, float] | None = None
    rms: float = 0.0
    pack_cold: tuple[float, float] | None = None  # ns per element of an A or B read from memory

    @property
    def form(self) -> str:
        """``"pack"`` or ``"half"``: the form fitted (the other's parameters are None)."""
        return "pack" if self.pack is not None else "half"


#: Candidate half-performance lengths of the grid search in :func:`gemm_fit`:
#: 0 and 1 to 4096 in steps of sqrt(2), refined around the best in steps of 2^(1/8).
_HALF_GRID = (0.0, *(2.0 ** (j / 2) for j in range(25)))


def _fit_half(y: np.ndarray, sizes: np.ndarray) -> tuple[float, tuple[float, float, float]]:
    """``(log of seconds per peak-FLOP, n_1/2 of M, N, K)`` minimising the squared
    log error of ``prod (1 + n_1/2 / n)``: a grid search, then a finer grid."""

    def search(grids: list[np.ndarray]) -> tuple[float, tuple[float, float, float]]:
        lm, ln, lk = (np.log1p(g[None, :] / sizes[:, d:d + 1]) for d, g in enumerate(grids))
        r = y[:, None, None, None] - lm[:, :, None, None] - ln[:, None, :, None] - lk[:, None, None, :]
        sse = ((r - r.mean(axis=0)) ** 2).sum(axis=0)
        a, b, c = np.unravel_index(int(np.argmin(sse)), sse.shape)  # first minimum: deterministic
        return float(r[:, a, b, c].mean()), (float(grids[0][a]), float(grids[1][b]), float(grids[2][c]))

    grid = np.array(_HALF_GRID)
    _, best = search([grid] * 3)
    fine = [np.array(sorted({h * 2.0 ** (j / 8) for j in range(-4, 5)} | ({0.0, 0.5} if h == 0 else set())))
            for h in best]
    return search(fine)


def nonneg_least_squares(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``x >= 0`` minimising ``|a x - b|``, for a few columns: every subset of
    columns is solved by least squares and the best all-nonnegative solution
    kept (exact for the up to 7 unknowns of the GEMM fit; ties go to the
    first subset in order)."""
    n = a.shape[1]
    best, best_res = np.zeros(n), float(np.sum(b * b))
    for mask in range(1, 1 << n):
        cols = [j for j in range(n) if mask >> j & 1]
        sol, *_ = np.linalg.lstsq(a[:, cols], b, rcond=None)
        if np.any(sol < 0):
            continue
        x = np.zeros(n)
        x[cols] = sol
        res = float(np.sum((a @ x - b) ** 2))
        if res < best_res - 1e-15:
            best, best_res = x, res
    return best


def gemm_fit(cal: Calibration) -> GemmFit | None:
    """Fit the GEMM model to the matmul probes, in two forms, and keep the one
    with the smaller root-mean-square log error:

    - ``pack``: ``t = launch + F / (e P) + a M K + b K N + c M N`` (per GEMM
      of a batch), the multiply-adds at the asymptotic rate plus the
      memory-bound packing of ``A`` and ``B`` and the update of ``C`` (Goto
      and van de Geijn, ACM TOMS 2008), least squares on the relative error
      with every coefficient >= 0 (:func:`nonneg_least_squares`);
    - ``half``: ``t = launch + F / (e P) prod_d (1 + n_1/2,d / n_d)`` over
      ``d = M, N, K`` (Hockney's half-performance law per dimension, Hockney,
      SIAM 1996), least squares on the log of the time by grid search.

    conv2d's im2col rate, ``t = launch + GEMM model + bytes / rate``
    (:func:`mapper.cost.im2col_bytes`): the pack form fits it jointly with
    the GEMM, the conv probes as rows beside the matmul probes with their
    bytes as one more column (so that the GEMMs conv2d calls, a cold weight
    times a column matrix just written, weigh in the packing rates); the
    half form fits it afterwards on the conv probes beside their GEMMs' model
    times. Both forms are scored on all the probes. None with fewer than 5
    matmul probes.
    """
    from mapper.cost import gemm_pack_time

    peaks = {r.key: r.stored * 1e9 for r in cal.peak_gflops}
    pts = [(p, p.measured - p.launch, peaks.get(p.rate_dtype, 0.0)) for p in cal.probes]
    gemms = [(p, body, peak) for p, body, peak in pts if p.op == "matmul" and p.gemm and body > 0 and peak > 0]
    if len(gemms) < 5:
        return None
    y = np.array([math.log(body * peak / p.flops) for p, body, peak in gemms])
    sizes = np.array([p.gemm[1:] for p, _, _ in gemms], dtype=float)  # [probe, (M, N, K)]
    mean, half = _fit_half(y, sizes)
    fits = {"half": (math.exp(-mean), tuple(float(f"{h:.3g}") for h in half), None)}
    # columns: F / peak, then A's and B's elements (split by whether the operand comes from
    # memory where the probes have both), then C's, then im2col's bytes; one coefficient each
    convs = [(p, body, peak) for p, body, peak in pts if p.op == "conv2d" and p.gemm and body > 0 and peak > 0]
    joint = gemms + convs  # the pack form fits conv2d's im2col rate with the GEMM (one more column)
    colds = [tuple(p.gemm_cold) or (False, False) for p, _, _ in joint]
    split = [len({c[i] for c in colds}) > 1 for i in (0, 1)]
    rows = []
    for (p, _, peak), cold in zip(joint, colds):
        batch, m, n, k = p.gemm
        row = [p.flops / peak]
        for i, elems in ((0, batch * m * k), (1, batch * k * n)):
            row += [elems * (not cold[i]), elems * cold[i]] if split[i] else [elems]
        rows.append(row + [batch * m * n, p.copy_bytes])
    bodies = np.array([body for _, body, _ in joint])
    coef = nonneg_least_squares(np.array(rows, dtype=float) / bodies[:, None], np.ones(len(joint)))
    if coef[0] > 0:
        ns = [float(f"{c * 1e9:.3g}") for c in coef[1:-1]]
        a_hot, a_cold = (ns.pop(0), ns.pop(0)) if split[0] else (ns[0], ns.pop(0))
        b_hot, b_cold = (ns.pop(0), ns.pop(0)) if split[1] else (ns[0], ns.pop(0))
        cold_ns = (a_cold, b_cold) if any(split) else None
        copy_gbs = float(f"{1.0 / coef[-1] * 1e-9:.3g}") if coef[-1] > 0 else None
        fits["pack"] = (1.0 / coef[0], None, ((a_hot, b_hot, ns[0]), cold_ns, copy_gbs))

    def model(form: str, e: float, p: Probe, peak: float) -> float:
        _, h, pack = fits[form]
        if form == "half":
            return p.flops / (e * peak * gemm_shape_factor(tuple(p.gemm), h))  # type: ignore[arg-type]
        hot_ns, cold_ns, _ = pack  # type: ignore[misc]
        return p.flops / (e * peak) + gemm_pack_time(tuple(p.gemm), hot_ns, cold_ns,  # type: ignore[arg-type]
                                                      tuple(p.gemm_cold) or (False, False))

    def copy_rate(form: str) -> float | None:
        """conv2d's im2col rate (GB/s) with ``form``: the pack form's joint
        fit, or, for the half form, fitted on the conv probes beside their
        GEMMs' model times; None where the probes show no copy time."""
        if form == "pack":
            return fits["pack"][2][2]  # type: ignore[index]
        pairs = [(p.copy_bytes / body, model(form, effs[form], p, peak) / body) for p, body, peak in convs]
        num = sum(c * (1.0 - g) for c, g in pairs)
        den = sum(c * c for c, _ in pairs)
        return float(f"{den / num * 1e-9:.3g}") if den > 0 and num > 0 else None

    def probe_time(form: str, p: Probe, peak: float) -> float:
        gbs = rates[form]
        return model(form, effs[form], p, peak) + (p.copy_bytes / (gbs * 1e9) if gbs else 0.0)

    # each form's efficiency as written (3 digits, at most 1) times the peak's raise when raw > 1
    effs = {form: float(f"{min(raw, 1.0):.3g}") * raw / min(raw, 1.0) for form, (raw, _, _) in fits.items()}
    rates = {form: copy_rate(form) for form in fits}
    scored = []
    for form in fits:
        logs = [math.log(probe_time(form, p, peak) / body) for p, body, peak in joint]
        scored.append((math.sqrt(statistics.fmean(v * v for v in logs)), form))
    rms, form = min(scored)
    raw, half_t, pack_t = fits[form]
    e = float(f"{min(raw, 1.0):.3g}")
    worst = max(abs(probe_time(form, p, peak) / body - 1.0) for p, body, peak in gemms)
    conv_worst = max((abs(probe_time(form, p, peak) / body - 1.0) for p, body, peak in convs), default=0.0)
    pack_ns, pack_cold = pack_t[:2] if pack_t is not None else (None, None)
    return GemmFit(e, half_t, len(gemms), worst, rates[form], len(convs), conv_worst, raw, pack_ns, rms, pack_cold)


def class_efficiency(cal: Calibration) -> tuple[tuple[str, float], ...]:
    """``(key, efficiency)`` of each of :func:`model_entries`."""
    return tuple((e.key, e.efficiency) for e in model_entries(cal) if e.efficiency > 0)


def _geomean_raw(values: list[float]) -> float:
    """Geometric mean."""
    return math.exp(statistics.fmean(math.log(v) for v in values))


def _serial_probe(argv: list[str]) -> int:
    """Child-process entry of :func:`measure_serial`: prints ``[gflops, n, runs]``."""
    dtype, size, budget = argv[0], int(argv[1]), float(argv[2])
    print(json.dumps(list(measure_gemm(dtype, (size,), budget))))
    return 0


if __name__ == "__main__":  # the serial-rate child process
    if sys.argv[1:2] == ["--serial-probe"]:
        sys.exit(_serial_probe(sys.argv[2:]))
    sys.exit(2)

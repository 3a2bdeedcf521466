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
- per op class, the fraction of the peak a probe task reaches, written as
  the platform's ``efficiency`` table where the model's default does not
  explain the probe (:func:`class_efficiency`).

:func:`platform_toml` writes the result in the schema of docs/platforms.md,
with comments saying when and how each number was measured. Rates are
stored divided by the cost model's efficiency factors (``mapper.cost``) so
that the model reproduces the measured rates.
"""

from __future__ import annotations

import json
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

from mapper.cost import EFF_COMPUTE, EFF_MEMORY, build_cost_table, op_class, rate_dtype
from mapper.errors import MapperError, OptionsError
from mapper.platform import Platform, parse_platform

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
    probe_budget: float = 0.2  # seconds per probe and pass (at least 2 timed calls)
    probe_repeats: int = 10  # at most this many timed calls per probe and pass
    probe_passes: int = 2  # the probes run this many times; the fastest pass counts per class

    @staticmethod
    def quick() -> Settings:
        return Settings(
            rounds=1, gemm_sizes=(128, 256), gemm_budget=0.25, measure_serial=False, stream_mib=16,
            stream_budget=0.4, launch_calls=200, probes=False,
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

    def platform(self) -> Platform:
        """The calibrated platform, as :func:`mapper.platform.load_platform` reads the file."""
        return parse_platform(platform_toml(self), f"<calibration {self.name}>")


# -- timing -------------------------------------------------------------------------------
def best_time(fn: Callable[[], Any], budget: float, min_runs: int = 3, max_runs: int = 50) -> tuple[float, int]:
    """Best wall time of ``fn`` after one warm-up call: at least ``min_runs``
    runs, more while ``budget`` seconds last. Returns (seconds, runs)."""
    fn()
    best = float("inf")
    runs = 0
    stop = time.perf_counter() + budget
    while runs < min_runs or (runs < max_runs and time.perf_counter() < stop):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        runs += 1
    return best, runs


def measure_gemm(dtype: str, sizes: tuple[int, ...], budget: float) -> tuple[float, int, int]:
    """Best matmul GFLOP/s over square ``sizes``: (gflops, size, runs)."""
    from mapper.kernels import registry as k

    rng = np.random.default_rng(0)
    best = (0.0, 0, 0)
    for n in sizes:
        a, b = k.make_tensor(dtype, (n, n), rng), k.make_tensor(dtype, (n, n), rng)
        secs, runs = best_time(lambda: k.run_kernel("matmul", [a, b], {}), budget / len(sizes))
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


def stream_arrays(mib: int) -> tuple[np.ndarray, np.ndarray]:
    """Two f64 arrays of ``mib`` MiB for :func:`measure_bandwidth`."""
    n = mib * 2**20 // 8
    return np.full(n, 1.5), np.full(n, 2.5)


def measure_bandwidth(a: np.ndarray, b: np.ndarray, budget: float) -> tuple[float, int]:
    """GB/s of ``add`` of ``a`` and ``b`` into a new array (3 arrays' bytes move): (gbs, runs)."""
    from mapper.kernels import registry as k

    secs, runs = best_time(lambda: k.run_kernel("add", [a, b], {}), budget, min_runs=2)
    return 3 * a.nbytes / secs / 1e9, runs


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
#: One probe task per op class (moderate sizes: milliseconds each).
PROBES: tuple[tuple[str, str], ...] = (
    ("gemm", "input a : f32[512, 512]\n  y = matmul(a, weight f32[512, 512])"),
    ("conv", "input x : f32[8, 64, 28, 28]\n  y = conv2d(x, weight f32[64, 64, 3, 3], padding = 1)"),
    ("attention", "input x : f32[512, 2304]\n  y = attention(x, heads = 12, seq = 128)"),
    ("activation", "input x : f32[1024, 1024]\n  y = gelu(x)"),
    ("elementwise", "input a : f32[1024, 1024]\n  input b : f32[1024, 1024]\n  y = add(a, b)"),
    ("norm", "input x : f32[1024, 1024]\n  y = layernorm(x)"),
    ("pool", "input x : f32[8, 64, 56, 56]\n  y = maxpool(x, kernel = 2)"),
    ("reduction", "input x : f32[4194304]\n  y = reduce(x, kind = \"sum\")"),
    ("stencil", "input x : f64[1024, 1024]\n  y = stencil(x, points = 5, steps = 4)"),
    ("sparse", "weight A : f64[262144, 262144] csr(nnz = 1310720)\n  input x : f64[262144]\n  y = spmv(A, x)"),
    ("fft", "input x : c64[256, 1024]\n  y = fft(x)"),
)


def run_probes(plat: Platform, budget: float, max_runs: int) -> tuple[Probe, ...]:
    """Time each probe task with the kernels (best of at least 2 timed calls,
    more while ``budget`` seconds last) and predict it with the model on ``plat``."""
    from mapper.execute import TensorStore
    from mapper.kernels import registry as k
    from mapper.lower import graph_from_text

    out = []
    for cls, body in PROBES:
        graph = graph_from_text(f"graph probe_{cls} {{\n  {body}\n  output y\n}}\n", f"<probe {cls}>")
        cost = build_cost_table(graph, plat)
        task = graph.tasks[-1]
        args = TensorStore(graph, 0, k).operands(task)
        attrs = dict(task.attrs)
        secs, _ = best_time(lambda: k.run_kernel(task.op, args, attrs), budget, min_runs=2, max_runs=max_runs)
        out.append(Probe(op_class(task.op), f"{task.op} {task.output}", secs, cost.time[task.index][0],
                         cost.bound[task.index][0], task.flops, task.bytes, plat.devices[0].launch_us * 1e-6,
                         rate_dtype(plat.devices[0], task.dtype) or task.dtype))
    return tuple(out)


# -- the calibration -------------------------------------------------------------------------
def calibrate(settings: Settings = Settings(), name: str = "host", log: Callable[[str], None] | None = None) -> Calibration:
    """Measure this machine; see the module docstring. ``log`` gets progress lines.

    Runs with the thread pools as :func:`mapper.execute.execute` runs tasks
    (:func:`mapper.execute.one_compute_pool`: BLAS limited to one thread), so
    that the rates describe the executor's kernels.
    """
    from mapper.execute import one_compute_pool

    if not name.strip():
        raise OptionsError("the platform name must not be empty", obj="--name")
    with one_compute_pool() as blas_threads:
        return _measure(settings, name, log or (lambda _: None), blas_threads)


def _measure(settings: Settings, name: str, say: Callable[[str], None], blas_threads: int | None) -> Calibration:
    """The body of :func:`calibrate`, run inside the thread-pool limit."""
    t_start = time.perf_counter()
    when = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    eff_gemm = EFF_COMPUTE["cpu"]["gemm"]
    eff_mem = EFF_MEMORY["cpu"]
    nthreads = threads()
    sizes = ", ".join(str(n) for n in settings.gemm_sizes)
    rounds = max(settings.rounds, 1)
    mib = stream_mib(settings)
    arrays = stream_arrays(mib)
    gemm = {dt: (0.0, 0, 0) for dt in ("f32", "f64")}  # best (rate, n, runs so far)
    stream = (0.0, 0)
    for r in range(rounds):  # rounds spread the samples over time: a burst of load spoils one, not all
        for dt in gemm:
            rate, n, runs = measure_gemm(dt, settings.gemm_sizes, settings.gemm_budget)
            best = max(gemm[dt][:2], (rate, n))
            gemm[dt] = (*best, gemm[dt][2] + runs)
        gbs, runs = measure_bandwidth(*arrays, settings.stream_budget)
        stream = (max(stream[0], gbs), stream[1] + runs)
        say(f"round {r + 1}/{rounds}: matmul f32 {gemm['f32'][0]:.1f}, f64 {gemm['f64'][0]:.1f} GFLOP/s; "
            f"add {stream[0]:.2f} GB/s (best so far)")
    del arrays
    peaks = tuple(
        Rate(dt, rate, rate / eff_gemm,
             f"{dt} matmul n x n x n, n in ({sizes}): best {rate:.1f} GFLOP/s at n = {n} ({runs} runs in "
             f"{rounds} rounds), BLAS on {blas_threads or nthreads} threads; stored / {eff_gemm:.2f} (gemm efficiency)")
        for dt, (rate, n, runs) in gemm.items()
    )
    if settings.measure_serial:
        rate, n, runs = measure_serial("f64", settings.serial_size, settings.serial_budget)
        serial = Rate("serial_gflops", rate, rate,
                      f"f64 matmul n = {n} in a process limited to one thread, best of {runs} runs")
    else:
        gemm_threads = blas_threads or nthreads  # the threads the matmul above ran on
        rate = peaks[1].value / gemm_threads
        serial = Rate("serial_gflops", rate, rate,
                      f"estimated (--quick, not measured): f64 matmul rate / {gemm_threads} threads")
    say(f"serial: {serial.value:.1f} GFLOP/s")
    llc = llc_bytes()
    llc_text = f"LLC {llc / 2**20:.0f} MiB" if llc else "LLC size unknown"
    gbs, runs = stream
    bandwidth = Rate("mem_bandwidth_gbs", gbs, gbs / eff_mem,
                     f"add of two {mib} MiB f64 arrays into a new one ({llc_text}): best {gbs:.2f} GB/s of "
                     f"{runs} runs in {rounds} rounds, counting 3 arrays moved; stored / {eff_mem:.2f} "
                     "(memory efficiency)")
    launch = measure_launch(settings.launch_calls) * 1e6
    launch_rate = Rate("launch_us", launch, launch,
                       f"median of {max(settings.launch_calls, 1)} timed kernel calls (add, 1-element arrays) "
                       "from Python, argument checks included")
    say(f"launch: {launch:.1f} us")
    cal = Calibration(name, when, nthreads, peaks, serial, bandwidth, launch_rate, memory_gib(),
                      blas_threads=blas_threads)
    probes: tuple[Probe, ...] = ()
    if settings.probes:
        plat = cal.platform()
        passes = [run_probes(plat, settings.probe_budget, settings.probe_repeats)
                  for _ in range(max(settings.probe_passes, 1))]
        probes = tuple(min(group, key=lambda p: p.measured) for group in zip(*passes))
        for p in probes:
            say(f"probe {p.op_class}: measured {p.measured * 1e3:.3f} ms, model {p.model * 1e3:.3f} ms")
    return replace(cal, probes=probes, seconds=time.perf_counter() - t_start)


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
        "# best of short bounded runs unless said otherwise). Rates are stored divided by the cost model's",
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
    table = class_efficiency(cal)
    if table:
        lines.append("# per op class: the fraction of the stored peak that the class's probe task (listed below)")
        lines.append("# reached net of launch_us, fastest timed call; replaces the cost model's default for the class")
        lines.append("efficiency = { " + ", ".join(f"{c} = {v:.3g}" for c, v in table) + " }")
    if cal.probes:
        peaks_by = {r.key: r.stored for r in cal.peak_gflops}
        bw = cal.mem_bandwidth_gbs.stored
        lines += [
            "",
            "# Op-class probes (fastest timed call of one task per class): measured, the model's time with the",
            "# default efficiencies, model/measured, and the rates reached net of launch_us as fractions of the",
            "# stored peak and bandwidth. Classes slower than the model, or compute-bound in it, get an",
            "# `efficiency` entry above; a class faster than the model's memory term (data in cache) gets",
            "# none, since only the bandwidth could describe it.",
        ]
        for p in cal.probes:
            peak = peaks_by.get(p.rate_dtype, 0.0)
            head = (f"#   {p.op_class:<11} {p.task:<28} {p.measured * 1e3:9.3f} ms {p.model * 1e3:9.3f} ms "
                    f"{p.ratio:6.2f} ({p.bound})")
            if p.gflops is None or p.gbs is None:
                lines.append(f"{head} no faster than one launch: no rates")
            else:
                frac = f" = {p.gflops / peak:.3f} of peak" if peak else ""
                lines.append(f"{head} {p.gflops:.3g} GFLOP/s{frac}, {p.gbs:.3g} GB/s = {p.gbs / bw:.3f} of bandwidth")
    return "\n".join(lines) + "\n"


def _blas_text(blas_threads: int | None) -> str:
    return "BLAS pool not controlled" if blas_threads is None else f"BLAS pool at {blas_threads}"


def class_efficiency(cal: Calibration) -> tuple[tuple[str, float], ...]:
    """Per probed op class, the compute efficiency that makes the model give
    the probe's measured time: ``F / ((measured - launch) * peak)``, at most 1.

    Given where the probe ran slower than the model with the default
    efficiencies (the kernel is below the model's roofline; the compute term
    then explains the time) or where the model calls the class
    compute-bound. A probe faster than the model's memory term gets none, and
    so does one no longer than a launch.
    """
    peaks = {r.key: r.stored for r in cal.peak_gflops}
    out = []
    for p in cal.probes:
        peak = peaks.get(p.rate_dtype)
        if p.gflops is None or not peak or p.flops <= 0:
            continue
        if p.ratio < 1.0 or p.bound in ("compute", "serial"):
            out.append((p.op_class, float(f"{min(p.gflops / peak, 1.0):.3g}")))
    return tuple(out)


def _serial_probe(argv: list[str]) -> int:
    """Child-process entry of :func:`measure_serial`: prints ``[gflops, n, runs]``."""
    dtype, size, budget = argv[0], int(argv[1]), float(argv[2])
    print(json.dumps(list(measure_gemm(dtype, (size,), budget))))
    return 0


if __name__ == "__main__":  # the serial-rate child process
    if sys.argv[1:2] == ["--serial-probe"]:
        sys.exit(_serial_probe(sys.argv[2:]))
    sys.exit(2)

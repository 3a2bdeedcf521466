"""Measurements of the machine itself: timing loops, matmul and
single-thread rates, STREAM-style bandwidth, the cache sweep, launch
overhead, memory and threads. Run as a module, it is the single-thread
child process of :func:`measure_serial`."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from mapper.errors import MapperError
from mapper.run.calibration.records import Settings

#: Threading knobs set to 1 in the serial-rate child process.
_ONE_THREAD = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


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
        secs, runs = median_time(partial(k.run_kernel, "matmul", [a, b], {}), budget / len(sizes))
        rate = 2.0 * n**3 / secs / 1e9
        if rate > best[0]:
            best = (rate, n, runs)
    return best


def measure_serial(dtype: str, size: int, budget: float) -> tuple[float, int, int]:
    """:func:`measure_gemm` in a child process with every thread pool at one thread."""
    env = dict(os.environ)
    env.update({k: "1" for k in _ONE_THREAD})
    cmd = [sys.executable, "-m", "mapper.run.calibration.machine", "--serial-probe", dtype, str(size), str(budget)]
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
        secs, _ = median_time(partial(_add, a, b), budget / len(sizes_mib), min_runs=5)
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


def _serial_probe(argv: list[str]) -> int:
    """Child-process entry of :func:`measure_serial`: prints ``[gflops, n, runs]``."""
    dtype, size, budget = argv[0], int(argv[1]), float(argv[2])
    print(json.dumps(list(measure_gemm(dtype, (size,), budget))))
    return 0


if __name__ == "__main__":  # the serial-rate child process
    if sys.argv[1:2] == ["--serial-probe"]:
        sys.exit(_serial_probe(sys.argv[2:]))
    sys.exit(2)

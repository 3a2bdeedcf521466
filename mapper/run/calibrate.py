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
stored divided by the cost model's efficiency factors (``mapper.costing.cost``) so
that the model reproduces the measured rates.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from mapper.costing.efficiency import EFF_COMPUTE, EFF_MEMORY
from mapper.errors import OptionsError
from mapper.run.calibration.fits import gemm_fit
from mapper.run.calibration.machine import (
    cache_level,
    cache_sweep,
    llc_bytes,
    measure_bandwidth,
    measure_gemm,
    measure_launch,
    measure_serial,
    memory_gib,
    stream_arrays,
    stream_mib,
    threads,
)
from mapper.run.calibration.probes import run_probes
from mapper.run.calibration.records import Calibration, Probe, Rate, Settings
from mapper.run.calibration.writer import calibrated_platform


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

    Runs with the thread pools and the heap policy as :func:`mapper.run.execute.execute`
    runs tasks (:func:`mapper.run.execute.one_compute_pool`: BLAS limited to one
    thread; :func:`mapper.run.heap.steady_heap`), so that the rates describe the
    executor's kernels.
    """
    from mapper.run.execute import one_compute_pool
    from mapper.run.heap import steady_heap

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
    when = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
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
        probes = run_probes(calibrated_platform(cal), settings.probe_passes, between)
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

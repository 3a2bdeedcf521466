"""The calibrated platform file: :func:`platform_toml` writes a
:class:`~mapper.run.calibration.records.Calibration` in the schema of
docs/platforms.md, with a comment on every number;
:func:`calibrated_platform` reads it back as a platform."""

from __future__ import annotations

import platform as pyplatform

import numpy as np

from mapper.platform.loader import Platform, parse_platform
from mapper.run.calibration.fits import gemm_fit, model_entries_with_fit
from mapper.run.calibration.probes import MEMORY_CLASSES, STREAMING_OPS
from mapper.run.calibration.records import Calibration


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
    for cached in (cal.cache_mib, cal.cache_bandwidth_gbs):
        if cached is not None:
            lines.append(f"# {cached.how}")
            lines.append(f"{cached.key} = {_num(cached.stored)}")
    if cal.cache_mib is None and cal.cache_sweep:
        lines.append("# no cache keys: no working set of the add sweep ran 25 % faster than memory; sweep "
                     "(working set, GB/s): " + ", ".join(f"{w:.3g} MiB {r:.3g}" for w, r in cal.cache_sweep))
    fit = gemm_fit(cal)
    entries = model_entries_with_fit(cal, fit)
    if entries:
        lines.append("# per op class, op or op variant: the fraction of the stored peak that its probe tasks (listed")
        lines.append("# below) reached net of launch_us, median call; replaces the cost model's default. Where one")
        lines.append("# kernel was probed at several amounts of work, Hockney's fit t = t0 + w / e (overhead_us = t0)")
        lines.append("# or t = t0 MiB + w / e (overhead_us_per_mib = t0, MiB the working set), or t = w / e (1 "
                     "+ n_1/2 / n)")
        lines.append("# (half_length = n_1/2, n the op's vector length), whichever fits best (with four or more probes")
        lines.append("# also t0 and n_1/2 together where that halves the worst error), else the geometric mean")
        lines.append("# over the probes; n = probes: " + ", ".join(
            f"{e.key} n={e.probes}" + (f" t0={e.overhead * 1e6:.4g} us" if e.overhead > 0 else "")
            + (f" t0={e.per_mib * 1e6:.4g} us/MiB" if e.per_mib > 0 else "")
            + (f" n_1/2={e.half:.4g}" if e.half > 0 else "") for e in entries))
        compute = [e for e in entries if e.efficiency > 0]
        if compute:
            pairs = ", ".join(f"{_toml_key(e.key)} = {e.efficiency:.3g}" for e in compute)
            lines.append("efficiency = { " + pairs + " }")
        streaming = [e for e in entries if e.memory > 0]
        if streaming:
            lines.append("# streaming op classes and ops (" + ", ".join(MEMORY_CLASSES + STREAMING_OPS)
                         + "): the fraction of the bandwidth (the cache's where")
            lines.append("# the working set fits it) their probes reached, net of launch_us, geometric mean "
                         "over each key's probes")
            lines.append("memory_efficiency = { " + ", ".join(
                f"{_toml_key(e.key)} = {e.memory:.3g}" for e in streaming) + " }")
        fixed = [e for e in entries if e.overhead > 0]
        if fixed:
            lines.append("# fixed time per call beyond launch_us (Hockney's t0, microseconds), from the fits above")
            lines.append("overhead_us = { " + ", ".join(
                f"{_toml_key(e.key)} = {e.overhead * 1e6:.4g}" for e in fixed) + " }")
        halves = [e for e in entries if e.half > 0]
        if halves:
            lines.append("# Hockney's half-performance length n_1/2: the rate is e n / (n + n_1/2), n the op's "
                         "vector length")
            lines.append("# (matmul, conv2d: the smallest GEMM dimension; attention: sequence), from the fits above")
            lines.append("half_length = { " + ", ".join(f"{_toml_key(e.key)} = {e.half:.4g}" for e in halves) + " }")
        if fit is not None:
            lines.append(f"# GEMM model (matmul and conv2d's im2col GEMM), fitted on {fit.probes} matmul probes "
                         "of 48 to 3072 per")
            if fit.form == "pack":
                lines.append("# dimension: t = F / (gemm efficiency x peak) + (a M K + b K N + c M N) ns, the "
                             "packing of A and B and")
                lines.append("# the update of C (Goto and van de Geijn 2008), least squares on the relative "
                             "error, coefficients >= 0;")
            else:
                lines.append("# dimension: rate = gemm efficiency x peak x prod n / (n + n_1/2) over M, N, K "
                             "(Hockney's law per")
                lines.append("# dimension), least squares on log time;")
            lines.append(f"# rms log error {fit.rms * 100:.1f} %, worst probe error {fit.worst * 100:.1f} % "
                         "(the better of the two forms)")
            if fit.pack is not None:
                lines.append("gemm_pack_ns = { " + ", ".join(f"{d} = {h:.4g}" for d, h in zip("abc", fit.pack)) + " }")
            if fit.pack_cold is not None:
                lines.append("# the same for an A or B operand read from memory (a weight; the probes read "
                             "their inputs first)")
                lines.append("gemm_pack_cold_ns = { " + ", ".join(
                    f"{d} = {h:.4g}" for d, h in zip("ab", fit.pack_cold)) + " }")
            if fit.half is not None:
                gemm_halves = ", ".join(f"{d} = {h:.4g}" for d, h in zip("mnk", fit.half))
                lines.append("gemm_half_lengths = { " + gemm_halves + " }")
            if fit.im2col_gbs is not None:
                lines.append(f"# conv2d's im2col, bytes moved (matrix written, input read at the stride) per "
                             f"second, fitted on {fit.conv_probes} conv probes")
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


def calibrated_platform(cal: Calibration) -> Platform:
    """The calibrated platform, as :func:`mapper.platform.loader.load_platform` reads the file."""
    return parse_platform(platform_toml(cal), f"<calibration {cal.name}>")

"""Calibration: measurements are sane, the written platform file loads and says how."""

from __future__ import annotations

import numpy as np
import pytest

from mapper.cli import main
from mapper.costing.efficiency import EFF_COMPUTE, EFF_MEMORY
from mapper.errors import OptionsError
from mapper.platform.loader import load_platform, parse_platform
from mapper.run.calibrate import calibrate
from mapper.run.calibration.fits import class_efficiency
from mapper.run.calibration.machine import best_time, cache_level, stream_mib
from mapper.run.calibration.records import Calibration, Probe, Rate, Settings
from mapper.run.calibration.writer import calibrated_platform, platform_toml


def fake() -> Calibration:
    peaks = (Rate("f32", 90.0, 100.0, "f32 matmul"), Rate("f64", 45.0, 50.0, "f64 matmul"))
    return Calibration(
        "calibrated", "2026-01-02T03:04:05Z", 2, peaks,
        Rate("serial_gflops", 20.0, 20.0, "one thread"),
        Rate("mem_bandwidth_gbs", 16.0, 20.0, "add of two arrays"),
        Rate("launch_us", 12.5, 12.5, "tiny calls"),
        23.5,
        (Probe("gemm", "matmul f32[512, 512]", 0.002, 0.0021, "compute", 2.0e8, 3.0e6, 1e-3, "f32"),
         Probe("elementwise", "add f32[4]", 1e-6, 2e-6, "launch", 4.0, 48.0, 1e-5, "f32"),
         Probe("activation", "gelu f32[1024]", 0.011, 0.002, "memory", 1.0e8, 8.0e6, 1e-3, "f32"),
         Probe("stencil", "stencil f64[64, 64]", 0.002, 0.004, "memory", 1.0e6, 4.0e7, 1e-3, "f64")),
    )


def test_platform_file_round_trips_with_a_comment_per_number():
    text = platform_toml(fake())
    plat = parse_platform(text, "cal.toml")
    (dev,) = plat.devices
    assert plat.name == "calibrated" and dev.kind == "cpu"
    assert dev.peak("f32") == 100.0 and dev.peak("f64") == 50.0
    assert (dev.serial_gflops, dev.mem_bandwidth_gbs, dev.launch_us, dev.memory_gib) == (20.0, 20.0, 12.5, 23.5)
    lines = text.splitlines()
    for key in ("peak_gflops", "serial_gflops", "mem_bandwidth_gbs", "launch_us", "memory_gib"):
        i = next(i for i, ln in enumerate(lines) if ln.startswith(key + " ="))
        assert lines[i - 1].startswith("# "), key  # every number says how it was measured
    assert "2026-01-02T03:04:05Z" in lines[0]
    gemm = next(ln for ln in lines if ln.startswith("#   gemm"))
    # model / measured, and the achieved rates net of the 1 ms launch: 0.2 GFLOP in 1 ms, 3 MB in 1 ms
    assert " 1.05 (compute) 200 GFLOP/s = 2.000 of peak, 3 GB/s = 0.150 of bandwidth" in gemm
    assert next(ln for ln in lines if ln.startswith("#   elementwise")).endswith("no faster than one launch: no rates")
    # per-class efficiency: gemm reached 200 GFLOP/s of a stored peak of 100 (capped at 1); gelu,
    # slower than the model, 0.1 GFLOP in 10 ms net = 10 GFLOP/s = 0.1; the launch-bound add and the
    # stencil, faster than the model's memory term, get none
    assert "efficiency = { gemm = 1, activation = 0.1 }" in lines
    assert dev.efficiency == (("activation", 0.1), ("gemm", 1.0))


def test_best_time_runs_at_least_min_runs():
    calls = []
    secs, runs = best_time(lambda: calls.append(1), budget=0.0, min_runs=3)
    assert runs == 3 and len(calls) == 4 and secs >= 0.0  # one warm-up call


def test_stream_size_is_bounded():
    assert stream_mib(Settings(stream_mib=8)) == 8
    assert 64 <= stream_mib(Settings()) <= 256


def test_quick_calibration_writes_a_loadable_platform(tmp_path, capsys):
    out = tmp_path / "host.toml"
    assert main(["calibrate", "--quick", "-o", str(out), "--name", "here"]) == 0
    plat = load_platform(str(out))
    (dev,) = plat.devices
    assert plat.name == "here" and dev.name == "cpu0" and dev.kind == "cpu"
    assert dev.peak("f32") > 0 and dev.peak("f64") > 0 and dev.serial_gflops > 0
    assert dev.mem_bandwidth_gbs > 0 and dev.launch_us > 0 and dev.memory_gib > 0
    text = out.read_text()
    assert "estimated (--quick, not measured)" in text
    assert f"stored / {EFF_COMPUTE['cpu']['gemm']:.2f}" in text and f"stored / {EFF_MEMORY['cpu']:.2f}" in text
    assert "wrote" in capsys.readouterr().err


def test_calibration_api_reports_measured_and_stored_rates():
    cal = calibrate(Settings.quick())
    f32 = cal.peak_gflops[0]
    assert f32.key == "f32" and f32.stored == pytest.approx(f32.value / EFF_COMPUTE["cpu"]["gemm"])
    assert cal.mem_bandwidth_gbs.stored == pytest.approx(cal.mem_bandwidth_gbs.value / EFF_MEMORY["cpu"])
    assert calibrated_platform(cal).devices[0].peak("f64") == pytest.approx(cal.peak_gflops[1].stored, rel=1e-3)
    with pytest.raises(OptionsError):
        calibrate(Settings.quick(), name=" ")


def test_class_efficiency_makes_the_model_reproduce_a_slow_probe():
    from dataclasses import replace

    from mapper.costing.cost import build_cost_table
    from mapper.frontend.load import graph_from_text

    graph = graph_from_text("graph g {\n  input x : f32[1024, 1024]\n  y = gelu(x)\n  output y\n}\n")
    task = graph.tasks[0]
    base = fake()
    before = build_cost_table(graph, calibrated_platform(replace(base, probes=()))).time[0][0]
    slow = Probe("activation", "gelu f32[1024, 1024]", 0.05, before, "memory", task.flops, task.bytes,
                 base.launch_us.stored * 1e-6, "f32")
    cal = replace(base, probes=(slow,))
    after = build_cost_table(graph, calibrated_platform(cal)).time[0][0]
    assert before < 0.01 and after == pytest.approx(0.05, rel=2e-3)  # 3 significant digits in the file


def test_cache_level_by_hand():
    # fastest 18 GB/s >= 1.25 x 7; cut sqrt(18 x 7) = 11.22: 3, 12 and 48 MiB are in cache, 192 MiB is not
    sweep = ((3.0, 15.0), (12.0, 18.0), (48.0, 12.0), (192.0, 7.0))
    assert cache_level(sweep, 7.0) == (48.0, 15.0)
    # the run of cache-speed sizes stops at the first slow one, even if a larger one is fast again
    assert cache_level(((3.0, 5.0), (12.0, 18.0), (48.0, 7.5), (96.0, 12.0)), 7.0) == (12.0, 18.0)
    # nothing 25 % faster than memory: no cache level
    assert cache_level(((3.0, 8.0), (192.0, 7.0)), 7.0) is None
    assert cache_level((), 7.0) is None


def test_cache_keys_round_trip_with_comments():
    from dataclasses import replace

    cal = replace(fake(), cache_mib=Rate("cache_mib", 48.0, 48.0, "largest fast working set"),
                  cache_bandwidth_gbs=Rate("cache_bandwidth_gbs", 16.0, 20.0, "median of the sweep"),
                  cache_sweep=((3.0, 15.0), (48.0, 16.0), (192.0, 7.0)))
    text = platform_toml(cal)
    dev = parse_platform(text, "cal.toml").devices[0]
    assert (dev.cache_mib, dev.cache_bandwidth_gbs) == (48.0, 20.0)
    lines = text.splitlines()
    for key in ("cache_mib", "cache_bandwidth_gbs"):
        i = next(i for i, ln in enumerate(lines) if ln.startswith(key + " ="))
        assert lines[i - 1].startswith("# "), key
    # without a cache level the sweep is still reported, and no keys are written
    plain = platform_toml(replace(fake(), cache_sweep=((3.0, 7.5), (192.0, 7.0))))
    assert "cache_mib" not in plain and "3 MiB 7.5, 192 MiB 7" in plain


def test_class_efficiency_is_the_geometric_mean_over_a_class_s_probes():
    from dataclasses import replace

    base = fake()
    # stored f32 peak 100 GFLOP/s, launch 1 ms: 0.2 GFLOP in 1 + 4 ms -> 50 GFLOP/s = 0.5;
    # 0.2 GFLOP in 1 + 1.25 ms -> 160 GFLOP/s, capped at 1; 0.1 GFLOP in 1 + 8 ms -> 0.125
    probes = (Probe("gemm", "matmul -> [1]", 0.005, 0.002, "compute", 2.0e8, 1e6, 1e-3, "f32"),
              Probe("gemm", "matmul -> [2]", 0.00225, 0.002, "compute", 2.0e8, 1e6, 1e-3, "f32"),
              Probe("gemm", "matmul -> [3]", 0.009, 0.002, "compute", 1.0e8, 1e6, 1e-3, "f32"))
    (entry,) = class_efficiency(replace(base, probes=probes))
    assert entry[0] == "gemm" and entry[1] == pytest.approx((0.5 * 1.0 * 0.125) ** (1 / 3), rel=1e-3)
    # two ops of one class: each op its own (0.5 and 0.125); fft, named as its class, takes the class key
    ffts = (Probe("fft", "fft -> [1]", 0.005, 0.002, "compute", 2.0e8, 1e6, 1e-3, "f32"),
            Probe("fft", "ifft -> [1]", 0.009, 0.002, "compute", 1.0e8, 1e6, 1e-3, "f32"))
    table = class_efficiency(replace(base, probes=ffts))
    assert table == (("fft", 0.5), ("ifft", 0.125))  # an op named as its class takes the class key
    dev = parse_platform(platform_toml(replace(base, probes=ffts)), "f.toml").devices[0]
    assert dict(dev.efficiency) == {"fft": 0.5, "ifft": 0.125}


def test_streaming_classes_get_a_fraction_of_the_bandwidth_per_op():
    from dataclasses import replace

    from mapper.run.calibration.fits import model_entries

    # stored bandwidth 20 GB/s (no cache level), launch 1 ms: 10 MB in 1 + 1 ms -> 10 GB/s = 0.5;
    # 2.5 MB in 1 + 1 ms -> 0.125; an f64 add keyed by its dtype: 16 MB in 1 + 1 ms -> 0.8
    probes = (Probe("norm", "layernorm -> [1]", 0.002, 0.001, "memory", 1e6, 1e7, 1e-3, "f32"),
              Probe("norm", "batchnorm -> [1]", 0.002, 0.001, "memory", 1e6, 2.5e6, 1e-3, "f32"),
              Probe("elementwise", "add -> [1]", 0.002, 0.001, "memory", 1e6, 1.6e7, 1e-3, "f64", "elementwise:f64"))
    cal = replace(fake(), probes=probes)
    entries = {e.key: e for e in model_entries(cal)}
    assert {k: e.memory for k, e in entries.items()} == pytest.approx(
        {"norm": 0.25, "layernorm": 0.5, "batchnorm": 0.125, "elementwise:f64": 0.8})
    assert all(e.efficiency == 0 for e in entries.values()) and class_efficiency(cal) == ()
    text = platform_toml(cal)
    assert 'memory_efficiency = { norm = 0.25, layernorm = 0.5, batchnorm = 0.125, "elementwise:f64" = 0.8 }' in text
    dev = parse_platform(text, "m.toml").devices[0]
    assert dict(dev.memory_efficiency_ops) == pytest.approx(
        {"norm": 0.25, "layernorm": 0.5, "batchnorm": 0.125, "elementwise:f64": 0.8})
    # the model: a layernorm's time follows its bytes at 0.5 of 20 GB/s; an f64 sub at 0.8
    from mapper.costing.cost import build_cost_table
    from mapper.frontend.load import graph_from_text

    g = graph_from_text("graph g {\n  input x : f32[1024, 1024]\n  input a : f64[1024, 1024]\n"
                        "  y = layernorm(x)\n  d = sub(a, a)\n  output y, d\n}\n")
    table = build_cost_table(g, calibrated_platform(cal))
    ln, sub = g.tasks
    assert table.time[0][0] == pytest.approx(12.5e-6 + ln.bytes / (0.5 * 20e9), rel=1e-9)
    assert table.time[1][0] == pytest.approx(12.5e-6 + sub.bytes / (0.8 * 20e9), rel=1e-9)


def test_hockney_fit_recovers_a_fixed_time_and_a_rate():
    from dataclasses import replace

    from mapper.run.calibration.fits import hockney_fit, model_entries

    # t = t0 + w / e with t0 = 0.5 ms, e = 0.25: exact points give both back
    pts = [(w, 5e-4 + w / 0.25) for w in (1e-4, 1e-3, 4e-3)]
    e, t0 = hockney_fit(pts)
    assert e == pytest.approx(0.25, rel=1e-9) and t0 == pytest.approx(5e-4, rel=1e-9)
    # a fit that would need e > 1 keeps e = 1 and refits t0; one that would need t0 < 0 keeps t0 = 0
    # free slope 0.6 < 1 (e = 1.67): e = 1, t0 = sum(u (1 - x)) / sum(u^2) with u = 1 / t, x = w / t
    e, t0 = hockney_fit([(1e-3, 1.2e-3), (2e-3, 1.8e-3)])
    u, x = (1 / 1.2e-3, 1 / 1.8e-3), (1 / 1.2, 2 / 1.8)
    assert e == 1.0 and t0 == pytest.approx((u[0] * (1 - x[0]) + u[1] * (1 - x[1])) / (u[0] ** 2 + u[1] ** 2))
    e, t0 = hockney_fit([(1e-3, 1e-3), (2e-3, 3e-3)])
    assert t0 == 0.0 and e == pytest.approx((1 + 4 / 9) / (1 + 2 / 3))  # 1 / (sum x / sum x^2)
    # through the calibration: stored f32 peak 100 GFLOP/s, launch 1 ms; attention probes of one kernel at
    # two amounts of work (w = 0.1 and 0.8 ms) measured 1 + 2.5 + w / 0.5 ms; a reduce.max probe feeds only its variant
    base = fake()
    probes = tuple(Probe("attention", f"attention -> [{i}]", 1e-3 + 2.5e-3 + w / 0.5, 1e-3, "compute", w * 1e11,
                         1e6, 1e-3, "f32") for i, w in enumerate((1e-4, 8e-4)))
    probes += (Probe("reduction", "reduce -> []", 1e-3 + 2e-2, 1e-3, "compute", 2e7, 1e6, 1e-3, "f32", "reduce.max"),)
    cal = replace(base, probes=probes)
    entries = {e.key: e for e in model_entries(cal)}
    assert set(entries) == {"attention", "reduce.max"}
    assert entries["attention"].efficiency == pytest.approx(0.5) and entries["attention"].overhead == pytest.approx(2.5e-3)
    # reduce.max streams its operand: a fraction of the 20 GB/s, 1 MB in 20 ms net -> 0.0025
    assert entries["reduce.max"].memory == pytest.approx(0.0025) and entries["reduce.max"].efficiency == 0.0
    text = platform_toml(cal)
    assert 'overhead_us = { attention = 2500 }' in text and 'memory_efficiency = { "reduce.max" = 0.0025 }' in text
    dev = parse_platform(text, "h.toml").devices[0]
    assert dict(dev.overhead_us) == {"attention": 2500.0}
    # the model: launch 12.5 us + t0 2.5 ms + the roofline with e = 0.5
    from mapper.costing.cost import build_cost_table
    from mapper.frontend.load import graph_from_text

    g = graph_from_text("graph g {\n  input x : f32[1024, 1024]\n  input q : f32[512, 2304]\n"
                        "  y = attention(q, heads = 12, seq = 128)\n"
                        "  m = reduce(x, kind = \"max\")\n  s = reduce(x, kind = \"sum\")\n  output y, m, s\n}\n")
    plat = calibrated_platform(cal)
    table = build_cost_table(g, plat)
    att, mx, sm = g.tasks
    peak = 100e9
    body = max(att.flops / (0.5 * peak), att.bytes / (0.8 * 20e9))  # memory efficiency 0.8 of 20 GB/s
    assert table.time[0][0] == pytest.approx(12.5e-6 + 2.5e-3 + body, rel=1e-9)
    assert table.time[1][0] == pytest.approx(12.5e-6 + mx.bytes / (0.0025 * 20e9), rel=1e-9)
    assert table.time[2][0] < table.time[1][0] / 3  # reduce.sum keeps the default reduction efficiency


def test_a_fixed_time_within_the_noise_is_not_fitted():
    from dataclasses import replace

    from mapper.run.calibration.fits import model_entries

    # two attention probes whose rates differ by 10 %: the rate alone is within FIT_NOISE, so no t0
    base = fake()
    probes = (Probe("attention", "attention -> [1]", 1e-3 + 4e-3, 1e-3, "compute", 1e8, 1e6, 1e-3, "f32"),
              Probe("attention", "attention -> [2]", 1e-3 + 14.5e-3, 1e-3, "compute", 4e8, 1e6, 1e-3, "f32"))
    (entry,) = model_entries(replace(base, probes=probes))
    assert entry.overhead == 0.0 and entry.efficiency == pytest.approx(((1 / 4) * (4 / 14.5)) ** 0.5, rel=2e-3)
    # a probe faster than the model (ratio > 1, memory-bound) still enters Hockney's fit: one sweep and
    # eight sweeps, 2 ms fixed and e = 0.5 (w = 0.1 and 0.8 ms)
    probes = (Probe("attention", "attention -> [1]", 1e-3 + 2e-3 + 2e-4, 1e-3, "memory", 1e7, 1e6, 1e-3, "f32"),
              Probe("attention", "attention -> [8]", 1e-3 + 2e-3 + 1.6e-3, 9e-3, "memory", 8e7, 1e6, 1e-3, "f32"))
    (entry,) = model_entries(replace(base, probes=probes))
    assert entry.overhead == pytest.approx(2e-3) and entry.efficiency == pytest.approx(0.5)


def test_an_op_named_as_its_class_gets_the_class_key():
    from dataclasses import replace

    from mapper.run.calibration.fits import model_entries

    # fft at two sizes and ifft once: "fft" is fft's own fit (e = 0.1 of 100 GFLOP/s, w = F / peak), ifft its own
    probes = (Probe("fft", "fft -> [1]", 1e-3 + 1e-3, 1e-4, "compute", 1e7, 1e6, 1e-3, "f32"),
              Probe("fft", "fft -> [2]", 1e-3 + 4e-3, 1e-4, "compute", 4e7, 1e6, 1e-3, "f32"),
              Probe("fft", "ifft -> [1]", 1e-3 + 2e-3, 1e-4, "compute", 1e7, 1e6, 1e-3, "f32"))
    entries = {e.key: (e.efficiency, e.overhead, e.probes) for e in model_entries(replace(fake(), probes=probes))}
    assert entries == {"fft": (0.1, 0.0, 2), "ifft": (0.05, 0.0, 1)}


def test_a_fixed_time_in_proportion_to_the_working_set():
    from dataclasses import replace

    from mapper.run.calibration.fits import model_entries

    # one kernel at 1 and 8 units of work on working sets of 4 and 25 MiB: a fixed 0.1 ms per MiB
    # plus the work at e = 0.5 (w per unit 0.05 and 0.3125 ms); no constant t0 fits
    probes = []
    for mib, w1 in ((4.0, 5e-5), (25.0, 3.125e-4)):
        for steps in (1, 8):
            w = w1 * steps
            probes.append(Probe("attention", f"attention -> [{mib}, {steps}]", 1e-3 + 1e-4 * mib + w / 0.5, 1e-3,
                                "memory", w * 1e11, 1e6, 1e-3, "f32", "", mib * 2**20))
    (entry,) = model_entries(replace(fake(), probes=tuple(probes)))
    assert entry.overhead == 0.0 and entry.per_mib == pytest.approx(1e-4) and entry.efficiency == pytest.approx(0.5)
    text = platform_toml(replace(fake(), probes=tuple(probes)))
    assert "overhead_us_per_mib = { attention = 100 }" in text
    dev = parse_platform(text, "m.toml").devices[0]
    assert dict(dev.overhead_us_per_mib) == {"attention": 100.0}


def test_a_half_performance_length_is_fitted_over_vector_lengths():
    from dataclasses import replace

    from mapper.run.calibration.fits import model_entries

    # conv probes with 64, 128 and 256 output channels at r = e n / (n + 128), e = 0.8 (w = F / peak)
    probes = tuple(Probe("conv", f"conv2d -> [{n}]", 1e-3 + w / 0.8 * (1 + 128 / n), 1e-3, "compute", w * 1e11,
                         1e6, 1e-3, "f32", "", 1e6, n) for n, w in ((64, 2e-3), (128, 2e-3), (256, 1e-3)))
    (entry,) = model_entries(replace(fake(), probes=probes))
    assert (entry.overhead, entry.per_mib) == (0.0, 0.0)
    assert entry.half == pytest.approx(128) and entry.efficiency == pytest.approx(0.8)
    text = platform_toml(replace(fake(), probes=probes))
    dev = parse_platform(text, "h.toml").devices[0]
    assert dict(dev.half_length) == {"conv": 128.0}
    # n_1/2 = 64: the rate alone is off by 24 % at most, under FIT_NOISE but over half of it; three probes
    # leave the fit a residual to show, so it is kept
    probes = tuple(replace(p, measured=1e-3 + p.flops / 1e11 / 0.8 * (1 + 64 / p.vector)) for p in probes)
    (entry,) = model_entries(replace(fake(), probes=probes))
    assert entry.half == pytest.approx(64) and entry.efficiency == pytest.approx(0.8)


def test_a_fixed_time_and_a_half_length_together_from_four_probes():
    from dataclasses import replace

    from mapper.run.calibration.fits import hockney_fit_both, model_entries

    # attention probes at t = 0.4 ms + w / 0.6 (1 + 100 / n): exact points give all three back
    work = ((64, 5e-4), (64, 1e-3), (128, 2e-3), (256, 2e-3), (512, 8e-3))
    e, t0, half = hockney_fit_both([(w, 4e-4 + w / 0.6 * (1 + 100 / n), n) for n, w in work])
    assert (e, t0, half) == pytest.approx((0.6, 4e-4, 100.0), rel=1e-9)
    probes = tuple(Probe("attention", f"attention -> [{i}]", 1e-3 + 4e-4 + w / 0.6 * (1 + 100 / n), 1e-3, "compute",
                         w * 1e11, 1e6, 1e-3, "f32", "", n * 1e5, n) for i, (n, w) in enumerate(work))
    (entry,) = model_entries(replace(fake(), probes=probes))
    assert (entry.efficiency, entry.overhead, entry.half) == pytest.approx((0.6, 4e-4, 100.0), rel=1e-3)
    dev = parse_platform(platform_toml(replace(fake(), probes=probes)), "h.toml").devices[0]
    assert dict(dev.overhead_us) == {"attention": 400.0} and dict(dev.half_length) == {"attention": 100.0}
    # three probes: one extra parameter only (here the half-length, the better of the single forms)
    (entry,) = model_entries(replace(fake(), probes=probes[2:]))
    assert entry.half > 0 and entry.overhead == 0.0
    # a fixed time alone explains four probes: the joint form does not halve its error, so is not taken
    probes = tuple(replace(p, measured=1e-3 + 4e-4 + p.flops / 1e11 / 0.6) for p in probes)
    (entry,) = model_entries(replace(fake(), probes=probes))
    assert entry.overhead == pytest.approx(4e-4) and entry.half == 0.0


def test_gemm_fit_recovers_half_lengths_and_the_im2col_rate():
    from dataclasses import replace

    from mapper.costing.work import gemm_shape_factor
    from mapper.run.calibration.fits import gemm_fit, model_entries
    from mapper.run.calibration.probes import GEMM_PROBE_SHAPES

    # matmul probes timed exactly by the model: stored f32 peak 100 GFLOP/s, e = 0.8,
    # n_1/2 = (64, 32, 16) for (M, N, K), launch 1 ms
    half, e, launch = (64.0, 32.0, 16.0), 0.8, 1e-3
    probes = []
    for m, n, k in GEMM_PROBE_SHAPES:
        flops = 2.0 * m * n * k
        t = launch + flops / (e * 100e9 * gemm_shape_factor((1, m, n, k), half))
        probes.append(Probe("gemm", f"matmul -> [{m}, {n}]", t, t, "compute", flops, 1e6, launch, "f32",
                            gemm=(1, m, n, k)))
    # conv probes: their GEMM by the same model plus an im2col copy at 4 GB/s (one with no copy)
    for (m, n, k), copy in (((64, 3136, 576), 7.2e6), ((128, 784, 1152), 3.6e6), ((256, 196, 512), 0.0)):
        flops = 2.0 * m * n * k
        t = launch + flops / (e * 100e9 * gemm_shape_factor((1, m, n, k), half)) + copy / 4e9
        probes.append(Probe("conv", f"conv2d -> [1, {m}]", t, t, "compute", flops, 1e6, launch, "f32",
                            gemm=(1, m, n, k), copy_bytes=copy))
    cal = replace(fake(), probes=tuple(probes))
    fit = gemm_fit(cal)
    assert fit is not None and fit.probes == len(GEMM_PROBE_SHAPES) and fit.conv_probes == 3
    assert fit.efficiency == pytest.approx(0.8, rel=0.02)
    assert fit.half == pytest.approx(half, rel=0.1)
    assert fit.worst < 0.02 and fit.conv_worst < 0.03
    assert fit.im2col_gbs == pytest.approx(4.0, rel=0.05)
    # the platform file carries the model; matmul and conv2d get no entries of their own
    assert {x.key for x in model_entries(cal)} == {"gemm"}
    dev = parse_platform(platform_toml(cal), "g.toml").devices[0]
    assert dev.gemm_half_lengths == pytest.approx(half, rel=0.1) and dev.im2col_gbs == pytest.approx(4.0, rel=0.05)
    # fewer than 5 matmul probes: no shape model
    assert gemm_fit(replace(cal, probes=tuple(probes[:4]))) is None


def test_gemm_fit_prefers_the_packing_form_when_it_explains_the_probes():
    from dataclasses import replace

    from mapper.costing.work import gemm_pack_time
    from mapper.run.calibration.fits import gemm_fit, nonneg_least_squares
    from mapper.run.calibration.probes import GEMM_PROBE_SHAPES

    # probes timed by t = launch + F / (0.9 x 100 GFLOP/s) + (a MK + b KN + 0.4 MN) ns, with a, b =
    # 0.5, 0.8 for an operand in cache and 0.9, 1.3 for one read from memory (a weight): each shape
    # once with the weight as B (matmul(input, weight)) and once as A (matmul(weight, input))
    pack, cold_ns, e, launch = (0.5, 0.8, 0.4), (0.9, 1.3), 0.9, 1e-3
    probes = []
    for cold in ((False, True), (True, False)):
        for m, n, k in GEMM_PROBE_SHAPES:
            flops = 2.0 * m * n * k
            t = launch + flops / (e * 100e9) + gemm_pack_time((1, m, n, k), pack, cold_ns, cold)
            probes.append(Probe("gemm", f"matmul -> [{m}, {n}]", t, t, "compute", flops, 1e6, launch, "f32",
                                gemm=(1, m, n, k), gemm_cold=cold))
    # conv probes (the weight as A) with an im2col copy at 5 GB/s: fitted jointly with the GEMM
    for (m, n, k), copy in (((64, 3136, 576), 14.4e6), ((128, 784, 1152), 10.8e6), ((512, 49, 4608), 1.8e6),
                            ((256, 196, 512), 0.0)):
        flops = 2.0 * m * n * k
        t = launch + flops / (e * 100e9) + gemm_pack_time((1, m, n, k), pack, cold_ns, (True, False)) + copy / 5e9
        probes.append(Probe("conv", f"conv2d -> [1, {m}]", t, t, "compute", flops, 1e6, launch, "f32",
                            gemm=(1, m, n, k), copy_bytes=copy, gemm_cold=(True, False)))
    cal = replace(fake(), probes=tuple(probes))
    fit = gemm_fit(cal)
    assert fit is not None and fit.form == "pack" and fit.half is None and fit.conv_probes == 4
    assert fit.efficiency == pytest.approx(0.9, rel=1e-3) and fit.pack == pytest.approx(pack, rel=1e-2)
    assert fit.pack_cold == pytest.approx(cold_ns, rel=1e-2) and fit.im2col_gbs == pytest.approx(5.0, rel=1e-2)
    assert fit.rms < 1e-3 and fit.worst < 1e-2 and fit.conv_worst < 1e-2
    dev = parse_platform(platform_toml(cal), "p.toml").devices[0]
    assert dev.gemm_pack_ns == pytest.approx(pack, rel=1e-2) and dev.gemm_half_lengths is None
    assert dev.gemm_pack_cold_ns == pytest.approx(cold_ns, rel=1e-2)
    # the model prices a matmul with it: its weight (B) packs at the cold rate, its input (A) at the hot one
    from mapper.costing.cost import build_cost_table
    from mapper.costing.work import gemm_cold
    from mapper.frontend.load import graph_from_text

    g = graph_from_text("graph g {\n  input a : f32[200, 300]\n  y = matmul(a, weight f32[300, 50])\n  output y\n}\n")
    assert gemm_cold(g.tasks[-1]) == (False, True)
    want = 12.5e-6 + 2 * 200 * 50 * 300 / (0.9 * 100e9) + gemm_pack_time(
        (1, 200, 50, 300), dev.gemm_pack_ns, dev.gemm_pack_cold_ns, (False, True))
    assert build_cost_table(g, calibrated_platform(cal)).time[0][0] == pytest.approx(want, rel=1e-6)
    # the non-negative least squares: a negative free solution is clipped to the best subset
    a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert nonneg_least_squares(a, np.array([1.0, -1.0, 0.0])) == pytest.approx([0.5, 0.0])


def test_a_streaming_kernel_gets_hockney_s_fixed_time_beside_its_bandwidth():
    from dataclasses import replace

    from mapper.run.calibration.fits import model_entries

    # stencil probes (no cache level: the stored 20 GB/s) at 1 and 8 sweeps of a 2 MB grid
    # (4 and 32 MB counted) measured launch 1 ms + 0.3 ms + bytes at 1.5 x 20 GB/s (a stencil's
    # counted bytes may exceed the bandwidth: cache reuse)
    probes = tuple(Probe("stencil", f"stencil -> [{mb}]", 1e-3 + 3e-4 + mb * 1e6 / 30e9, 1e-3, "memory", 1e6,
                         mb * 1e6, 1e-3, "f64") for mb in (4, 32))
    (entry,) = model_entries(replace(fake(), probes=probes))
    assert entry.key == "stencil" and entry.memory == pytest.approx(1.5) and entry.overhead == pytest.approx(3e-4)
    text = platform_toml(replace(fake(), probes=probes))
    assert "memory_efficiency = { stencil = 1.5 }" in text and "overhead_us = { stencil = 300 }" in text


def test_an_op_named_as_its_streaming_class_counts_each_probe_once():
    from dataclasses import replace

    from mapper.run.calibration.fits import model_entries

    probes = tuple(Probe("stencil", f"stencil -> [{i}]", 2e-3, 1e-3, "memory", 1e6, 1e7, 1e-3, "f64")
                   for i in range(3))
    (entry,) = model_entries(replace(fake(), probes=probes))
    assert entry.key == "stencil" and entry.probes == 3 and entry.memory == pytest.approx(0.5)


def test_relu_streams_and_keeps_gelu_s_compute_rate_away():
    from dataclasses import replace

    from mapper.costing.cost import build_cost_table
    from mapper.frontend.load import graph_from_text
    from mapper.run.calibration.fits import model_entries
    from mapper.run.calibration.probes import PROBES

    assert any(key == "relu" for key, _ in PROBES)
    # gelu: 1e8 flops at 100 GFLOP/s stored = 1 ms of work in 1 s net of launch -> 0.001 of the peak;
    # relu: 4 MB at 20 GB/s = 0.2 ms in 1 ms net -> 0.2 of the bandwidth, its own key
    probes = (Probe("activation", "gelu -> [1]", 1.001, 0.002, "compute", 1.0e8, 8.0e6, 1e-3, "f32"),
              Probe("activation", "relu -> [1]", 0.002, 0.001, "memory", 1.0e6, 4.0e6, 1e-3, "f32", "relu"))
    cal = replace(fake(), probes=probes)
    entries = {e.key: e for e in model_entries(cal)}
    assert entries["activation"].efficiency == pytest.approx(0.001) and entries["activation"].memory == 0
    assert entries["relu"].memory == pytest.approx(0.2) and entries["relu"].efficiency == 0
    g = graph_from_text("graph g {\n  input x : f32[1024, 1024]\n  y = relu(x)\n  z = gelu(x)\n  output y, z\n}\n")
    table = build_cost_table(g, calibrated_platform(cal))
    relu, gelu = g.tasks
    # relu's time follows its bytes at its own fraction (at gelu's class rate its 1e6 flops would take 10 ms)
    assert table.bound[0][0] == "memory"
    assert table.time[0][0] == pytest.approx(12.5e-6 + relu.bytes / (0.2 * 20e9), rel=1e-9)
    assert table.time[1][0] == pytest.approx(12.5e-6 + gelu.flops / (0.001 * 100e9), rel=1e-6)

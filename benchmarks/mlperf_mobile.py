"""MLPerf Mobile v4.0 on the Snapdragon 8 Gen 3: predicted single-stream latency on the NPU against
the published rows, the NPU's one fitted number, and CPU+GPU co-execution.

Published rows: mlcommons/mobile_results_v4.0 at commit 5a937a58465ebf4b38201fdf68ede35e99c29852,
closed/Qualcomm_Innovation_Center/results/SD8G3/<model>/SingleStream/log_performance/
mlperf_log_summary.txt, "90th percentile latency (ns)" (Vivo iQOO 12, SNPE on the HTP, int8).
The graphs are tests/data/mlperf_mobile (benchmarks/mlperf_models.py builds them: MobileNetV4-Conv-L
at 384, MobileBERT at sequence 384, EDSR F32B5 2x at 540x960, random weights, int8 QDQ).

The NPU has two fitted numbers (platforms/sd8gen3.toml), each on one model, and EDSR checks both:
its per-op memory efficiency (``memory_efficiency``: above 1 because the HTP keeps tiles in its
on-chip memory, so it moves fewer DRAM bytes than the per-layer byte count), fitted on MobileNetV4
(107 NPU ops), and its fixed time per op (``launch_us``: the HTP's per-op scheduling wait, the
"Wait" cycles of QNN's linting profile, for which no figure is published), fitted on MobileBERT
(639 NPU ops, most of them small). The fit is joint: for each trial ``launch_us`` the efficiency is
refitted on MobileNetV4, and ``launch_us`` is bisected until MobileBERT's latency is its row's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import tempfile
import warnings
from pathlib import Path

from mobile import cpu_gpu

from mapper.cli import main as cli_main
from mapper.engine.validate import validate
from mapper.errors import InputWarning
from mapper.mapping.base import MapOptions
from mapper.pipeline import compile_graph
from mapper.platform.devices import Platform
from mapper.platform.loader import load_platform
from mapper.platform.schema import MAX_STREAM_FRACTION

HERE = Path(__file__).resolve().parent
MODELS = HERE.parent / "tests" / "data" / "mlperf_mobile"
COMMIT = "5a937a58465ebf4b38201fdf68ede35e99c29852"
#: model -> (MLPerf results folder, 90th-percentile latency in seconds), SD8G3 rows at COMMIT.
PUBLISHED = {
    "mobilenetv4": ("mobilenetV4", 866771e-9),
    "mobilebert": ("mobileBERT", 2307969e-9),
    "edsr": ("EDSR", 6175729e-9),
}
#: The other SoCs of v4.0 (same commit; Qualcomm's results/<SoC>/<model>/SingleStream/log_performance and
#: Samsung's results/exynos2400/<task>-performance mlperf_log_summary.txt), p90 seconds for the models
#: above in their order: printed for reference, not predicted (no platform files for them).
OTHER_ROWS = {
    "Snapdragon 8s Gen 3 (QRD)": (1381354e-9, 3113646e-9, 7519166e-9),
    "Snapdragon 7 Gen 3 (Honor 100)": (3846406e-9, 5720730e-9, 21812969e-9),
    "Snapdragon X Elite (QRD)": (1256200e-9, 3346100e-9, 5294900e-9),
    "Exynos 2400 (ENN)": (1037070e-9, 3153477e-9, 7150625e-9),
}
FIT_ON = "mobilenetv4"  # the memory efficiency's row
FIT_LAUNCH_ON = "mobilebert"  # launch_us's row
NPU = "hexagon"


def with_memory_efficiency(platform: Platform, value: float) -> Platform:
    """``platform`` with the NPU's per-op memory efficiency table set to ``value`` for every key."""
    devices = []
    for d in platform.devices:
        if d.name == NPU:
            d = dataclasses.replace(d, memory_efficiency_ops=tuple((k, value) for k, _ in d.memory_efficiency_ops))
        devices.append(d)
    return dataclasses.replace(platform, devices=tuple(devices))


def with_launch(platform: Platform, us: float) -> Platform:
    """``platform`` with the NPU's fixed time per op (``launch_us``) set to ``us`` microseconds."""
    devices = tuple(dataclasses.replace(d, launch_us=us) if d.name == NPU else d for d in platform.devices)
    return dataclasses.replace(platform, devices=devices)


def latency(model: str, platform: Platform | str, mapper: str = "delegate-greedy") -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InputWarning)
        r = compile_graph(str(MODELS / f"{model}.onnx"), platform, mapper=mapper,
                          options=MapOptions(time_limit=5.0)).result
    bad = validate(r.schedule)
    if bad:
        raise SystemExit(f"{model}: {mapper}'s schedule is invalid: {bad[0].message}")
    return r.schedule.makespan


def fit(platform: Platform, model: str, target: float, lo: float = 0.5, hi: float = MAX_STREAM_FRACTION) -> float:
    """The memory efficiency at which ``model``'s predicted latency is ``target`` (bisection; the
    latency falls as the efficiency rises), at most the platform schema's cap."""
    for _ in range(12):
        mid = (lo + hi) / 2
        if latency(model, with_memory_efficiency(platform, mid)) > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def fit_both(platform: Platform, lo: float = 0.0, hi: float = 4.0) -> tuple[float, float]:
    """(``launch_us``, memory efficiency): the per-op time at which MobileBERT's latency is its row's,
    with the efficiency refitted on MobileNetV4 at each trial (bisection: MobileBERT, with six times
    MobileNetV4's ops, gains more from a longer per-op time than the refitted efficiency takes off)."""
    for _ in range(10):
        mid = (lo + hi) / 2
        trial = with_launch(platform, mid)
        eff = fit(trial, FIT_ON, PUBLISHED[FIT_ON][1])
        if latency(FIT_LAUNCH_ON, with_memory_efficiency(trial, eff)) < PUBLISHED[FIT_LAUNCH_ON][1]:
            lo = mid
        else:
            hi = mid
    us = (lo + hi) / 2
    return us, fit(with_launch(platform, us), FIT_ON, PUBLISHED[FIT_ON][1])


#: Band-style workloads (Jeong et al., MobiSys 2022): models requested together every PERIOD_MS (a 30 fps
#: camera), each due SLO_FACTOR times its latency alone on the phone under ``--delegate greedy``.
PERIOD_MS = 1000.0 / 30
SLO_FACTOR = 1.5
WORKLOADS = (("mobilenetv4", "mobilebert"), ("mobilenetv4", "edsr"), ("mobilenetv4", "mobilebert", "edsr"),
             ("mobilenetv4", "mobilenetv4", "mobilebert"))


def workloads(solo: dict[str, float]) -> None:
    """SLOs met under ``--delegate greedy`` and ``--delegate mapped`` for each of WORKLOADS."""
    print(f"Several models at once (Band-style): period {PERIOD_MS:.1f} ms, SLO = {SLO_FACTOR} x latency alone")
    print(f"{'workload':<36} {'greedy met':>10} {'mapped met':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for models in WORKLOADS:
            doc = {"models": [{"file": str(MODELS / f"{m}.onnx"), "period_ms": PERIOD_MS,
                               "slo_ms": SLO_FACTOR * solo[m] * 1e3} for m in models]}
            apps = os.path.join(tmp, "apps.json")
            with open(apps, "w") as f:
                json.dump(doc, f)
            met = []
            for mode in ("greedy", "mapped"):
                out = os.path.join(tmp, f"{mode}.json")
                with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
                    warnings.simplefilter("ignore", InputWarning)
                    code = cli_main(["compile", apps, "--platform", "sd8gen3", "--delegate", mode,
                                     "--json", out, "-q"])
                if code != 0:
                    raise SystemExit(f"{'+'.join(models)} --delegate {mode}: exit {code}")
                with open(out) as f:
                    rows = json.load(f)["apps"]["models"]
                met.append(f"{sum(r['slo_met'] for r in rows)}/{len(rows)}")
            print(f"{'+'.join(models):<36} {met[0]:>10} {met[1]:>10}")


def main() -> None:
    shipped = load_platform("sd8gen3")
    npu = next(d for d in shipped.devices if d.name == NPU)
    eff = dict(npu.memory_efficiency_ops)
    us, fitted = fit_both(shipped)
    print(f"MLPerf Mobile v4.0, Snapdragon 8 Gen 3 (mlcommons/mobile_results_v4.0 {COMMIT[:10]}), SingleStream p90")
    print(f"NPU launch_us fitted on {FIT_LAUNCH_ON}: {us:.3f} us (shipped: {npu.launch_us:g}); memory efficiency "
          f"fitted on {FIT_ON} with it: {fitted:.3f} (shipped: {sorted(set(eff.values()))})")
    head = f"{'model':<12} {'published':>10} {'predicted':>10} {'ratio':>6}  {'role':<6} {'MLPerf row':<12}"
    print(head)
    print("-" * len(head))
    solo = {}
    for model, (folder, published) in PUBLISHED.items():
        pred = solo[model] = latency(model, shipped)
        role = "fit" if model in (FIT_ON, FIT_LAUNCH_ON) else "check"
        print(f"{model:<12} {published * 1e3:>8.3f}ms {pred * 1e3:>8.3f}ms {pred / published:>5.2f}x  {role:<6} "
              f"SD8G3/{folder}")
    print(f"other v4.0 rows, p90 ({', '.join(PUBLISHED)}): "
          + "; ".join(f"{soc} " + " / ".join(f"{t * 1e3:.3f}" for t in row) + " ms" for soc, row in OTHER_ROWS.items()))
    print()
    workloads(solo)
    print()
    print("CPU+GPU co-execution (HEFT over the Kryo clusters and the Adreno GPU, no NPU) vs the better single one")
    cpu_gpu_only = cpu_gpu("sd8gen3")
    for model in PUBLISHED:
        single = latency(model, cpu_gpu_only, "single")
        both = latency(model, cpu_gpu_only, "heft")
        print(f"{model:<12} single {single * 1e3:8.3f}ms  co-executed {both * 1e3:8.3f}ms  gain {single / both:.2f}x")


if __name__ == "__main__":
    if not MODELS.is_dir() or not os.listdir(MODELS):
        raise SystemExit(f"no graphs under {MODELS}: run benchmarks/mlperf_models.py")
    main()

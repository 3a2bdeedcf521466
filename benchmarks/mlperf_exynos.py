"""MLPerf Mobile v4.0 on the Exynos 2400 (Galaxy S24): predicted single-stream latency on the NPU
against Samsung's published rows, with sd8gen3's mechanism and its two fitted numbers.

Published rows: mlcommons/mobile_results_v4.0 at commit 5a937a58465ebf4b38201fdf68ede35e99c29852,
closed/Samsung/results/exynos2400/<task>-performance/mlperf_log_summary.txt, "90th percentile latency
(ns)" (ENN 2.2.20 on the NPU, uint8). The graphs are benchmarks/mlperf_mobile.py's (tests/data/mlperf_mobile).

``platforms/exynos2400.toml`` keeps sd8gen3's per-op memory efficiency (4.0, fitted there on
MobileNetV4: the NPU tiles layers through its on-chip scratchpad) and its fixed time per op
(``launch_us`` 1.87, fitted there on MobileBERT) unchanged. The one number of the
Samsung NPU that no source gives is its per-invocation cost (``invoke_us``): it is fitted here on
MobileNetV4 alone (one invocation) by bisection and checked on MobileBERT (several, around its CPU
fallbacks) and EDSR. MLPerf Mobile has no MediaTek Dimensity or Google Tensor row in v3.1 to v5.0,
so this is the one non-Qualcomm phone with published rows to check against.

    python benchmarks/mlperf_exynos.py
"""

from __future__ import annotations

import dataclasses
import os

from mlperf_mobile import COMMIT, MODELS, latency

from mapper.platform.devices import Platform
from mapper.platform.loader import load_platform

#: model -> (Samsung's task folder, 90th-percentile latency in seconds), exynos2400 rows at COMMIT.
PUBLISHED = {
    "mobilenetv4": ("image_classification_v2", 1037070e-9),
    "mobilebert": ("natural_language_processing", 3153477e-9),
    "edsr": ("super_resolution", 7150625e-9),
}
FIT_ON = "mobilenetv4"
NPU = "samsung_npu"


def with_invoke(platform: Platform, us: float) -> Platform:
    """``platform`` with the NPU's per-invocation cost set to ``us`` microseconds."""
    devices = tuple(dataclasses.replace(d, invoke_us=us) if d.name == NPU else d for d in platform.devices)
    return dataclasses.replace(platform, devices=devices)


def fit(platform: Platform, model: str, target: float, lo: float = 0.0, hi: float = 2000.0) -> float:
    """The invocation cost (us) at which ``model``'s predicted latency is ``target`` (bisection; the
    latency rises with the cost)."""
    for _ in range(14):
        mid = (lo + hi) / 2
        if latency(model, with_invoke(platform, mid)) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def main() -> None:
    shipped = load_platform("exynos2400")
    npu = next(d for d in shipped.devices if d.name == NPU)
    fitted = fit(shipped, FIT_ON, PUBLISHED[FIT_ON][1])
    eff = sorted({v for _, v in npu.memory_efficiency_ops})
    print(f"MLPerf Mobile v4.0, Exynos 2400 (mlcommons/mobile_results_v4.0 {COMMIT[:10]}), SingleStream p90")
    print(f"NPU memory efficiency {eff} and launch_us {npu.launch_us:g} us (sd8gen3's, not refitted); "
          f"invoke_us fitted on {FIT_ON}: "
          f"{fitted:.1f} us (shipped: {npu.invoke_us:g} us)")
    head = f"{'model':<12} {'published':>10} {'predicted':>10} {'ratio':>6}  {'role':<6} {'MLPerf row':<40}"
    print(head)
    print("-" * len(head))
    for model, (folder, published) in PUBLISHED.items():
        pred = latency(model, shipped)
        role = "fit" if model == FIT_ON else "check"
        print(f"{model:<12} {published * 1e3:>8.3f}ms {pred * 1e3:>8.3f}ms {pred / published:>5.2f}x  {role:<6} "
              f"exynos2400/{folder}-performance")


if __name__ == "__main__":
    if not MODELS.is_dir() or not os.listdir(MODELS):
        raise SystemExit(f"no graphs under {MODELS}: run benchmarks/mlperf_models.py")
    main()

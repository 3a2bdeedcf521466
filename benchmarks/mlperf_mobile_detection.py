"""MLPerf Mobile v4.0 object detection on the Snapdragon 8 Gen 3: MobileDet-SSD's predicted
single-stream latency on the NPU against the published row (the rows of benchmarks/mlperf_mobile.py
lack it).

Published row: mlcommons/mobile_results_v4.0 at commit 3e6d7f00f80b8e666e8df51a00988157fff8d212,
closed/Qualcomm_Innovation_Center/results/SD8G3/mobiledetSSD/SingleStream/log_performance/
mlperf_log_summary.txt, "90th percentile latency (ns)" (SNPE on the HTP, int8). The graph is
examples/mobiledet_ssd.tg (SSDLite with the MobileDet-EdgeTPU backbone at 320x320, the model MLPerf
Mobile exports from ssdlite_mobiledet_edgetpu_320x320_coco; its 1.533 G multiply-accumulates are
the config's "1.53B MulAdds") with its tensors as i8. Nothing is fitted here: sd8gen3 as shipped,
its NPU memory efficiency fitted on MobileNetV4 and its per-op launch_us on MobileBERT by
benchmarks/mlperf_mobile.py. MOSAIC (image
segmentation) is not built.

    python benchmarks/mlperf_mobile_detection.py
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

from mapper.engine.validate import validate
from mapper.errors import InputWarning
from mapper.mapping.base import MapOptions
from mapper.pipeline import compile_graph
from mapper.report.delegation import delegation

ROOT = Path(__file__).resolve().parent.parent
COMMIT = "3e6d7f00f80b8e666e8df51a00988157fff8d212"
#: (MLPerf results folder, p90 latency in seconds, example)
PUBLISHED = {"mobiledet-ssd": ("mobiledetSSD", 406615e-9, "mobiledet_ssd")}
#: Published but not predicted (no graph built): the segmentation row, p90 seconds.
NOT_BUILT = {"mosaic": ("mosaic", 658021e-9)}


def main() -> None:
    print(f"MLPerf Mobile v4.0, Snapdragon 8 Gen 3 (mlcommons/mobile_results_v4.0 {COMMIT[:10]}), SingleStream p90")
    head = f"{'model':<14} {'published':>10} {'greedy':>10} {'ratio':>6} {'mapped':>10} {'NPU runs':>8}  MLPerf row"
    print(head)
    print("-" * len(head))
    with tempfile.TemporaryDirectory() as tmp:
        for model, (folder, published, example) in PUBLISHED.items():
            path = Path(tmp) / f"{example}_i8.tg"
            path.write_text((ROOT / "examples" / f"{example}.tg").read_text().replace("f32", "i8"))
            out = {}
            for mapper in ("delegate-greedy", "delegate-mapped"):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", InputWarning)
                    r = compile_graph(str(path), "sd8gen3", mapper=mapper, mapping=MapOptions(time_limit=5.0)).result
                bad = validate(r.schedule)
                if bad:
                    raise SystemExit(f"{model}: {mapper}'s schedule is invalid: {bad[0].message}")
                out[mapper] = r.schedule
            greedy, mapped = out["delegate-greedy"], out["delegate-mapped"]
            subgraphs = (delegation(greedy) or {"subgraphs": []})["subgraphs"]
            runs = sum(1 for sub in subgraphs if sub["device"] == "hexagon")
            print(f"{model:<14} {published * 1e3:>8.3f}ms {greedy.makespan * 1e3:>8.3f}ms "
                  f"{greedy.makespan / published:>5.2f}x {mapped.makespan * 1e3:>8.3f}ms {runs:>8}  SD8G3/{folder}")
    for model, (folder, published) in NOT_BUILT.items():
        print(f"{model:<14} {published * 1e3:>8.3f}ms  {'(no graph built)':<38}SD8G3/{folder}")


if __name__ == "__main__":
    main()

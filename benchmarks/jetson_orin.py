"""Jetson AGX Orin: predicted single-stream latency against MLPerf Inference's published Orin rows,
with one fitted number.

Published rows: mlcommons/inference_results_v3.1 at commit eaf622a25c00f2b4b1d2c4f5b4f430570429d24a,
closed/NVIDIA/results/Orin_TRT/<model>/SingleStream/performance/run_1/mlperf_log_summary.txt,
"90th percentile latency (ns)" (Jetson AGX Orin 64GB, TensorRT, INT8; SingleStream runs on the GPU).
The graphs are the shipped examples, built offline: examples/resnet50.tg and examples/retinanet.tg
in INT8 (their f32 tensors as i8, as MLPerf's Orin engines), examples/bert_large.tg at batch 1 and
sequence 384 in FP16 (the DSL's attention and layer norm take floats only, so its GEMMs cannot be
INT8 as MLPerf's are; and MLPerf's samples are SQuAD questions of their own lengths, at most 384:
the published p90 sits below a 384-token pass).

One number is fitted: the GPU's per-kernel launch cost ``launch_us`` (the platform declares none),
by bisection on ResNet-50 alone (the row that fixed costs dominate), on the GPU as MLPerf ran it
(jetson-orin less its DLAs); RetinaNet and BERT are checked with it. The last columns map each
graph on the whole SoC (the GPU and both DLAs, the DLAs' TensorRT layer list deciding what they
take) with the fitted number.

    python benchmarks/jetson_orin.py
"""

from __future__ import annotations

import dataclasses
import tempfile
import warnings
from pathlib import Path

from mapper.engine.validate import validate
from mapper.errors import InputWarning
from mapper.frontend.sources import ModelFile
from mapper.mapping.base import MapOptions
from mapper.pipeline import compile_graph
from mapper.platform.devices import Platform
from mapper.platform.loader import load_platform, parse_platform

ROOT = Path(__file__).resolve().parent.parent
COMMIT = "eaf622a25c00f2b4b1d2c4f5b4f430570429d24a"
#: model -> (MLPerf results folder, p90 latency in seconds, example file, its params, dtype the run uses)
PUBLISHED = {
    "resnet50": ("resnet50", 640258e-9, "resnet50", (), "i8"),
    "retinanet": ("retinanet", 11672065e-9, "retinanet", (), "i8"),
    "bert-large": ("bert-99", 5704810e-9, "bert_large", (("B", 1), ("S", 384)), "f16"),
}
FIT_ON = "resnet50"


def gpu_only() -> Platform:
    """jetson-orin less its DLAs: the platform file less the DLA device and the links that name it."""
    blocks = (ROOT / "platforms" / "jetson-orin.toml").read_text().split("\n[[")
    kept = [blocks[0]] + [b for b in blocks[1:] if '"dla' not in b]
    return parse_platform("\n[[".join(kept), "jetson-orin without its DLAs")


def with_launch(platform: Platform, launch_us: float) -> Platform:
    """``platform`` with its GPU's per-kernel launch cost set to ``launch_us``."""
    devices = tuple(dataclasses.replace(d, launch_us=launch_us) if d.kind == "gpu" else d for d in platform.devices)
    return dataclasses.replace(platform, devices=devices)


def graph(model: str, folder: Path) -> ModelFile:
    """The example of ``model`` in the dtype MLPerf's run uses, written under ``folder``."""
    _, _, example, params, dtype = PUBLISHED[model]
    text = (ROOT / "examples" / f"{example}.tg").read_text()
    if dtype == "i8":
        text = text.replace("f32", "i8")
    path = folder / f"{example}_{dtype}.tg"
    path.write_text(text)
    return ModelFile(str(path), params=params)


def latency(source: ModelFile, platform: Platform, mapper: str = "heft") -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InputWarning)
        r = compile_graph(source, platform, mapper=mapper, mapping=MapOptions(time_limit=10.0)).result
    bad = validate(r.schedule)
    if bad:
        raise SystemExit(f"{source.path}: {mapper}'s schedule is invalid: {bad[0].message}")
    return r.schedule.makespan


def fit(source: ModelFile, platform: Platform, target: float, lo: float = 0.0, hi: float = 50.0) -> float:
    """The GPU launch cost (us) at which ``source``'s predicted latency is ``target`` (bisection;
    the latency rises with it)."""
    for _ in range(20):
        mid = (lo + hi) / 2
        if latency(source, with_launch(platform, mid)) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def main() -> None:
    gpu, soc = gpu_only(), load_platform("jetson-orin")
    with tempfile.TemporaryDirectory() as tmp:
        graphs = {m: graph(m, Path(tmp)) for m in PUBLISHED}
        launch = fit(graphs[FIT_ON], gpu, PUBLISHED[FIT_ON][1])
        print(f"MLPerf Inference v3.1 closed, NVIDIA Jetson AGX Orin (mlcommons/inference_results_v3.1 "
              f"{COMMIT[:10]}), SingleStream p90")
        print(f"GPU launch cost fitted on {FIT_ON} (GPU as MLPerf ran it): {launch:.2f} us per kernel "
              f"(shipped: {next(d for d in gpu.devices if d.kind == 'gpu').launch_us:g})")
        head = (f"{'model':<11} {'dtype':<5} {'published':>10} {'unfitted':>10} {'GPU':>10} {'ratio':>6}  {'role':<6}"
                f" {'GPU+2 DLA':>10} {'ratio':>6}  MLPerf row")
        print(head)
        print("-" * len(head))
        for model, (folder, published, _, _, dtype) in PUBLISHED.items():
            raw = latency(graphs[model], gpu)
            pred = latency(graphs[model], with_launch(gpu, launch))
            whole = latency(graphs[model], with_launch(soc, launch), "milp")
            role = "fit" if model == FIT_ON else "check"
            print(f"{model:<11} {dtype:<5} {published * 1e3:>8.3f}ms {raw * 1e3:>8.3f}ms {pred * 1e3:>8.3f}ms "
                  f"{pred / published:>5.2f}x  {role:<6} {whole * 1e3:>8.3f}ms {whole / published:>5.2f}x  "
                  f"Orin_TRT/{folder}")


if __name__ == "__main__":
    main()

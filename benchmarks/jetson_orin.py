"""Jetson AGX Orin: predicted latency against MLPerf Inference's published Orin rows, with two
numbers fitted on ResNet-50 and RetinaNet and BERT checked.

Published rows: mlcommons/inference_results_v3.1 at commit eaf622a25c00f2b4b1d2c4f5b4f430570429d24a,
closed/NVIDIA/results/Orin_TRT/<model>/<scenario>/performance/run_1/mlperf_log_summary.txt (Jetson
AGX Orin 64GB, TensorRT, INT8): SingleStream's "90th percentile latency (ns)" (one sample a query)
and MultiStream's "99th percentile latency (ns)" (eight samples a query, run as one batch of 8:
closed/NVIDIA/configs/resnet50/MultiStream, ``gpu_batch_size = 8``). Both scenarios run on the GPU
alone (their configs give no DLA batch size), so the graphs are mapped on jetson-orin less its DLAs.

The graphs are the shipped examples, built offline: examples/resnet50.tg and examples/retinanet.tg
with their tensors as i8 (MLPerf's Orin engines are INT8), and examples/bert_large.tg at batch 1 in
f16 with ``--precision int8``: its linear layers' GEMMs on the INT8 tensor cores with static scales,
attention and layer norm in FP16 (mapper.costing.precision, "Statically scaled INT8"). NVIDIA's
BERT harness runs each SQuAD sample packed at its own length, no padding (closed/NVIDIA/code/harness/
harness_bert/bert_core_vs.cc: ``BERTCoreVS::infer`` sums each sample's input mask and sets the
engine's input to that total), so a sample is at most 384 tokens (``bert_opt_seqlen = 384``,
configs/bert): the graph is priced at 384, the longest sample, and its ratio bounds the p90's
from above. SQuAD's length distribution is not shipped, so the p90 sample's length is not known here.

Two numbers are fitted, on the two ResNet-50 rows (NVIDIA's own figures of INT8 convolution on this
GPU, neither of them RetinaNet's): the GPU's per-kernel launch cost ``launch_us`` (no figure for
Orin is published), set by the batch-1 row that fixed costs dominate,
and the GPU's INT8 convolution efficiency ``efficiency["conv:i8"]`` (no microbenchmark of TensorRT's
INT8 convolutions on Orin is published; the model's GPU table says 0.75 for every dtype), set by the
batch-8 row whose convolutions run compute-bound; alternating bisections until both hold. RetinaNet
(both scenarios) and BERT are checked with them. The last columns map each graph on the whole SoC
(the GPU and both DLAs, the DLAs' TensorRT layer list deciding what they take) with the fitted numbers.
The platform file carries both fitted numbers, citing this fit; the ``shipped`` column prices with it.

    python benchmarks/jetson_orin.py
"""

from __future__ import annotations

import dataclasses
import tempfile
import warnings
from pathlib import Path

from mobile import cpu_gpu

from mapper.engine.validate import validate
from mapper.errors import InputWarning
from mapper.frontend.sources import ModelFile
from mapper.mapping.base import MapOptions
from mapper.pipeline import compile_graph
from mapper.platform.devices import Platform
from mapper.platform.loader import load_platform

ROOT = Path(__file__).resolve().parent.parent
COMMIT = "eaf622a25c00f2b4b1d2c4f5b4f430570429d24a"
#: row -> (MLPerf results folder, scenario, published latency in seconds, example, its params,
#: the graph's dtype, --precision)
PUBLISHED = {
    "resnet50": ("resnet50", "SingleStream", 640258e-9, "resnet50", (), "i8", None),
    "resnet50 x8": ("resnet50", "MultiStream", 2182046e-9, "resnet50", (("N", 8),), "i8", None),
    "retinanet": ("retinanet", "SingleStream", 11672065e-9, "retinanet", (), "i8", None),
    "retinanet x8": ("retinanet", "MultiStream", 82916399e-9, "retinanet", (("N", 8),), "i8", None),
    "bert-large": ("bert-99", "SingleStream", 5704810e-9, "bert_large", (("B", 1), ("S", 384)), "f16", "int8"),
}
#: the rows the two numbers are fitted on: launch cost, then INT8 convolution efficiency
FIT_LAUNCH, FIT_CONV = "resnet50", "resnet50 x8"
#: the key of the GPU's efficiency table the fit sets (mapper.costing.efficiency.model_keys)
CONV_KEY = "conv:i8"


def fitted(platform: Platform, launch_us: float, conv: float | None = None) -> Platform:
    """``platform`` with its GPU's per-kernel launch cost ``launch_us`` and, given ``conv``, its INT8
    convolution efficiency."""
    def gpu(d):
        eff = tuple(kv for kv in d.efficiency if conv is None or kv[0] != CONV_KEY)
        eff += ((CONV_KEY, conv),) if conv is not None else ()
        return dataclasses.replace(d, launch_us=launch_us, efficiency=eff)

    devices = tuple(gpu(d) if d.kind == "gpu" else d for d in platform.devices)
    return dataclasses.replace(platform, devices=devices)


def graph(row: str, folder: Path) -> ModelFile:
    """The example of ``row`` in the dtype MLPerf's run uses, written under ``folder``."""
    _, _, _, example, params, dtype, _ = PUBLISHED[row]
    text = (ROOT / "examples" / f"{example}.tg").read_text()
    if dtype == "i8":
        text = text.replace("f32", "i8")
    path = folder / f"{example}_{dtype}.tg"
    path.write_text(text)
    return ModelFile(str(path), params=params)


def latency(source: ModelFile, platform: Platform, precision: str | None = None, mapper: str = "heft") -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InputWarning)
        r = compile_graph(source, platform, mapper=mapper, mapping=MapOptions(time_limit=10.0),
                          precision=precision).result
    bad = validate(r.schedule)
    if bad:
        raise SystemExit(f"{source.path}: {mapper}'s schedule is invalid: {bad[0].message}")
    return r.schedule.makespan


def bisect(f, target: float, lo: float, hi: float, rising: bool = True) -> float:
    """The ``x`` in ``[lo, hi]`` where monotone ``f(x)`` meets ``target`` (20 halvings)."""
    for _ in range(20):
        mid = (lo + hi) / 2
        if (f(mid) < target) == rising:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def fit(graphs: dict[str, ModelFile], gpu: Platform, rounds: int = 4) -> tuple[float, float]:
    """``(launch_us, conv efficiency)`` meeting the two ResNet-50 rows: alternating bisections, the
    launch cost on the batch-1 row (latency rises with it), the efficiency on the batch-8 row
    (latency falls as it rises)."""
    launch, conv = 0.0, 0.75
    for _ in range(rounds):
        launch = bisect(lambda x, c=conv: latency(graphs[FIT_LAUNCH], fitted(gpu, x, c)),
                        PUBLISHED[FIT_LAUNCH][2], 0.0, 50.0)
        conv = bisect(lambda e, x=launch: latency(graphs[FIT_CONV], fitted(gpu, x, e)),
                      PUBLISHED[FIT_CONV][2], 0.05, 1.0, rising=False)
    return launch, conv


def main() -> None:
    gpu, soc = cpu_gpu("jetson-orin", "DLAs"), load_platform("jetson-orin")
    with tempfile.TemporaryDirectory() as tmp:
        graphs = {row: graph(row, Path(tmp)) for row in PUBLISHED}
        launch, conv = fit(graphs, gpu)
        shipped = next(d for d in gpu.devices if d.kind == "gpu")
        print(f"MLPerf Inference v3.1 closed, NVIDIA Jetson AGX Orin (mlcommons/inference_results_v3.1 "
              f"{COMMIT[:10]}), SingleStream p90 and MultiStream p99 (8 samples)")
        print(f"fitted on the ResNet-50 rows (GPU as MLPerf ran it): launch {launch:.2f} us per kernel on "
              f"{FIT_LAUNCH} (shipped: {shipped.launch_us:g}), INT8 convolution efficiency {conv:.3f} on "
              f"{FIT_CONV} (the model's GPU conv class: 0.75)")
        head = (f"{'row':<13} {'graph':<10} {'published':>10} {'shipped':>10} {'GPU':>10} {'ratio':>6}  "
                f"{'role':<6} {'GPU+2 DLA':>10} {'ratio':>6}  MLPerf row")
        print(head)
        print("-" * len(head))
        for row, (folder, scenario, published, _, _, dtype, precision) in PUBLISHED.items():
            raw = latency(graphs[row], gpu, precision)
            pred = latency(graphs[row], fitted(gpu, launch, conv), precision)
            whole = latency(graphs[row], fitted(soc, launch, conv), precision, "milp")
            role = "fit" if row in (FIT_LAUNCH, FIT_CONV) else "check"
            kind = dtype + ("/" + precision if precision else "")
            print(f"{row:<13} {kind:<10} {published * 1e3:>8.3f}ms {raw * 1e3:>8.3f}ms {pred * 1e3:>8.3f}ms "
                  f"{pred / published:>5.2f}x  {role:<6} {whole * 1e3:>8.3f}ms {whole / published:>5.2f}x  "
                  f"Orin_TRT/{folder}/{scenario}")
        print("bert-large: priced at 384 tokens, the longest sample the harness runs (each SQuAD sample is run "
              "at its own length): the ratio bounds the p90 sample's from above.")


if __name__ == "__main__":
    main()

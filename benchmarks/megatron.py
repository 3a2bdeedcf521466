"""Megatron-LM's Table 1 on Selene: predicted against published TFLOP/s per GPU.

    python benchmarks/megatron.py [--rows N] [--no-auto]

Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM", SC'21 (arXiv 2104.04473), Table 1: GPT models of 1.7B to 1T
parameters on 32 to 3,072 A100 80 GB GPUs of Selene, sequence 2,048, vocabulary
51,200, 16-bit, activation recomputation. Each row is priced with its published
tensor and pipeline degrees and micro-batch 1 (examples/gpt.tg, platform
selene, --nodes GPUs/8): throughput by the paper's equation 3,
``96 B s l h^2 (1 + s/(6h) + V/(16 l h))`` FLOPs per step (four passes with
recomputation) over the step time and GPUs. Then ``--parallel auto`` plans the
same row; its predicted throughput must not be below the published layout's.
A second source, nothing fitted to it: Korthikanti et al., "Reducing Activation
Recomputation in Large Transformer Models" (MLSys 2023, arXiv 2205.05198),
Tables 3 and 5: four models on Selene without data parallelism (175B and 530B
with three interleaved stages), iteration times with full recomputation and
with selective recomputation and sequence parallelism; and their statement
(6.1) that without both techniques together none of the four fits in memory, priced with
PyTorch's default caching allocator (``allocator=caching``: the runs predate its expandable
segments), whose fragmentation is GMLake's measured share, not fitted here either.
Predictions do not depend on the machine's load; the planning times do (the
load average is printed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from mapper.cluster.search import plan_cluster
from mapper.costing.fusion import fuse_for
from mapper.frontend.load import load_graph
from mapper.frontend.sources import ModelFile
from mapper.parallel.layout import LayoutSpec
from mapper.platform.cluster import with_nodes
from mapper.platform.loader import load_platform

SEQ, VOCAB = 2048, 51200
# (params in billions, heads, hidden, layers, tensor, pipeline, GPUs, batch, published TFLOP/s per GPU)
TABLE1 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
]


# (name, heads, hidden, layers, tensor, pipeline, GPUs, batch, micro-batch, interleave,
#  measured seconds: full recomputation, selective + sequence parallel)
KORTHIKANTI = [
    ("22B", 64, 6144, 48, 8, 1, 8, 4, 4, 1, 1.42, 1.10),
    ("175B", 96, 12288, 96, 8, 8, 64, 64, 1, 3, 18.13, 13.75),
    ("530B", 128, 20480, 105, 8, 35, 280, 280, 1, 3, 49.05, 37.83),
    ("1T", 160, 25600, 128, 8, 64, 512, 512, 1, 1, 94.42, 71.49),
]


def korthikanti(selene) -> None:
    """Iteration times and fits of Korthikanti et al.'s configurations (module docstring)."""
    print("\nKorthikanti et al. 2023, Table 5 (seconds per iteration) and memory (GiB per GPU, 80 on an A100)")
    print(f"{'model':>6s} {'full pred':>9s} {'meas':>6s} {'ratio':>5s} {'sel+sp pred':>11s} {'meas':>6s} {'ratio':>5s}"
          f"  memory: none / sp / selective / selective+sp / full")
    ratios, agree = [], 0
    for name, heads, hidden, layers, t, p, gpus, batch, b, v, full, present in KORTHIKANTI:
        params = (("LAYERS", layers), ("HIDDEN", hidden), ("HEADS", heads), ("SEQ", SEQ), ("VOCAB", VOCAB),
                  ("BATCH", batch))
        graph = load_graph(ModelFile("examples/gpt.tg", params=params))
        plat = with_nodes(selene, gpus // 8)

        def est(recompute: str, sequence: bool, plat=plat, graph=graph, t=t, p=p, b=b, v=v):
            fixed = {"tensor": t, "pipeline": p, "data": 1, "micro_batch": b, "interleave": v,
                     "recompute": recompute, "zero": 0, "sequence": sequence, "allocator": "caching",
                     "context": 1}
            return plan_cluster(graph, plat, LayoutSpec(**fixed), "adam", lambda g: fuse_for(g, plat)).best

        f, s = est("full", False), est("selective", True)
        ratios += [f.step / full, s.step / present]
        mems = [est("none", False), est("none", True), est("selective", False), s, f]
        fits = ["fits" if e.fits else "OOM" for e in mems]
        # the paper: only selective + sequence parallel (and full recomputation) fit
        agree += sum(ok == want for ok, want in zip(fits, ["OOM", "OOM", "OOM", "fits", "fits"]))
        print(f"{name:>6s} {f.step:9.2f} {full:6.2f} {f.step / full:5.2f} {s.step:11.2f} {present:6.2f} "
              f"{s.step / present:5.2f}  " + " / ".join(f"{e.peak / 2**30:.0f} {ok}" for e, ok in zip(mems, fits)))
    print(f"ratio predicted / measured: median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-"
          f"{max(ratios):.2f}; fits as the paper says: {agree}/{5 * len(KORTHIKANTI)}")


def megatron_flops(batch: int, layers: int, hidden: int) -> float:
    """SC'21 equation 3: FLOPs of one step with full recomputation."""
    h, s, v, l_ = hidden, SEQ, VOCAB, layers
    return 96 * batch * s * l_ * h * h * (1 + s / (6 * h) + v / (16 * l_ * h))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=len(TABLE1))
    ap.add_argument("--no-auto", action="store_true")
    args = ap.parse_args()
    selene = load_platform("selene")
    print(f"load average {os.getloadavg()[0]:.2f} (planning times only; predictions do not depend on it)")
    print(f"{'model':>7s} {'GPUs':>5s} {'t':>2s} {'p':>3s} {'pred TF':>8s} {'pub TF':>7s} {'ratio':>6s} {'mem GiB':>8s}"
          f" {'fits':>5s} | auto layout{'':38s} {'auto TF':>8s} {'secs':>6s}")
    ratios = []
    for size, heads, hidden, layers, t, p, gpus, batch, published in TABLE1[:args.rows]:
        params = (("LAYERS", layers), ("HIDDEN", hidden), ("HEADS", heads), ("SEQ", SEQ), ("VOCAB", VOCAB),
                  ("BATCH", batch))
        graph = load_graph(ModelFile("examples/gpt.tg", params=params))
        plat = with_nodes(selene, gpus // 8)

        def prepare(g, plat=plat):
            return fuse_for(g, plat)

        fixed = {"tensor": t, "pipeline": p, "micro_batch": 1, "recompute": "full", "interleave": 1,
                 "zero": 0, "sequence": False, "context": 1}  # SC'21 ran no context parallelism
        est = plan_cluster(graph, plat, LayoutSpec(**fixed), "adam", prepare).best
        flops = megatron_flops(batch, layers, hidden)
        pred = flops / est.step / gpus / 1e12
        ratios.append(pred / published)
        line = (f"{size:6.1f}B {gpus:5d} {t:2d} {p:3d} {pred:8.1f} {published:7.0f} {pred / published:6.2f} "
                f"{est.peak / 2**30:8.1f} {str(est.fits):>5s} |")
        if not args.no_auto:
            t0 = time.perf_counter()
            auto = plan_cluster(graph, plat, LayoutSpec(), "adam", prepare).best
            secs = time.perf_counter() - t0
            auto_tf = flops / auto.step / gpus / 1e12  # the same work per step, so throughput compares
            line += f" {auto.layout.label():48.48s} {auto_tf:8.1f} {secs:6.1f}"
            if auto.fits and est.fits and auto.step > est.step * 1.0001:
                line += "  AUTO SLOWER"
        print(line, flush=True)
    print(f"ratio predicted / published: median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-"
          f"{max(ratios):.2f}, within 0.85-1.15: {sum(0.85 <= r <= 1.15 for r in ratios)}/{len(ratios)}")
    korthikanti(selene)


if __name__ == "__main__":
    main()

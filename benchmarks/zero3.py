"""ZeRO-3 at scale against PTD-P: Megatron-LM SC'21, Table 2, predicted against published.

    python benchmarks/zero3.py [--no-auto]

Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", SC'21 (arXiv 2104.04473), section 5.2 and Table 2: the 175B GPT-3 and the 530B
GPT on Selene's A100s with DeepSpeed's ZeRO-3 and no model parallelism (global batch fixed,
micro-batch 4, 2, 1 as the GPUs double) against PTD-P (tensor 8 x pipeline 12 and 8 x 35,
micro-batch 1). Each row is priced with its published layout (examples/gpt.tg, platform
selene, --nodes GPUs/8, full recomputation, 16-bit) and its throughput taken by the paper's
equation 3 over the step time. The one parameter of the ZeRO-3 model,
``mapper.cluster.zero3.SHARDED_EFFICIENCY``, is fitted here on the 175B run on 768 GPUs (by
bisection; the module keeps the value rounded to two digits) and checked on the other five
ZeRO-3 rows. Then ``--parallel auto`` plans each 175B cluster: it must not pick a ZeRO-3
layout when a layout without it is predicted faster.
"""

from __future__ import annotations

import argparse
import time

import mapper.cluster.zero3 as zero3
from mapper.cluster.search import plan_cluster
from mapper.costing.fusion import fuse_for
from mapper.frontend.load import load_graph
from mapper.frontend.sources import ModelFile
from mapper.parallel.layout import LayoutSpec
from mapper.platform.cluster import with_nodes
from mapper.platform.loader import load_platform

SEQ, VOCAB = 2048, 51200
#: (model, heads, hidden, layers, PTD-P tensor x pipeline, rows: (GPUs, global batch, ZeRO-3 micro-batch,
#: published TFLOP/s per GPU with ZeRO-3, with PTD-P)); SC'21 Table 2 (the 530B ZeRO-3 run on 640 GPUs
#: took a batch of 2,560: it did not fit on 560 at micro-batch 4; PTD-P ran 560 GPUs at 2,240)
TABLE2 = [
    ("175B", 96, 12288, 96, (8, 12), [(384, 1536, 4, 144, 153), (768, 1536, 2, 88, 149), (1536, 1536, 1, 44, 141)]),
    ("530B", 128, 20480, 105, (8, 35), [(640, 2560, 4, 138, None), (1120, 2240, 2, 98, 167),
                                        (2240, 2240, 1, 48, 159)]),
]
#: The row the efficiency is fitted on.
FIT = ("175B", 768)


def flops(batch: int, layers: int, hidden: int) -> float:
    """SC'21 equation 3: FLOPs of one step with full recomputation."""
    h, s, v, l_ = hidden, SEQ, VOCAB, layers
    return 96 * batch * s * l_ * h * h * (1 + s / (6 * h) + v / (16 * l_ * h))


def _graph(heads: int, hidden: int, layers: int, batch: int):
    params = (("LAYERS", layers), ("HIDDEN", hidden), ("HEADS", heads), ("SEQ", SEQ), ("VOCAB", VOCAB),
              ("BATCH", batch))
    return load_graph(ModelFile("examples/gpt.tg", params=params))


def _plan(graph, plat, spec: LayoutSpec):
    return plan_cluster(graph, plat, spec, "adam", lambda g: fuse_for(g, plat))


def zero3_spec(micro: int) -> LayoutSpec:
    return LayoutSpec(tensor=1, pipeline=1, micro_batch=micro, interleave=1, recompute="full", zero=3, context=1,
                      sequence=False)


def fit(selene) -> float:
    """The efficiency that reproduces the fitted row's published throughput (bisection)."""
    name, heads, hidden, layers, _, rows = next(r for r in TABLE2 if r[0] == FIT[0])
    gpus, batch, micro, published, _ = next(r for r in rows if r[0] == FIT[1])
    graph, plat = _graph(heads, hidden, layers, batch), with_nodes(selene, gpus // 8)
    kept = zero3.SHARDED_EFFICIENCY
    lo, hi = 0.05, 1.0
    try:
        for _ in range(30):
            zero3.SHARDED_EFFICIENCY = (lo + hi) / 2
            tf = flops(batch, layers, hidden) / _plan(graph, plat, zero3_spec(micro)).best.step / gpus / 1e12
            lo, hi = (zero3.SHARDED_EFFICIENCY, hi) if tf < published else (lo, zero3.SHARDED_EFFICIENCY)
    finally:
        zero3.SHARDED_EFFICIENCY = kept
    return (lo + hi) / 2


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-auto", action="store_true")
    args = ap.parse_args()
    selene = load_platform("selene")
    eff = fit(selene)
    print(f"SHARDED_EFFICIENCY fitted on {FIT[0]} / {FIT[1]} GPUs: {eff:.4f} (the model keeps "
          f"{zero3.SHARDED_EFFICIENCY})")
    print(f"{'model':>5s} {'GPUs':>5s} {'mb':>3s} | {'ZeRO-3 pred':>11s} {'pub':>5s} {'ratio':>5s} {'mem GiB':>8s} "
          f"{'fits':>5s} | {'PTD-P pred':>10s} {'pub':>5s} {'ratio':>5s} | {'PTD/Z3 pred':>11s} {'pub':>5s}")
    checked = []
    for name, heads, hidden, layers, (t, p), rows in TABLE2:
        for gpus, batch, micro, z_pub, p_pub in rows:
            graph, plat = _graph(heads, hidden, layers, batch), with_nodes(selene, gpus // 8)
            work = flops(batch, layers, hidden)
            z = _plan(graph, plat, zero3_spec(micro)).best
            z_tf = work / z.step / gpus / 1e12
            line = (f"{name:>5s} {gpus:5d} {micro:3d} | {z_tf:11.1f} {z_pub:5.0f} {z_tf / z_pub:5.2f} "
                    f"{z.peak / 2**30:8.1f} {str(z.fits):>5s} |")
            if (name, gpus) != FIT:
                checked.append(z_tf / z_pub)
            if p_pub is None:
                print(line + f" {'':>10s} {'':>5s} {'':>5s} |", flush=True)
                continue
            ptd = _plan(graph, plat, LayoutSpec(tensor=t, pipeline=p, micro_batch=1, interleave=1,
                                                recompute="full", zero=0, sequence=False, context=1)).best
            p_tf = work / ptd.step / gpus / 1e12
            print(line + f" {p_tf:10.1f} {p_pub:5.0f} {p_tf / p_pub:5.2f} | {p_tf / z_tf:11.2f} "
                         f"{p_pub / z_pub:5.2f}", flush=True)
    print(f"ZeRO-3 rows checked (not fitted): {sum(0.8 <= r <= 1.25 for r in checked)}/{len(checked)} within "
          f"0.8-1.25, range {min(checked):.2f}-{max(checked):.2f}")
    if args.no_auto:
        return
    name, heads, hidden, layers, _, rows = TABLE2[0]
    print(f"\n--parallel auto on the {name} clusters (a ZeRO-3 pick must be the fastest layout predicted)")
    for gpus, batch, _, _, _ in rows:
        graph, plat = _graph(heads, hidden, layers, batch), with_nodes(selene, gpus // 8)
        t0 = time.perf_counter()
        choice = _plan(graph, plat, LayoutSpec())
        fitting = [e for e in choice.ranked if e.fits]
        other = min((e.step for e in fitting if e.layout.zero != 3), default=float("inf"))
        ok = choice.best.layout.zero != 3 or choice.best.step <= other
        print(f"{gpus:5d} GPUs: {choice.best.layout.label()}, step {choice.best.step:.1f} s (best without ZeRO-3 "
              f"{other:.1f} s) {'ok' if ok else 'ZERO-3 PICKED BUT SLOWER'} [{time.perf_counter() - t0:.0f} s]",
              flush=True)


if __name__ == "__main__":
    main()

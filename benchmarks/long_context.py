"""Long-sequence training with and without context parallelism: predicted against published TFLOP/s per GPU.

    python benchmarks/long_context.py [--tables 1,2]

The rows are NVIDIA NeMo's long-sequence table (NVIDIA/NeMo,
``docs/source/performance/performance_long_sequence.md`` at commit
9421f21af3bc554cd5656caac4dff863b20e8c65, vendored below): Llama 2 7B in FP8 on
DGX H100 from 4K to 1M tokens a sequence, 4M tokens a step, one GPU per 1K
tokens, with context parallelism at the layout the table gives (tensor,
pipeline, data, context) and without it at the best layout that fits (the
table's words; the planner chooses it with ``context=1``). The same file's
Llama 3 8B FP8 table on DGX B200 is printed as a second source. Each row is
priced by the cluster planner (:mod:`mapper.cluster`, context parallelism in
:mod:`mapper.cluster.context`) with the distributed optimizer (ZeRO 1), f32
main gradients, sequence parallelism with tensor parallelism, micro-batch 1,
recomputation left to the planner. TFLOP/s are NVIDIA's model FLOPs
(:mod:`mapper.cluster.flops`: the whole score matrix, no causal saving), as the
table counts them. Nothing is fitted to these rows. A third row for each sequence
length (CP column ``a``) is what ``--parallel auto`` picks on the row's GPUs with
every key left to it (context degree and kind, micro-batch, ZeRO and
recomputation included): its layout is printed, its TFLOP/s beside the others.

Two predictions are printed for the H100 table: the cost model's own rates (fused attention's
forward at 60 % of the 16-bit tensor peak and its backward at 0.80 of that, 0.51 forward plus
backward, which cuDNN 9.1's causal attention on an H200 in 2024 reached within 0.97-1.08:
docs/cost_model.md, ``python benchmarks/attention_rates.py``) and attention's forward at
FlashAttention-2's utilisation of an H100, 35 % (:data:`FA2_H100`; Shah et al., "FlashAttention-3",
arXiv 2407.08608, abstract), its backward at the same share of that (0.30 forward plus backward,
as FlashAttention-2 measured on an H200 in 2024: 0.27-0.33). Neither is fitted to these rows; the
second is a cited kernel rate, shown to say how much of the gap is attention's rate: the
container's Transformer Engine (the commit NeMo 24.03's Dockerfile pins) runs cuDNN's fused
attention on an H100 with context parallelism, and the rate these runs imply (about 0.32 of the
peak at 1M tokens) is below every published cuDNN measurement of that year. The B200 table has
only the first (its half-length fitted on cuDNN on a B200, docs/cost_model.md).

The B200 table's "# of GPUs"
column repeats the sequence column at that commit; the GPUs priced are its
layout's, TP x PP x DP x CP (2 to 256, as an earlier revision of the same
table lists them); the H100 table's agree with its layouts.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from mapper.cluster.profile import _cut
from mapper.cluster.search import plan_cluster
from mapper.costing.efficiency import ATTENTION_BACKWARD_SHARE, EFF_COMPUTE
from mapper.costing.fusion import fuse_for
from mapper.costing.precision import with_precision
from mapper.errors import OptionsError
from mapper.frontend.load import load_graph
from mapper.frontend.sources import ModelFile
from mapper.parallel.layout import LayoutSpec
from mapper.platform.cluster import with_nodes
from mapper.platform.devices import Platform
from mapper.platform.loader import load_platform

SOURCE = ("https://github.com/NVIDIA/NeMo/blob/9421f21af3bc554cd5656caac4dff863b20e8c65/"
          "docs/source/performance/performance_long_sequence.md")
#: Llama 2 7B (Touvron et al., arXiv 2307.09288: 32 layers, width 4,096, 32 heads, FFN 11,008, vocabulary 32,000).
LLAMA2_7B = {"LAYERS": 32, "HIDDEN": 4096, "HEADS": 32, "KV_HEADS": 32, "FFN": 11008, "VOCAB": 32000}
#: Llama 3 8B (examples/llama.tg's defaults).
LLAMA3_8B = {"LAYERS": 32, "HIDDEN": 4096, "HEADS": 32, "KV_HEADS": 8, "FFN": 14336, "VOCAB": 128256}
# (sequence K tokens, global batch, published TFLOP/s without CP (None: none ran), TP, PP, DP, CP,
#  published TFLOP/s with CP); the GPUs are TP x PP x DP x CP
H100_LLAMA2_7B = [
    (4, 1024, 768, 1, 1, 4, 1, 768),
    (8, 512, 730, 1, 2, 4, 1, 730),
    (16, 256, 660, 2, 1, 8, 1, 660),
    (32, 128, 595, 2, 1, 8, 2, 610),
    (64, 64, 534, 4, 1, 8, 2, 574),
    (128, 32, 424, 4, 1, 8, 4, 555),
    (256, 16, 392, 4, 1, 8, 8, 549),
    (512, 8, 104, 8, 1, 4, 16, 549),
    (1024, 4, 26.5, 8, 1, 4, 32, 536),
]
B200_LLAMA3_8B = [
    (8, 512, 1671, 1, 1, 2, 1, 1671),
    (16, 256, 1717, 1, 1, 4, 1, 1717),
    (32, 128, 1549, 1, 1, 4, 2, 1624),
    (64, 64, 1481, 1, 1, 4, 4, 1600),
    (128, 32, 1438, 2, 1, 4, 4, 1588),
    (256, 16, 1162, 4, 1, 4, 4, 1590),
    (512, 8, 607, 4, 1, 4, 8, 1619),
    (1024, 4, None, 4, 1, 4, 16, 1608),
]
#: FlashAttention-2's share of an H100's 16-bit tensor peak (Shah et al., arXiv 2407.08608, abstract: "only 35%").
FA2_H100 = 0.35
#: (title, model, cluster platform, its node's platform, GPUs per node, rows, a cited attention efficiency or None)
TABLES = [("Llama 2 7B FP8, DGX H100 (NeMo 24.03.01)", LLAMA2_7B, "dgx-h100-superpod", "dgx-h100", 8, H100_LLAMA2_7B,
           FA2_H100),
          ("Llama 3 8B FP8, DGX B200 (NeMo 25.04)", LLAMA3_8B, "dgx-b200-superpod", "dgx-b200", 8, B200_LLAMA3_8B,
           None)]


def machine(cluster: str, node: str, per_node: int, gpus: int, attention: float | None = None) -> Platform:
    """The cluster with ``gpus / per_node`` nodes, or for fewer GPUs than a node that many of one
    node's GPUs (the table's 4-GPU row); ``attention``: its GPUs' attention efficiency instead of the
    cost model's."""
    if gpus >= per_node:
        plat = with_nodes(load_platform(cluster), gpus // per_node)
    else:
        one = load_platform(node)
        plat = _cut(one, tuple(d.name for d in one.devices if d.kind == "gpu")[:gpus])
    if attention is None:
        return plat
    return replace(plat, devices=tuple(replace(d, efficiency=(*d.efficiency, ("attention", attention)))
                                       if d.kind == "gpu" else d for d in plat.devices))


def price(model: dict[str, int], plat: Platform, seq: int, batch: int,
          keys: dict[str, int] | None) -> tuple[float, str]:
    """Predicted model TFLOP/s per GPU of one row on ``plat`` (0 when nothing fits), and the layout kept;
    ``keys`` None: ``--parallel auto`` (every key chosen, context and its degree included)."""
    params = {**model, "SEQ": seq, "BATCH": batch}
    graph = with_precision(load_graph(ModelFile("examples/llama.tg", params=tuple(params.items()))), "fp8")
    given = LayoutSpec(**{"micro_batch": 1, "zero": 1, **(keys or {})}) if keys is not None else LayoutSpec()
    if keys and "tensor" in keys:
        given = LayoutSpec(**{**given.fixed(), "sequence": keys["tensor"] > 1})
    try:
        choice = plan_cluster(graph, plat, given, "adam", lambda g: fuse_for(g, plat), precision="fp8")
    except OptionsError as err:
        return 0.0, err.message
    if not choice.best.fits:
        return 0.0, f"does not fit: {choice.best.layout.label()}"
    return choice.tflops_per_gpu(), choice.best.layout.label()


def _ratio(pred: float, published: float | None) -> float | None:
    return pred / published if published and pred else None


def _shown(r: float | None) -> str:
    return f"{r:.2f}" if r is not None else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", default="", help="comma-separated table numbers (1-based); all by default")
    args = ap.parse_args()
    pick = {int(x) for x in args.tables.split(",") if x.strip()}
    print(f"source: {SOURCE}")
    b200 = next(d for d in load_platform("dgx-b200").devices if d.kind == "gpu")
    print(f"attention: forward {EFF_COMPUTE['gpu']['attention']:.2f} of the 16-bit peak (cited); backward "
          f"{ATTENTION_BACKWARD_SHARE['gpu']:.2f} of that and the B200 causal half-length "
          f"{dict(b200.half_length)['attention.causal']:,.0f} (fitted on cuDNN on a B200: "
          "python benchmarks/attention_rates.py)")
    for n, (title, model, cluster, node, per_node, rows, attention) in enumerate(TABLES, 1):
        if pick and n not in pick:
            continue
        alt = f"{'att ' + str(int(attention * 100)) + '%':>8} {'ratio':>6} " if attention else ""
        print(f"\n{title}\n{'seq':>5} {'GPUs':>5} {'CP':>3} {'pub':>7} {'pred':>7} {'ratio':>6} {alt}"
              f"{'secs':>5}  layout")
        ratios: dict[tuple[str, bool], list[float]] = {}
        for k, batch, without, tp, pp, dp, cp, with_cp in rows:
            gpus = tp * pp * dp * cp
            runs = [("with CP", {"tensor": tp, "pipeline": pp, "data": dp, "context": cp}, with_cp)]
            if cp > 1:
                runs.append(("without CP", {"context": 1}, without))
            runs.append(("auto", None, None))
            for kind, keys, published in runs:
                start = time.perf_counter()
                pred, label = price(model, machine(cluster, node, per_node, gpus), k * 1024, batch, keys)
                r = _ratio(pred, published)
                ratios.setdefault((kind, False), []).extend([r] if r is not None else [])
                extra = ""
                if attention:
                    pred2, label2 = price(model, machine(cluster, node, per_node, gpus, attention), k * 1024, batch,
                                          keys)
                    r2 = _ratio(pred2, published)
                    ratios.setdefault((kind, True), []).extend([r2] if r2 is not None else [])
                    extra = f"{pred2:>8,.1f} {_shown(r2):>6} "
                    label += "" if label2 == label else f" (at {attention:.0%}: {label2})"
                pub = f"{published:>7,}" if published is not None else f"{'-':>7}"
                shown = keys.get("context", 1) if keys is not None else "a"
                print(f"{k:>4}K {gpus:>5} {shown:>3} {pub} {pred:>7,.1f} {_shown(r):>6} {extra}"
                      f"{time.perf_counter() - start:>5.1f}  {label}", flush=True)
        for (kind, alt_rate), rs in ratios.items():
            if rs:
                rate = f"attention at {attention:.0%}" if alt_rate else "the cost model's rates"
                print(f"{kind}, {rate}: ratio median {statistics.median(rs):.2f}, range {min(rs):.2f}-{max(rs):.2f}, "
                      f"within 0.8-1.25: {sum(0.8 <= r <= 1.25 for r in rs)}/{len(rs)}")


if __name__ == "__main__":
    main()

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

Each table is priced with the attention kernel its release ran (``--parallel ...,attn=NAME``,
:mod:`mapper.platform.kernels`), printed with the evidence (:data:`TABLES`). The H100 table is
NeMo 24.03.01's: its launcher (NVIDIA/NeMo-Framework-Launcher, tag 24.03.01,
``launcher_scripts/conf/config.yaml``) sets ``NVTE_FUSED_ATTN: 0`` ("Disable cudnn FA until we've
tested it more"; still set at 24.05 and 24.07, dropped in August 2024) and its
``conf/training/llama/llama2_7b.yaml`` ``use_flash_attention: true``, so Transformer Engine (the
commit NeMo's 24.03 Dockerfile pins, da30634, between v1.3 and v1.4) runs flash-attn 2, whose
ring implementation it also uses for context parallelism; without the variable it would have picked
cuDNN's fused attention on sm90 ("Select FusedAttention on sm90", ``attention.py``). So the rows
run ``attn=fa2``: FlashAttention-2's Hopper rate (forward 0.40 x s / (s + 540) of the 16-bit peak,
backward 0.80 of that), fitted on its own H100 sweep and checked on its H200 runs of 2024 and on
FlashAttention-3's "35 %" (``python benchmarks/attention_rates.py``, fit 5), nothing on these rows.
The platform's default kernel (cuDNN's fused attention, forward 0.60 x s / (s + 270), which
cuDNN 9.1 reached on an H200 in 2024 within 0.95-1.01) is printed beside it, as what the same
layouts give on today's default stack. The B200 table (NeMo 25.04; the launcher stopped disabling
cuDNN's attention in 2024) runs the platform's default, cuDNN (half-length fitted on cuDNN on a
B200, docs/cost_model.md).

Without CP the table gives neither layouts nor batch ("we use the most performant model- and
data-parallel configurations without CP given the memory capacity constraint"); the rows assume the
CP rows' batch (4M tokens a step) and GPUs. Beside the planner's pick (``context=1``, its tensor group
inside a node) two more rows (:func:`without_cp`): ``1b``, the bound under the model, the best of that
pick and the planner's layouts with a tensor group of 16 or 32 GPUs over nodes (NVIDIA's own baselines
without CP: TP8CP1, TP16CP1 and TP32CP1 in Megatron-LM's context-parallel guide, Figure 2, where
TP8CP1 is full recomputation, "about 30 percent" overhead); and ``1r``, full recomputation with the
planner's tensor group or one of 16 GPUs, the layout the published figures imply, printed as an
inference from these rows and not as a prediction. Why (:func:`busy_tensor`): a step of ``B``
sequences keeps at most ``B x tensor`` GPUs busy at once (a pipeline runs one sequence's stages one
after another), none faster than the same row's rate with CP, so ``tensor >= published x GPUs / (B x
rate with CP)``: from 256K to 1M on the H100s that is 11.4-12.7, a sequence over more than one node
(or a batch above 4M tokens).

The B200 table's "# of GPUs"
column repeats the sequence column at that commit; the GPUs priced are its
layout's, TP x PP x DP x CP (2 to 256, as an earlier revision of the same
table lists them); the H100 table's agree with its layouts.
"""

from __future__ import annotations

import argparse
import statistics
import time

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
#: Tensor groups over nodes of the bound without CP (1b) and of the inferred full-recomputation rows
#: (1r), beside the planner's own inside a node: :func:`without_cp`.
BOUND_TENSOR = (16, 32)
RECOMPUTE_TENSOR = (16,)
H100_WHY = ("NeMo-Framework-Launcher 24.03.01 sets NVTE_FUSED_ATTN=0 and use_flash_attention: true, so Transformer "
             "Engine (da30634) runs flash-attn 2, its CP ring included")
B200_WHY = "NeMo 25.04 leaves Transformer Engine's choice: cuDNN fused attention"
#: (title, model, cluster platform, its node's platform, GPUs per node, rows, the attention kernel the release ran
#: (attn=), why, the kernel printed beside it or None)
TABLES = [("Llama 2 7B FP8, DGX H100 (NeMo 24.03.01)", LLAMA2_7B, "dgx-h100-superpod", "dgx-h100", 8, H100_LLAMA2_7B,
           "fa2", H100_WHY, "cudnn"),
          ("Llama 3 8B FP8, DGX B200 (NeMo 25.04)", LLAMA3_8B, "dgx-b200-superpod", "dgx-b200", 8, B200_LLAMA3_8B,
           "cudnn", B200_WHY, None)]


def machine(cluster: str, node: str, per_node: int, gpus: int) -> Platform:
    """The cluster with ``gpus / per_node`` nodes, or for fewer GPUs than a node that many of one
    node's GPUs (the table's 4-GPU row)."""
    if gpus >= per_node:
        return with_nodes(load_platform(cluster), gpus // per_node)
    one = load_platform(node)
    return _cut(one, tuple(d.name for d in one.devices if d.kind == "gpu")[:gpus])


def price(model: dict[str, int], plat: Platform, seq: int, batch: int,
          keys: dict[str, int] | None, attn: str) -> tuple[float, str]:
    """Predicted model TFLOP/s per GPU of one row on ``plat`` (0 when nothing fits), and the layout kept;
    ``keys`` None: ``--parallel auto`` (every key chosen, context and its degree included); ``attn``: the
    attention kernel (``--parallel ...,attn=``; "": the platform's default)."""
    params = {**model, "SEQ": seq, "BATCH": batch}
    graph = with_precision(load_graph(ModelFile("examples/llama.tg", params=tuple(params.items()))), "fp8")
    given = LayoutSpec(**{"micro_batch": 1, "zero": 1, **(keys or {})}, attn=attn or None) if keys is not None \
        else LayoutSpec(attn=attn or None)
    if keys and "tensor" in keys:
        given = LayoutSpec(**{**given.fixed(), "sequence": keys["tensor"] > 1})
    try:
        choice = plan_cluster(graph, plat, given, "adam", lambda g: fuse_for(g, plat), precision="fp8")
    except OptionsError as err:
        return 0.0, err.message
    if not choice.best.fits:
        return 0.0, f"does not fit: {choice.best.layout.label()}"
    return choice.tflops_per_gpu(), choice.best.layout.label()


def without_cp(model: dict[str, int], plat: Platform, gpus: int, seq: int, batch: int, attn: str,
               kind: str) -> tuple[float, str]:
    """The best of the layouts without CP that ``kind`` names on ``plat`` (``gpus`` GPUs) and its label
    (0 when none fits): "bound", the planner's (tensor inside a node) or a tensor group of
    :data:`BOUND_TENSOR` GPUs over nodes, the rest the planner's; "recompute", full recomputation
    with the planner's tensor group or one of :data:`RECOMPUTE_TENSOR` GPUs."""
    degrees, extra = (BOUND_TENSOR, {}) if kind == "bound" else (RECOMPUTE_TENSOR, {"recompute": "full"})
    priced = [price(model, plat, seq, batch, {"context": 1, **({"tensor": t} if t else {}), **extra}, attn)
              for t in (0, *degrees) if gpus % (t or 1) == 0]
    return max(priced, key=lambda x: x[0])


def busy_tensor(published: float, gpus: int, batch: int, with_cp: float) -> float:
    """The tensor group a run without CP needs at least to reach ``published`` TFLOP/s per GPU on
    ``gpus`` GPUs with ``batch`` sequences a step, if no busy GPU outpaces the rate ``with_cp`` of the
    same row with CP: at most ``batch x tensor`` GPUs are busy at once (a pipeline runs one sequence's
    stages one after another)."""
    return published * gpus / (batch * with_cp)


def _ratio(pred: float, published: float | None) -> float | None:
    return pred / published if published and pred else None


def _shown(r: float | None) -> str:
    return f"{r:.2f}" if r is not None else "-"


#: The CP column of the rows without CP beyond the planner's pick, and their summary lines' notes.
SHOWN = {"bound": "1b", "recompute": "1r"}
NOTES = {"bound": " [1b: the best under the model, tensor up to 32 over nodes]",
         "recompute": " [1r: full recomputation, tensor up to 16: inferred from these rows, not a prediction]"}


def _priced(model: dict[str, int], plat: Platform, gpus: int, seq: int, batch: int, keys: dict | None,
            attn: str) -> tuple[float, str]:
    """:func:`price`, or :func:`without_cp` for the rows that name a kind of layout without CP."""
    if keys is not None and "without" in keys:
        return without_cp(model, plat, gpus, seq, batch, attn, keys["without"])
    return price(model, plat, seq, batch, keys, attn)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", default="", help="comma-separated table numbers (1-based); all by default")
    args = ap.parse_args()
    pick = {int(x) for x in args.tables.split(",") if x.strip()}
    print(f"source: {SOURCE}")
    for name in ("dgx-h100", "dgx-b200"):
        gpu = next(d for d in load_platform(name).devices if d.kind == "gpu")
        kernels = [(gpu.kernel or "default", gpu.efficiency, gpu.half_length), *gpu.kernels]
        print(f"{name} attention kernels (attn=): " + "; ".join(
            f"{k} forward {dict(e).get('attention', EFF_COMPUTE['gpu']['attention']):.2f} x s / "
            f"(s + {dict(h)['attention.causal']:,.0f})" for k, e, h in kernels)
              + f", backward {ATTENTION_BACKWARD_SHARE['gpu']:.2f} of the forward (benchmarks/attention_rates.py)")
    for n, (title, model, cluster, node, per_node, rows, attn, why, other) in enumerate(TABLES, 1):
        if pick and n not in pick:
            continue
        print(f"\n{title}: every row runs attn={attn or 'the platform default'} ({why})")
        alt = f"{other:>8} {'ratio':>6} " if other else ""
        print(f"{'seq':>5} {'GPUs':>5} {'CP':>3} {'pub':>7} {attn or 'pred':>7} {'ratio':>6} {alt}{'secs':>5}  layout")
        ratios: dict[tuple[str, str], list[float]] = {}
        picks: dict[str, int] = {}  # auto's context parallelism by kind
        for k, batch, without, tp, pp, dp, cp, with_cp in rows:
            gpus = tp * pp * dp * cp
            runs = [("with CP", {"tensor": tp, "pipeline": pp, "data": dp, "context": cp}, with_cp)]
            if cp > 1:
                runs.append(("without CP", {"context": 1}, without))
                runs += [(kind, {"context": 1, "without": kind}, without) for kind in ("bound", "recompute")]
            runs.append(("auto", None, None))
            for kind, keys, published in runs:
                start = time.perf_counter()
                plat = machine(cluster, node, per_node, gpus)
                pred, label = _priced(model, plat, gpus, k * 1024, batch, keys, attn)
                r = _ratio(pred, published)
                ratios.setdefault((kind, attn), []).extend([r] if r is not None else [])
                extra = ""
                if other:
                    pred2, label2 = _priced(model, plat, gpus, k * 1024, batch, keys, other)
                    r2 = _ratio(pred2, published)
                    ratios.setdefault((kind, other), []).extend([r2] if r2 is not None else [])
                    extra = f"{pred2:>8,.1f} {_shown(r2):>6} "
                    label += "" if label2 == label else f" (attn={other}: {label2})"
                if keys is None:  # the label names the kind unless it is the ring
                    how = next((x for x in ("allgather", "a2a") if f"({x})" in label),
                               "a2a+p2p" if " + p2p " in label.split(" (attn=")[0] else "ring")
                    how = how if " x context " in label else "none"
                    picks[how] = picks.get(how, 0) + 1
                pub = f"{published:>7,}" if published is not None else f"{'-':>7}"
                shown = "a" if keys is None else SHOWN.get(str(keys.get("without")), keys.get("context", 1))
                print(f"{k:>4}K {gpus:>5} {shown:>3} {pub} {pred:>7,.1f} {_shown(r):>6} {extra}"
                      f"{time.perf_counter() - start:>5.1f}  {label}", flush=True)
            if cp > 1 and without and batch * per_node < gpus:  # a node a sequence would leave GPUs idle
                need = busy_tensor(without, gpus, batch, with_cp)
                print(f"{'':>16}published without CP needs tensor >= {need:.1f} at {batch} sequences a step "
                      f"({without} x {gpus} GPUs / ({batch} x {with_cp} with CP)): "
                      f"{'more than' if need > per_node else 'within'} a node's {per_node}")
        print("auto picks: " + ", ".join(f"{k} {picks[k]}" for k in ("none", "ring", "allgather", "a2a", "a2a+p2p")
                                         if k in picks)
              + f" of {sum(picks.values())} rows (context parallelism by kind; none: context 1)")
        for (kind, kernel), rs in ratios.items():
            if rs:
                note = " (the release's)" if kernel == attn else ""
                note += NOTES.get(kind, "")
                print(f"{kind}, attn={kernel or 'default'}{note}: ratio median {statistics.median(rs):.2f}, range "
                      f"{min(rs):.2f}-{max(rs):.2f}, within 0.8-1.25: {sum(0.8 <= r <= 1.25 for r in rs)}/{len(rs)}")


if __name__ == "__main__":
    main()

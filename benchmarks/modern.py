"""Today's LLM training on Hopper and Blackwell: predicted against published tokens/s per GPU.

    python benchmarks/modern.py [--rows N,...] [--overlap recipe|off]

The rows are NVIDIA's published training throughputs (NVIDIA-NeMo/Megatron-Bridge,
``docs/performance-summary.md`` and its archive), each priced with its published
layout by the cluster planner (:mod:`mapper.cluster`): the model from
``examples/llama.tg``, ``examples/moe.tg`` or ``examples/deepseek_v3.tg`` at the
released config, the GEMMs at ``--precision`` (FP8 on H100, MXFP8 on GB200), the
distributed optimizer (ZeRO 1) with a bf16 gradient buffer and FP8/MXFP8 parameters, as the
recipes set them (``grad=bf16``, ``fp8_param=on``: :func:`price`), sequence parallelism
with tensor parallelism, micro-batch 1 where the table gives none (the recipes'
default), the communication overlaps each recipe sets (``overlap=``, :mod:`mapper.cluster.overlap`;
``--overlap off`` prices them without), and the activation recomputation left to the planner (the fastest
that fits) unless the recipe names its modules. Where a recipe sets it, the
recompute modules (Megatron-Core's ``recompute_modules``) and the layers of the
first and last pipeline chunks are the recipe's (``recompute=``, ``first=``,
``last=``; each row cites its source below). Context parallelism (the Llama
3.1 405B H100 row's CP2) is priced as Megatron-Core's ring
(:mod:`mapper.cluster.context`). Nothing is fitted to these rows. Predictions
do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from mapper.cluster.search import plan_cluster
from mapper.costing.fusion import fuse_for
from mapper.costing.precision import with_precision
from mapper.frontend.load import load_graph
from mapper.frontend.sources import ModelFile
from mapper.parallel.layout import LayoutSpec
from mapper.platform.cluster import with_nodes
from mapper.platform.loader import load_platform

LLAMA3_70B = ("examples/llama.tg", {"LAYERS": 80, "HIDDEN": 8192, "HEADS": 64, "KV_HEADS": 8, "FFN": 28672,
                                    "VOCAB": 128256, "SEQ": 8192})
LLAMA31_405B = ("examples/llama.tg", {"LAYERS": 126, "HIDDEN": 16384, "HEADS": 128, "KV_HEADS": 8, "FFN": 53248,
                                      "VOCAB": 128256, "SEQ": 8192})
QWEN3_30B = ("examples/moe.tg", {"SEQ": 4096})  # its defaults are Qwen3-30B-A3B
QWEN3_235B = ("examples/moe.tg", {"LAYERS": 94, "HIDDEN": 4096, "HEADS": 64, "EXPERT_FFN": 1536, "SEQ": 4096})
DEEPSEEK_V3 = ("examples/deepseek_v3.tg", {"SEQ": 4096})  # its defaults are DeepSeek-V3 671B

#: Megatron-Bridge's Llama 3.1 405B recipe (``recipes/llama/llama3.py``, ``llama31_405b_pretrain_config``)
#: sets ``account_for_embedding_in_pipeline_split`` and ``account_for_loss_in_pipeline_split``: with
#: the embedding and the loss counted as a layer each, the first and last chunks hold one layer less.
LLAMA31_405B_ENDS = {"first": 1, "last": 1}
#: Megatron-Bridge's DeepSeek-V3 GB200 MXFP8 recipe (``recipes/deepseek/deepseek_v3_perf.py``,
#: ``deepseek_v3_pretrain_256gpu_gb200_fp8mx_config``; ``scripts/performance/configs/deepseek/``
#: ``deepseek_workload_base_configs.py``, ``DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX``):
#: ``recompute_modules = ["mla_up_proj"]``, and the pipeline layout of ``deepseek_v3.py`` for PP 4,
#: VP 4: the embedding and 4 layers, 14 chunks of 4, then 1 layer with the loss.
DEEPSEEK_V3_GB200 = {"recompute": "mla_up_proj", "first": 4, "last": 1}

# (name, model, platform, GPUs per node, GPUs, precision, global batch, layout keys, published tokens/s/GPU);
# ``overlap`` as each row's Megatron-Bridge perf recipe sets it (benchmarks/recipes.py, A2A_RECIPES and
# TP_RECIPES: llama/{h100,gb200}/llama3{,1}.py give a tp_comm_overlap_cfg; qwen/h100/qwen3_moe.py sets
# moe_a2a_overlap for 235B and not for 30B fp8cs; the GB200 MXFP8 MoE recipes turn on
# overlap_moe_expert_parallel_comm through qwen/common.py and deepseek/common.py); ``p2p`` is added where
# VP > 1 (price: Megatron-Bridge's CommOverlapConfig sets overlap_p2p_comm with an interleaved pipeline)
ROWS = [
    ("Llama 3 70B", LLAMA3_70B, "dgx-h100-superpod", 8, 64, "fp8", 256,
     {"tensor": 4, "pipeline": 8, "interleave": 5, "overlap": "tp"}, 1664),
    ("Llama 3.1 405B", LLAMA31_405B, "dgx-h100-superpod", 8, 1024, "fp8", 1536,
     {"tensor": 8, "pipeline": 8, "interleave": 8, "context": 2, **LLAMA31_405B_ENDS, "overlap": "tp"}, 328),
    ("Qwen3-30B-A3B", QWEN3_30B, "dgx-h100-superpod", 8, 16, "fp8", 1024, {"tensor": 1, "pipeline": 1, "expert": 16},
     8960),
    ("Qwen3-235B-A22B", QWEN3_235B, "dgx-h100-superpod", 8, 256, "fp8", 8192,
     {"tensor": 2, "pipeline": 8, "interleave": 4, "expert": 32, "overlap": "a2a"}, 1712),
    ("Llama 3.1 405B", LLAMA31_405B, "gb200-nvl72", 4, 256, "fp8", 1536,
     {"tensor": 4, "pipeline": 16, "interleave": 4, **LLAMA31_405B_ENDS, "overlap": "tp"}, 843),
    ("DeepSeek-V3", DEEPSEEK_V3, "gb200-nvl72", 4, 256, "mxfp8", 4096,
     {"tensor": 1, "pipeline": 4, "interleave": 4, "expert": 64, **DEEPSEEK_V3_GB200, "overlap": "a2a"}, 4912),
    ("Qwen3-30B-A3B", QWEN3_30B, "gb200-nvl72", 4, 8, "mxfp8", 512,
     {"tensor": 1, "pipeline": 1, "expert": 8, "micro_batch": 4, "overlap": "a2a"}, 39936),
    ("Qwen3-235B-A22B", QWEN3_235B, "gb200-nvl72", 4, 256, "mxfp8", 8192,
     {"tensor": 1, "pipeline": 8, "interleave": 3, "expert": 32, "overlap": "a2a"}, 7280),
]


def price(model: tuple[str, dict[str, int]], platform: str, per_node: int, gpus: int, precision: str, batch: int,
          keys: dict[str, Any], overlaps: bool = True) -> tuple[float, str, float, bool]:
    """Predicted tokens/s per GPU, the layout kept, its peak memory (GiB) and whether it fits, of one row;
    ``overlaps``: with the communication overlaps its recipe sets."""
    path, params = model
    graph = with_precision(load_graph(ModelFile(path, params=tuple({**params, "BATCH": batch}.items()))), precision)
    plat = with_nodes(load_platform(platform), gpus // per_node)
    if overlaps and keys.get("interleave", 1) > 1:  # Megatron-Bridge sets overlap_p2p_comm with VP > 1
        keys = {**keys, "overlap": "+".join(x for x in (keys.get("overlap", "none"), "p2p") if x != "none")}
    keys = {k: v for k, v in keys.items() if k != "overlap" or overlaps}
    # FP8 and MXFP8 parameters, all-gathered so, as every FP8 and MXFP8 preset of Megatron-Bridge sets them
    # (src/megatron/bridge/training/mixed_precision.py: fp8_param_gather = True; mapper.cluster.lowparam), and a
    # bf16 gradient buffer, as its performance configs set it (perf_recipes/_common.py, _benchmark_common:
    # cfg.ddp.grad_reduce_in_fp32 = False; scripts/performance/configs/*_llm_pretrain since v0.1.0)
    given = LayoutSpec(**{"micro_batch": 1, "zero": 1, "context": 1, **keys, "sequence": keys.get("tensor", 1) > 1,
                          "fp8_param": "on", "grad": "bf16"})
    choice = plan_cluster(graph, plat, given, "adam", lambda g: fuse_for(g, plat), precision=precision)
    return choice.tokens_per_s / choice.gpus, choice.best.layout.label(), choice.best.peak / 2**30, choice.best.fits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="", help="comma-separated row numbers (1-based) to run; all by default")
    ap.add_argument("--overlap", choices=("recipe", "off"), default="recipe",
                    help="communication overlaps as each row's recipe sets them (default), or none")
    args = ap.parse_args()
    pick = {int(x) for x in args.rows.split(",") if x.strip()}
    print(f"{'#':>2} {'model':<16} {'platform':<18} {'GPUs':>5} {'prec':<6} {'pred':>8} {'pub':>7} {'ratio':>6} "
          f"{'GiB':>6} {'secs':>5}  layout")
    ratios = []
    for i, (name, model, platform, per_node, gpus, prec, batch, keys, published) in enumerate(ROWS, 1):
        if pick and i not in pick:
            continue
        start = time.perf_counter()
        pred, label, peak, fits = price(model, platform, per_node, gpus, prec, batch, keys, args.overlap == "recipe")
        ratios.append(pred / published)
        print(f"{i:>2} {name:<16} {platform:<18} {gpus:>5} {prec:<6} {pred:>8,.0f} {published:>7,} "
              f"{pred / published:>6.2f} {peak:>6.1f} {time.perf_counter() - start:>5.1f}  {label}"
              + ("" if fits else "  (does not fit)"), flush=True)
    if ratios:
        inside = sum(0.8 <= r <= 1.25 for r in ratios)
        print(f"ratio predicted / published: median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-"
              f"{max(ratios):.2f}, within 0.8-1.25: {inside}/{len(ratios)}")


if __name__ == "__main__":
    main()

"""Published recipe runs we were not fitted on: predicted against published tokens/s per GPU.

    python benchmarks/recipes.py [--source mb,nemo,dgxc] [--system h100,b200,gb200] [--rows N,...]
                                 [--overlap recipe|off]

Every pre-training (and full fine-tuning) row of NVIDIA's performance summaries for the
platforms the planner has (DGX H100, DGX B200, GB200 NVL72) and the models it can write:
Megatron-Bridge's ``docs/performance-summary.md`` and ``docs/performance-summary-archive.md``
(releases 25.09 to 26.08), NeMo's ``docs/source/performance/performance_summary.md``
(release 24.07) and the NeMo user guide's summaries of 25.02 and 25.04, and NVIDIA's
DGX Cloud benchmarking recipes (``NVIDIA/dgxc-benchmarking``, tags v24.11.1, v25.04.01 and
v25.05.01), whose READMEs publish step times of BF16 and FP8 on identical layouts (tokens/s/GPU
here = sequence x global batch / step time / GPUs, their own formula). :data:`SOURCES` names
each with its address and commit. Each row is priced as ``benchmarks/modern.py`` prices its
rows: the model at its released config, the GEMMs at the row's precision (FP8 rows on H100
are per-tensor current scaling, ``fp8``; FP8-MX is ``mxfp8``), the distributed optimizer
(ZeRO 1; ZeRO 3 where the row says FSDP, as Megatron-FSDP, ``fsdp=megatron``: the recipes' FSDP is
``ddp.use_megatron_fsdp``, NVIDIA-NeMo/Megatron-Bridge ``scripts/performance/utils/helpers.py``,
``set_megatron_fsdp_overrides``; NeMo 2's performance scripts ran Megatron-Core's own FSDP, its
predecessor), sequence parallelism with tensor parallelism, the
row's TP, PP, VP, EP, micro- and global batch and sequence length, the weights' layout its
source ran (:func:`param_key`: FP8 parameters or 16-bit ones beside cached FP8 copies) and its gradient buffer
where the source says (:data:`BF16_GRADS`), the communication overlaps
its recipe sets (:func:`recipe_overlap`; ``--overlap off``: none), the recomputation left to
the planner, and the attention kernel the release ran (:data:`FA2_RELEASES`: NeMo's 24.07 launcher,
tag 24.07 of NVIDIA/NeMo-Framework-Launcher, ``launcher_scripts/conf/config.yaml``, sets
``NVTE_FUSED_ATTN: 0``, so Transformer Engine ran FlashAttention-2 on its H100 rows,
``attn=fa2``; every other row runs the platform's default, cuDNN's fused attention). Nothing is
fitted to these rows.

Not priced, and said so: rows with context parallelism (CP > 1) while the planner has no
``context`` key; GPT-OSS 120B (alternating sliding-window attention with attention sinks:
``examples/moe.tg`` has full attention only); DeepSeek-V3 rows with its multi-token
prediction module; rows on GB300 and B300 (no platform) and the hybrid Mamba models
(Nemotron 3, NemotronH) and LoRA rows are left out of :data:`ROWS` altogether.

MLPerf Training: its results publish time to train, which folds in evaluation and
convergence; here one GPT-3 175B submission (v4.0, 512 H100s) is compared by its per-step
throughput between evaluations, read from its log (:data:`SOURCES`). NVIDIA's larger GPT-3
submissions (10,752 and 11,616 H100s) exceed the platform's 1,024 nodes; Llama 2 70B LoRA
(frozen weights) is not expressible.

Models: Nemotron-4 15B and 340B (squared-ReLU MLP of width F, not gated) are written with
``examples/llama.tg`` at a SwiGLU width of 2F/3, which gives the same MLP parameters and FLOPs
(3 h 2F/3 = 2 h F); GPT-3 with ``examples/gpt.tg`` at FlashAttention (``FLASH = 1``, as
NeMo runs it); Mixtral 8x7B with ``examples/moe.tg``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from typing import Any

from mapper.cluster.search import plan_cluster
from mapper.costing.fusion import fuse_for
from mapper.costing.precision import with_precision
from mapper.errors import MapperError
from mapper.frontend.load import load_graph
from mapper.frontend.sources import ModelFile
from mapper.parallel import layout as layout_mod
from mapper.parallel.layout import LayoutSpec
from mapper.platform.cluster import with_nodes
from mapper.platform.loader import load_platform

MB = "https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/067f987df03b8355b03192d88d70f1709fedf51a/docs/"
DGXC = "https://github.com/NVIDIA/dgxc-benchmarking/blob/"
SOURCES = {
    "mb": "Megatron-Bridge performance summary and archive, releases 25.09-26.08: " + MB
          + "performance-summary.md and performance-summary-archive.md (commit 067f987d)",
    "nemo": "NeMo 24.07 performance summary: https://github.com/NVIDIA/NeMo/blob/"
            "9c5c5e9709407d3511005fc966e45374998bb478/docs/source/performance/performance_summary.md",
    "nemo-ug": "NeMo user guide performance summary, 25.02 (B200, H100) and 25.04 (GB200): "
               "https://docs.nvidia.com/nemo-framework/user-guide/latest/performance/performance_summary.html "
               "and archive/25.04-performance-summary.html",
    "dgxc": "DGX Cloud benchmarking recipes, READMEs' step times: " + DGXC
            + "v24.11.1/{nemo_megatron,nemotron,llama3.1}/README_*.md (35a9aecc), v25.04.01/... (85380ffe), "
              "v25.05.01/{nemotron,llama3.1}/README.md (85d92846)",
    "mlperf": "MLPerf Training v4.0, NVIDIA closed division, GPT-3 175B on Eos, 64 DGX H100 (FP8, TP4 PP8 VP4, "
              "MBS 2, GBS 2,304, sequence 2,048): https://github.com/mlcommons/training_results_v4.0/blob/"
              "62f111b7690f163b269f32e4f93dcaaa13717c9c/NVIDIA/results/eos_n64_ngc24.04_nemo/gpt3/result_0.txt "
              "and .../benchmarks/gpt3/implementations/nemo/config_DGXH100_64x8x128x4x8_mbs2.sh; per-step "
              "throughput between evaluations (a block_start-block_stop interval is 11 steps: 119.86, 119.95, "
              "119.87 s for the first three), not time to train",
}

_L = "examples/llama.tg"
_G = "examples/gpt.tg"
_M = "examples/moe.tg"
#: model key -> (model file, params at the released config; SEQ comes from the row)
MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama3_8b": (_L, {}),  # llama.tg's defaults are Llama 3 8B
    "llama3_70b": (_L, {"LAYERS": 80, "HIDDEN": 8192, "HEADS": 64, "KV_HEADS": 8, "FFN": 28672}),
    "llama31_405b": (_L, {"LAYERS": 126, "HIDDEN": 16384, "HEADS": 128, "KV_HEADS": 8, "FFN": 53248}),
    "llama2_7b": (_L, {"LAYERS": 32, "HIDDEN": 4096, "HEADS": 32, "KV_HEADS": 32, "FFN": 11008, "VOCAB": 32000}),
    "llama2_13b": (_L, {"LAYERS": 40, "HIDDEN": 5120, "HEADS": 40, "KV_HEADS": 40, "FFN": 13824, "VOCAB": 32000}),
    "llama2_70b": (_L, {"LAYERS": 80, "HIDDEN": 8192, "HEADS": 64, "KV_HEADS": 8, "FFN": 28672, "VOCAB": 32000}),
    "nemotron4_15b": (_L, {"LAYERS": 32, "HIDDEN": 6144, "HEADS": 48, "KV_HEADS": 8, "FFN": 16384, "VOCAB": 256000}),
    "nemotron4_340b": (_L, {"LAYERS": 96, "HIDDEN": 18432, "HEADS": 96, "KV_HEADS": 8, "FFN": 49152,
                            "VOCAB": 256000}),
    "gpt3_5b": (_G, {"LAYERS": 24, "HIDDEN": 4096, "HEADS": 32, "FLASH": 1}),
    "gpt3_20b": (_G, {"LAYERS": 44, "HIDDEN": 6144, "HEADS": 48, "FLASH": 1}),
    "gpt3_175b": (_G, {"LAYERS": 96, "HIDDEN": 12288, "HEADS": 96, "FLASH": 1}),
    "mixtral_8x7b": (_M, {"LAYERS": 32, "HIDDEN": 4096, "HEADS": 32, "KV_HEADS": 8, "HEAD_DIM": 128, "EXPERTS": 8,
                          "TOPK": 2, "EXPERT_FFN": 14336, "VOCAB": 32000}),
    "qwen3_30b": (_M, {}),  # moe.tg's defaults are Qwen3-30B-A3B
    "qwen3_235b": (_M, {"LAYERS": 94, "HIDDEN": 4096, "HEADS": 64, "EXPERT_FFN": 1536}),
    "deepseek_v3": ("examples/deepseek_v3.tg", {}),  # its defaults are DeepSeek-V3 671B
}
#: Models the planner cannot write, with why.
UNWRITABLE = {"gpt_oss_120b": "sliding-window attention with sinks is not expressible"}
MOE = {"mixtral_8x7b", "qwen3_30b", "qwen3_235b", "deepseek_v3", "gpt_oss_120b"}
#: system -> (platform, GPUs per node)
SYSTEMS = {"h100": ("dgx-h100-superpod", 8), "b200": ("dgx-b200-superpod", 8), "gb200": ("gb200-nvl72", 4)}

# (source, release, task, model, system, GPUs, precision, GBS, MBS, seq, FSDP, TP, PP, CP, VP, EP,
#  published tokens/s/GPU, published model TFLOP/s/GPU (0: none)[, note])
ROWS: list[tuple[Any, ...]] = [
    ("mb","26.08","pretrain","deepseek_v3","gb200",256,"mxfp8",4096,1,4096,0,1,4,1,4,64,4912,1276),
    ("mb","26.08","pretrain","gpt_oss_120b","gb200",64,"mxfp8",1280,4,4096,0,1,1,1,1,64,28672,934),
    ("mb","26.08","pretrain","qwen3_30b","gb200",8,"mxfp8",512,4,4096,0,1,1,1,1,8,39936,923),
    ("mb","26.08","pretrain","qwen3_235b","gb200",256,"mxfp8",8192,1,4096,0,1,8,1,3,32,7280,1077),
    ("mb","26.06.01","pretrain","deepseek_v3","gb200",256,"mxfp8",4096,1,4096,0,1,4,1,4,64,4928,1280),
    ("mb","26.06.01","pretrain","gpt_oss_120b","gb200",64,"mxfp8",1280,4,4096,0,1,1,1,1,64,18304,597),
    ("mb","26.06.01","pretrain","qwen3_30b","gb200",8,"mxfp8",512,4,4096,0,1,1,1,1,8,40960,937),
    ("mb","26.06.01","pretrain","qwen3_235b","gb200",256,"mxfp8",8192,1,4096,0,1,8,1,3,32,7360,1089),
    ("mb","26.06","pretrain","llama31_405b","gb200",256,"fp8",1536,1,8192,0,4,16,1,4,1,843,2129),
    ("mb","26.06","pretrain","llama31_405b","gb200",256,"mxfp8",1536,1,8192,0,4,16,1,8,1,783,1976),
    ("mb","26.06","pretrain","llama31_405b","gb200",256,"nvfp4",1536,1,8192,0,4,16,1,8,1,1166,2944),
    ("mb","26.06","pretrain","llama31_405b","h100",1024,"fp8",1536,1,8192,0,8,8,2,8,1,326,822),
    ("mb","26.06","pretrain","deepseek_v3","gb200",256,"mxfp8",4096,1,4096,0,1,4,1,4,64,4969,1292),
    ("mb","26.06","pretrain","gpt_oss_120b","gb200",64,"mxfp8",1280,4,4096,0,1,1,1,1,64,28947,943),
    ("mb","26.06","pretrain","qwen3_30b","gb200",8,"mxfp8",512,4,4096,0,1,1,1,1,8,40706,936),
    ("mb","26.06","pretrain","qwen3_30b","h100",16,"fp8",1024,1,4096,0,1,1,1,1,16,8826,203),
    ("mb","26.06","pretrain","qwen3_235b","gb200",256,"mxfp8",8192,1,4096,0,1,8,1,3,32,7376,1092),
    ("mb","26.06","sft","llama3_70b","gb200",32,"fp8",32,1,4096,0,1,8,1,10,1,3864,1671),
    ("mb","26.06","sft","llama3_70b","gb200",32,"mxfp8",32,1,4096,0,1,8,1,10,1,3593,1553),
    ("mb","26.06","sft","llama3_70b","h100",32,"fp8",32,1,4096,0,4,4,1,5,1,1638,710),
    ("mb","26.04.01","pretrain","llama3_70b","gb200",64,"fp8",256,2,8192,1,1,1,1,1,1,4224,1892),
    ("mb","26.04.01","pretrain","llama3_70b","gb200",64,"mxfp8",256,1,8192,0,2,4,1,5,1,3712,1664),
    ("mb","26.04.01","pretrain","llama3_70b","gb200",64,"nvfp4",256,1,8192,0,2,4,1,5,1,4864,2202),
    ("mb","26.04.01","pretrain","llama3_70b","h100",64,"fp8",256,1,8192,0,4,8,1,5,1,1664,731),
    ("mb","26.04.01","pretrain","llama31_405b","gb200",256,"fp8",1536,1,8192,0,4,16,1,4,1,864,2144),
    ("mb","26.04.01","pretrain","llama31_405b","gb200",256,"mxfp8",1536,1,8192,0,4,16,1,8,1,800,1994),
    ("mb","26.04.01","pretrain","llama31_405b","gb200",256,"nvfp4",1536,1,8192,0,4,16,1,8,1,1184,2960),
    ("mb","26.04.01","pretrain","llama31_405b","h100",1024,"fp8",1536,1,8192,0,8,8,2,8,1,328,827),
    ("mb","26.04.01","pretrain","deepseek_v3","gb200",256,"mxfp8",4096,1,4096,0,1,4,1,4,64,4256,1106),
    ("mb","26.04.01","pretrain","deepseek_v3","b200",256,"mxfp8",4096,1,4096,0,1,8,1,2,32,3328,864),
    ("mb","26.04.01","pretrain","gpt_oss_120b","gb200",64,"bf16",1280,4,4096,0,1,1,1,1,64,16640,452),
    ("mb","26.04.01","pretrain","gpt_oss_120b","b200",64,"bf16",1280,4,4096,0,1,1,1,1,8,13568,369),
    ("mb","26.04.01","pretrain","gpt_oss_120b","h100",64,"bf16",1280,1,4096,0,1,4,1,1,8,5824,158),
    ("mb","26.04.01","pretrain","qwen3_30b","gb200",8,"mxfp8",512,4,4096,0,1,1,1,1,8,26112,599),
    ("mb","26.04.01","pretrain","qwen3_30b","b200",8,"mxfp8",512,4,4096,0,1,1,1,1,8,27136,619),
    ("mb","26.04.01","pretrain","qwen3_30b","h100",16,"fp8",1024,1,4096,0,1,1,1,1,16,8960,206),
    ("mb","26.04.01","pretrain","qwen3_235b","gb200",256,"mxfp8",8192,1,4096,0,1,8,1,3,32,5680,840),
    ("mb","26.04.01","pretrain","qwen3_235b","b200",256,"mxfp8",8192,1,4096,0,1,8,1,1,8,3776,560),
    ("mb","26.04.01","pretrain","qwen3_235b","h100",256,"fp8",8192,1,4096,0,2,8,1,4,32,1712,253),
    ("mb","26.04","pretrain","llama3_70b","gb200",64,"nvfp4",256,1,8192,0,2,4,1,5,1,4898,2201),
    ("mb","26.04","pretrain","llama3_70b","gb200",64,"mxfp8",256,1,8192,0,2,4,1,5,1,3828,1721),
    ("mb","26.04","pretrain","llama3_70b","gb200",64,"fp8",256,2,8192,1,1,1,1,1,1,4143,1861),
    ("mb","26.04","pretrain","llama3_70b","h100",64,"fp8",256,1,8192,0,4,8,1,5,1,1633,734),
    ("mb","26.04","pretrain","llama31_405b","gb200",256,"nvfp4",1536,1,8192,0,4,16,1,8,1,1136,2866),
    ("mb","26.04","pretrain","llama31_405b","gb200",256,"mxfp8",1536,1,8192,0,4,16,1,8,1,793,2002),
    ("mb","26.04","pretrain","llama31_405b","gb200",256,"fp8",1536,1,8192,0,4,16,1,4,1,842,2126),
    ("mb","26.04","pretrain","deepseek_v3","gb200",256,"mxfp8",4096,1,4096,0,1,4,1,4,64,4193,1090),
    ("mb","26.04","pretrain","deepseek_v3","b200",256,"mxfp8",4096,1,4096,0,1,16,1,1,8,2815,732),
    ("mb","26.04","pretrain","gpt_oss_120b","gb200",64,"bf16",1280,4,4096,0,1,1,1,1,64,15938,433),
    ("mb","26.04","pretrain","gpt_oss_120b","b200",64,"bf16",1280,4,4096,0,1,1,1,1,8,13045,355),
    ("mb","26.04","pretrain","gpt_oss_120b","h100",64,"bf16",1280,1,4096,0,1,4,1,1,8,5810,158),
    ("mb","26.04","pretrain","qwen3_30b","gb200",8,"mxfp8",512,4,4096,0,1,1,1,1,8,26032,599),
    ("mb","26.04","pretrain","qwen3_30b","b200",8,"mxfp8",512,4,4096,0,1,1,1,1,8,26859,618),
    ("mb","26.04","pretrain","qwen3_30b","h100",16,"fp8",1024,1,4096,0,1,1,1,1,16,8901,205),
    ("mb","26.04","pretrain","qwen3_235b","gb200",256,"mxfp8",8192,1,4096,0,1,8,1,3,32,5672,840),
    ("mb","26.04","pretrain","qwen3_235b","h100",256,"fp8",8192,1,4096,0,2,8,1,4,32,1686,250),
    ("mb","26.02.01","pretrain","llama3_70b","gb200",64,"nvfp4",256,1,8192,0,2,4,1,5,1,4557,2047),
    ("mb","26.02.01","pretrain","llama3_70b","gb200",64,"mxfp8",256,1,8192,0,2,4,1,5,1,3837,1724),
    ("mb","26.02.01","pretrain","llama3_70b","gb200",64,"fp8",256,2,8192,1,1,1,1,1,1,4357,1956),
    ("mb","26.02.01","pretrain","llama3_70b","h100",64,"fp8",256,1,8192,0,4,8,1,5,1,1639,736),
    ("mb","26.02.01","pretrain","llama31_405b","gb200",256,"nvfp4",1536,1,8192,0,4,16,1,4,1,1083,2734),
    ("mb","26.02.01","pretrain","llama31_405b","gb200",256,"mxfp8",1536,1,8192,0,4,16,1,8,1,775,1957),
    ("mb","26.02.01","pretrain","llama31_405b","gb200",256,"fp8",1536,1,8192,0,4,16,1,4,1,818,2063),
    ("mb","26.02.01","pretrain","deepseek_v3","gb200",256,"mxfp8",4096,1,4096,0,1,4,1,4,64,4021,1046),
    ("mb","26.02.01","pretrain","deepseek_v3","b200",256,"mxfp8",4096,1,4096,0,1,16,1,1,8,2790,725),
    ("mb","26.02.01","pretrain","gpt_oss_120b","gb200",64,"bf16",1280,4,4096,0,1,1,1,1,64,15754,428),
    ("mb","26.02.01","pretrain","gpt_oss_120b","b200",64,"bf16",1280,4,4096,0,1,1,1,1,8,13722,373),
    ("mb","26.02.01","pretrain","gpt_oss_120b","h100",64,"bf16",1280,1,4096,0,1,4,1,1,8,5984,163),
    ("mb","26.02.01","pretrain","qwen3_30b","gb200",8,"mxfp8",512,4,4096,0,1,1,1,1,8,26373,607),
    ("mb","26.02.01","pretrain","qwen3_30b","b200",8,"mxfp8",512,4,4096,0,1,1,1,1,8,26695,614),
    ("mb","26.02.01","pretrain","qwen3_30b","h100",16,"fp8",1024,1,4096,0,1,2,1,12,8,9058,208),
    ("mb","26.02.01","pretrain","qwen3_235b","gb200",256,"mxfp8",8192,1,4096,0,1,8,1,1,32,5530,819),
    ("mb","26.02.01","pretrain","qwen3_235b","h100",256,"fp8",8192,1,4096,0,2,8,1,4,32,1611,238),
    ("mb","26.02","pretrain","llama3_70b","gb200",64,"nvfp4",256,1,8192,0,2,4,1,5,1,4458,2004),
    ("mb","26.02","pretrain","llama3_70b","gb200",64,"mxfp8",256,1,8192,0,2,4,1,5,1,3613,1623),
    ("mb","26.02","pretrain","llama3_70b","gb200",64,"fp8",256,2,8192,1,1,1,1,1,1,4040,1815),
    ("mb","26.02","pretrain","llama3_70b","h100",64,"fp8",256,1,8192,0,4,8,1,5,1,1621,728),
    ("mb","26.02","pretrain","llama31_405b","gb200",256,"nvfp4",1536,1,8192,0,4,16,1,8,1,1076,2716),
    ("mb","26.02","pretrain","llama31_405b","gb200",256,"mxfp8",1536,1,8192,0,4,16,1,8,1,786,1983),
    ("mb","26.02","pretrain","llama31_405b","gb200",256,"fp8",1536,1,8192,0,4,16,1,4,1,793,2004),
    ("mb","26.02","pretrain","llama31_405b","h100",1024,"fp8",1536,1,8192,0,8,8,2,8,1,311,784),
    ("mb","26.02","pretrain","deepseek_v3","gb200",256,"mxfp8",4096,1,4096,0,1,4,1,4,64,3955,1028),
    ("mb","26.02","pretrain","deepseek_v3","b200",256,"mxfp8",4096,1,4096,0,1,16,1,1,8,2689,699),
    ("mb","26.02","pretrain","gpt_oss_120b","gb200",64,"bf16",1280,4,4096,0,1,1,1,1,64,15784,428),
    ("mb","26.02","pretrain","gpt_oss_120b","b200",64,"bf16",1280,4,4096,0,1,1,1,1,64,8047,219),
    ("mb","26.02","pretrain","gpt_oss_120b","h100",64,"bf16",1280,1,4096,0,1,4,1,1,8,5993,163),
    ("mb","26.02","pretrain","qwen3_30b","gb200",8,"mxfp8",512,4,4096,0,1,1,1,1,8,26084,600),
    ("mb","26.02","pretrain","qwen3_30b","b200",8,"mxfp8",512,1,4096,0,1,1,1,1,8,9691,223),
    ("mb","26.02","pretrain","qwen3_30b","h100",16,"fp8",1024,1,4096,0,1,2,1,12,8,5113,118),
    ("mb","26.02","pretrain","qwen3_235b","gb200",256,"mxfp8",8192,1,4096,0,1,8,1,1,32,5448,806),
    ("mb","26.02","pretrain","qwen3_235b","b200",256,"mxfp8",8192,1,4096,0,1,8,1,1,8,3805,563),
    ("mb","26.02","pretrain","qwen3_235b","h100",256,"fp8",8192,1,4096,0,2,8,1,4,32,1633,242),
    ("mb","25.11","pretrain","llama3_8b","gb200",8,"fp8",128,2,8192,0,1,1,1,1,1,31508,1622),
    ("mb","25.11","pretrain","llama3_8b","gb200",8,"mxfp8",128,2,8192,0,1,1,1,1,1,29789,1533),
    ("mb","25.11","pretrain","llama3_70b","gb200",64,"fp8",256,2,8192,1,1,1,1,1,1,4312,1937),
    ("mb","25.11","pretrain","llama31_405b","gb200",256,"fp8",1536,1,8192,0,4,16,1,4,1,813,2053),
    ("mb","25.11","pretrain","deepseek_v3","gb200",256,"bf16",4096,1,4096,0,1,4,1,4,64,3139,782,"w/o MTP"),
    ("mb","25.11","pretrain","deepseek_v3","gb200",256,"mxfp8",4096,1,4096,0,1,8,1,4,32,4018,1003,"w/o MTP"),
    ("mb","25.11","pretrain","gpt_oss_120b","gb200",64,"bf16",1280,1,8192,0,1,1,1,1,64,15876,488),
    ("mb","25.11","pretrain","qwen3_30b","gb200",8,"mxfp8",512,4,4096,0,1,1,1,1,8,23766,547),
    ("mb","25.11","pretrain","qwen3_235b","gb200",256,"bf16",8192,1,4096,0,1,8,1,3,32,4916,728),
    ("mb","25.11","pretrain","llama3_8b","b200",8,"fp8",128,2,8192,0,1,1,1,1,1,30624,1576),
    ("mb","25.11","pretrain","llama3_8b","b200",8,"mxfp8",128,2,8192,0,1,1,1,1,1,29521,1519),
    ("mb","25.11","pretrain","llama31_405b","b200",128,"fp8",64,1,8192,0,4,8,2,8,1,661,1667),
    ("mb","25.11","pretrain","llama31_405b","b200",128,"mxfp8",64,1,8192,0,4,8,2,8,1,624,1576),
    ("mb","25.11","pretrain","deepseek_v3","b200",256,"mxfp8",2048,1,4096,0,1,16,1,1,8,2139,557,"w/ MTP"),
    ("mb","25.11","pretrain","gpt_oss_120b","b200",64,"bf16",512,4,4096,0,1,1,1,1,8,8213,223),
    ("mb","25.11","pretrain","qwen3_30b","b200",8,"mxfp8",512,1,4096,0,1,1,1,1,8,9299,214),
    ("mb","25.11","pretrain","qwen3_235b","b200",64,"mxfp8",1024,1,4096,0,1,8,1,2,8,3269,484),
    ("mb","25.11","pretrain","llama3_8b","h100",8,"fp8",128,1,8192,1,1,1,1,1,1,14451,744),
    ("mb","25.11","pretrain","llama3_70b","h100",64,"fp8",128,1,8192,0,4,8,1,5,1,1602,719),
    ("mb","25.11","pretrain","llama31_405b","h100",1024,"fp8",512,1,8192,0,8,8,2,8,1,292,737),
    ("mb","25.11","pretrain","gpt_oss_120b","h100",64,"bf16",512,4,4096,0,1,4,1,1,8,5630,153),
    ("mb","25.11","pretrain","qwen3_30b","h100",16,"fp8",512,2,4096,0,1,2,1,24,8,5275,121),
    ("mb","25.11","pretrain","qwen3_235b","h100",256,"fp8",2048,1,4096,0,2,8,1,4,32,1575,233),
    ("mb","25.09","pretrain","llama3_8b","gb200",8,"fp8",128,2,8192,0,1,1,1,1,1,31357,1614),
    ("mb","25.09","pretrain","llama3_8b","gb200",8,"mxfp8",128,2,8192,0,1,1,1,1,1,29925,1540),
    ("mb","25.09","pretrain","llama3_70b","gb200",64,"fp8",128,2,8192,1,1,1,1,1,1,3986,1791),
    ("mb","25.09","pretrain","llama3_70b","gb200",64,"mxfp8",128,2,8192,0,2,4,1,5,1,3546,1593),
    ("mb","25.09","pretrain","llama31_405b","gb200",128,"fp8",64,1,8192,1,2,1,1,1,1,729,1840),
    ("mb","25.09","pretrain","llama31_405b","gb200",128,"mxfp8",64,1,8192,0,4,8,2,8,1,578,1458),
    ("mb","25.09","pretrain","deepseek_v3","gb200",256,"fp8",2048,1,4096,0,1,4,1,4,64,3454,899,"tokendrop"),
    ("mb","25.09","pretrain","deepseek_v3","gb200",256,"mxfp8",2048,1,4096,0,1,8,1,2,64,2835,738,"tokendrop"),
    ("mb","25.09","pretrain","qwen3_30b","gb200",8,"fp8",512,4,4096,0,1,1,1,1,8,22775,524,"tokendrop"),
    ("mb","25.09","pretrain","qwen3_30b","gb200",8,"mxfp8",512,4,4096,0,1,1,1,1,8,23723,546,"tokendrop"),
    ("mb","25.09","pretrain","qwen3_235b","gb200",64,"fp8",1024,1,4096,0,2,1,1,1,64,4452,659,"tokendrop"),
    ("mb","25.09","pretrain","qwen3_235b","gb200",64,"mxfp8",1024,1,4096,0,2,1,1,1,64,4416,654,"tokendrop"),
    ("mb","25.09","pretrain","llama3_8b","b200",8,"fp8",128,2,8192,0,1,1,1,1,1,29994,1544),
    ("mb","25.09","pretrain","llama3_8b","b200",8,"mxfp8",128,2,8192,0,1,1,1,1,1,29388,1513),
    ("mb","25.09","pretrain","llama31_405b","b200",128,"fp8",64,1,8192,0,4,8,2,8,1,664,1676),
    ("mb","25.09","pretrain","llama31_405b","b200",128,"mxfp8",64,1,8192,0,4,8,2,8,1,622,1569),
    ("mb","25.09","pretrain","deepseek_v3","b200",256,"fp8",2048,1,4096,0,1,16,1,1,8,2265,589,"tokendrop"),
    ("mb","25.09","pretrain","deepseek_v3","b200",256,"mxfp8",2048,1,4096,0,1,16,1,1,8,2159,562,"tokendrop"),
    ("mb","25.09","pretrain","qwen3_30b","b200",8,"fp8",512,1,4096,0,1,1,1,1,8,18066,416,"tokendrop"),
    ("mb","25.09","pretrain","qwen3_235b","b200",64,"fp8",1024,1,4096,0,1,8,1,2,8,4104,607,"tokendrop"),
    ("mb","25.09","pretrain","qwen3_235b","b200",64,"mxfp8",1024,1,4096,0,1,8,1,2,8,4275,633,"tokendrop"),
    ("mb","25.09","pretrain","llama3_8b","h100",8,"fp8",128,1,8192,1,1,1,1,1,1,14079,725),
    ("mb","25.09","pretrain","llama3_70b","h100",64,"fp8",128,1,8192,0,4,8,1,5,1,1619,727),
    ("mb","25.09","pretrain","llama31_405b","h100",1024,"fp8",512,1,8192,0,8,8,2,8,1,302,763),
    ("mb","25.09","pretrain","deepseek_v3","h100",1024,"fp8",8192,1,4096,0,2,8,1,4,64,1297,338,"dropless"),
    ("mb","25.09","pretrain","qwen3_30b","h100",16,"fp8",512,2,4096,0,1,2,1,24,8,10494,241,"tokendrop"),
    ("mb","25.09","pretrain","qwen3_235b","h100",256,"fp8",2048,1,4096,0,2,8,1,4,32,1204,178,"tokendrop"),
    ("nemo","24.07","pretrain","gpt3_5b","h100",64,"fp8",2048,4,2048,0,1,1,1,1,1,23406,765),
    ("nemo","24.07","pretrain","gpt3_20b","h100",64,"fp8",256,2,2048,0,2,1,1,1,1,5851,750),
    ("nemo","24.07","pretrain","gpt3_175b","h100",128,"fp8",256,1,2048,0,4,8,1,6,1,716,771),
    ("nemo","24.07","pretrain","gpt3_175b","h100",512,"fp8",2048,2,2048,0,4,8,1,6,1,825,888),
    ("nemo","24.07","pretrain","llama2_7b","h100",8,"fp8",128,1,4096,0,1,1,1,1,1,16934,780),
    ("nemo","24.07","pretrain","llama2_13b","h100",16,"fp8",128,1,4096,0,1,4,1,10,1,8715,760),
    ("nemo","24.07","pretrain","llama2_70b","h100",64,"fp8",128,1,4096,0,4,4,1,20,1,1728,768),
    ("nemo","24.07","pretrain","nemotron4_340b","h100",128,"fp8",32,1,4096,0,8,8,1,12,1,326,686),
    ("nemo","24.07","pretrain","llama3_8b","h100",8,"fp8",128,1,8192,0,1,1,2,1,1,12273,711),
    ("nemo","24.07","pretrain","llama3_70b","h100",64,"fp8",128,1,8192,0,4,4,2,5,1,1524,734),
    ("nemo-ug","25.02","pretrain","gpt3_175b","b200",512,"fp8",2048,2,2048,0,4,4,1,6,1,1600,1722),
    ("nemo-ug","25.02","pretrain","llama3_8b","b200",8,"fp8",128,2,8192,0,1,1,1,1,1,26006,1506),
    ("nemo-ug","25.02","pretrain","llama3_70b","b200",64,"fp8",128,1,8192,0,2,4,2,5,1,3062,1474),
    ("nemo-ug","25.02","pretrain","llama31_405b","b200",128,"fp8",64,1,8192,0,4,8,2,8,1,625,1658),
    ("nemo-ug","25.02","pretrain","nemotron4_15b","b200",64,"fp8",256,2,4096,0,1,1,1,1,1,14760,1387),
    ("nemo-ug","25.02","pretrain","nemotron4_340b","b200",128,"fp8",32,1,4096,0,8,4,1,12,1,602,1268),
    ("nemo-ug","25.02","pretrain","mixtral_8x7b","b200",64,"fp8",256,2,4096,0,1,1,1,1,8,15457,1282),
    ("nemo-ug","25.02","pretrain","mixtral_8x22b","b200",256,"fp8",64,1,65536,0,2,4,8,14,8,2232,824),
    ("nemo-ug","25.02","pretrain","gpt3_175b","h100",512,"fp8",2048,2,2048,0,4,8,1,6,1,866,932),
    ("nemo-ug","25.04","pretrain","gpt3_175b","gb200",128,"fp8",256,2,2048,0,4,4,1,12,1,1804,1942),
    ("nemo-ug","25.04","pretrain","llama3_8b","gb200",8,"fp8",128,2,8192,0,1,1,1,1,1,33099,1917),
    ("nemo-ug","25.04","pretrain","llama3_70b","gb200",64,"fp8",128,1,8192,1,1,1,1,1,1,4035,1943),
    ("nemo-ug","25.04","pretrain","llama31_405b","gb200",128,"fp8",64,1,8192,0,4,8,2,8,1,665,1763),
    ("nemo-ug","25.04","pretrain","nemotron4_15b","gb200",64,"fp8",256,2,4096,0,1,1,1,1,1,17809,1674),
    ("nemo-ug","25.04","pretrain","nemotron4_340b","gb200",128,"fp8",32,1,4096,0,8,4,1,12,1,737,1551),
    ("nemo-ug","25.04","pretrain","mixtral_8x7b","gb200",64,"fp8",256,2,4096,0,1,1,1,1,8,19275,1598),
    ("nemo-ug","25.04","pretrain","mixtral_8x22b","gb200",256,"fp8",64,1,65536,0,2,4,8,14,8,2731,0),
    ("mlperf","v4.0","pretrain","gpt3_175b","h100",512,"fp8",2304,2,2048,0,4,8,1,4,1,
     round(2304 * 2048 * 11 / ((119.856 + 119.949 + 119.865) / 3) / 512, 1),0),
]

_G1 = (128, 256, 512, 1024, 2048)
_G2 = (16, 32, 64, 128, 256, 512, 1024, 2048)
_G3 = (64, 128, 256, 512, 1024, 2048)
_G4 = (8, 16, 32, 64, 128)
# DGX Cloud benchmarking weak-scaling sweeps: (release, model, system, seq, MBS, TP, PP, CP, VP, GPUs,
#  global batch per GPU or a fixed global batch (strong scaling), {precision: published step times, s})
SWEEPS: list[tuple[Any, ...]] = [
    ("v24.11.1", "gpt3_175b", "h100", 2048, 1, 4, 8, 1, 12, _G1, 2.0,
     {"bf16": (8.91, 8.95, 9.09, 9.01, 9.02), "fp8": (5.92, 5.96, 6.44, 6.72, 6.24)}),
    ("v24.11.1", "nemotron4_15b", "h100", 4096, 4, 4, 1, 1, 1, _G2, 4.0,
     {"bf16": (2.83, 2.86, 2.86, 2.89, 2.88, 2.92, 2.92, 2.96),
      "fp8": (2.08, 2.07, 2.09, 2.08, 2.1, 2.12, 2.12, 2.18)}),
    ("v24.11.1", "nemotron4_340b", "h100", 4096, 1, 8, 8, 1, 12, _G1, 0.25,
     {"bf16": (4.61, 4.67, 4.7, 4.73, 4.84), "fp8": (3.16, 3.21, 3.26, 3.34, 3.49)}),
    ("v24.11.1", "llama3_70b", "h100", 8192, 1, 4, 4, 2, 5, _G3, 2.0,
     {"bf16": (14.72, 14.73, 14.8, 14.89, 14.92, 14.98), "fp8": (11.01, 10.93, 11.16, 11.18, 11.28, 11.39)}),
    ("v24.11.1", "llama3_8b", "h100", 8192, 1, 1, 1, 2, 1, _G4, 16.0,
     {"bf16": (12.91, 13.00, 13.05, 13.08, 13.10), "fp8": (9.67, 9.73, 9.75, 9.80, 9.82)}),
    ("v25.04.01", "gpt3_175b", "h100", 2048, 1, 4, 8, 1, 6, _G1, 2.0,
     {"bf16": (8.309, 8.408, 8.42, 8.453, 8.49), "fp8": (5.626, 5.725, 5.774, 5.82, 5.96)}),
    ("v25.04.01", "nemotron4_15b", "h100", 4096, 2, 2, 1, 1, 1, _G2, 4.0,
     {"bf16": (2.66, 2.66, 2.67, 2.67, 2.68, 2.71, 2.74, 2.78), "fp8": (1.98, 1.98, 1.98, 1.99, 2, 2.02, 2.03, 2.09)}),
    ("v25.04.01", "nemotron4_340b", "h100", 4096, 1, 8, 8, 1, 1, _G1[1:], 0.25,
     {"bf16": (4.36, 4.39, 4.41, 4.43), "fp8": (2.93, 2.97, 3, 3.05)}),
    ("v25.04.01", "llama3_8b", "h100", 8192, 1, 1, 1, 2, 1, _G4, 16.0,
     {"bf16": (12.27, 12.3, 12.32, 12.33, 12.33), "fp8": (9.33, 9.36, 9.43, 9.48, 9.54)}),
    ("v25.04.01", "llama3_70b", "h100", 8192, 1, 4, 4, 2, 5, _G3, 2.0,
     {"bf16": (14.66, 14.67, 14.68, 14.67, 14.65, 14.66)}),
    ("v25.04.01", "llama3_70b", "h100", 8192, 1, 4, 8, 1, 5, _G3, 2.0,
     {"fp8": (9.86, 9.95, 10, 10.07, 10.08, 10.15)}),
    ("v25.05.01", "nemotron4_15b", "h100", 4096, 2, 2, 1, 1, 1, (16,), 4.0, {"bf16": (2.746,), "fp8": (1.988,)}),
    ("v25.05.01", "nemotron4_340b", "h100", 4096, 1, 8, 8, 1, 12, (256,), 0.25, {"bf16": (4.606,), "fp8": (3.107,)}),
    ("v25.05.01", "llama31_405b", "h100", 8192, 1, 8, 8, 2, 8, (512,), 0.5, {"bf16": (19.81,), "fp8": (13.02,)}),
    ("v25.05.01", "nemotron4_340b", "gb200", 4096, 1, 8, 4, 1, 12, (128, 256, 512), 0.25,
     {"bf16": (2.189, 2.19, 2.229), "fp8": (1.483, 1.517, 1.549)}),
    ("v25.05.01", "nemotron4_340b", "gb200", 4096, 1, 8, 4, 1, 12, (128, 256, 512), 512,
     {"bf16": (32.66, 16.58, 8.468), "fp8": (21.83, 11.21, 5.668)}),
    ("v25.05.01", "llama31_405b", "gb200", 8192, 1, 4, 8, 2, 8, (128, 256, 512), 0.5,
     {"bf16": (9.347, 9.484, 9.508), "fp8": (6.131, 6.183, 6.244)}),
]


def _expand() -> list[tuple[Any, ...]]:
    """The sweeps as rows (tokens/s/GPU = seq x global batch / step / GPUs)."""
    rows = []
    for rel, model, system, seq, mbs, tp, pp, cp, vp, gpus, gbs, steps in SWEEPS:
        for prec, times in steps.items():
            for n, step in zip(gpus, times):
                batch = int(gbs) if isinstance(gbs, int) else int(gbs * n)
                rows.append(("dgxc", rel, "pretrain", model, system, n, prec, batch, mbs, seq, 0, tp, pp, cp, vp, 1,
                             round(seq * batch / step / n, 1), 0))
    return rows


ROWS += _expand()
MODELS["mixtral_8x22b"] = (_M, {"LAYERS": 56, "HIDDEN": 6144, "HEADS": 48, "KV_HEADS": 8, "HEAD_DIM": 128,
                                "EXPERTS": 8, "TOPK": 2, "EXPERT_FFN": 16384, "VOCAB": 32768})
MOE.add("mixtral_8x22b")

BRIDGE = ("https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/067f987df03b8355b03192d88d70f1709fedf51a/"
          "src/megatron/bridge/perf_recipes/")
NEMO2 = "https://github.com/NVIDIA/NeMo/blob/8cfedd7203/nemo/collections/llm/recipes/"
#: Rows of Megatron-Bridge whose perf recipe sets ``overlap_moe_expert_parallel_comm``: (model, system) ->
#: precisions. qwen/h100/qwen3_moe.py (235B, bf16 and fp8cs: ``moe_a2a_overlap = True``; 30B fp8cs: False),
#: qwen/{gb200,b200}/qwen3_moe.py fp8mx (``_enable_hybridep_full_iteration_mxfp8`` of qwen/common.py; b200
#: 30B fp8mx directly), deepseek/{gb200,b200}/deepseek_v3.py fp8mx (``_enable_deepseek_full_iteration_mxfp8``
#: of deepseek/common.py; b200 directly); the other MoE recipes leave it off.
A2A_RECIPES = {("qwen3_235b", "h100"): {"bf16", "fp8"}, ("qwen3_235b", "gb200"): {"mxfp8"},
               ("qwen3_30b", "gb200"): {"mxfp8"}, ("qwen3_235b", "b200"): {"mxfp8"}, ("qwen3_30b", "b200"): {"mxfp8"},
               ("deepseek_v3", "gb200"): {"mxfp8"}, ("deepseek_v3", "b200"): {"mxfp8"}}
#: Models whose recipes set ``tp_comm_overlap`` (Transformer Engine userbuffers) with TP > 1: Megatron-Bridge's
#: llama/{h100,b200,gb200}/llama3{,1}.py (each TP > 1 config gives a ``tp_comm_overlap_cfg``; the nvfp4 ones
#: turn it off), and NeMo 2's performance recipes (``pretrain_performance_optimizations`` in
#: nemotron4_340b.py, nemotron4_15b.py, llama3_70b.py, llama31_405b.py, gpt3_175b.py: ``tp_comm_overlap=True``)
#: that the NeMo user guide's 25.02/25.04 tables and the DGX Cloud recipes ran. NeMo 24.07's runs (NeMo 1
#: launcher configs) and MLPerf's are not checked here and keep it off.
TP_RECIPES = {"mb": {"llama3_70b", "llama31_405b"},
              "nemo-ug": {"nemotron4_340b", "nemotron4_15b", "llama3_70b", "llama31_405b", "gpt3_175b"},
              "dgxc": {"nemotron4_340b", "nemotron4_15b", "llama3_70b", "llama31_405b", "gpt3_175b"}}


#: Sources whose runs set ``overlap_p2p_comm`` (and not ``batch_p2p_comm``) whenever the pipeline is
#: interleaved: Megatron-Bridge's and NeMo 2's communication-overlap setup (``CommOverlapConfig`` /
#: ``MegatronCommOverlapCallback``: PP > 1 with VP > 1 turns it on). NeMo 24.07's launcher configs and
#: MLPerf's are not checked here and keep it off.
P2P_SOURCES = {"mb", "nemo-ug", "dgxc"}


def recipe_overlap(row: tuple[Any, ...]) -> str:
    """The ``overlap=`` key of a row as its recipe sets it (:data:`A2A_RECIPES`, :data:`TP_RECIPES`,
    :data:`P2P_SOURCES`), where the layout allows it (:func:`mapper.cluster.overlap.why_not`: a2a with a
    pipeline needs interleaving, tp needs TP > 1, p2p an interleaved pipeline)."""
    src, _, _, model, system, _, prec = row[:7]
    tp, pp, vp, ep = row[11], row[12], row[14], row[15]
    a2a = src == "mb" and prec in A2A_RECIPES.get((model, system), set()) and ep > 1 and (pp == 1 or vp > 1)
    tpo = model in TP_RECIPES.get(src, set()) and tp > 1 and prec != "nvfp4"
    p2p = src in P2P_SOURCES and pp > 1 and vp > 1
    return "+".join(k for k, on in (("a2a", a2a), ("tp", tpo), ("p2p", p2p)) if on) or "none"


#: Rows whose runs kept 16-bit weights beside Transformer Engine's cached FP8 copies (``fp8_param=off``,
#: :mod:`mapper.cluster.lowparam`); every other low-precision row held its GEMM weights quantised and
#: all-gathered them so (``on``): Megatron-Bridge's presets (``src/megatron/bridge/training/mixed_precision.py``,
#: ``fp8_param_gather = True``, NVFP4 ``fp4_param_gather = True``), NeMo 2's (NVIDIA/NeMo v2.2.0
#: ``nemo/collections/llm/recipes/precision/mixed_precision.py`` ``fp8_params = True``; v2.3.0 ``fp8_param_gather =
#: True``), the DGX Cloud recipes (v24.11.1 ``+model.fp8_params=$FP8_ENABLED``; later ones NeMo 2's presets) and
#: NVIDIA's MLPerf GPT-3 (NeMo-Framework-Launcher 24.07 ``conf/training/gpt3/mlperf.yaml``: ``fp8_params: true``).
#: Off: NeMo 24.07's launcher configs (``conf/training/{gpt3,llama,nemotron}/*.yaml`` leave ``fp8_params`` unset,
#: NeMo 1's default false); NeMo 2 at 25.04 (v2.3.0) for MXFP8 (``bf16_with_mxfp8_mixed``: ``fp8_param_gather =
#: False``) and with FSDP (``scripts/performance/utils.py``: "FSDP does not support FP8 param gather");
#: Megatron-Bridge's DeepSeek-V3 B200 NVFP4 recipe (``perf_recipes/deepseek/b200/deepseek_v3.py``:
#: ``fp4_param_gather = False``).
def param_key(row: tuple[Any, ...]) -> dict[str, str]:
    """The ``fp8_param``/``fp4_param`` key of a row as its source ran it (comment above); none for BF16."""
    src, rel, _, model, system, _, prec = row[:7]
    if prec == "bf16":
        return {}
    off = (src == "nemo" or (src == "nemo-ug" and rel == "25.04" and (prec == "mxfp8" or row[10]))
           or (src == "mb" and model == "deepseek_v3" and system == "b200" and prec == "nvfp4"))
    return {"fp4_param" if prec == "nvfp4" else "fp8_param": "off" if off else "on"}


#: Sources (and releases) whose runs reduced gradients in bf16 (``grad=bf16``), and the model families: every
#: pretraining config of Megatron-Bridge's performance scripts from its first release on (NVIDIA-NeMo/Megatron-Bridge
#: v0.1.0rc4 ``scripts/performance/configs/*/*_llm_pretrain.yaml``: ``grad_reduce_in_fp32: false``; v0.2.0 on
#: ``configs/*/*_llm_pretrain.py``; now ``perf_recipes/_common.py`` ``_benchmark_common``:
#: ``cfg.ddp.grad_reduce_in_fp32 = False``), and NeMo 24.07's launcher example scripts for GPT-3 and Llama on H100
#: (NVIDIA/NeMo-Framework-Launcher tag 24.07, ``examples/training/{gpt,llama}/h100/*.sh``:
#: ``+training.model.optim.grad_sync_dtype=bf16``, the gradient buffer of NeMo 1's Apex distributed Adam, f32 by
#: default; its Nemotron scripts leave it, and no 340B script exists). Other sources keep Megatron-Core's f32.
BF16_GRADS = {("nemo", "24.07"): ("gpt3_", "llama"), ("mb", ""): ("",)}


def source_keys(row: tuple[Any, ...]) -> dict[str, str]:
    """The keys of the plan a row's source set: its weights' layout (:func:`param_key`) and its gradient buffer
    (:data:`BF16_GRADS`)."""
    families = BF16_GRADS.get(tuple(row[:2]), BF16_GRADS.get((row[0], ""), ()))
    return {**param_key(row), **({"grad": "bf16"} if families and row[3].startswith(families) else {})}


#: (source, release) whose H100 runs had Transformer Engine's cuDNN attention switched off (module docstring).
FA2_RELEASES = {("nemo", "24.07")}


#: Low-precision formats in order, the base of a speedup first.
ORDER = ("bf16", "fp8", "mxfp8", "nvfp4")


def why_not(row: tuple[Any, ...]) -> str:
    """Why a row is not priced ("" when it is)."""
    model, cp, note = row[3], row[13], row[18] if len(row) > 18 else ""
    if model in UNWRITABLE:
        return UNWRITABLE[model]
    if "w/ MTP" in note:
        return "multi-token prediction module not in examples/deepseek_v3.tg"
    if cp > 1 and "context" not in layout_mod.KEYS:
        return "context parallelism is not modelled yet"
    return ""


def price(row: tuple[Any, ...], overlaps: bool = True) -> tuple[float, str]:
    """Predicted tokens/s per GPU of one row and the layout kept; ``overlaps``: with the communication
    overlaps its recipe sets (:func:`recipe_overlap`)."""
    _, _, _, model, system, gpus, prec, gbs, mbs, seq, fsdp, tp, pp, cp, vp, ep = row[:16]
    path, params = MODELS[model]
    graph = load_graph(ModelFile(path, params=tuple({**params, "SEQ": seq, "BATCH": gbs}.items())))
    graph = with_precision(graph, prec)
    platform, per_node = SYSTEMS[system]
    plat = with_nodes(load_platform(platform), gpus // per_node)
    keys: dict[str, Any] = {"tensor": tp, "pipeline": pp, "micro_batch": mbs, "interleave": vp,
                            "zero": 3 if fsdp else 1, "sequence": tp > 1, "context": 1}
    if fsdp:
        keys["fsdp"] = "megatron"
    if ep > 1:
        keys["expert"] = ep
    if cp > 1:
        keys["context"] = cp
    if overlaps and recipe_overlap(row) != "none":
        keys["overlap"] = recipe_overlap(row)
    if tuple(row[:2]) in FA2_RELEASES and system == "h100":
        keys["attn"] = "fa2"
    keys |= source_keys(row)
    choice = plan_cluster(graph, plat, LayoutSpec(**keys), "adam", lambda g: fuse_for(g, plat), precision=prec)
    return choice.tokens_per_s / choice.gpus, choice.best.layout.label() + ("" if choice.best.fits else
                                                                           " (does not fit)")


def layout_text(row: tuple[Any, ...]) -> str:
    fsdp, tp, pp, cp, vp, ep = row[10:16]
    parts = [f"TP{tp}", f"PP{pp}"] + [f"CP{cp}"] * (cp > 1) + [f"VP{vp}"] * (vp > 1) + [f"EP{ep}"] * (ep > 1)
    return " ".join(parts + ["FSDP"] * bool(fsdp)) + f" MBS{row[8]} GBS{row[7]} s{row[9]}"


def summary(label: str, ratios: list[float]) -> str:
    inside = sum(0.8 <= r <= 1.25 for r in ratios)
    return (f"  {label:<22} {len(ratios):>4} priced, within 0.8-1.25: {inside:>4}, "
            f"median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default="", help="comma-separated sources (mb, nemo, nemo-ug, dgxc, mlperf); "
                    "all by default")
    ap.add_argument("--system", default="", help="comma-separated systems (h100, b200, gb200); all by default")
    ap.add_argument("--rows", default="", help="comma-separated row numbers (1-based); all by default")
    ap.add_argument("--overlap", choices=("recipe", "off"), default="recipe",
                    help="communication overlaps as each row's recipe sets them (default), or none")
    args = ap.parse_args()
    sources = {s for s in args.source.split(",") if s}
    systems = {s for s in args.system.split(",") if s}
    pick = {int(x) for x in args.rows.split(",") if x.strip()}
    print("sources:")
    for key, text in SOURCES.items():
        print(f"  {key}: {text}")
    print(f"{'#':>3} {'src':<7} {'rel':<9} {'model':<15} {'sys':<5} {'GPUs':>5} {'prec':<6} {'pred':>8} {'pub':>8} "
          f"{'ratio':>6}  layout")
    groups: dict[str, list[float]] = defaultdict(list)
    skipped: dict[str, int] = defaultdict(int)
    newest: dict[tuple[Any, ...], tuple[tuple[int, ...], float]] = {}
    start = time.perf_counter()
    for i, row in enumerate(ROWS, 1):
        src, rel, task, model, system, gpus, prec = row[:7]
        if (pick and i not in pick) or (sources and src not in sources) or (systems and system not in systems):
            continue
        head = f"{i:>3} {src:<7} {rel:<9} {model:<15} {system:<5} {gpus:>5} {prec:<6}"
        published = row[16]
        reason = why_not(row)
        if reason:
            skipped[reason] += 1
            print(f"{head} {'-':>8} {published:>8,.0f} {'-':>6}  {layout_text(row)}: not priced, {reason}")
            continue
        try:
            pred, kept = price(row, args.overlap == "recipe")
        except MapperError as err:
            skipped["planner refused: " + str(err).splitlines()[0][:60]] += 1
            print(f"{head} {'-':>8} {published:>8,.0f} {'-':>6}  {layout_text(row)}: {str(err).splitlines()[0]}")
            continue
        ratio = pred / published
        _priced[i] = pred
        ov = recipe_overlap(row) if args.overlap == "recipe" else "none"
        print(f"{head} {pred:>8,.0f} {published:>8,.0f} {ratio:>6.2f}  {layout_text(row)}"
              + (f" overlap {ov}" if ov != "none" else "")
              + "".join(f" {k} {v}" for k, v in source_keys(row).items())
              + (" (does not fit)" if "does not fit" in kept else "")
              + (f" ({task})" if task != "pretrain" else "") + (f" [{row[18]}]" if len(row) > 18 else ""), flush=True)
        groups["all"].append(ratio)
        groups[f"system {system}"].append(ratio)
        groups[f"precision {prec}"].append(ratio)
        groups["MoE" if model in MOE else "dense"].append(ratio)
        groups[f"source {src}"].append(ratio)
        groups[f"{'MoE' if model in MOE else 'dense'} {system} {prec}"].append(ratio)
        groups[f"model {model}"].append(ratio)
        key, when = row[2:16], tuple(int(x) for x in rel.lstrip("v").split("."))
        if key not in newest or newest[key][0] < when:
            newest[key] = (when, ratio)
    if not groups:
        return
    print(f"\npredicted / published tokens/s/GPU ({time.perf_counter() - start:.0f} s):")
    groups["newest release per layout"] = [r for _, r in newest.values()]
    for label in sorted(groups, key=lambda k: (k != "all", k)):
        print(summary(label, groups[label]))
    for reason, n in sorted(skipped.items()):
        print(f"  not priced: {n} rows, {reason}")
    speedups()


def speedups() -> None:
    """Speedup of a lower precision over a higher one on identical layouts, predicted and published."""
    same: dict[tuple[Any, ...], dict[str, int]] = defaultdict(dict)
    for i, row in enumerate(ROWS, 1):
        same[row[:6] + row[7:16]][row[6]] = i
    print("\nlower precision on an identical layout, speedup (tokens/s ratio):")
    print(f"  {'src':<7} {'rel':<9} {'model':<15} {'sys':<5} {'GPUs':>5} {'formats':<14} {'pred':>5} {'pub':>5}")
    pred_all, pub_all = [], []
    for key, by in same.items():
        formats = [f for f in ORDER if f in by]
        for fmt in formats[1:]:
            base, low = ROWS[by[formats[0]] - 1], ROWS[by[fmt] - 1]
            pub = low[16] / base[16]
            pa, pb = _priced.get(by[fmt]), _priced.get(by[formats[0]])
            pred = f"{pa / pb:>5.2f}" if pa and pb else f"{'-':>5}"
            if pa and pb:
                pred_all.append(pa / pb)
                pub_all.append(pub)
            print(f"  {key[0]:<7} {key[1]:<9} {key[3]:<15} {key[4]:<5} {key[5]:>5} {formats[0] + '->' + fmt:<14} "
                  f"{pred} {pub:>5.2f}")
    by_model: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for key, by in same.items():
        formats = [f for f in ORDER if f in by]
        for fmt in formats[1:]:
            pa, pb = _priced.get(by[fmt]), _priced.get(by[formats[0]])
            if pa and pb:
                pub = ROWS[by[fmt] - 1][16] / ROWS[by[formats[0]] - 1][16]
                by_model[f"{key[3]} {key[4]} {formats[0]}->{fmt}"].append((pa / pb, pub))
    for label, pairs in sorted(by_model.items()):
        pred_m = statistics.median(p for p, _ in pairs)
        pub_m = statistics.median(q for _, q in pairs)
        print(f"  {label:<34} {len(pairs):>3} pairs: predicted median {pred_m:.2f}, published median {pub_m:.2f}")
    if pred_all:
        off = [p / q for p, q in zip(pred_all, pub_all)]
        print(f"  {len(off)} priced pairs: predicted / published speedup median {statistics.median(off):.2f}, "
              f"range {min(off):.2f}-{max(off):.2f}")


_priced: dict[int, float] = {}

if __name__ == "__main__":
    main()

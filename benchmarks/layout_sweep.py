"""A published layout sweep: Llama 13B/30B/65B on A100 clusters, predicted against measured.

    python benchmarks/layout_sweep.py [--group 13B/2048]

Hagemann, Weinbach, Dobler, Schall and de Melo, "Efficient Parallelization Layouts for
Large-Scale Distributed Model Training" (arXiv 2311.05610, 2023): Llama models trained with
Megatron-LM-style 3D parallelism on DGX A100 80 GB nodes (200 Gb/s HDR InfiniBand), global
batches of 4M tokens (2,048 sequences of 2,048 tokens or 512 of 8,192: what their step times
and MFU give), bf16, sweeping tensor and pipeline degrees, micro-batch size and activation
checkpointing (every layer or none) per attention kernel; each layout's average step time, MFU
or out-of-memory error. The rows here are every FlashAttention-2 run of the authors' sheets
(their repository Aleph-Alpha/NeurIPS-WANT-submission-efficient-parallelization-layouts,
``data/llama_*_all_runs.xlsx``; the kernel of their micro-batch study, reproduce_figure_mb.py):
(recompute, tensor, pipeline, micro-batch, measured seconds per step or None for out of memory,
measured MFU). Layouts the authors list both with and without the RMSNorm kernel are the plain
ones here. Their framework's SwiGLU is PyTorch's ``silu(gate) * up`` (as in its released form,
Aleph-Alpha/scaling, ``ParallelSwiGLUMLP``) and, without the kernel, its RMSNorm is PyTorch's
too, and its rotary embedding is PyTorch's ``x * cos + rotate_half(x) * sin``
(``apply_rotary_pos_emb``): llama.tg's ``FUSED_SWIGLU = 0``, ``FUSED_NORM = 0`` and ``FUSED_ROPE = 0``
(what they keep: docs/parallel.md; their kernels: docs/cost_model.md, composite ops).
The runs predate PyTorch's expandable segments (2.1, October 2023): ``allocator=caching``, whose
fragmentation is GMLake's measured 15 % (mapper.cluster.model.FRAGMENTATION).

Each is priced with its layout on platform ``selene`` (DGX A100 80 GB nodes; --nodes GPUs/8),
examples/llama.tg with the Llama 1 sizes (Touvron et al. 2023, Table 2; FFN from the released
configs, vocabulary 32,000), fused attention, ZeRO 1 (the optimizer states sharded over the data
ranks: without it the 13B model cannot hold its states on one GPU, yet ran at tensor 1 x
pipeline 2) and 16-bit gradients. Printed per group: out-of-memory agreement, predicted over
measured step time for layouts that ran and fit, and whether the planner's pick among the
layouts it predicts to fit is the measured best (its measured slowdown otherwise).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

from mapper.cluster.model import refine
from mapper.cluster.search import Framework, _setup
from mapper.costing.efficiency import op_class
from mapper.costing.fusion import fuse_for
from mapper.frontend.load import load_graph
from mapper.frontend.sources import ModelFile
from mapper.parallel.layout import Layout
from mapper.platform.cluster import with_nodes
from mapper.platform.loader import load_platform

#: Llama 1 sizes (layers, hidden, heads, FFN): Touvron et al. 2023, Table 2, and the released configs.
MODELS = {"13B": (40, 5120, 40, 13824), "30B": (60, 6656, 52, 17920), "65B": (80, 8192, 64, 22016)}
VOCAB = 32000
#: Tokens per global batch (4M, Llama 2's; Touvron et al., "Llama 2", 2023, 2.2).
TOKENS = 4 * 2**20
#: (model, sequence, GPUs, kernels): [(recompute, tensor, pipeline, micro-batch, measured s/step or None = OOM,
#: MFU)]; kernels ``flash2``: FlashAttention-2 with PyTorch's RMSNorm, ``flash2+rms``: with FlashAttention's
#: fused RMSNorm kernel too (no checkpointing: the authors found the two incompatible)
SWEEP = {
    ('13B', 2048, 64, 'flash2'): [
        ('full', 1, 1, 1, 37.51, 0.4989), ('full', 1, 1, 2, 36.69, 0.5102), ('full', 1, 1, 4, 36.66, 0.5104),
        ('full', 1, 2, 1, 44.13, 0.4239), ('full', 1, 2, 2, 47.37, 0.3951), ('full', 1, 2, 4, 55.61, 0.3364),
        ('full', 1, 2, 8, 72.82, 0.2569), ('full', 2, 1, 1, 47.12, 0.3972), ('full', 2, 1, 2, 44.45, 0.4209),
        ('full', 2, 1, 4, 44.1, 0.424), ('full', 2, 1, 8, 43.24, 0.4326), ('full', 2, 2, 2, 53.57, 0.3494),
        ('full', 2, 2, 4, 56.61, 0.3306), ('full', 2, 2, 8, 65.47, 0.2857), ('none', 1, 1, 1, None, None),
        ('none', 1, 1, 2, None, None), ('none', 1, 1, 4, None, None), ('none', 1, 2, 1, 33.7, 0.5553),
        ('none', 1, 2, 2, 38.27, 0.4886), ('none', 1, 2, 4, None, None), ('none', 1, 2, 8, None, None),
        ('none', 2, 1, 1, 35.54, 0.5264), ('none', 2, 1, 2, 33.9, 0.5519), ('none', 2, 1, 4, None, None),
        ('none', 2, 1, 8, None, None), ('none', 2, 2, 1, 39.64, 0.4719), ('none', 2, 2, 2, 39.83, 0.4697),
        ('none', 2, 2, 4, None, None), ('none', 2, 2, 8, None, None),
    ],
    ('13B', 8192, 128, 'flash2'): [
        ('full', 1, 1, 1, 28.15, 0.3885), ('full', 1, 1, 2, None, None), ('full', 1, 1, 4, None, None),
        ('full', 1, 2, 1, 24.62, 0.4442), ('full', 1, 2, 2, 27.53, 0.3973), ('full', 1, 2, 4, None, None),
        ('full', 1, 4, 1, 26.29, 0.4181), ('full', 1, 4, 2, 29.08, 0.376), ('full', 1, 4, 4, None, None),
        ('full', 2, 1, 1, 26.63, 0.4108), ('full', 2, 1, 2, None, None), ('full', 2, 1, 4, None, None),
        ('full', 2, 2, 1, 27.42, 0.3989), ('full', 2, 2, 2, 29.19, 0.3749), ('full', 2, 2, 4, None, None),
        ('full', 2, 4, 1, 28.08, 0.3894), ('full', 2, 4, 2, 30.08, 0.3636), ('full', 2, 4, 4, None, None),
        ('full', 4, 1, 1, 32.57, 0.3358), ('full', 4, 1, 2, 32.13, 0.3404), ('full', 4, 1, 4, None, None),
        ('full', 4, 2, 1, 34.76, 0.3146), ('full', 4, 2, 2, 34.64, 0.3158), ('full', 4, 2, 4, None, None),
        ('full', 4, 4, 1, 36.71, 0.2992), ('full', 4, 4, 2, 36.07, 0.3032), ('full', 4, 4, 4, None, None),
        ('none', 1, 1, 1, None, None), ('none', 1, 1, 2, None, None), ('none', 1, 1, 4, None, None),
        ('none', 1, 2, 1, None, None), ('none', 1, 2, 2, None, None), ('none', 1, 2, 4, None, None),
        ('none', 1, 4, 1, None, None), ('none', 1, 4, 2, None, None), ('none', 1, 4, 4, None, None),
        ('none', 2, 1, 1, None, None), ('none', 2, 1, 2, None, None), ('none', 2, 1, 4, None, None),
        ('none', 2, 2, 1, None, None), ('none', 2, 2, 2, None, None), ('none', 2, 2, 4, None, None),
        ('none', 2, 4, 1, 21.93, 0.4988), ('none', 2, 4, 2, None, None), ('none', 2, 4, 4, None, None),
        ('none', 4, 1, 1, None, None), ('none', 4, 1, 2, None, None), ('none', 4, 1, 4, None, None),
        ('none', 4, 2, 1, 25.99, 0.4208), ('none', 4, 2, 2, None, None), ('none', 4, 2, 4, None, None),
        ('none', 4, 4, 1, 26.94, 0.4059), ('none', 4, 4, 2, None, None), ('none', 4, 4, 4, None, None),
    ],
    ('30B', 2048, 256, 'flash2'): [
        ('full', 1, 1, 1, None, None), ('full', 1, 1, 2, None, None), ('full', 1, 1, 4, None, None),
        ('full', 1, 2, 1, 35.07, 0.3184), ('full', 1, 2, 2, 37.76, 0.2958), ('full', 1, 2, 4, None, None),
        ('full', 1, 4, 1, 29.08, 0.3837), ('full', 1, 4, 2, 29.76, 0.3748), ('full', 1, 4, 4, 34.22, 0.3261),
        ('full', 2, 1, 1, 39.7, 0.281), ('full', 2, 1, 2, None, None), ('full', 2, 1, 4, None, None),
        ('full', 2, 2, 1, 31.94, 0.3493), ('full', 2, 2, 2, 32.27, 0.3457), ('full', 2, 2, 4, 34.45, 0.3239),
        ('full', 2, 4, 1, 31.81, 0.3508), ('full', 2, 4, 2, 31.13, 0.3584), ('full', 2, 4, 4, 33.7, 0.3311),
        ('full', 4, 1, 1, 44.09, 0.253), ('full', 4, 1, 2, 42.13, 0.2648), ('full', 4, 1, 4, 43.92, 0.254),
        ('full', 4, 2, 1, 40.07, 0.2784), ('full', 4, 2, 2, 39.57, 0.2819), ('full', 4, 2, 4, 37.12, 0.3006),
        ('full', 4, 4, 1, 41.01, 0.272), ('full', 4, 4, 2, 38.51, 0.2897), ('full', 4, 4, 4, 38.28, 0.2915),
        ('none', 1, 1, 1, None, None), ('none', 1, 1, 2, None, None), ('none', 1, 1, 4, None, None),
        ('none', 1, 2, 1, None, None), ('none', 1, 2, 2, None, None), ('none', 1, 2, 4, None, None),
        ('none', 1, 4, 1, None, None), ('none', 1, 4, 2, None, None), ('none', 1, 4, 4, None, None),
        ('none', 2, 1, 1, None, None), ('none', 2, 1, 2, None, None), ('none', 2, 1, 4, None, None),
        ('none', 2, 2, 1, 29.13, 0.3832), ('none', 2, 2, 2, None, None), ('none', 2, 2, 4, None, None),
        ('none', 2, 4, 1, 24.7, 0.4516), ('none', 2, 4, 2, None, None), ('none', 2, 4, 4, None, None),
        ('none', 4, 1, 1, 39.81, 0.2803), ('none', 4, 1, 2, None, None), ('none', 4, 1, 4, None, None),
        ('none', 4, 2, 1, 31.47, 0.3546), ('none', 4, 2, 2, 31.66, 0.3524), ('none', 4, 2, 4, None, None),
        ('none', 4, 4, 1, 30.08, 0.3709), ('none', 4, 4, 2, 29.45, 0.3788), ('none', 4, 4, 4, None, None),
    ],
    ('30B', 8192, 128, 'flash2'): [
        ('full', 2, 2, 1, 62.99, 0.4033), ('full', 2, 2, 2, None, None), ('full', 2, 2, 4, None, None),
        ('full', 2, 4, 1, 62.84, 0.4043), ('full', 2, 4, 2, 66.71, 0.3808), ('full', 2, 4, 4, None, None),
        ('full', 2, 8, 1, 63.99, 0.397), ('full', 2, 8, 2, 68.99, 0.3682), ('full', 2, 8, 4, None, None),
        ('full', 2, 16, 1, 66.69, 0.3809), ('full', 2, 16, 2, 71.81, 0.3538), ('full', 2, 16, 4, None, None),
        ('full', 4, 2, 1, 72.42, 0.3508), ('full', 4, 2, 2, 73.33, 0.3464), ('full', 4, 2, 4, None, None),
        ('full', 4, 4, 1, 75.53, 0.3364), ('full', 4, 4, 2, 76.53, 0.332), ('full', 4, 4, 4, None, None),
        ('full', 4, 8, 1, 77.86, 0.3263), ('full', 4, 8, 2, 79.74, 0.3186), ('full', 4, 8, 4, None, None),
        ('full', 4, 16, 1, 82.62, 0.3075), ('full', 4, 16, 2, 85.34, 0.2977), ('full', 4, 16, 4, None, None),
        ('none', 2, 2, 1, None, None), ('none', 2, 2, 2, None, None), ('none', 2, 2, 4, None, None),
        ('none', 2, 4, 1, None, None), ('none', 2, 4, 2, None, None), ('none', 2, 4, 4, None, None),
        ('none', 2, 8, 1, None, None), ('none', 2, 8, 2, None, None), ('none', 2, 8, 4, None, None),
        ('none', 2, 16, 1, None, None), ('none', 2, 16, 2, None, None), ('none', 2, 16, 4, None, None),
        ('none', 4, 2, 1, None, None), ('none', 4, 2, 2, None, None), ('none', 4, 2, 4, None, None),
        ('none', 4, 4, 1, None, None), ('none', 4, 4, 2, None, None), ('none', 4, 4, 4, None, None),
        ('none', 4, 8, 1, None, None), ('none', 4, 8, 2, None, None), ('none', 4, 8, 4, None, None),
        ('none', 4, 16, 1, None, None), ('none', 4, 16, 2, None, None), ('none', 4, 16, 4, None, None),
    ],
    ('65B', 2048, 128, 'flash2'): [
        ('full', 2, 2, 1, 118.68, 0.3693), ('full', 2, 2, 2, None, None), ('full', 2, 2, 4, None, None),
        ('full', 2, 4, 1, 111.35, 0.3936), ('full', 2, 4, 2, 107.39, 0.4081), ('full', 2, 4, 4, 109.04, 0.4019),
        ('full', 2, 8, 1, 118.39, 0.3702), ('full', 2, 8, 2, 112.77, 0.3886), ('full', 2, 8, 4, 114.42, 0.383),
        ('full', 4, 2, 1, 136.43, 0.3212), ('full', 4, 2, 4, 126.61, 0.3461), ('full', 4, 4, 1, 140.95, 0.3109),
        ('full', 4, 4, 2, 129.68, 0.338), ('full', 4, 4, 4, 125.11, 0.3503), ('full', 4, 8, 1, 156.54, 0.28),
        ('full', 4, 8, 2, 141.87, 0.3089), ('full', 4, 8, 4, 133.56, 0.3281), ('full', 8, 2, 1, 192.69, 0.2275),
        ('full', 8, 2, 2, 174.43, 0.2513), ('full', 8, 2, 4, 164.21, 0.2669), ('full', 8, 4, 1, 209.24, 0.2095),
        ('full', 8, 4, 2, 180.93, 0.2422), ('full', 8, 4, 4, 168.97, 0.2594), ('full', 8, 8, 1, 237.99, 0.1842),
        ('full', 8, 8, 2, 203.08, 0.2158), ('full', 8, 8, 4, 184.98, 0.2369), ('none', 2, 2, 1, None, None),
        ('none', 2, 2, 2, None, None), ('none', 2, 2, 4, None, None), ('none', 2, 4, 1, None, None),
        ('none', 2, 4, 2, None, None), ('none', 2, 4, 4, None, None), ('none', 2, 8, 1, 88.16, 0.4971),
        ('none', 2, 8, 2, None, None), ('none', 2, 8, 4, None, None), ('none', 4, 2, 1, None, None),
        ('none', 4, 2, 2, None, None), ('none', 4, 2, 4, None, None), ('none', 4, 4, 1, 101.97, 0.4298),
        ('none', 4, 4, 2, None, None), ('none', 4, 4, 4, None, None), ('none', 4, 8, 1, 107.97, 0.4059),
        ('none', 4, 8, 2, None, None), ('none', 4, 8, 4, None, None), ('none', 8, 2, 1, 139.67, 0.3138),
        ('none', 8, 2, 2, None, None), ('none', 8, 2, 4, None, None), ('none', 8, 4, 1, 142.77, 0.307),
        ('none', 8, 4, 2, None, None), ('none', 8, 4, 4, None, None), ('none', 8, 8, 1, 151.95, 0.2884),
        ('none', 8, 8, 2, None, None), ('none', 8, 8, 4, None, None),
    ],
    ('13B', 2048, 64, 'flash2+rms'): [
        ('none', 1, 1, 1, 26.54, 0.7057), ('none', 1, 1, 2, None, None), ('none', 1, 1, 4, None, None),
        ('none', 1, 1, 8, None, None), ('none', 1, 2, 1, 31.06, 0.6026), ('none', 1, 2, 2, 33.11, 0.5655),
        ('none', 1, 2, 4, None, None), ('none', 1, 2, 8, None, None), ('none', 2, 1, 1, 31.29, 0.5982),
        ('none', 2, 1, 2, 29.7, 0.6305), ('none', 2, 1, 4, None, None), ('none', 2, 1, 8, None, None),
        ('none', 2, 2, 1, 34.84, 0.5369), ('none', 2, 2, 2, 35.05, 0.5337), ('none', 2, 2, 4, 37.57, 0.498),
        ('none', 2, 2, 8, None, None),
    ],
    ('13B', 8192, 128, 'flash2+rms'): [
        ('none', 1, 1, 1, None, None), ('none', 1, 1, 2, None, None), ('none', 1, 1, 4, None, None),
        ('none', 1, 2, 1, None, None), ('none', 1, 2, 2, None, None), ('none', 1, 2, 4, None, None),
        ('none', 1, 4, 1, None, None), ('none', 1, 4, 2, None, None), ('none', 1, 4, 4, None, None),
        ('none', 2, 1, 1, None, None), ('none', 2, 1, 2, None, None), ('none', 2, 1, 4, None, None),
        ('none', 2, 2, 1, 18.41, 0.5941), ('none', 2, 2, 2, None, None), ('none', 2, 2, 4, None, None),
        ('none', 2, 4, 1, 19.32, 0.5661), ('none', 2, 4, 2, None, None), ('none', 2, 4, 4, None, None),
        ('none', 4, 1, 1, 21.36, 0.5121), ('none', 4, 1, 2, None, None), ('none', 4, 1, 4, None, None),
        ('none', 4, 2, 1, 21.94, 0.4993), ('none', 4, 2, 2, None, None), ('none', 4, 2, 4, None, None),
        ('none', 4, 4, 1, 23.46, 0.469), ('none', 4, 4, 2, 23.78, 0.4627), ('none', 4, 4, 4, None, None),
    ],
    ('30B', 2048, 256, 'flash2+rms'): [
        ('none', 1, 1, 1, None, None), ('none', 1, 1, 2, None, None), ('none', 1, 1, 4, None, None),
        ('none', 1, 2, 1, None, None), ('none', 1, 2, 2, None, None), ('none', 1, 2, 4, None, None),
        ('none', 1, 4, 1, 24.0, 0.4676), ('none', 1, 4, 2, None, None), ('none', 1, 4, 4, None, None),
        ('none', 2, 1, 1, None, None), ('none', 2, 1, 2, None, None), ('none', 2, 1, 4, None, None),
        ('none', 2, 2, 1, 28.34, 0.3939), ('none', 2, 2, 2, None, None), ('none', 2, 2, 4, None, None),
        ('none', 2, 4, 1, 22.67, 0.4922), ('none', 2, 4, 2, 24.26, 0.4601), ('none', 2, 4, 4, None, None),
        ('none', 4, 1, 1, 31.77, 0.3515), ('none', 4, 1, 2, 35.32, 0.3161), ('none', 4, 1, 4, None, None),
        ('none', 4, 2, 1, 26.94, 0.4142), ('none', 4, 2, 2, 26.26, 0.4248), ('none', 4, 2, 4, None, None),
        ('none', 4, 4, 1, 26.28, 0.4245), ('none', 4, 4, 2, 25.32, 0.4406), ('none', 4, 4, 4, 25.05, 0.4455),
    ],
    ('30B', 8192, 128, 'flash2+rms'): [
        ('none', 2, 2, 1, None, None), ('none', 2, 2, 2, None, None), ('none', 2, 2, 4, None, None),
        ('none', 2, 4, 1, None, None), ('none', 2, 4, 2, None, None), ('none', 2, 4, 4, None, None),
        ('none', 2, 8, 1, None, None), ('none', 2, 8, 2, None, None), ('none', 2, 8, 4, None, None),
        ('none', 2, 16, 1, None, None), ('none', 2, 16, 2, None, None), ('none', 2, 16, 4, None, None),
        ('none', 4, 2, 1, None, None), ('none', 4, 2, 2, None, None), ('none', 4, 2, 4, None, None),
        ('none', 4, 4, 1, 49.43, 0.514), ('none', 4, 4, 2, None, None), ('none', 4, 4, 4, None, None),
        ('none', 4, 8, 1, 50.23, 0.5057), ('none', 4, 8, 2, None, None), ('none', 4, 8, 4, None, None),
        ('none', 4, 16, 1, 54.78, 0.4637), ('none', 4, 16, 2, None, None), ('none', 4, 16, 4, None, None),
    ],
    ('65B', 2048, 128, 'flash2+rms'): [
        ('none', 2, 2, 1, None, None), ('none', 2, 2, 2, None, None), ('none', 2, 2, 4, None, None),
        ('none', 2, 4, 1, 79.31, 0.5526), ('none', 2, 4, 2, None, None), ('none', 2, 4, 4, None, None),
        ('none', 2, 8, 1, 79.54, 0.551), ('none', 2, 8, 2, None, None), ('none', 2, 8, 4, None, None),
        ('none', 4, 2, 1, 87.14, 0.503), ('none', 4, 2, 2, None, None), ('none', 4, 2, 4, None, None),
        ('none', 4, 4, 1, 86.61, 0.506), ('none', 4, 4, 2, 82.88, 0.5288), ('none', 4, 4, 4, None, None),
        ('none', 4, 8, 1, 92.61, 0.4732), ('none', 4, 8, 2, 86.55, 0.5063), ('none', 4, 8, 4, None, None),
        ('none', 8, 2, 1, 107.85, 0.4064), ('none', 8, 2, 2, 101.28, 0.4328), ('none', 8, 2, 4, None, None),
        ('none', 8, 4, 1, 111.83, 0.3919), ('none', 8, 4, 2, 103.17, 0.4248), ('none', 8, 4, 4, None, None),
        ('none', 8, 8, 1, 121.93, 0.3595), ('none', 8, 8, 2, 115.58, 0.3792), ('none', 8, 8, 4, None, None),
    ],
}


def _group(selene, model: str, seq: int, gpus: int, kernels: str, rows: list) -> dict:
    layers, hidden, heads, ffn = MODELS[model]
    params = (("LAYERS", layers), ("HIDDEN", hidden), ("HEADS", heads), ("KV_HEADS", heads), ("FFN", ffn),
              ("SEQ", seq), ("VOCAB", VOCAB), ("BATCH", TOKENS // seq), ("FLASH", 1),
              ("FUSED_NORM", int(kernels == "flash2+rms")), ("FUSED_SWIGLU", 0), ("FUSED_ROPE", 0))
    graph = load_graph(ModelFile("examples/llama.tg", params=params))
    plat = with_nodes(selene, gpus // 8)
    model_ = _setup(graph, plat, "adam", lambda g: fuse_for(g, plat), Framework(allocator="caching")).model
    out = []
    for recompute, t, p, b, step, mfu in rows:
        d = gpus // (t * p)
        est = model_.estimate(Layout(t, p, d, b, 1, recompute, 1, False))
        if est is not None and est.fits:
            est = refine(est)
        out.append((recompute, t, p, b, step, mfu, est))
    return {"rows": out, "model": model_}


def report(key, result) -> tuple[int, int, list[float], float | None]:
    """Print one group; return (OOM agreements, rows, step ratios, the pick's slowdown)."""
    model, seq, gpus, kernels = key
    rows = result["rows"]
    print(f"\nLlama {model}, sequence {seq:,}, {gpus} A100s ({TOKENS // seq:,} sequences a step), {kernels}")
    print(f"{'layout':34s} {'measured':>9s} {'predicted':>10s} {'ratio':>6s} {'GiB':>6s}  OOM meas/pred")
    agree, ratios = 0, []
    for recompute, t, p, b, step, _, est in rows:
        pred_fit = est is not None and est.fits
        agree += pred_fit == (step is not None)
        label = f"t{t} p{p} mb{b} ckpt {'every layer' if recompute == 'full' else 'none'}"
        meas = f"{step:9.2f}" if step is not None else f"{'OOM':>9s}"
        pred = f"{est.step:10.2f}" if pred_fit else f"{'OOM':>10s}"
        ratio = ""
        if pred_fit and step is not None:
            ratios.append(est.step / step)
            ratio = f"{est.step / step:6.2f}"
        gib = f"{est.peak / 2**30:6.1f}" if est is not None else f"{'-':>6s}"
        mark = "" if pred_fit == (step is not None) else "  <- " + ("called OOM" if step is not None else "ran OOM")
        print(f"{label:34s} {meas} {pred} {ratio:>6s} {gib}{mark}")
    fitting = [r for r in rows if r[6] is not None and r[6].fits]
    slowdown = None
    ran = [r for r in rows if r[4] is not None]
    if fitting and ran:
        pick = min(fitting, key=lambda r: r[6].step)
        best = min(ran, key=lambda r: r[4])
        name = f"t{pick[1]} p{pick[2]} mb{pick[3]} {pick[0]}"
        if pick[4] is None:
            print(f"pick: {name}, which ran out of memory (measured best t{best[1]} p{best[2]} mb{best[3]} {best[0]})")
        else:
            slowdown = 1.0 if pick is best else pick[4] / best[4]
            print(f"pick: {name}: {'the measured best' if pick is best else f'{slowdown:.2f}x the measured best'}"
                  f" (t{best[1]} p{best[2]} mb{best[3]} {best[0]}, {best[4]:.2f} s)")
    both = [r for r in ran if r[6] is not None and r[6].fits]
    ranked = None
    if both and ran:
        pick, best = min(both, key=lambda r: r[6].step), min(ran, key=lambda r: r[4])
        ranked = 1.0 if pick is best else pick[4] / best[4]
        print(f"ranking alone (the predicted fastest of the layouts that ran): t{pick[1]} p{pick[2]} mb{pick[3]} "
              f"{pick[0]}, {ranked:.2f}x the measured best")
    result["ranked"] = ranked
    if ratios:
        print(f"OOM agreement {agree}/{len(rows)}; predicted/measured step: median {statistics.median(ratios):.2f}, "
              f"range {min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} layouts")
    else:
        print(f"OOM agreement {agree}/{len(rows)}")
    return agree, len(rows), ratios, slowdown


def kernel_check(results: dict) -> None:
    """Print, for the layouts run with both kernel sets, PyTorch's RMSNorm over the fused kernel:
    measured and predicted step ratios (a check: nothing is fitted to it)."""
    pairs = []
    for (model, seq, gpus, kernels), result in results.items():
        other = results.get((model, seq, gpus, "flash2+rms"))
        if kernels != "flash2" or other is None:
            continue
        fused = {r[:4]: r for r in other["rows"]}
        for r in result["rows"]:
            f = fused.get(r[:4])
            if f is not None and r[4] and f[4] and r[6] is not None and r[6].fits and f[6] is not None and f[6].fits:
                pairs.append((f"{model}/{seq} t{r[1]} p{r[2]} mb{r[3]}", r[4] / f[4], r[6].step / f[6].step))
    if not pairs:
        return
    print("\nPyTorch's RMSNorm (flash2) over the fused kernel (flash2+rms), same layout: measured, predicted")
    for name, meas, pred in pairs:
        print(f"  {name:26s} {meas:6.3f} {pred:6.3f}")
    print(f"  median over {len(pairs)} layouts: measured {statistics.median(p[1] for p in pairs):.3f}, "
          f"predicted {statistics.median(p[2] for p in pairs):.3f}")


def uniform_check(results: dict) -> None:
    """Print how much of the remaining gap is one factor for every layout: the median measured
    over predicted step fitted on the 13B groups, the other groups' ratios divided by it (a
    diagnostic of the benchmark: nothing of it enters the model)."""
    ratios: dict[str, list[float]] = {}
    for (model, _, _, _), result in results.items():
        for r in result["rows"]:
            if r[4] is not None and r[6] is not None and r[6].fits:
                ratios.setdefault(model, []).append(r[4] / r[6].step)
    if "13B" not in ratios or len(ratios) < 2:
        return
    factor = statistics.median(ratios["13B"])
    print(f"\none factor fitted on the 13B layouts (measured / predicted step, median): {factor:.3f}; "
          "the others' predicted steps times it:")
    for model, rs in ratios.items():
        if model != "13B":
            scaled = [factor / r for r in rs]
            print(f"  {model}: median {statistics.median(scaled):.2f}, range {min(scaled):.2f}-{max(scaled):.2f}, "
                  f"within 0.8-1.25 {sum(0.8 <= x <= 1.25 for x in scaled)}/{len(scaled)}")


def residual_breakdown(results: dict) -> None:
    """Print predicted over measured step (median, layouts that ran and fit) by each factor of the
    sweep, and the predicted step's parts (the pipeline's compute and communication per micro-batch,
    its bubble, the exposed gradient synchronisation and optimizer step): where a residual lives. A
    diagnostic: nothing of it enters the model."""
    by: dict[tuple[str, object], list[float]] = {}
    parts = {"per micro-batch": 0.0, "bubble": 0.0, "sync+optimizer": 0.0}
    for (model, seq, _, kernels), result in results.items():
        for recompute, t, p, b, step, _, est in result["rows"]:
            if step is None or est is None or not est.fits:
                continue
            r = est.step / step
            for factor, value in (("model", model), ("sequence", seq), ("kernels", kernels), ("tensor", t),
                                  ("pipeline", p), ("micro-batch", b), ("checkpointing", recompute)):
                by.setdefault((factor, value), []).append(r)
            busy = max(est.rank_times) * (TOKENS // seq) / (b * est.layout.data)  # micro-batches x slowest rank
            parts["per micro-batch"] += min(busy, est.pipeline) / est.step
            parts["bubble"] += max(0.0, est.pipeline - busy) / est.step
            parts["sync+optimizer"] += est.sync / est.step
    if not by:
        return
    print("\npredicted / measured step by factor (median, n):")
    factors = dict.fromkeys(f for f, _ in by)
    for factor in factors:
        cells = [f"{v}: {statistics.median(rs):.2f} ({len(rs)})" for (f, v), rs in by.items() if f == factor]
        print(f"  {factor:13s} " + ", ".join(cells))
    n = sum(len(rs) for (f, _), rs in by.items() if f == "model")
    print("predicted step's parts (mean share over those layouts): "
          + ", ".join(f"{k} {v / n:.1%}" for k, v in parts.items()))
    kernel_split(results)
    microbatch_cost(results)


def kernel_split(results: dict) -> None:
    """Print each group's forward kernel time per micro-batch by op class at its measured-fastest
    layout (tensor-parallel collectives apart): which component a per-token residual could sit in."""
    print("forward kernel time per micro-batch by op class, at each group's measured-fastest layout:")
    for (model, seq, _, kernels), result in results.items():
        ran = [r for r in result["rows"] if r[4] is not None and r[6] is not None and r[6].fits]
        if not ran:
            continue
        _, t, _, b, *_ = min(ran, key=lambda r: r[4])
        split: dict[str, float] = {}
        for cost in result["model"].block_costs(t, b):
            for sec, ops, coll in cost.kernels:
                key = "collective" if coll >= 0 else "+".join(sorted({op_class(o) for o in ops}))
                split[key] = split.get(key, 0.0) + sec
        whole = sum(split.values())
        print(f"  {model}/{seq} {kernels:10s} t{t} mb{b}: " + ", ".join(
            f"{k} {v / whole:.0%}" for k, v in sorted(split.items(), key=lambda kv: -kv[1]) if v / whole >= 0.005))


def microbatch_cost(results: dict) -> None:
    """Print the time each extra micro-batch costs, measured and predicted: for layouts alike but
    for the micro-batch size, the step difference over the difference in micro-batches per replica,
    per Transformer layer of a pipeline stage (what a fixed cost per micro-batch and layer, which
    larger micro-batches amortise, would show), by tensor degree; and the ratio by the predicted
    peak memory (what allocator pressure near the capacity would show). A diagnostic only."""
    costs: dict[int, list[tuple[float, float]]] = {}
    for (model, seq, gpus, _), result in results.items():
        layers = MODELS[model][0]
        ran = {r[:4]: r for r in result["rows"] if r[4] is not None and r[6] is not None and r[6].fits}
        for (rec, t, p, b), r in ran.items():
            big = ran.get((rec, t, p, 2 * b))
            if big is None:
                continue
            per = TOKENS // seq // (gpus // (t * p))  # sequences per replica
            dm = per / b - per / (2 * b)  # micro-batches saved by doubling the micro-batch
            stage = layers / p
            costs.setdefault(t, []).append(((r[4] - big[4]) / dm / stage, (r[6].step - big[6].step) / dm / stage))
    if costs:
        print("cost of one more micro-batch per layer of a stage (ms; pairs alike but for the micro-batch), "
              "measured / predicted, median by tensor degree:")
        for t in sorted(costs):
            ms = [m * 1e3 for m, _ in costs[t]]
            ps = [q * 1e3 for _, q in costs[t]]
            print(f"  tensor {t}: {statistics.median(ms):6.2f} / {statistics.median(ps):6.2f} ({len(ms)} pairs)")
    bins: dict[str, list[float]] = {}
    for result in results.values():
        for r in result["rows"]:
            if r[4] is not None and r[6] is not None and r[6].fits:
                gib = r[6].peak / 2**30
                key = "< 40 GiB" if gib < 40 else "40-60 GiB" if gib < 60 else ">= 60 GiB"
                bins.setdefault(key, []).append(r[6].step / r[4])
    print("predicted / measured step by predicted peak memory: " + ", ".join(
        f"{k} {statistics.median(v):.2f} ({len(v)})" for k, v in sorted(bins.items())))


def reserve_check(results: dict) -> None:
    """Print how the OOM agreement and the pick change with the memory set aside (a check: the same
    plans judged again with no reserve, with the flat 2 GiB used before, and with the reserve by part
    of :mod:`mapper.cluster.reserve` that the model uses)."""
    ways = {"none": lambda e: 0.0, "flat 2 GiB": lambda e: 2.0 * 2**30, "by part": lambda e: e.memory["reserve"]}
    tally: dict[tuple[str, str], list[int]] = {}
    spans: list[float] = []
    for key, result in results.items():
        rows = [r for r in result["rows"] if r[6] is not None]
        spans += [r[6].memory["reserve"] / 2**30 for r in rows]
        for way, res in ways.items():
            fit = {id(r): not r[6].blocked and math.isfinite(r[6].step)
                   and r[6].peak - r[6].memory["reserve"] + res(r[6]) <= r[6].capacity for r in rows}
            t = tally.setdefault((key[3], way), [0, 0, 0, 0])
            t[0] += sum(fit[id(r)] == (r[4] is not None) for r in rows)
            t[1] += len(result["rows"])
            fitting = [r for r in rows if fit[id(r)]]
            if fitting:
                pick = min(fitting, key=lambda r: r[6].step)
                t[2] += pick[4] is None
                t[3] += pick[4] is not None and pick[4] == min(r[4] for r in result["rows"] if r[4] is not None)
    if not spans:
        return
    print(f"\nmemory set aside per GPU (driver, CUDA context, NCCL buffers, workspaces): "
          f"{min(spans):.2f}-{max(spans):.2f} GiB by layout; the same plans judged with each reserve:")
    for (kernels, way), (agree, n, oom, best) in tally.items():
        print(f"  {kernels:10s} {way:10s} OOM agreement {agree}/{n}; the pick ran out of memory in {oom} groups, "
              f"was the measured best in {best}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--group", help="one group, e.g. 13B/2048")
    ap.add_argument("--kernels", choices=("flash2", "flash2+rms"), help="one kernel set (default both)")
    args = ap.parse_args()
    selene = load_platform("selene")
    t0 = time.perf_counter()
    tally: dict[str, list] = {}
    results = {}
    for key, rows in SWEEP.items():
        if args.group and args.group != f"{key[0]}/{key[1]}" or args.kernels and args.kernels != key[3]:
            continue
        results[key] = result = _group(selene, *key, rows)
        tally.setdefault(key[3], []).append((*report(key, result), result["ranked"]))
    kernel_check(results)
    uniform_check(results)
    residual_breakdown(results)
    reserve_check(results)
    print()
    for kernels, groups in tally.items():
        agree, n = sum(g[0] for g in groups), sum(g[1] for g in groups)
        ratios = [r for g in groups for r in g[2]]
        picks, ranked = [g[3] for g in groups], [g[4] for g in groups]
        steps = (f"predicted/measured step median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-"
                 f"{max(ratios):.2f}, within 0.8-1.25 {sum(0.8 <= r <= 1.25 for r in ratios)}/{len(ratios)}; "
                 if ratios else "")
        print(f"{kernels}: OOM agreement {agree}/{n}; {steps}the pick ran and was the measured best in "
              f"{sum(1 for x in picks if x == 1.0)}/{len(groups)} groups (ran out of memory in "
              f"{sum(1 for x in picks if x is None)}); ranking the layouts that ran, the predicted fastest is the "
              f"measured best in {sum(1 for x in ranked if x == 1.0)}/{len(groups)}, worst "
              f"{max((x for x in ranked if x is not None), default=float('nan')):.2f}x")
    print(f"[{time.perf_counter() - t0:.0f} s]")


if __name__ == "__main__":
    main()

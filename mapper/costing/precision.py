"""``--precision``: the number format a training step's GEMMs run in, and what it costs.

Low-precision training as Transformer Engine and Megatron-Core run it (NVIDIA
Transformer Engine user guide, "Using FP8 with Transformer Engine"; Micikevicius
et al., "FP8 Formats for Deep Learning", arXiv:2209.05433): the GEMMs of the
linear layers (QKV, attention output, MLP, expert MLPs) take their inputs
quantised to the format and run at the platform's tensor rate for it; the rest
stays in 16-bit or f32: attention (FlashAttention in bf16), norms, activations,
the router (Megatron-Core computes its logits in f32), the embedding and the LM
head (Megatron-Core keeps the first and last layers in bf16 by default), the
master weights and the optimizer states. :func:`with_precision` marks the GEMMs
that change (``Task.precision``), and the cost model prices a marked GEMM at
``tensor_gflops[format]`` (:mod:`mapper.costing.latency`).

Scaling overhead (:func:`gemm_bytes`): every quantised activation is cast by a
kernel that reads it in 16-bit and writes it in the format, computing its scale
on the way (Transformer Engine computes the amax in the cast kernel, one f32
scale per tensor for FP8; per 32-element block, an E8M0 byte, for MXFP8, OCP
"Microscaling Formats (MX) Specification" v1.0, 2023; per 16-element block, an
E4M3 byte plus an f32 per tensor, for NVFP4, NVIDIA "Introducing NVFP4",
2025), and the GEMM then reads the quantised copy: ``2 + 2 e`` bytes per
activation element where 16-bit reads 2 (``e`` = :data:`ELEMENT_BYTES`).
Weights are cast once per step and cached across micro-batches (Transformer
Engine's ``is_first_microbatch``), so a GEMM reads ``e`` bytes per weight. The
backward GEMMs keep the 16-bit traffic the training step gives them: casting
the output gradient (read 2 bytes, write ``e``) and the two GEMMs reading it
(``e`` each) move about what the 16-bit reads counted. Memory
(:mod:`mapper.cluster.profile`): a quantised GEMM keeps its input for the
backward pass as it cast it, ``e`` bytes an element; weights stay at their 16
bits (Megatron-Core's ``--fp8-param-gather`` holds FP8 weights and a transposed
copy, about the same bytes).

Casts of a training step (:func:`cast_bytes`): Transformer Engine quantises a GEMM's
16-bit input in a kernel of its own before the GEMM runs, so in a training step that
kernel's time adds to the GEMM's rather than hiding under its multiply-adds. Each cast
reads the 16-bit tensor and writes it twice in the format: Hopper's FP8 tensor cores take
only the TN layout, so TE's ``cast_transpose`` writes a row-wise and a transposed copy (the
wgrad GEMM reads the transposed input and output gradient; Micikevicius et al.,
arXiv:2209.05433, and the TE user guide, "FP8 tensors ... transposes"), and the MX and
NVFP4 block scales run along the contraction dimension, so the column-wise operand of the
backward GEMMs needs its own quantised copy (TE's ``rowwise`` and ``columnwise`` MXFP8
data). Per-tensor FP8 as NVIDIA's recipes run it since NeMo 25.04 scales with the current
step's amax (TE's ``Float8CurrentScaling``: "per-tensor FP8 quantization, leveraging
scaling factors computed in the current step", NeMo performance summary), which needs a
reduction over the tensor before it can be cast: one more 16-bit read (:data:`AMAX_PASS`);
the block formats compute each block's scale inside the cast. A step casts every quantised
GEMM's input (forward) and its output gradient (backward): :func:`cast_bytes` charges the
input's cast to the wgrad GEMM and the output gradient's to the dgrad GEMM, tasks only a
training step has, so serving (whose runtimes fuse the quantisation into the kernel before,
with static scales) keeps its cost. The weights' casts run once per step, not per
micro-batch, and are left out. The forward's own cast bytes stay under the forward GEMM's
roofline as before (:func:`gemm_bytes`).

How fast a cast runs (:data:`CAST_MEMORY_SHARE`): a cast is a streaming kernel, priced at the
GPU's streaming share of its bandwidth (0.90) unless the format's quantiser is measured below
it. Transformer Engine's MXFP8 quantiser (row-wise and column-wise copies in one kernel, E8M0
scales per 32 elements) reaches less: on a B200 an 8,192 x 8,192 BF16 tensor took 52.34 us
(ROCm/TransformerEngine pull request 598, "CAST_ONLY", its B200 column, NVIDIA's kernel on
a B200): after the 3 us launch, 272.6 MB at 0.691 of the 8,000 GB/s. That one value is
fitted; the same table's FP16 (51.16 us) and FP32 (76.95 us: 406.8 MB) inputs are predicted
within 3 %, and NVIDIA/TransformerEngine pull request 2634's B200 timings of small tensors
(512 x 4,096: 9.26 us) show the launch-bound floor it does not model (predicted 4.5 us;
a training step's casts are 10^7 elements and more). ``python benchmarks/blackwell_residual.py``
prints the fit and the checks. MXFP8 runs on Blackwell only, so the share is the format's.

Weight-only formats (:data:`WEIGHT_ONLY`, serving): AWQ (Lin et al., "AWQ: Activation-aware Weight
Quantization for LLM Compression and Acceleration", MLSys 2024) stores a linear layer's weights in
4 bits with a 16-bit scale and a 4-bit zero point per group of 128 input channels (the paper's
group size; AutoAWQ's GEMM layout packs the zeros eight to an int32 beside f16 scales), so
``0.5 + 2.5/128`` bytes a weight. The kernel dequantises each tile to 16 bits in registers and
runs the GEMM at the 16-bit tensor rate (W4A16): activations keep their 16-bit bytes and no cast.
The dequantisation's arithmetic is not priced: it is modelled as the extra bytes of the scales and
zeros only (an assumption: it overlaps the memory-bound decode GEMM and is small beside a large
prefill GEMM's multiply-adds).

Statically scaled INT8 (:data:`STATIC`, a forward pass only): TensorRT's INT8 inference (TensorRT
Developer Guide, "Working with Quantized Types": post-training calibration or Q/DQ scales, fixed at
build time) runs a linear layer's GEMM on the integer tensor cores with 8-bit weights and inputs;
the quantisation of its input is fused into the producer's epilogue (a Q node fuses into the layer
before it) and the dequantisation into the GEMM's own (a DQ node fuses into the layer after it),
so there is no cast kernel and no 16-bit read of the input: 1 byte an input element and a weight,
the output written in the graph's 16 bits for the layers that stay there. Attention, norms,
activations and embeddings keep the graph's dtype, as TensorRT keeps a layer in FP16 where no INT8
kernel or scale is given (``--int8 --fp16`` builds; NVIDIA's MLPerf BERT engines are INT8 builds,
mlcommons/inference_results_v3.1, closed/NVIDIA, BERT ``precision = "int8"``). A device with no
integer tensor rate but an ``i8`` peak (a DLA, an NPU) runs such a GEMM at that peak.
"""

from __future__ import annotations

from dataclasses import replace

from mapper.core.graph import DTYPE_BYTES, Task, TaskGraph
from mapper.costing.efficiency import op_class
from mapper.errors import OptionsError
from mapper.platform.devices import Platform

#: The formats ``--precision`` takes, in order of bytes.
FORMATS = ("bf16", "fp8", "mxfp8", "nvfp4")
#: Bytes per element, block scales included (module docstring).
ELEMENT_BYTES = {"bf16": 2.0, "fp8": 1.0, "mxfp8": 1.0 + 1.0 / 32, "nvfp4": 0.5 + 1.0 / 16}
#: Formats whose scale comes from the tensor's amax of the same step: a reduction pass before the cast
#: (module docstring, "Casts of a training step").
AMAX_PASS = frozenset({"fp8"})
#: Share of the memory bandwidth a format's training-step cast reaches where it is measured below
#: the streaming share (module docstring, "How fast a cast runs"); formats not here stream at the
#: device kind's ``EFF_MEMORY``.
CAST_MEMORY_SHARE = {"mxfp8": 0.691}
#: Weight-only formats, their bytes per weight (scales and zeros included), run at the 16-bit rate.
WEIGHT_ONLY = {"int4_awq": 0.5 + 2.5 / 128}
#: The tensor rate a weight-only format needs.
WEIGHT_ONLY_RATE = "f16"
#: Statically scaled integer formats of a forward pass (module docstring) and the rate key they run at.
STATIC = {"int8": "i8"}
#: Ops whose reading of a GEMM's output marks it as a router (kept in f32/bf16): these, and any op
#: whose name says router or top-k.
ROUTER_READERS = frozenset({"softmax", "sigmoid"})


def check_precision(text: str | None, inference: bool = False, forward: bool = False) -> str | None:
    """``--precision``'s value, checked (an OptionsError, exit 2, otherwise); the weight-only
    formats only for ``inference``, the statically scaled ones only for a ``forward`` pass (a
    compile without ``--train`` or ``--inference``)."""
    if text is None or text in FORMATS or (inference and text in WEIGHT_ONLY) or (forward and text in STATIC):
        return text
    known = (*FORMATS, *WEIGHT_ONLY) if inference else (*FORMATS, *STATIC) if forward else FORMATS
    raise OptionsError(f"unknown precision {text!r}; choose one of {', '.join(known)}", obj="--precision")


def require_format(platform: Platform, fmt: str) -> None:
    """Exit 2 naming the GPU and the format when ``platform``'s GPUs have no tensor rate for ``fmt``
    (every GPU of a fleet's kinds is checked)."""
    kinds = platform.fleet.kinds if platform.fleet is not None else ()
    platforms = [k.platform for k in kinds] or [platform]
    rate = WEIGHT_ONLY_RATE if fmt in WEIGHT_ONLY else STATIC.get(fmt, fmt)
    for plat in platforms:
        for dev in plat.devices:
            if dev.kind != "gpu":
                continue
            if dev.tensor_peak(rate) is None and not (rate == "bf16" and dev.peak("bf16") is not None):
                have = ", ".join(k for k, _ in dev.tensor_gflops) or "none"
                raise OptionsError(f"device {dev.name} of platform {plat.name} ({plat.description or plat.name}) "
                                   f"has no {rate} tensor rate (its tensor_gflops formats: {have}): it cannot run "
                                   f"{fmt} GEMMs", obj="--precision")


def rate_format(fmt: str) -> str:
    """The tensor-rate key a GEMM marked ``fmt`` runs at ("" for a weight-only format: the GEMM's
    own 16-bit dtype)."""
    return "" if fmt in WEIGHT_ONLY else STATIC.get(fmt, fmt)


def _is_low(fmt: str) -> bool:
    return (fmt in FORMATS and fmt != "bf16") or fmt in WEIGHT_ONLY or fmt in STATIC


def with_precision(graph: TaskGraph, fmt: str | None) -> TaskGraph:
    """``graph`` with the GEMMs of its linear layers marked to run in ``fmt`` (module docstring);
    unchanged for None and bf16 (the graph's 16-bit GEMMs already run at the 16-bit rate). A GEMM
    is a linear layer's when it multiplies by a weight, and it is not the LM head (its output is a
    graph output) nor a router (a router, top-k, softmax or sigmoid reads its output, or its name
    says router)."""
    if fmt is None or not _is_low(fmt):
        return graph
    readers: dict[int, set[str]] = {}
    for e in graph.edges:
        readers.setdefault(e.src, set()).add(graph.tasks[e.dst].op)
    outputs = set(graph.outputs)
    tasks = []
    for t in graph.tasks:
        if (op_class(t.op, None) == "gemm" and any(o.kind == "weight" for o in t.operands)
                and t.name not in outputs and "router" not in t.name
                and not any(_routes(op) for op in readers.get(t.index, ()))):
            t = replace(t, precision=fmt)
        tasks.append(t)
    return replace(graph, tasks=tuple(tasks))


def _routes(op: str) -> bool:
    """Whether op ``op`` reading a GEMM's output makes that GEMM a router."""
    return op in ROUTER_READERS or "router" in op or "topk" in op or "top_k" in op


def gemm_bytes(task: Task) -> float:
    """Bytes a forward GEMM marked by :func:`with_precision` moves, its casts included (module
    docstring); ``task.bytes`` for every other task."""
    fmt = task.precision
    if not fmt or task.backward or (fmt not in ELEMENT_BYTES and fmt not in WEIGHT_ONLY and fmt not in STATIC):
        return float(task.bytes)
    main = task.parts[0] if task.parts else task
    item = DTYPE_BYTES.get(main.operands[0].type.dtype, 2) if main.operands else 2
    acts = float(sum(o.type.numel for o in main.operands if o.kind != "weight"))
    weights = float(sum(o.type.numel for o in main.operands if o.kind == "weight"))
    if fmt in WEIGHT_ONLY:  # 16-bit activations, no cast; the weights in the format
        return float(task.bytes) - weights * item + weights * WEIGHT_ONLY[fmt]
    if fmt in STATIC:  # 8-bit inputs and weights, no cast (fused into the producer); the output as it was
        return float(task.bytes) - (acts + weights) * (item - DTYPE_BYTES[STATIC[fmt]])
    e = ELEMENT_BYTES[fmt]
    return float(task.bytes) - (acts + weights) * item + acts * (item + 2 * e) + weights * e


def cast_bytes(task: Task) -> float:
    """Bytes of the standalone quantisation kernels charged to a backward GEMM marked by
    :func:`with_precision` (module docstring, "Casts of a training step"): the wgrad GEMM
    carries its forward input's cast, the dgrad GEMM its output gradient's, each reading the
    16-bit tensor (twice for an amax-scaled format) and writing two quantised copies; 0 for
    every other task."""
    fmt = task.precision
    if not task.backward or fmt not in ELEMENT_BYTES or fmt == "bf16":
        return 0.0
    main = task.parts[0] if task.parts else task
    item = DTYPE_BYTES.get(main.operands[0].type.dtype, 2) if main.operands else 2
    weights = float(sum(o.type.nbytes for o in main.operands if o.kind == "weight"))
    acts = float(sum(o.type.nbytes for o in main.operands if o.kind != "weight"))
    if task.name.endswith(".wgrad"):
        tensor = acts  # the forward input, 16-bit
    elif task.name.endswith(".dgrad"):
        tensor = max(float(task.bytes_read) - weights, 0.0)  # the output gradient it reads
    else:
        return 0.0
    per = item * (2 if fmt in AMAX_PASS else 1) + 2 * ELEMENT_BYTES[fmt]
    return tensor / item * per

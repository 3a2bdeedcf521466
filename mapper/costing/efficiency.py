"""How fast a device runs an op: efficiency factors per op class and device
kind (sources in docs/cost_model.md), the dtype whose rate applies, and the
keys (op variant, op, op class) under which a device's own tables override
them."""

from __future__ import annotations

from mapper.core.graph import Task
from mapper.core.ops import ATTENTION_OPS, OPS
from mapper.errors import InputError, SourceSpan
from mapper.platform.loader import DEVICE_KINDS, Device

#: Compute efficiency: the fraction of a device's peak FLOP rate that an op
#: class reaches, per device kind. Sources in docs/cost_model.md.
EFF_COMPUTE: dict[str, dict[str, float]] = {
    "cpu": {
        "gemm": 0.90, "conv": 0.70, "attention": 0.50, "elementwise": 0.50, "activation": 0.50,
        "norm": 0.50, "pool": 0.50, "reduction": 0.50, "stencil": 0.50, "sparse": 0.50,
        "fft": 0.30, "shape": 0.50, "embedding": 0.50, "task": 1.00,
    },
    "gpu": {
        "gemm": 0.78, "conv": 0.75, "attention": 0.60, "elementwise": 0.50, "activation": 0.50,
        "norm": 0.50, "pool": 0.50, "reduction": 0.50, "stencil": 0.50, "sparse": 0.50,
        "fft": 0.30, "shape": 0.50, "embedding": 0.50, "task": 1.00,
    },
    "fpga": {
        "gemm": 0.30, "conv": 0.30, "attention": 0.50, "elementwise": 0.50, "activation": 0.50,
        "norm": 0.50, "pool": 0.50, "reduction": 0.50, "stencil": 0.70,
        "fft": 0.50, "shape": 0.50, "task": 1.00,
    },
}

#: An NPU or a DLA, without factors of its own (its ``efficiency`` table), takes a GPU's:
#: like a GPU it is a wide array fed from DRAM by DMA, and no vendor publishes per-op fractions.
EFF_COMPUTE["npu"] = EFF_COMPUTE["dla"] = EFF_COMPUTE["gpu"]

#: The rate of a fused attention's backward kernel as a share of its forward's rate, per device kind:
#: the backward recomputes the scores and runs five matrix products against two with more shared-memory
#: traffic and an accumulation of dQ across key blocks (Dao, "FlashAttention-2", arXiv 2307.08691,
#: section 3.1.2). Fitted (the median over sequences 2,048-32,768, 0.80) to cuDNN 9.10.2's causal BF16
#: forward and backward TFLOP/s on a B200 (NVIDIA/cudnn-frontend, benchmark/sdpa_benchmark_training
#: artifacts) and checked on cuDNN 9.1 and 9.19 and FlashAttention-2 on an H200 (the same repository's
#: 2024 benchmark_results.csv and h200_919_only_cudnn results): ``python benchmarks/attention_rates.py``.
#: A device's own ``attention.backward`` efficiency entry replaces the share times the forward rate; an
#: NPU and a DLA take a GPU's share, as they take its efficiency factors.
ATTENTION_BACKWARD_SHARE: dict[str, float] = {"gpu": 0.80, "npu": 0.80, "dla": 0.80}

#: Memory efficiency: the fraction of the declared bandwidth that streaming
#: kernels reach (STREAM / BabelStream / Shuhai), per device kind (an NPU and a DLA as a GPU).
EFF_MEMORY: dict[str, float] = {"cpu": 0.80, "gpu": 0.90, "fpga": 0.90, "npu": 0.90, "dla": 0.90}

#: Memory efficiency on a GPU (where the device declares none) of GEMMs whose rows fit one tile
#: and of matrix-vector products: the libraries' small-M kernels stream the weight through the
#: tile pipeline, below a copy's rate. Fitted on one
#: published row (benchmarks/inference.py prints it): Llama-2-7B decoding at batch 1 on an A100
#: with CUDA graphs, 107 tokens/s (PyTorch, "Accelerating Generative AI with PyTorch II: GPT,
#: Fast", 2023); checked on FasterTransformer's GPT tables (the same benchmark).
EFF_MEMORY_GEMM: dict[str, float] = {"gpu": 0.77}

#: Dtypes whose rate falls back to another dtype's when not declared:
#: complex arithmetic is counted in real FLOPs of the component type on every
#: kind; f16/bf16 on a CPU without native support run at the f32 rate.
_RATE_FALLBACK: dict[tuple[str, str], str] = {
    ("cpu", "f16"): "f32",
    ("cpu", "bf16"): "f32",
    **{(k, "c64"): "f32" for k in DEVICE_KINDS},
    **{(k, "c128"): "f64" for k in DEVICE_KINDS},
    # masks, comparisons and index arithmetic run on the integer ALUs at about the f32 rate
    # (NVIDIA A100 whitepaper, 2020, table 1: INT32 19.5 TOPS = FP32 19.5 TFLOPS; x86 SIMD units
    # are as wide for 32-bit integers as for f32)
    **{(k, d): "f32" for k in DEVICE_KINDS for d in ("bool", "i8", "i32", "i64")},
}


def op_class(op: str, span: SourceSpan | None = None) -> str:
    """The op class of ``op`` from the catalogue; ``"task"`` for kernel-less tasks."""
    if op == "task":
        return "task"
    spec = OPS.get(op)
    if spec is None:
        raise InputError(f"unknown op {op!r}: it is not in the op catalogue", span=span)
    return spec.op_class


def rate_dtype(device: Device, dtype: str) -> str | None:
    """The dtype whose declared rate ``device`` uses for ``dtype`` work, if any."""
    if device.peak(dtype) is not None:
        return dtype
    fallback = _RATE_FALLBACK.get((device.kind, dtype))
    if fallback is not None and device.peak(fallback) is not None:
        return fallback
    return None


def model_keys(task: Task, cls: str) -> tuple[str, ...]:
    """Keys of a device's ``efficiency`` and ``overhead_us`` tables that apply
    to ``task``, most specific first: its op variants (``reduce.max``: the op
    and the value of each of its string attributes with fixed choices;
    ``attention.causal``: the op and each of its flags in
    :data:`mapper.core.ops.FLAG_VARIANTS` that is set, after ``attention.backward`` for an
    attention's gradient task), its op, its op class;
    each first for the task's GEMM format where ``--precision`` marks one (``gemm:fp8``) and then
    its dtype (``reduce.max:f64``), since a kernel's rate need not scale between dtypes and
    formats as the peaks do."""
    from mapper.core.ops import FLAG_VARIANTS, OPS

    spec = OPS.get(task.op)
    attrs = dict(task.attrs)
    variants = []
    if spec is not None:
        for attr, _ in spec.choices:
            value = attrs.get(attr, spec.default(attr))
            if isinstance(value, str):
                variants.append(f"{task.op}.{value}")
    variants += [f"{task.op}.{flag}" for flag in FLAG_VARIANTS.get(task.op, ()) if attrs.get(flag)]
    if task.backward and task.op in ATTENTION_OPS:
        variants.insert(0, f"{task.op}.backward")
    formats = (task.precision, task.dtype) if task.precision else (task.dtype,)
    return tuple(k for key in (*variants, task.op, cls) for k in (*(f"{key}:{f}" for f in formats), key))


def fitted_keys(device: Device, keys: tuple[str, ...]) -> tuple[str, ...]:
    """The keys whose ``efficiency``, ``overhead_us``, ``overhead_us_per_mib``
    and ``half_length`` entries go with the rate the task gets: ``keys`` up to
    the first one the device's ``efficiency`` or per-op ``memory_efficiency``
    table has (a rate and its fixed time are fitted together: an ``ifft``
    with its own rate must not take the ``fft`` class's fixed time, and a
    ``relu`` with its own fraction of the bandwidth must not take the
    activation class's compute efficiency, fitted to ``gelu``'s tanh), all of
    them when neither table has any."""
    rated = {k for k, _ in device.efficiency} | {k for k, _ in device.memory_efficiency_ops}
    for i, key in enumerate(keys):
        if key in rated:
            return keys[:i + 1]
    return keys


def backward_share(device: Device, task: Task, keys: tuple[str, ...]) -> float:
    """The factor on the rate of ``task`` for an attention's backward pass: the device kind's
    :data:`ATTENTION_BACKWARD_SHARE`, or 1 where the device declares the backward's own efficiency
    (``attention.backward``) or the task is no attention gradient."""
    if not task.backward or task.op not in ATTENTION_OPS:
        return 1.0
    own = {k for k, _ in device.efficiency}
    if any(k in own for k in keys if k.startswith(f"{task.op}.backward")):
        return 1.0
    return ATTENTION_BACKWARD_SHARE.get(device.kind, 1.0)


def lookup(table: tuple[tuple[str, float], ...], keys: tuple[str, ...]) -> float | None:
    """The entry of ``table`` under the first of ``keys`` it has, else None."""
    own = dict(table)
    for key in keys:
        if key in own:
            return own[key]
    return None

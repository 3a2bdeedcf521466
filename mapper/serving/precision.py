"""``mapper serve --precision`` and ``--kv-precision``: the formats weights and KV cache are served in.

Weights (``--precision``): ``fp16`` and ``bf16`` serve the model file's 16-bit GEMMs; ``fp8``,
``mxfp8`` and ``nvfp4`` mark the linear layers' GEMMs as the training side does
(:func:`mapper.costing.precision.with_precision`: QKV, attention output and MLP run at the
format's tensor rate, reading their weights in it; the embedding, the LM head, attention and norms
stay 16-bit, as NVIDIA's ModelOpt FP8 and NVFP4 checkpoints keep them). Those weights are also
stored in the format (:func:`stored_fraction`), which is what frees memory for the KV cache.
A GPU without a tensor rate for the format exits 2 naming it. ``int4_awq`` is weight-only
(AWQ, Lin et al., MLSys 2024; :data:`mapper.costing.precision.WEIGHT_ONLY`): the same GEMMs'
weights in 4 bits with a 16-bit scale and 4-bit zero per 128 input channels, the GEMM at the
16-bit tensor rate on dequantised tiles (W4A16), so any GPU with an f16 tensor rate runs it.

KV cache (``--kv-precision fp16|bf16|fp8``): bytes per cached element; a decode's attention streams
its cache, so its time scales with them. The default follows the engine: TensorRT-LLM sets an FP8
KV cache whenever it quantises weights to FP8 ("If you specify FP8 quantization, the KV cache will
automatically be set to FP8 as well", docs/source/performance/perf-overview.md, v0.17; likewise
NVFP4); vLLM's ``kv_cache_dtype`` ``auto`` keeps the model's 16-bit.
"""

from __future__ import annotations

from mapper.cluster.blocks import Block
from mapper.core.graph import DTYPE_BYTES, TaskGraph
from mapper.costing.precision import ELEMENT_BYTES, FORMATS, WEIGHT_ONLY
from mapper.errors import OptionsError

#: ``--precision`` values of ``mapper serve``; the 16-bit ones change nothing.
WEIGHTS = ("fp16", *FORMATS, *WEIGHT_ONLY)
#: ``--kv-precision`` values and their bytes per element.
KV = {"fp16": 2.0, "bf16": 2.0, "fp8": 1.0}


def weight_format(text: str | None) -> str | None:
    """The format the linear layers' GEMMs are marked with (None: the graph's 16-bit)."""
    if text is None or text in ("fp16", "bf16"):
        return None
    if text not in WEIGHTS:
        raise OptionsError(f"unknown precision {text!r}; choose one of {', '.join(WEIGHTS)}", obj="--precision")
    return text


def kv_format(text: str | None, weights: str | None, runtime: str) -> str:
    """``--kv-precision``, or the engine's default for the weights (module docstring)."""
    if text is None:
        return "fp8" if runtime in ("trtllm", "trtllm-pytorch") and weights in ("fp8", "mxfp8", "nvfp4") else "fp16"
    if text not in KV:
        raise OptionsError(f"unknown KV-cache precision {text!r}; choose one of {', '.join(KV)}",
                           obj="--kv-precision")
    return text


def stored_fraction(graph: TaskGraph, block: Block, fmt: str | None) -> float:
    """The bytes ``block``'s weights take stored with its marked GEMMs' weights in ``fmt``, over
    their 16-bit bytes."""
    per = ELEMENT_BYTES.get(fmt or "", WEIGHT_ONLY.get(fmt or ""))
    if per is None:
        return 1.0
    total = stored = 0.0
    seen: set[str] = set()
    for i in block.tasks:
        task = graph.tasks[i]
        for o in task.operands:
            if o.kind == "weight" and o.name not in seen:
                seen.add(o.name)
                nbytes = float(o.type.nbytes)
                total += nbytes
                stored += nbytes * per / DTYPE_BYTES.get(o.type.dtype, 2) if task.precision else nbytes
    return stored / total if total > 0 else 1.0

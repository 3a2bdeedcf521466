"""What ``--inference`` asks and what ``--runtime`` assumes (:mod:`mapper.serving`).

``--inference prefill=S_IN[,decode=S_OUT][,batch=B|auto]``: ``B`` sequences of ``S_IN``
prompt tokens each are prefilled at once (which yields each sequence's first
output token), then ``S_OUT`` decode steps each add one token per sequence
against a KV cache that grows from ``S_IN`` to ``S_IN + S_OUT - 1`` positions.
A request thus returns ``B (1 + S_OUT)`` tokens; ``decode=0`` prices the
prefill alone. ``batch=auto`` searches the batch (:mod:`mapper.serving.batch`).

``--runtime`` says how ops reach the GPU. ``graph`` (CUDA graphs, TensorRT,
FasterTransformer's C++ runtime): each kernel pays only its launch, which the
device's ``launch_us`` already holds. ``eager`` (PyTorch eager): the framework
also dispatches every op on the CPU, :data:`EAGER_DISPATCH_US` each, and the
GPU waits when the CPU falls behind. An eager implementation runs more
framework ops than the graph has ops: :data:`EAGER_OPS` counts them for the
composite ops, after Hugging Face transformers' ``modeling_llama.py``
(``LlamaRMSNorm``: to, pow, mean, add, rsqrt, mul, to, mul; ``apply_rotary_pos_emb``:
per q and k a mul, two slices, a neg, a cat, a mul and an add, and two
unsqueezes; the SDPA attention: q, k, v views and transposes, the cache's two
concatenations, ``repeat_kv``'s expand and reshape of k and v, the kernel, a
transpose and a reshape; ``LlamaMLP``: the activation and the product).
"""

from __future__ import annotations

from dataclasses import dataclass

from mapper.costing.eager import forward_kernels
from mapper.errors import OptionsError

#: The largest prompt, output length or batch a request may give.
MAX_TOKENS = 1 << 20

#: CPU time PyTorch eager spends dispatching one op (Python, the C++ dispatcher, the caching
#: allocator and cudaLaunchKernel). Fitted on one published row, checked on another source
#: (benchmarks/inference.py prints both): PyTorch, "Accelerating Generative AI with PyTorch II:
#: GPT, Fast" (2023): Llama-2-7B, batch 1, A100, eager 25.5 tokens/s; checked against
#: Megatron-LM's eager latencies over FasterTransformer's (NVIDIA/FasterTransformer
#: docs/gpt_guide.md, GPT-89B and GPT-175B on 8 A100s).
EAGER_DISPATCH_US = 23.0

#: Framework ops an eager implementation dispatches for one op of the graph (module docstring);
#: every other op is one. A bias ``add`` fused to its matmul is part of ``nn.Linear`` (addmm).
EAGER_OPS = {"rmsnorm": forward_kernels("rmsnorm"), "rotary": 16, "attention": 13, "swiglu": forward_kernels("swiglu")}
#: The KV cache's two concatenations (``DynamicCache.update``) in a decode step's attention.
EAGER_CACHE_OPS = 2

RUNTIMES = ("graph", "eager")


@dataclass(frozen=True, slots=True)
class Request:
    """``batch`` sequences: ``prefill`` prompt tokens each, then ``decode`` generation steps."""

    prefill: int
    decode: int = 0
    batch: int = 1
    auto_batch: bool = False  # ``batch=auto``: the batch is searched (:mod:`mapper.serving.batch`)

    @property
    def tokens(self) -> int:
        """Output tokens of the request, all sequences: the prefill's and one per decode step."""
        return self.batch * (1 + self.decode)

    @property
    def context(self) -> int:
        """KV-cache positions per sequence at the end of the request."""
        return self.prefill + self.decode

    def to_json(self) -> dict[str, int | bool]:
        return {"prefill": self.prefill, "decode": self.decode, "batch": self.batch, "batch_auto": self.auto_batch}


def parse_inference(text: str) -> Request:
    """The :class:`Request` of ``--inference prefill=S_IN[,decode=S_OUT][,batch=B|auto]``."""
    values: dict[str, int] = {}
    auto = False
    for item in (p.strip() for p in text.split(",")):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in ("prefill", "decode", "batch"):
            raise OptionsError(f"expected prefill=S_IN[,decode=S_OUT][,batch=B|auto], got {item!r}",
                               obj="--inference")
        if key in values or (key == "batch" and auto):
            raise OptionsError(f"{key} is given twice", obj="--inference")
        digits = value.strip()
        if key == "batch" and digits == "auto":
            auto = True
            continue
        bare = digits.removeprefix("-")
        if not (bare.isascii() and bare.isdigit()) or len(bare) > 9:  # ASCII digits, as layouts read them
            raise OptionsError(f"{key} must be a whole number, got {digits!r}", obj="--inference")
        number = int(digits)
        low = 0 if key == "decode" else 1
        if not low <= number <= MAX_TOKENS:
            raise OptionsError(f"{key} must be from {low} to {MAX_TOKENS}, got {number}", obj="--inference")
        values[key] = number
    if "prefill" not in values:
        raise OptionsError("give the prompt length: prefill=S_IN", obj="--inference")
    return Request(values["prefill"], values.get("decode", 0), values.get("batch", 1), auto)


def check_runtime(runtime: str) -> str:
    if runtime not in RUNTIMES:
        raise OptionsError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}", obj="--runtime")
    return runtime


def framework_ops(ops: tuple[str, ...], decode: bool) -> int:
    """Framework ops eager PyTorch dispatches for a kernel made of ``ops`` (a fused task's parts)."""
    n = 0
    for i, op in enumerate(ops):
        if op == "add" and i > 0 and ops[i - 1] == "matmul":
            continue  # the bias of nn.Linear
        n += EAGER_OPS.get(op, 1) + (EAGER_CACHE_OPS if op == "attention" and decode else 0)
    return n


def stream_finishes(kernels: list[tuple[float, int]], dispatch: float) -> list[float]:
    """When each of ``kernels`` (seconds, framework ops) ends on a GPU fed by one CPU thread that
    spends ``dispatch`` seconds per framework op: the GPU starts a kernel when it is free and the
    CPU has issued it (the CPU runs ahead asynchronously; a sync-free stream)."""
    cpu = gpu = 0.0
    out = []
    for seconds, ops in kernels:
        cpu += ops * dispatch
        gpu = max(gpu, cpu) + seconds
        out.append(gpu)
    return out


def stream_time(kernels: list[tuple[float, int]], dispatch: float) -> float:
    """Seconds the stream of :func:`stream_finishes` takes."""
    ends = stream_finishes(kernels, dispatch)
    return ends[-1] if ends else 0.0

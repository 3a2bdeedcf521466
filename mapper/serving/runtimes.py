"""What ``mapper serve --runtime`` assumes of an in-flight batching engine (:mod:`mapper.serving.inflight`).

Each field is the engine's own default, from its documentation or source:

* ``trtllm``: TensorRT-LLM's C++ batch manager (release v0.17). KV cache: ``free_gpu_memory_fraction``
  0.9 of the memory free after the engine (weights) and its activation workspace are loaded
  (``KvCacheConfig``, docs/source/performance/perf-benchmarking.md: "the default setting of
  0.90"), in blocks of 64 tokens (``trtllm-build --tokens_per_block`` default 64);
  ``max_batch_size`` 2048 and ``max_num_tokens`` 8192 (``trtllm-build`` defaults); chunked
  context (Sarathi-Serve's chunked prefill); scheduler ``GUARANTEED_NO_EVICT`` (its default
  ``CapacitySchedulerPolicy``): a request is admitted only when blocks for its whole prompt and
  output are free, so nothing is ever evicted.
  Its ``front`` (below) is :data:`TRTLLM_FRONT`: the cost per request outside the GPU's steps (the
  request's enqueue, the host's sampling and copy of its first token), **fitted** on one row of
  TensorRT-LLM v0.5's "Low Latency" table (docs/source/performance.md: Llama 2 7B in FP8 on one
  H100, 128-token prompt, 7 ms to the first token, of which the steps give 4.5) and checked on its
  seven others by ``benchmarks/serving_online.py``.
* ``vllm``: vLLM's V1 engine (0.8). ``gpu_memory_utilization`` 0.9 of the GPU's whole memory for
  weights, activations and KV cache together, in blocks of 16 tokens (``block_size`` default
  16); ``max_num_seqs`` 256 and ``max_num_batched_tokens`` 8192 with chunked prefill
  (``EngineArgs`` defaults for the OpenAI server on a data-centre GPU); blocks are taken as tokens
  are computed, and when a running sequence cannot grow the most recently admitted one is
  preempted and later recomputed (Kwon et al., "vLLM", SOSP 2023, section 4.5: recomputation).
* ``sglang``: SGLang v0.3.0's scheduler (``--disable-radix-cache``): ``mem_fraction_static`` 0.88 of
  the whole GPU memory, one-token pages, up to 2,048 running requests (its request pool),
  ``chunked_prefill_size`` 8,192 and prefill-first steps (``enable_mixed_chunk`` off). Its front end
  (HTTP server, tokenizer-manager and detokenizer processes and their ZMQ hops) delays each request
  by :data:`SGLANG_FRONT` before the scheduler sees it: no source read publishes that latency, so
  it is **fitted** on one row (Llama 3.1 8B on an A100 at 4 requests/s, median time to first
  token) and checked on the other online rows by ``benchmarks/serving_online.py``.
* ``eager``: vLLM's scheduler (as ``vllm``) with ``enforce_eager=True`` (``EngineArgs``: "Always use
  eager-mode PyTorch"), the way a PyTorch model served without CUDA graphs or a compiled engine
  runs: every framework op is dispatched from Python on the CPU, :data:`EAGER_DISPATCH_US` each
  (Python, the C++ dispatcher, the caching allocator and ``cudaLaunchKernel``; fitted on PyTorch's
  eager Llama-2-7B row of "Accelerating Generative AI with PyTorch II: GPT, Fast", 2023, and
  checked on Megatron-LM's eager latencies, benchmarks/inference.py, and on the smallest of
  LLMCompass's eager GEMM timings, benchmarks/gemm_tiles.py). A kernel shorter than its dispatch leaves the
  GPU waiting, so each call costs at least its framework ops' dispatch: a per-call floor that
  decode steps of small models hit on their norms, rotary and element-wise kernels.

* ``trtllm-pytorch``: TensorRT-LLM's PyTorch backend (the ``trtllm-bench --backend pytorch`` runs of
  the v0.19-and-later tables, docs/source/performance/perf-overview.md at release v1.0) as
  ``trtllm`` (scheduler, KV fraction, limits), with the CUDA-graph configuration that page gives
  for its dense-model runs: graphs captured at the batch sizes :data:`TRTLLM_PYTORCH_GRAPHS` and
  ``enable_padding: true``, so a decode-only step is padded up to the next captured size
  (``graphs``; :mod:`mapper.serving.iteration`: "batches are rounded up to the nearest
  cuda_graph_batch_size", ``CudaGraphConfig`` in ``tensorrt_llm/llmapi/llm_args.py``). A step that
  holds a prompt chunk runs without a graph and unpadded. The engine keeps the sizes up to the
  largest batch of decodes it can schedule, the smaller of its max batch and max tokens, and pads
  to that largest batch where a listed size exceeds it (:func:`captured`;
  ``_filter_cuda_graph_batch_sizes``, ``tensorrt_llm/_torch/pyexecutor/model_engine.py``).

The other runtimes run their steps from CUDA graphs or a compiled engine, which removes that floor (a
graph's kernels are launched by one CPU call: NVIDIA, "Getting Started with CUDA Graphs", 2019;
PyTorch, "Accelerating PyTorch with CUDA Graphs", 2021; vLLM captures its decode steps in CUDA
graphs unless ``enforce_eager``): a step costs its kernels and their
launches (the device's ``launch_us``), as :mod:`mapper.serving.request`'s ``graph`` runtime
prices them. Host-side scheduling is taken as hidden behind the GPU (TensorRT-LLM's C++ runtime;
vLLM V1's separate engine-core process): no per-step overhead is added, since neither engine
publishes one; docs/serving.md lists this among what the model leaves out. ``overhead`` is the
host time an engine whose scheduler runs in the GPU's loop adds per scheduling decision (once per
multi-step run, :mod:`mapper.serving.inflight`): vLLM's V0 engine, about 4 ms (its RFC
"Multi-Step Scheduling", vllm-project/vllm issue 6854), as ``benchmarks/serving_online.py`` sets
for vLLM v0.6.0.

Two scheduler policies are fields with these engines' values as defaults (both mix prompt chunks
into decode steps, both decide every step); :mod:`mapper.serving.inflight` gives them meaning:
``mixed=False`` is the prefill-first schedule of vLLM's V0 engine with chunked prefill off (its
default up to 32K-token contexts) and of SGLang's default, ``steps=n`` vLLM V0's
``--num-scheduler-steps n`` and ``lag=1`` its asynchronous output processing;
``benchmarks/serving_online.py`` sets them as the runs it checks used them.

``stream`` is the host time per token a streaming run returns each step
(:mod:`mapper.serving.inflight`); the built-in runtimes leave it 0, as ``trtllm-bench
throughput`` and the offline tables run without streaming; ``benchmarks/serving_online.py``
fits TensorRT-LLM's on MLPerf's one Server row where the harness streams and checks it on the others.

``dispatch`` is how requests are dealt to replicas (:mod:`mapper.serving.dispatch`). The built-in
runtimes deal them round-robin: each engine serves one replica, and what spreads requests over
several is the deployment's router, not the engine (SGLang's router defaults to prefix affinity,
``cache_aware``, with a least-loaded fallback once the load is out of balance, and offers
``round_robin``: docs/serving.md). NVIDIA's MLPerf harness sends each request to the least-loaded
replica, and ``benchmarks/serving_online.py`` sets that for its rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from mapper.errors import OptionsError
from mapper.serving.request import EAGER_DISPATCH_US


@dataclass(frozen=True, slots=True)
class Runtime:
    name: str
    block: int  # tokens per KV block
    kv_fraction: float
    of_total: bool  # kv_fraction of the whole memory (vLLM) or of what is free after weights and workspace
    max_batch: int
    chunk: int  # tokens per step (max_num_tokens)
    reserve_output: bool  # admission reserves blocks for the whole output (no eviction)
    overhead: float = 0.0  # host seconds per scheduling decision not hidden behind the GPU (module docstring)
    mixed: bool = True  # prompt chunks and decodes share a step; False: prefill-first steps
    steps: int = 1  # decode steps per scheduling decision (multi-step scheduling)
    lag: int = 0  # steps before a computed token is returned (asynchronous output processing)
    dispatch_us: float = 0.0  # CPU microseconds per framework op, each call's floor (0: CUDA graphs)
    front: float = 0.0  # seconds from a request's arrival until the scheduler sees it (front-end processes)
    stream: float = 0.0  # host seconds per streamed token per step (0: responses at the end only)
    dispatch: str = "round-robin"  # how requests are dealt to replicas (mapper.serving.dispatch)
    graphs: tuple[int, ...] = ()  # CUDA-graph batch sizes a decode-only step is padded up to (empty: no padding)


#: TensorRT-LLM's cost per request outside the steps, seconds: fitted (module docstring).
TRTLLM_FRONT = 0.0025
#: SGLang v0.3.0's front-end latency per request, seconds: fitted (module docstring).
SGLANG_FRONT = 0.0093
#: The CUDA-graph batch sizes of TensorRT-LLM's published PyTorch-backend runs (perf-overview.md,
#: release v1.0, ``llm_options.yml``: ``cuda_graph_config.batch_sizes``, ``enable_padding: true``).
TRTLLM_PYTORCH_GRAPHS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192)


RUNTIMES = {
    "trtllm": Runtime("trtllm", 64, 0.9, False, 2048, 8192, True, front=TRTLLM_FRONT),
    "trtllm-pytorch": Runtime("trtllm-pytorch", 64, 0.9, False, 2048, 8192, True, front=TRTLLM_FRONT,
                              graphs=TRTLLM_PYTORCH_GRAPHS),
    "vllm": Runtime("vllm", 16, 0.9, True, 256, 8192, False),
    "sglang": Runtime("sglang", 1, 0.88, True, 2048, 8192, False, mixed=False, front=SGLANG_FRONT),
    "eager": Runtime("eager", 16, 0.9, True, 256, 8192, False, dispatch_us=EAGER_DISPATCH_US),
}


def captured(graphs: tuple[int, ...], max_batch: int, chunk: int) -> tuple[int, ...]:
    """The CUDA-graph batch sizes an engine of ``max_batch`` sequences and ``chunk`` tokens a step
    captures from ``graphs`` (module docstring: those up to the largest decode batch, and that
    batch itself when a listed size exceeds it)."""
    top = min(max_batch, chunk)
    kept = {g for g in graphs if g <= top}
    if any(g > top for g in graphs):
        kept.add(top)
    return tuple(sorted(kept))


def get_runtime(name: str) -> Runtime:
    if name not in RUNTIMES:
        raise OptionsError(f"unknown serving runtime {name!r}; choose one of {', '.join(RUNTIMES)}",
                           obj="--runtime")
    return RUNTIMES[name]

"""The probe tasks: small graphs per op class, timed with the kernels and
predicted with the model (:func:`run_probes`)."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import numpy as np

from mapper.core.ops import OP_CLASSES
from mapper.costing.cost import build_cost_table
from mapper.costing.efficiency import op_class, rate_dtype
from mapper.costing.work import (
    gemm_cold,
    gemm_dims,
    im2col_bytes,
    in_cache_bytes,
    kernel_flops,
    vector_length,
    working_set,
)
from mapper.platform.loader import Platform
from mapper.run.calibration.records import Probe

#: GEMM shapes ``(M, N, K)`` of the matmul probes: a small design over 48 to
#: 3072 in each dimension (each dimension short in some probes while the
#: others are long), for :func:`gemm_fit`, and three shapes with a short
#: ``N`` that is not a multiple of 16 (25, 41, 100; ResNet-50's last stage
#: has N = 49, and without these its 1x1 and 3x3 layers there were 5-7 %
#: under, with them -3 to +10 %). Each does at least 50 MFLOP, so
#: that no probe is mostly launch overhead (a 3072 x 48 x 48 probe of 14 MFLOP,
#: a fifth of a millisecond, pulled the half-length fit's N and K lengths to 0
#: and ResNet's 49-pixel layers to -45 %).
GEMM_PROBE_SHAPES: tuple[tuple[int, int, int], ...] = (
    (48, 1536, 384), (96, 3072, 96), (384, 3072, 48), (1536, 384, 96), (384, 48, 1536), (1536, 96, 384),
    (96, 384, 1536), (384, 384, 384), (1536, 1536, 192), (192, 1536, 1536), (768, 768, 768), (1536, 48, 1536),
    (1024, 41, 1024), (768, 100, 512), (2048, 25, 768),
)

#: ``(tokens, sequence length)`` of the attention probes (12 heads of 64): one
#: to four sequences of 64 to 512 tokens, so that :func:`_fit` can tell a
#: fixed time per call from the short sequences' lower rate.
ATTENTION_PROBES: tuple[tuple[int, int], ...] = ((128, 64), (256, 64), (512, 128), (256, 256), (512, 512))

#: Probe tasks per op class (moderate sizes: milliseconds each), as
#: ``(class, op variant or dtype key, body)``. The GEMM shapes above run as
#: ``matmul(input, weight)`` and as ``matmul(weight, input)`` (the weight, read
#: from memory, as ``B`` and as ``A``, as conv2d calls its GEMM); conv2d has
#: seven layers (3x3, 1x1, 7x7 stride 2, 1x1 stride 2, batch 1) for the im2col
#: rate beside the GEMM model. Classes with a fixed cost per call have the
#: same kernel at two or more amounts of work (stencil: 1 and 8 sweeps on two
#: grids; attention: :data:`ATTENTION_PROBES`, unmasked and causal; fft:
#: rows of 1024 to 32768 points and a small 4 x 4096; add, layernorm,
#: batchnorm and relu at two sizes each, the smaller one well under a
#: millisecond, where a parallel loop's fixed cost shows), so that
#: :func:`model_entries` can fit
#: Hockney's fixed time beside the rate. Classes with several kernels (norm:
#: layernorm, batchnorm; fft: fft, ifft) have a probe per kernel, and each op
#: its own entry. A probe keyed by an op variant (``reduce.max``, a different
#: loop from ``sum``; ``attention.causal``, masked scores) or a dtype
#: (``elementwise:f64``: Numba loops do not run at half the rate in f64 as
#: the BLAS peaks do) feeds only that key's entry.
#: The sizes form a small grid chosen around typical uses, not the benchmark
#: examples' shapes.
PROBES: tuple[tuple[str, str], ...] = (
    *(("gemm", f"input a : f32[{m}, {k}]\n  y = matmul(a, weight f32[{k}, {n}])") for m, n, k in GEMM_PROBE_SHAPES),
    *(("gemm", f"input b : f32[{k}, {n}]\n  y = matmul(weight f32[{m}, {k}], b)") for m, n, k in GEMM_PROBE_SHAPES),
    ("conv", "input x : f32[1, 3, 160, 160]\n  y = conv2d(x, weight f32[32, 3, 7, 7], stride = 2, padding = 3)"),
    ("conv", "input x : f32[1, 256, 28, 28]\n  y = conv2d(x, weight f32[512, 256, 1, 1], stride = 2)"),
    ("conv", "input x : f32[1, 64, 56, 56]\n  y = conv2d(x, weight f32[64, 64, 3, 3], padding = 1)"),
    ("conv", "input x : f32[1, 128, 28, 28]\n  y = conv2d(x, weight f32[128, 128, 3, 3], padding = 1)"),
    ("conv", "input x : f32[1, 512, 28, 28]\n  y = conv2d(x, weight f32[128, 512, 1, 1])"),
    ("conv", "input x : f32[1, 256, 16, 16]\n  y = conv2d(x, weight f32[256, 256, 3, 3], padding = 1)"),
    ("conv", "input x : f32[1, 256, 9, 9]\n  y = conv2d(x, weight f32[256, 256, 3, 3], padding = 1)"),
    *(("attention", f"input x : f32[{t}, 2304]\n  y = attention(x, heads = 12, seq = {seq})")
      for t, seq in ATTENTION_PROBES),
    *(("attention.causal", f"input x : f32[{t}, 2304]\n  y = attention(x, heads = 12, seq = {seq}, causal = 1)")
      for t, seq in ATTENTION_PROBES),
    ("activation", "input x : f32[1024, 1024]\n  y = gelu(x)"),
    ("relu", "input x : f32[1, 256, 56, 56]\n  y = relu(x)"),
    ("relu", "input x : f32[1, 1024, 14, 14]\n  y = relu(x)"),
    ("elementwise", "input a : f32[1024, 1024]\n  input b : f32[1024, 1024]\n  y = add(a, b)"),
    ("elementwise", "input a : f32[256, 512]\n  input b : f32[256, 512]\n  y = add(a, b)"),
    ("elementwise:f64", "input a : f64[1024, 1024]\n  input b : f64[1024, 1024]\n  y = add(a, b)"),
    ("elementwise:c64", "input a : c64[256, 4096]\n  input b : c64[1, 4096]\n  y = mul(a, b)"),
    ("norm", "input x : f32[1024, 1024]\n  y = layernorm(x)"),
    ("norm", "input x : f32[128, 768]\n  y = layernorm(x)"),
    ("norm", "input x : f32[1, 256, 56, 56]\n  y = batchnorm(x)"),
    ("norm", "input x : f32[1, 128, 28, 28]\n  y = batchnorm(x)"),
    ("pool", "input x : f32[8, 64, 56, 56]\n  y = maxpool(x, kernel = 2)"),
    ("pool", "input x : f32[4, 64, 64, 64]\n  y = maxpool(x, kernel = 3, stride = 2, padding = 1)"),
    ("pool", "input x : f32[1, 16, 224, 224]\n  y = maxpool(x, kernel = 3, stride = 2, padding = 1)"),
    ("reduction", "input x : f32[4194304]\n  y = reduce(x, kind = \"sum\")"),
    ("reduction:f64", "input x : f64[2097152]\n  y = reduce(x, kind = \"sum\")"),
    ("reduce.max", "input x : f32[1048576]\n  y = reduce(x, kind = \"max\")"),
    ("reduce.max", "input x : f32[4194304]\n  y = reduce(x, kind = \"max\")"),
    ("reduce.max:f64", "input x : f64[2097152]\n  y = reduce(x, kind = \"max\")"),
    ("stencil", "input x : f64[512, 512]\n  y = stencil(x, points = 5, steps = 1)"),
    ("stencil", "input x : f64[512, 512]\n  y = stencil(x, points = 5, steps = 8)"),
    ("stencil", "input x : f64[896, 896]\n  y = stencil(x, points = 5, steps = 1)"),
    ("stencil", "input x : f64[896, 896]\n  y = stencil(x, points = 5, steps = 8)"),
    ("sparse", "weight A : f64[262144, 262144] csr(nnz = 1310720)\n  input x : f64[262144]\n  y = spmv(A, x)"),
    ("fft", "input x : c64[256, 1024]\n  y = fft(x)"),
    ("fft", "input x : c64[32, 8192]\n  y = fft(x)"),
    ("fft", "input x : c64[4, 4096]\n  y = fft(x)"),
    ("fft", "input x : c64[8, 32768]\n  y = fft(x)"),
    ("fft", "input x : c64[256, 1024]\n  y = ifft(x)"),
)


def run_probes(plat: Platform, passes: int = 9, between: Callable[[], None] | None = None) -> tuple[Probe, ...]:
    """Time each probe task with the kernels and predict it with the model on
    ``plat``. After an untimed warm-up call of each, the probes run in
    ``passes`` passes; in each, every probe's inputs are read (a reduction
    over each) and then the probe is called and timed. So its inputs are in
    the cache, as in a graph, where a task's inputs were written just before
    by its producers, and its weights are not, as a graph's weights, last
    used a pass earlier, are not (the other probes evicted them): probes with
    everything cold ran memory-bound kernels up to 2x slower than inside the
    examples, probes called twice in a row (weights hot) ran GEMMs 10-17 %
    faster. Probes of streaming classes (:data:`MEMORY_CLASSES`, which have
    no weights) are called once untimed instead, so that their output buffer,
    recycled from the call before, is in the cache too, as a buffer a graph's
    consumer has just freed is (with only their inputs read first, the
    examples' elementwise tasks ran 15-60 % faster than predicted). The
    passes spread a probe's timed calls over the whole measurement, as the
    executor's passes do
    (:class:`mapper.run.execute.Execution`). A probe's time is the median of its
    calls, the statistic the executor reports. ``between``, when given, is
    called after each pass."""
    from mapper.frontend.load import graph_from_text
    from mapper.kernels import registry as k
    from mapper.run.execute import TensorStore, time_call

    dev = plat.devices[0]
    setup = []
    for i, (key, body) in enumerate(PROBES):
        graph = graph_from_text(f"graph probe_{i} {{\n  {body}\n  output y\n}}\n", f"<probe {key}>")
        task = graph.tasks[-1]
        setup.append((graph, task, TensorStore(graph, 0, k).operands(task), dict(task.attrs)))
    calls = [(lambda task=task, args=args, attrs=attrs: k.run_kernel(task.op, args, attrs))
             for _, task, args, attrs in setup]
    inputs = [[a for op, a in zip(task.operands, args) if op.kind == "input" and isinstance(a, np.ndarray)]
              for _, task, args, _ in setup]
    for call in calls:
        call()  # warm-up: compile
    samples: list[list[float]] = [[] for _ in PROBES]
    streaming = [streams(task.op) for _, task, _, _ in setup]
    for _ in range(max(passes, 1)):
        for i, call in enumerate(calls):
            if streaming[i]:
                call()  # inputs and a recycled output buffer in the cache, as in a graph
            else:
                for a in inputs[i]:  # inputs into the cache, as a producer leaves them; weights stay cold
                    np.add.reduce(a, axis=None)
            samples[i].append(time_call(call)[1])
        if between is not None:
            between()
    out = []
    for (key, _), (graph, task, _, _), times in zip(PROBES, setup, samples):
        cost = build_cost_table(graph, plat)
        assert task.output is not None  # every probe is an op call
        shape = ", ".join(str(x) for x in task.output.shape)
        dims = gemm_dims(task)
        out.append(Probe(op_class(task.op), f"{task.op} -> [{shape}]", statistics.median(times),
                         cost.time[task.index][0], cost.bound[task.index][0], kernel_flops(task), task.bytes,
                         dev.launch_us * 1e-6, rate_dtype(dev, task.dtype) or task.dtype,
                         "" if key in OP_CLASSES else key, working_set(task), vector_length(task) or 0,
                         dims or (), im2col_bytes(task), gemm_cold(task) if dims else (), in_cache_bytes(task)))
    return tuple(out)


#: Op classes whose kernels stream their operands: their probes give a
#: per-op fraction of the bandwidth (``memory_efficiency``), so that the model's
#: time follows their bytes (``sub`` moves 3 arrays, ``abs`` 2), not their FLOPs.
#: A stencil's sweeps reuse cache lines that its byte count charges each sweep,
#: so its fraction may exceed 1 (up to ``MAX_STREAM_FRACTION``).
MEMORY_CLASSES = ("elementwise", "norm", "reduction", "stencil")

#: Ops of other classes whose kernels stream their operands too (``relu``, one
#: compare per element, beside ``gelu``'s tanh in the activation class): each
#: gets its own ``memory_efficiency`` entry from its own probes, and the cost
#: model then leaves its class's fitted compute efficiency alone
#: (:func:`mapper.costing.efficiency.fitted_keys`). Priced at gelu's rate, a relu was
#: predicted 3-6x slower than it ran.
STREAMING_OPS = ("relu",)


def streams(op: str) -> bool:
    """Whether ``op``'s probes give a fraction of the bandwidth
    (:data:`MEMORY_CLASSES`, :data:`STREAMING_OPS`) rather than of the peak."""
    return op_class(op) in MEMORY_CLASSES or op in STREAMING_OPS

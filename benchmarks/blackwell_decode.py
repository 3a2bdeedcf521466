"""One B200 decode step of Llama 3.3 70B in NVFP4, cut into parts and each part set against
published Blackwell kernel timings.

    python benchmarks/blackwell_decode.py

The step is the one ``benchmarks/serving_blackwell.py`` simulates for TensorRT-LLM v1.0's 128/2048
row on one B200 (``--runtime trtllm-pytorch --kv-fraction 0.95 --precision nvfp4 --kv-precision
fp8``, 1,000 requests at once, ``trtllm-bench``'s limits: max batch 512, 2,048 tokens a step).
Printed:

1. the run: concurrency, output tokens/s against the published 9,922, the mean step of the steady
   decode phase and the step the published figure implies at the same schedule;
2. the step by part at that concurrency and mean cache length: the four GEMMs of a layer by shape
   (NVFP4, each at the token rows the step runs: the concurrency padded up to the next CUDA graph
   batch size, and unpadded), attention over the FP8 cache, norms, rotary and SwiGLU, the LM head
   (16-bit: NVIDIA's FP4 checkpoint leaves it unquantised); no all-reduce at TP1; sampling and
   host time are not priced (the runtimes' module docstring);
3. decode attention against FlashInfer's ``trtllm_batch_decode_with_kv_cache`` (the
   TensorRT-LLM trtllm-gen kernel) on a B200, FP8 query and cache, 64 query and 8 KV heads of 128,
   16-token pages (vllm-project/vllm pull request 23647, ``benchmarks/kernels/
   benchmark_trtllm_decode_attention.py``; its cache lengths are uniform in [1, max) with the last
   at max): the published times hold a fixed 40-50 us of host-side event timing (a batch of one
   takes 41 us), so the check is the slope, microseconds per million cached positions, between
   the max lengths 1,024 and 2,048 at one batch;
4. the GEMMs' shapes against the block-scaled microbenchmarks ``benchmarks/blackwell_gemm.py``
   fits and checks (for the rows 512 and 1,024 tall, nearest the padded step's).
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from blackwell_gemm import b200, ratio  # noqa: E402
from serving import KV_FRACTION, LLAMA, MODELS  # noqa: E402
from serving_blackwell import bench_limits  # noqa: E402

from mapper.frontend.sources import ModelFile  # noqa: E402
from mapper.serving.iteration import Batch  # noqa: E402
from mapper.serving.metrics import Slo  # noqa: E402
from mapper.serving.runtimes import RUNTIMES  # noqa: E402
from mapper.serving.serve import server_for  # noqa: E402
from mapper.serving.workload import Arrival, arrivals  # noqa: E402

ISL, OSL, REQUESTS, PUBLISHED = 128, 2048, 1000, 9922.0  # perf-overview.md v1.0, Llama 3.3 70B, B200 TP1 FP4
HIDDEN, FFN, HEADS, KV_HEADS, HEAD_DIM = 8192, 28672, 64, 8, 128
#: a layer's GEMMs in the order the graph runs them: name, N, K
GEMMS = (("qkv", (HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN), ("o_proj", HIDDEN, HEADS * HEAD_DIM),
         ("gate_up", 2 * FFN, HIDDEN), ("down", HIDDEN, FFN))
PR23647 = "vllm-project/vllm#23647 (B200, FlashInfer trtllm-gen decode, FP8 q/kv, bf16 out)"
#: (batch, max cache length, measured ms)
ATTENTION = ((128, 1024, 0.060), (128, 2048, 0.079), (256, 1024, 0.079), (256, 2048, 0.111))
#: (M, N, K, TFLOP/s measured, source): the microbenchmark rows nearest the step (benchmarks/blackwell_gemm.py)
GEMM_ROWS = ((512, 6144, 4096, 2188.0, "vllm-project/vllm#20578 (CUTLASS)"),
             (1024, 6144, 4096, 2895.0, "vllm-project/vllm#20578 (CUTLASS)"),
             (1024, 7168, 4608, 3840.7, "flashinfer-ai/flashinfer#1979 (mm_fp4)"))


def _positions(batch: int, longest: int) -> float:
    """Expected cached positions of the benchmark's batch: uniform in [1, longest), the last at longest."""
    return (batch - 1) * longest / 2 + longest


def main() -> int:
    runtime = replace(RUNTIMES["trtllm-pytorch"], kv_fraction=KV_FRACTION)
    server = server_for(ModelFile(LLAMA, params=MODELS["70B"]), "dgx-b200", runtime, "auto", "nvfp4", "fp8")
    batch_limit, tokens = bench_limits("70B", 1, "B200", "nvfp4", ISL, OSL)
    plan = server.plan({"tensor": 1, "pipeline": 1, "replicas": 1, "max_batch": batch_limit, "chunk": tokens})
    out = server.run(plan, arrivals([Arrival(None, ISL, OSL)] * REQUESTS, float("inf"), 0), Slo())
    got = float(out.metrics["output_tokens_per_s"])  # type: ignore[arg-type]
    steps = out.runs[0].timeline
    ends = [t for t, *_ in steps]
    third = len(steps) // 3
    lengths = [b - a for a, b in zip(ends[third:2 * third], ends[third + 1:2 * third + 1])]
    held = [n for _, n, *_ in steps[third:2 * third]]
    step_s = statistics.mean(lengths)
    conc = round(statistics.median(held))
    print(f"Llama 3.3 70B NVFP4, one B200, {ISL}/{OSL}, {REQUESTS:,} requests at once (mapper serve ... --runtime "
          f"trtllm-pytorch --kv-fraction {KV_FRACTION} --precision nvfp4 --kv-precision fp8):")
    print(f"  output tokens/s {got:,.0f} against {PUBLISHED:,.0f} published ({got / PUBLISHED:.2f}); "
          f"{conc} sequences a step in the middle third, mean step {step_s * 1e3:.1f} ms; the published figure "
          f"implies {step_s * got / PUBLISHED * 1e3:.1f} ms at the same schedule")

    model = server.step_model(1, 1, plan.chunk, plan.max_batch)
    context = ISL + OSL / 2  # mean cache length of a decode in the steady phase
    batch = Batch(conc, conc, conc * context, 0.0, conc)
    rows = model.padded(batch).tokens
    print(f"\nThe decode step of {conc} sequences at a mean cache of {context:,.0f} positions: each kernel priced "
          f"alone on {rows} rows (the next CUDA graph batch size) and on {conc}:")
    layers = sum(model.layers)
    parts: dict[str, tuple[float, float]] = {}
    for n in (rows, conc):
        prof = server.prices.profile(n)
        gemm = iter(GEMMS)
        seen: set[int] = set()
        for b, blk in enumerate(prof.blocks):
            if blk.signature in seen:
                continue
            seen.add(blk.signature)
            count = sum(1 for x in prof.blocks if x.signature == blk.signature)
            for seconds, ops, _ in server.prices.cost(prof, b, 1).kernels:
                if "attention" in ops:
                    continue
                if "matmul" in ops:
                    name = next(gemm, ("lm_head", 0, 0))[0] if count > 1 else "lm_head"
                else:
                    name = "norms, rotary, SwiGLU, embedding"
                was = parts.get(name, (0.0, 0.0))
                parts[name] = (was[0] + (seconds * count if n == rows else 0.0),
                               was[1] + (seconds * count if n != rows else 0.0))
    attention = layers * (model.alpha + model.beta_decode * batch.decode_context)
    total = sum(p for p, _ in parts.values()) + attention
    plain = sum(u for _, u in parts.values()) + attention
    print(f"  {'part':<34} {f'{rows} ms':>9} {f'{conc} ms':>9} {'share':>6}  TFLOP/s ({rows} rows)")
    shapes = {name: (nn, kk) for name, nn, kk in GEMMS}
    for name, (p, u) in parts.items():
        rate = ""
        if name in shapes:
            nn, kk = shapes[name]
            rate = f"{2 * rows * nn * kk * layers / p / 1e12:,.0f} (M {rows} x N {nn:,} x K {kk:,})"
        print(f"  {name:<34} {p * 1e3:>9.2f} {u * 1e3:>9.2f} {p / total:>6.1%}  {rate}")
    print(f"  {'attention over the FP8 cache':<34} {attention * 1e3:>9.2f} {attention * 1e3:>9.2f} "
          f"{attention / total:>6.1%}  {2 * KV_HEADS * HEAD_DIM / model.beta_decode / 1e12:.2f} TB/s of cache read")
    print(f"  {'all-reduce (TP1), sampling, host':<34} {0.0:>9.2f} {0.0:>9.2f} {0.0:>6.1%}  not priced")
    print(f"  {'step':<34} {total * 1e3:>9.2f} {plain * 1e3:>9.2f}")
    flat = server_for(ModelFile(LLAMA, params=MODELS["70B"]), "dgx-b200", replace(runtime, graphs=()), "auto",
                      "nvfp4", "fp8").step_model(1, 1, plan.chunk, plan.max_batch)
    print(f"  the step model (GEMMs at whole tiles up to {model.tiled[1]:,} tokens, the other kernels interpolated "
          f"between its priced token counts): padded {model.step(batch) * 1e3:.2f} ms, unpadded "
          f"{flat.step(batch) * 1e3:.2f} ms")

    print(f"\nDecode attention per layer against {PR23647}:")
    print(f"  {'batch':>5} {'max len':>7} {'measured us':>11} {'model us':>8}")
    for b, longest, ms in ATTENTION:
        mine = model.alpha + model.beta_decode * _positions(b, longest)
        print(f"  {b:>5} {longest:>7,} {ms * 1e3:>11.1f} {mine * 1e6:>8.1f}")
    for b in (128, 256):
        (_, lo, t_lo), (_, hi, t_hi) = [r for r in ATTENTION if r[0] == b]
        slope = (t_hi - t_lo) * 1e3 / ((_positions(b, hi) - _positions(b, lo)) / 1e6)
        print(f"  batch {b}: slope {slope:.0f} us per million positions measured, model "
              f"{model.beta_decode * 1e12:.0f} (fixed part measured {t_lo * 1e3 - slope * _positions(b, lo) / 1e6:.0f} "
              f"us, host-side timing included; model {model.alpha * 1e6:.1f})")

    print("\nNVFP4 GEMMs near the step's rows (benchmarks/blackwell_gemm.py), predicted / measured time "
          "without the launch:")
    for m, n, k, tflops, src in GEMM_ROWS:
        print(f"  M {m:>5} N {n:>5,} K {k:>5,}: measured {tflops:>6,.0f} TFLOP/s, ratio "
              f"{ratio(b200(), 'nvfp4', m, n, k, tflops, launch=False):.2f}  {src}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

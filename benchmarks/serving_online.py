"""``mapper serve`` against published online serving runs, MLPerf and first-token rows.

    python benchmarks/serving_online.py [--quick]

The same model as ``benchmarks/serving.py`` (``examples/llama.tg``, the cost model, the in-flight
batching simulator), not retuned to any row; each engine is described by its published defaults
and the flags of the run (:mod:`mapper.serving.runtimes`). Three sources:

1. **Online runs at set request rates** (SGLang v0.3.0 against vLLM v0.6.0:
   sgl-project/sglang ``benchmark/benchmark_vllm_060/README.md`` at commit 120affb9613c, September
   2024): Llama 3.1 8B Instruct on one A100-80GB and 70B Instruct on 4 x H100-80GB in 16-bit,
   ShareGPT prompts, Poisson arrivals at 4 and 8 requests/s (1,200 and 2,400 prompts), median
   TTFT, TPOT and end-to-end latency; and every prompt at once (5,000 prompts), requests/s.
2. **MLPerf Inference Llama 2 70B** (mlcommons/inference_results_v4.1 commit a2f5d66d17e8 and
   v4.0 commit 3c4a1cf196b7, ``closed/NVIDIA/results/*/llama2-70b-*/*/performance/run_1/
   mlperf_log_summary.txt``; engine settings from ``closed/NVIDIA/configs/llama2-70b``): Offline
   tokens/s and Server tokens/s (the highest Poisson rate whose p99 TTFT is at most 2 s and p99
   TPOT at most 200 ms) on 8 x H100-SXM-80GB (4 x TP2) and 8 x H200-SXM-141GB (8 x TP1) in FP8;
   and the layout ranking 4 x TP2 against 4 x PP2 with 1,024-token chunks (v5.0's H100 config).
3. **First-token latency at batch 1** (NVIDIA/TensorRT-LLM ``docs/source/performance.md`` at
   commit 138f96d45f90, "Low Latency", TensorRT-LLM v0.5): Llama 2 7B (TP1) and 70B (TP4) with
   128- and 2,048-token prompts on H100 in FP8 and A100 in FP16.

Length distributions. ShareGPT: the prompts ``sglang.bench_serving --dataset-name sharegpt
--num-prompts 1200`` draws (its default seed; the same command as the online rows) hold 269,081
input and 226,901 output tokens with the Llama 3.1 tokenizer (sgl-project/sglang issue 2097), means
224.2 and 189.1; the offline rows' own table gives 4,281.51 output tokens/s at 22.03 requests/s, a
mean of 194.4. OpenOrca (MLPerf): each log's tokens/s over samples/s gives its mean output (290.3
for v4.1 H100); the dataset caps prompts and outputs at 1,024 tokens (``processorca.py
--seqlen_limit=1024``), and no published source read gives its mean prompt, so that one number is
**fitted** on the v4.1 H100 Offline row and checked on every other MLPerf row. Lengths are drawn
from exponential distributions (the maximum-entropy law for a given mean, Jaynes 1957) truncated
to 1-1,024 tokens, with the rates that give the published means after truncation; a synthetic
stand-in for the datasets, said so in the output.

``--quick`` simulates fewer MLPerf requests and bisection steps (rounder figures).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mapper.frontend.sources import ModelFile  # noqa: E402
from mapper.serving.metrics import Slo, metrics  # noqa: E402
from mapper.serving.runtimes import RUNTIMES, SGLANG_FRONT, Runtime  # noqa: E402
from mapper.serving.serve import Outcome, Server, server_for  # noqa: E402
from mapper.serving.workload import Arrival, arrivals  # noqa: E402

LLAMA = str(ROOT / "examples" / "llama.tg")
#: Llama 3.1 70B (Grattafiori et al., arXiv 2407.21783, Table 3); 8B is examples/llama.tg's default.
L31_70B = (("LAYERS", 80), ("HIDDEN", 8192), ("HEADS", 64), ("KV_HEADS", 8), ("FFN", 28672))
#: Llama 2 (Touvron et al., arXiv 2307.09288, Table 1 and section 2.2: 32,000-token vocabulary;
#: 7B multi-head, 70B grouped-query with 8 key/value heads).
L2_7B = (("LAYERS", 32), ("HIDDEN", 4096), ("HEADS", 32), ("KV_HEADS", 32), ("FFN", 11008), ("VOCAB", 32000))
L2_70B = (("LAYERS", 80), ("HIDDEN", 8192), ("HEADS", 64), ("KV_HEADS", 8), ("FFN", 28672), ("VOCAB", 32000))

#: vLLM v0.6.0 as the online rows ran it (``--num-scheduler-steps 10 --max_model_len 4096``):
#: V0 engine, chunked prefill off below 32K-token contexts (prefill-first steps),
#: ``max_num_batched_tokens`` = max(max_model_len, 2048) = 4,096, ``max_num_seqs`` 256,
#: ``gpu_memory_utilization`` 0.9, 16-token blocks, asynchronous output processing (one step late);
#: 4 ms of host time the GPU waits for per scheduling decision (V0's scheduler, input preparation
#: and output processing: "about 4ms of GPU bubble" per decode in the traces of vLLM's RFC
#: "Multi-Step Scheduling", vllm-project/vllm issue 6854, paid once per multi-step run), not fitted.
VLLM_060 = replace(RUNTIMES["vllm"], chunk=4096, mixed=False, steps=10, lag=1, overhead=0.004)
#: SGLang v0.3.0 (``--disable-radix-cache``): the ``sglang`` runtime (prefill-first steps,
#: ``chunked_prefill_size`` 8,192, ``mem_fraction_static`` of the whole GPU (0.88 at TP1, 0.85 at
#: TP4 as launched online, 0.88 offline per the README's notes), up to 2,048 running requests,
#: one-token pages) with its front-end latency refitted here on the first SGLang row.
SGLANG_030 = RUNTIMES["sglang"]


def lengths(n: int, mean_in: float, mean_out: float, cap: int = 1024, seed: int = 0) -> list[Arrival]:
    """``n`` requests with exponential prompt and output lengths truncated to 1..``cap`` whose
    means are ``mean_in`` and ``mean_out`` (module docstring)."""
    rng = random.Random(seed)
    a, b = _scale(mean_in, cap), _scale(mean_out, cap)
    return [Arrival(None, _draw(rng, a, cap), _draw(rng, b, cap)) for _ in range(n)]


def _truncated_mean(scale: float, cap: int) -> float:
    lo, hi = 0.5, cap + 0.5  # rounding to whole tokens
    a, b = math.exp(-lo / scale), math.exp(-hi / scale)
    return scale + (lo * a - hi * b) / (a - b)


def _scale(mean: float, cap: int) -> float:
    lo, hi = 1.0, 1000.0 * cap
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _truncated_mean(mid, cap) < mean else (lo, mid)
    return lo


def _draw(rng: random.Random, scale: float, cap: int) -> int:
    while True:
        x = round(rng.expovariate(1.0 / scale))
        if 1 <= x <= cap:
            return x


def _mean(reqs: list[Arrival], out: bool) -> float:
    return statistics.fmean(r.output_tokens if out else r.input_tokens for r in reqs)


class Tally:
    """Ratios predicted / published, by group."""

    def __init__(self) -> None:
        self.groups: dict[str, list[float]] = {}

    def add(self, group: str, label: str, published: float, predicted: float, unit: str) -> None:
        ratio = predicted / published
        self.groups.setdefault(group, []).append(ratio)
        flag = "" if 0.8 <= ratio <= 1.25 else ("  (outside 0.67-1.5)" if not 0.67 <= ratio <= 1.5 else "  (*)")
        digits = 2 if unit == "x" else 1
        print(f"  {label:<54} {published:>10,.{digits}f} {predicted:>10,.{digits}f} {unit:<5} {ratio:5.2f}{flag}")

    def report(self) -> None:
        every: list[float] = []
        for group, ratios in self.groups.items():
            every += ratios
            _line(group, ratios)
        _line("all rows", every)


def _line(label: str, ratios: list[float]) -> None:
    within = sum(1 for r in ratios if 0.8 <= r <= 1.25)
    outside = sum(1 for r in ratios if not 0.67 <= r <= 1.5)
    print(f"  {label}: {len(ratios)} rows, {within} within 0.8-1.25x, {outside} outside 0.67-1.5x, geometric mean "
          f"{statistics.geometric_mean(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f}")


def _header() -> None:
    print(f"  {'row':<54} {'published':>10} {'predicted':>10} {'unit':<5} {'ratio':>5}")


# ---- 1. online runs at set request rates (SGLang v0.3.0 and vLLM v0.6.0) ----------------------

#: (model, platform, tensor, rate, prompts) -> engine -> (median E2E, median TTFT, median TPOT), ms
ONLINE = {
    ("8B", "dgx-a100", 1, 4.0, 1200): {"sglang": (1564.17, 31.98, 13.17), "vllm": (1691.97, 100.48, 14.14)},
    ("8B", "dgx-a100", 1, 8.0, 2400): {"sglang": (2175.02, 35.68, 17.85), "vllm": (2137.16, 120.39, 17.09)},
    ("70B", "dgx-h100", 4, 4.0, 1200): {"sglang": (3005.24, 53.94, 25.03), "vllm": (2915.60, 179.15, 23.58)},
    ("70B", "dgx-h100", 4, 8.0, 2400): {"sglang": (4064.98, 58.11, 33.07), "vllm": (3752.38, 207.12, 29.15)},
}
#: (model, platform, tensor) -> engine -> requests/s with 5,000 prompts at once
OFFLINE = {("8B", "dgx-a100", 1): {"sglang": 22.03, "vllm": 21.27}, ("70B", "dgx-h100", 4): {"sglang": 19.84,
                                                                                              "vllm": 19.04}}
SHAREGPT_IN, SHAREGPT_OUT, SHAREGPT_OUT_OFFLINE = 269081 / 1200, 226901 / 1200, 4281.51 / 22.03


def _engine(name: str, tensor: int, online: bool, front: float = SGLANG_FRONT) -> Runtime:
    if name == "vllm":
        return VLLM_060
    return replace(SGLANG_030, kv_fraction=0.88 if tensor == 1 or not online else 0.85, front=front)


def online(tally: Tally) -> None:
    print("\n1. Online serving, ShareGPT-like lengths (exponential, means 224.2 in / 189.1 out; offline 194.4 out), "
          "16-bit\n   source: sgl-project/sglang benchmark/benchmark_vllm_060/README.md (SGLang v0.3.0, vLLM v0.6.0 "
          "with --num-scheduler-steps 10)")
    servers: dict[tuple[str, str, str, float], Server] = {}
    (model, platform, tensor, rate, n), engines = next(iter(ONLINE.items()))
    reqs = arrivals(lengths(n, SHAREGPT_IN, SHAREGPT_OUT), rate, 0)
    bare = _serve(servers, model, platform, _engine("sglang", tensor, True, 0.0), reqs, {"tensor": tensor})
    front = round(engines["sglang"][1] / 1e3 - bare.metrics["ttft"]["p50"], 4)  # type: ignore[index]
    print(f"   SGLang's front-end latency per request fitted on {model} TP{tensor} {platform} {rate:.0f} req/s TTFT "
          f"p50: {front * 1e3:.1f} ms (the sglang runtime carries {SGLANG_FRONT * 1e3:.1f} ms); every other SGLang "
          "row checks it")
    _header()
    short: dict[float, list[float]] = {}
    for (model, platform, tensor, rate, n), engines in ONLINE.items():
        reqs = arrivals(lengths(n, SHAREGPT_IN, SHAREGPT_OUT), rate, 0)
        for engine, (e2e, ttft, tpot) in engines.items():
            rt = _engine(engine, tensor, True, front)
            got = _serve(servers, model, platform, rt, reqs, {"tensor": tensor})
            m = got.metrics
            where = f"{model} TP{tensor} {platform} {engine} {rate:.0f} req/s"
            tally.add("online", f"{where} TTFT p50", ttft, m["ttft"]["p50"] * 1e3, "ms")  # type: ignore[index]
            tally.add("online", f"{where} TPOT p50", tpot, m["tpot"]["p50"] * 1e3, "ms")  # type: ignore[index]
            tally.add("online", f"{where} E2E p50", e2e, m["e2e"]["p50"] * 1e3, "ms")  # type: ignore[index]
            if engine == "sglang":
                short.setdefault(rate, []).append(tpot - m["tpot"]["p50"] * 1e3)  # type: ignore[index]
    print("   SGLang TPOT p50 shortfall (published - predicted, ms; 8B then 70B): " + "; ".join(
        f"{rate:.0f} req/s " + ", ".join(f"{d:.1f}" for d in ds) for rate, ds in short.items())
          + "\n   (a front-end latency adds nothing between tokens)")
    _step_overhead(servers, front)
    for (model, platform, tensor), engines in OFFLINE.items():
        reqs = arrivals(lengths(5000, SHAREGPT_IN, SHAREGPT_OUT_OFFLINE), math.inf, 0)
        for engine, published in engines.items():
            got = _serve(servers, model, platform, _engine(engine, tensor, False, front), reqs, {"tensor": tensor})
            tally.add("online", f"{model} TP{tensor} {platform} {engine} all at once", published,
                      float(got.metrics["requests_per_s"]), "req/s")  # type: ignore[arg-type]


def _step_overhead(servers: dict, front: float) -> None:
    """Whether a host time per SGLang step (v0.3.0's scheduler runs in the GPU's loop) explains its
    TPOT rows: fitted on the first (8B, 4 req/s), printed against the others; not kept."""
    rows = [(key, engines["sglang"][2]) for key, engines in ONLINE.items()]

    def tpot(key: tuple, host: float) -> float:
        model, platform, tensor, rate, n = key
        rt = replace(_engine("sglang", tensor, True, front), overhead=host)
        reqs = arrivals(lengths(n, SHAREGPT_IN, SHAREGPT_OUT), rate, 0)
        got = _serve(servers, model, platform, rt, reqs, {"tensor": tensor})
        return float(got.metrics["tpot"]["p50"]) * 1e3  # type: ignore[index]

    (first, published) = rows[0]
    base, probe = tpot(first, 0.0), tpot(first, 0.001)
    host = (published - base) / (probe - base) * 0.001  # TPOT is linear in it near here
    ratios = ", ".join(f"{m} {r:.0f} req/s {tpot(k, host) / pub:.2f}" for k, pub in rows[1:]
                       for m, r in [(k[0], k[3])])
    print(f"   a host time per SGLang step fitted on the 8B 4 req/s TPOT row ({host * 1e3:.1f} ms) would give TPOT "
          f"ratios {ratios}: not kept")


def _serve(servers: dict, model: str, platform: str, rt: Runtime, reqs: list[Arrival], plan: dict[str, int],
           fmt: str | None = None) -> Outcome:
    """``reqs`` through ``plan`` (one replica unless it says) of ``model`` on ``platform``."""
    key = (model, platform, rt, fmt)
    if key not in servers:
        params = {"8B": (), "70B": L31_70B, "L2-7B": L2_7B, "L2-70B": L2_70B}[model]
        servers[key] = server_for(ModelFile(LLAMA, params=params), platform, rt, "auto", fmt, fmt)
    server = servers[key]
    return server.run(server.plan({"pipeline": 1, "replicas": 1, **plan}), reqs, Slo())


# ---- 2. MLPerf Inference Llama 2 70B ---------------------------------------------------------

#: TensorRT-LLM as NVIDIA's MLPerf harness sets it (configs/llama2-70b/{Offline,Server}/__init__.py,
#: v4.1): FP8 weights and cache, ``kvcache_free_gpu_mem_frac`` 0.90, per system the layout and
#: ``gpu_batch_size`` offline / server; scheduler ``MAX_UTILIZATION`` (``batch_scheduler_policy``
#: ``max_util`` with ``context_chunking_policy`` ``first_come_first_served`` in NVIDIA's llama2-70b base
#: configs as v5.0 partners copy them): blocks are taken as tokens are computed, and a request is
#: paused (its blocks freed, recomputed later) when they run out, not reserved for its whole output.
#: The v4.1 Server log needs it: 5,401 output tokens/s per replica at a median 156 ms per token
#: is ~845 sequences decoding at once (Little's law), which reserving each one's prompt and output
#: (GUARANTEED_NO_EVICT, the runtime's default) could not hold in the ~530k cached tokens of a replica.
#: ``max_num_tokens`` 4,096 (the llama2-70b ``GPUBaseConfig``, both scenarios). Requests go to the replica
#: with the fewest in flight (the harness's ``traffic_distribution_policy`` 2, :mod:`mapper.serving.dispatch`).
MLPERF_RT = replace(RUNTIMES["trtllm"], kv_fraction=0.90, reserve_output=False, chunk=4096, dispatch="least-loaded")
#: The harness streams in the Server scenario only (code/harness/harness_llm/main_llm.cc: ``mIsStreaming
#: = generation_config streaming && scenario != "Offline"``; generation_config.json ``"streaming":
#: true``): every Server step returns each of its ~850 tokens through the batch manager's response
#: callback, an Offline step only its finished requests'. That host time per streamed token
#: (:mod:`mapper.serving.inflight`) is **fitted** on the v4.1 H100 Server row (tokens/s) and checked
#: on the other Server rows and on every latency row.
STREAM_RANGE = (0.0, 64e-6)
#: What the full run fits (seconds); ``--quick`` uses it rather than refit on its shorter window, whose
#: p99 near capacity reads low (docs/serving.md).
STREAM_FIT = 27e-6
#: name -> (platform, layout, offline batch, server batch, published: offline tokens/s and samples/s,
#: server tokens/s and samples/s, server TTFT p50 and p99, TPOT p50 and p99 in seconds)
MLPERF = {
    "v4.1 8xH100 4xTP2": ("dgx-h100", {"tensor": 2, "replicas": 4}, 896, 1024,
                          (24524.9, 84.4792, 21605.79, 74.42, 0.272954995, 0.461278089, 0.156419276, 0.175354317)),
    "v4.1 8xH200 8xTP1": ("dgx-h200", {"tensor": 1, "replicas": 8}, 806, 896,
                          (31302.7, 107.477, 29228.22, 100.35, 0.180758928, 0.452744202, 0.124285539, 0.146040006)),
    "v4.0 8xH100 (v4.1 settings)": ("dgx-h100", {"tensor": 2, "replicas": 4}, 896, 1024,
                                    (21805.8, 74.699, 20556.4, 70.42, 0.381546051, 0.568284028, 0.139279667,
                                     0.156076924)),
}
#: v5.0's H100 layout (inference_results_v5.0 closed/NVIDIA/configs/llama2-70b/Offline, commit
#: 6069beb24b7a): 4 x PP2, ``max_num_tokens`` 1,024, batch 1,024, ``kvcache_free_gpu_mem_frac``
#: 0.95; the 1.44x over 4 x TP2 on the same 8 H100s is issue 47's figure.
PP2 = ({"tensor": 1, "pipeline": 2, "replicas": 4, "chunk": 1024, "max_batch": 1024}, 0.95, 1.44)
MLPERF_SLO = (2.0, 0.2)  # p99 TTFT and p99 TPOT, seconds (the logs' ttft_latency, tpot_latency)


def sustained(out: Outcome) -> float:
    """Output tokens per second the replicas sustain with requests waiting: per replica, the tokens its
    steps emit over the second half of the time some request waits (a step's sequences each emit one:
    a decode, or a prompt's last chunk), summed over the replicas; the whole run's rate when no
    request ever waits. MLPerf's Offline run issues 200,640 samples at once and lasts 2,618 s (the
    v4.1 H100 log), so its first admissions and its drain are a sliver of it; a simulation of a few
    thousand requests per replica is mostly those, and the first half of the waiting time (the
    admitted cohort still in step) is deleted as an initial transient (Law and Kelton, "Simulation
    Modeling and Analysis", 3rd ed., 2000, section 9.5.1: warm-up deletion)."""
    total = 0.0
    for run in out.runs:
        busy = [k for k, t in enumerate(run.timeline) if t[3] > 0]
        if not busy:
            return float(out.metrics["output_tokens_per_s"])  # type: ignore[arg-type]
        end = run.timeline[busy[-1]][0]
        first = next(k for k, t in enumerate(run.timeline) if t[0] > end / 2)
        start = run.timeline[first - 1][0] if first else 0.0
        if end <= start:
            return float(out.metrics["output_tokens_per_s"])  # type: ignore[arg-type]
        total += sum(t[1] for t in run.timeline[first:busy[-1] + 1]) / (end - start)
    return total


def _offline(servers: dict, name: str, mean_in: float, n: int) -> float:
    platform, layout, batch, _, pub = MLPERF[name]
    reqs = arrivals(lengths(n, mean_in, pub[0] / pub[1]), math.inf, 0)
    return sustained(_serve(servers, "L2-70B", platform, MLPERF_RT, reqs, {**layout, "max_batch": batch}, "fp8"))


#: The share of a simulated Server window whose arrivals are deleted as warm-up (:func:`_server`).
WARMUP = 1 / 3


def _server(servers: dict, name: str, mean_in: float, rate: float, seconds: float, stream: float) -> dict:
    """The metrics of a Server run of ``seconds`` of Poisson arrivals at ``rate``, over the requests
    that arrive after its first :data:`WARMUP` (warm-up deletion, Law and Kelton, section 9.5.1).
    The run starts empty, and near capacity the queue takes tens of seconds to build (a request
    lives ~30 s at ~850 sequences a replica); MLPerf's Server runs are long (``min_duration``), so
    that start is a sliver of their percentiles, while it would be a third of a 200 s simulation's.
    The requests arriving last see the drain, as MLPerf's last ones do; they are kept."""
    platform, layout, _, batch, pub = MLPERF[name]
    n = max(int(rate * seconds), 100)
    reqs = arrivals(lengths(n, mean_in, pub[2] / pub[3], seed=1), rate, 0)
    rt = replace(MLPERF_RT, stream=stream)
    out = _serve(servers, "L2-70B", platform, rt, reqs, {**layout, "max_batch": batch}, "fp8")
    cut = WARMUP * max(s.arrival for s in out.served)
    return metrics(tuple(s for s in out.served if s.arrival >= cut), Slo())


def _capacity(servers: dict, name: str, mean_in: float, stream: float, n: int, seconds: float, rounds: int) -> float:
    """The highest Poisson rate (requests/s, by bisection) whose p99 TTFT and TPOT meet MLPerf's limits."""
    pub = MLPERF[name][4]
    key = ("offline", name, mean_in, n)
    if key not in servers:
        servers[key] = _offline(servers, name, mean_in, n)
    offline_rate = servers[key] / (pub[0] / pub[1])
    lo, hi = 0.4 * offline_rate, 1.05 * offline_rate
    for _ in range(rounds):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _meets(_server(servers, name, mean_in, mid, seconds, stream)) else (lo, mid)
    return lo


def _meets(m: dict) -> bool:
    return m["ttft"]["p99"] <= MLPERF_SLO[0] and m["tpot"]["p99"] <= MLPERF_SLO[1]  # type: ignore[index]


def mlperf(tally: Tally, quick: bool) -> None:
    n, seconds, rounds = (12288, 200.0, 5) if quick else (49152, 600.0, 7)
    servers: dict = {}
    first = next(iter(MLPERF))
    target = MLPERF[first][4][0]
    lo, hi = 32.0, 1024.0
    for _ in range(rounds + 1):  # more prompt tokens, fewer output tokens/s
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _offline(servers, first, mid, n) > target else (lo, mid)
    mean_in = (lo + hi) / 2
    print(f"\n2. MLPerf Inference Llama 2 70B, FP8, OpenOrca-like lengths (exponential, 1-1,024 tokens; mean output "
          f"from each log)\n   fitted on {first} Offline ({target:,.1f} tokens/s): mean prompt {mean_in:.0f} tokens; "
          f"every other row checks it\n   source: mlcommons/inference_results_v4.1 and v4.0, closed/NVIDIA "
          f"(mlperf_log_summary.txt)\n   Server: {seconds:.0f} s of Poisson arrivals from an empty system, each "
          f"request to the replica with the fewest in flight; latencies over the arrivals after the first "
          f"{WARMUP * seconds:.0f} s (warm-up deletion)")
    stream = STREAM_FIT
    if quick:
        print(f"   host time per streamed token (the harness streams in Server only): {stream * 1e6:.0f} us, the full "
              f"run's fit on {first} Server")
    else:
        lo, hi = STREAM_RANGE
        bare = _capacity(servers, first, mean_in, 0.0, n, seconds, rounds)
        for _ in range(5):  # more host time per streamed token, a lower Server capacity
            mid = (lo + hi) / 2
            above = _capacity(servers, first, mean_in, mid, n, seconds, rounds) > MLPERF[first][4][3]
            lo, hi = (mid, hi) if above else (lo, mid)
        stream = (lo + hi) / 2
        print(f"   fitted on {first} Server ({MLPERF[first][4][2]:,.1f} tokens/s; {bare / MLPERF[first][4][3]:.2f}x "
              f"without it): {stream * 1e6:.0f} us of host time per streamed token (the harness streams in Server "
              f"only; STREAM_FIT carries {STREAM_FIT * 1e6:.0f});\n   every other Server row and every latency row "
              "checks it")
    _header()
    for name, (_, _, _, _, pub) in MLPERF.items():
        if name != first:
            tally.add("mlperf", f"{name} Offline tokens/s", pub[0], _offline(servers, name, mean_in, n), "tok/s")
        if name != first or quick:  # --quick checks the full run's fit on its row too
            lo = _capacity(servers, name, mean_in, stream, n, seconds, rounds)
            tally.add("mlperf", f"{name} Server tokens/s", pub[2], lo * pub[2] / pub[3], "tok/s")
        at = _server(servers, name, mean_in, pub[3], seconds, stream)
        for i, (key, q) in enumerate((("ttft", "p50"), ("ttft", "p99"), ("tpot", "p50"), ("tpot", "p99"))):
            group = ("mlperf latency at the fitted row's rate (the fit puts it at the model's capacity, where the "
                     "tails are on a knife edge)" if name == first else "mlperf latency at the published rate")
            tally.add(group, f"{name} {key.upper()} {q} at {pub[3]} req/s", pub[4 + i] * 1e3, at[key][q] * 1e3,
                      "ms")  # type: ignore[index]
    layout, fraction, published = PP2
    platform, _, batch, _, pub = MLPERF[first]
    reqs = arrivals(lengths(n, mean_in, pub[0] / pub[1]), math.inf, 0)
    pp = _serve(servers, "L2-70B", platform, replace(MLPERF_RT, kv_fraction=fraction), reqs, layout, "fp8")
    ratio = sustained(pp) / _offline(servers, first, mean_in, n)
    tally.add("layout ranking (issue 47's figure, v4.1 to v5.0 software)", "8xH100 4xPP2 (1,024 chunk) over 4xTP2, "
              "Offline", published, ratio, "x")


# ---- 3. first-token latency at batch 1 (TensorRT-LLM v0.5) ----------------------------------

#: (model, GPU platform, precision, tensor, prompt tokens, published ms)
FIRST_TOKEN = (("L2-7B", "dgx-h100", "fp8", 1, 128, 7), ("L2-7B", "dgx-h100", "fp8", 1, 2048, 36),
               ("L2-70B", "dgx-h100", "fp8", 4, 128, 26), ("L2-70B", "dgx-h100", "fp8", 4, 2048, 109),
               ("L2-7B", "dgx-a100", None, 1, 128, 16), ("L2-7B", "dgx-a100", None, 1, 2048, 133),
               ("L2-70B", "dgx-a100", None, 4, 128, 47), ("L2-70B", "dgx-a100", None, 4, 2048, 377))


def first_token(tally: Tally) -> None:
    rt = RUNTIMES["trtllm"]
    print(f"\n3. First-token latency, batch 1 (one request, one output token; trtllm runtime)\n   fitted on the "
          f"first row: the runtime's fixed cost per request outside the steps, {rt.front * 1e3:.1f} ms "
          f"(mapper.serving.runtimes.TRTLLM_FRONT); every other row checks it\n   source: "
          "NVIDIA/TensorRT-LLM docs/source/performance.md, Low Latency (v0.5)")
    _header()
    servers: dict = {}
    for k, (model, platform, fmt, tensor, isl, ms) in enumerate(FIRST_TOKEN):
        got = _serve(servers, model, platform, rt, [Arrival(0.0, isl, 1)], {"tensor": tensor}, fmt)
        steps = got.metrics["ttft"]["p50"] - rt.front  # type: ignore[index]
        label = f"{model} TP{tensor} {platform} {fmt or 'fp16'} {isl} tokens"
        if k == 0:
            print(f"  {label + ' (fit: steps ' + f'{steps * 1e3:.1f} ms)':<54} {ms:>10,.1f} "
                  f"{got.metrics['ttft']['p50'] * 1e3:>10,.1f} ms")  # type: ignore[index]
            continue
        tally.add("first token", label, ms, got.metrics["ttft"]["p50"] * 1e3, "ms")  # type: ignore[index]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer MLPerf requests and bisection steps")
    args = ap.parse_args()
    start = time.perf_counter()
    tally = Tally()
    online(tally)
    first_token(tally)
    mlperf(tally, args.quick)
    print("\nSummary (predicted / published; (*) marks a ratio outside 0.8-1.25x):")
    tally.report()
    print(f"simulated in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

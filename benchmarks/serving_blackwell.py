"""``mapper serve`` on Blackwell and H200 against TensorRT-LLM's later published offline throughput.

    python benchmarks/serving_blackwell.py [--quick]

Source: NVIDIA/TensorRT-LLM, docs/source/performance/perf-overview.md at commit 00f37686aa85 (the
v1.0 tables: "Starting with v0.19, testing was performed using the PyTorch backend"):
``trtllm-bench throughput`` fed every request at once, fixed input/output lengths, total output
tokens per second. Llama 3.3 70B (Llama 3.1 70B's architecture) on one B200, one GB200 (FP4
weights, ``nvidia/Llama-3.3-70B-Instruct-FP4``) and one H200 (FP8); Llama 3.1 405B on four B200s
and four GB200s (FP4) and eight H200s (FP8). A check only: nothing is fitted to these rows; the
model, the ``trtllm`` runtime and the platforms are those ``benchmarks/serving.py`` checks on the
v0.17 tables.

Each row is simulated as

    mapper serve examples/llama.tg [params] --platform P --workload isl=I,osl=O,requests=R
        --rate inf --parallel tensor=T,pipeline=1,replicas=1 --kv-fraction 0.95
        --precision nvfp4|fp8 --kv-precision fp8 --runtime trtllm-pytorch

with the doc's request counts and KV fraction ("In many cases, we also use a higher KV cache
percentage by setting ``--kv_cache_free_gpu_mem_fraction 0.95``"); NVIDIA's FP4 and FP8
checkpoints both keep an FP8 KV cache. The runtime is ``trtllm-pytorch``: the ``trtllm``
runtime with the doc's ``llm_options.yml`` (``cuda_graph_config``: graphs at batch sizes 1, 2, 4,
..., 256, 384, 512, 1,024, ... 8,192 and ``enable_padding: true``), so a decode-only step runs
padded up to the next captured size (:mod:`mapper.serving.iteration`). The engine limits are
those ``trtllm-bench throughput`` derives for the PyTorch backend when none is given, as these
runs gave none (:func:`bench_limits`): its heuristic (``tensorrt_llm/bench/build/tuning.py``,
``calc_engine_setting`` and ``finetune_setting``) sizes the max batch from the requests the KV
cache holds at the dataset's lengths, rounded up, and the max tokens from that batch times one
plus input over output, at least 2,048; with chunked prefill off (``trtllm-bench``'s default) it
raises the max tokens to the longest prompt plus the max batch
(``tensorrt_llm/bench/benchmark/utils/general.py``, ``get_settings``). Each row is also printed
under ``trtllm`` with the same limits (column ``unpadded``), the same engine without the padding,
to show what the padding moves. ``--quick`` caps each row at 1,000 requests.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from serving import KV_FRACTION, LLAMA, MODELS, PAIRS, REQUESTS  # noqa: E402

from mapper.errors import InfeasibleError  # noqa: E402
from mapper.frontend.sources import ModelFile  # noqa: E402
from mapper.serving.metrics import Slo  # noqa: E402
from mapper.serving.runtimes import RUNTIMES  # noqa: E402
from mapper.serving.serve import Server, server_for  # noqa: E402
from mapper.serving.workload import Arrival, arrivals  # noqa: E402

SOURCE = "NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md, commit 00f37686aa85 (v1.0)"
#: Llama 3.1 405B (Grattafiori et al., arXiv 2407.21783, Table 3).
L405B = (("LAYERS", 126), ("HIDDEN", 16384), ("HEADS", 128), ("KV_HEADS", 8), ("FFN", 53248))
PARAMS = {"70B": MODELS["70B"], "405B": L405B}
#: the doc's 128/4096, 500/2000 ... order; its tenth pair, 1000/2000, is priced too
LATER = (*PAIRS[:5], (1000, 2000), *PAIRS[5:])
REQUESTS_LATER = {**REQUESTS, (1000, 2000): 1500}


def _later(*values: float) -> tuple[tuple[tuple[int, int], float], ...]:
    return tuple(zip(LATER, values))


#: (model, tensor, GPU, weights) -> published output tokens/s per (input, output), the doc's column
#: order 128/128, 128/2048, 128/4096, 500/2000, 1000/1000, 1000/2000, 2048/128, 2048/2048, 5000/500,
#: 20000/2000
PUBLISHED = {
    ("70B", 1, "B200", "nvfp4"): _later(11147, 9922, 6831, 7762, 7007, 6271, 1339, 4783, 1459, 665),
    ("70B", 1, "GB200", "nvfp4"): _later(12189, 11309, 7849, 9028, 7326, 6513, 1450, 5646, 1602, 755),
    ("70B", 1, "H200", "fp8"): _later(3803, 4336, 2872, 3666, 2909, 2994, 442, 2003, 566, 283),
    ("405B", 4, "B200", "nvfp4"): _later(6281, 8020, 6345, 6244, 5209, 4933, 749, 4212, 1048, 672),
    ("405B", 4, "GB200", "nvfp4"): _later(6740, 8151, 6608, 6540, 5389, 5135, 797, 4407, 1112, 739),
    ("405B", 8, "H200", "fp8"): _later(3814, 5348, 4741, 4724, 3330, 3722, 456, 2948, 650, 505),
}
PLATFORMS = {"B200": "dgx-b200", "GB200": "gb200-nvl72", "H200": "dgx-h200"}
#: GiB of one GPU as ``torch.cuda`` reports it (the platform files' ``memory_gib``), weight bytes per
#: parameter (``tuning.py`` ``BYTES_PER_ELEM``), and the Llama shapes the heuristic reads
GIB = {"B200": 179.0, "GB200": 173.0, "H200": 140.0}
WEIGHT_BYTES = {"nvfp4": 0.5, "fp8": 1.0}
VOCAB, HEAD_DIM = 128256, 128


def bench_limits(model: str, tensor: int, gpu: str, fmt: str, isl: int, osl: int) -> tuple[int, int]:
    """``trtllm-bench``'s max batch and max tokens for a row (module docstring): the KV cache's
    requests at ``isl + osl`` tokens in the memory left after the weights, times the KV fraction."""
    p = dict(PARAMS[model])
    hidden, layers, ffn, kv_heads = p["HIDDEN"], p["LAYERS"], p["FFN"], p["KV_HEADS"]
    per_layer = hidden * (hidden + 2 * kv_heads * HEAD_DIM) + hidden * hidden + 3 * hidden * ffn + 2 * hidden
    params = 2 * VOCAB * hidden + layers * per_layer + hidden
    per_token = 2 * layers * max(tensor, kv_heads) * HEAD_DIM * 1.0 / 1024**3  # FP8 cache, GiB
    room = GIB[gpu] * tensor - params * WEIGHT_BYTES[fmt] / 1024**3
    requests = min(room * KV_FRACTION / (per_token * (isl + osl)), 4096)
    if requests < 256:
        batch = max(64, 32 * math.ceil(requests / 32))
    elif requests < 1024:
        batch = 128 * math.ceil(requests / 128)
    else:
        batch = 256 * math.ceil(requests / 256)
    raw = min(requests * (1 + isl / osl), 32768)
    tokens = (max(2048, 256 * math.ceil(raw / 256)) if raw < 4096 else
              512 * math.ceil(raw / 512) if raw < 8192 else 1024 * math.ceil(raw / 1024))
    return batch, max(tokens, isl + batch)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="at most 1,000 requests a row")
    args = ap.parse_args()
    runtime = replace(RUNTIMES["trtllm-pytorch"], kv_fraction=KV_FRACTION)
    unpadded = replace(RUNTIMES["trtllm"], kv_fraction=KV_FRACTION)
    start = time.perf_counter()
    print(f"{SOURCE}: output tokens/s, trtllm-pytorch runtime (unpadded: trtllm), --kv-fraction {KV_FRACTION}, "
          "--rate inf; a check, nothing fitted")
    ratios: dict[str, list[float]] = {}
    plain: dict[str, list[float]] = {}
    servers: dict[tuple[str, str, str, str], Server] = {}
    for (model, tensor, gpu, fmt), cells in PUBLISHED.items():
        platform = PLATFORMS[gpu]
        for rt in (runtime, unpadded):
            key = (model, platform, fmt, rt.name)
            if key not in servers:
                servers[key] = server_for(ModelFile(LLAMA, params=PARAMS[model]), platform, rt, "auto", fmt, "fp8")
        params = "".join(f" --param {k}={v}" for k, v in PARAMS[model])
        print(f"\nLlama {model} TP{tensor} {gpu} {fmt}: mapper serve examples/llama.tg{params} --platform {platform} "
              f"--workload isl=I,osl=O,requests=R --rate inf --parallel tensor={tensor},pipeline=1,replicas=1 "
              f"--kv-fraction {KV_FRACTION} --precision {fmt} --kv-precision fp8 --runtime {runtime.name} "
              "(--parallel ...,max_batch=B,chunk=T: trtllm-bench's limits)")
        print(f"  {'ISL/OSL':>11} {'requests':>8} {'published':>10} {'predicted':>10} {'ratio':>6} "
              f"{'kv tokens':>10} {'concurrent':>10} {'max batch':>9} {'max tokens':>10} {'unpadded':>8}")
        for (isl, osl), published in cells:
            n = REQUESTS_LATER[(isl, osl)]
            n = min(n, 1000) if args.quick else n
            got = []
            batch, tokens = bench_limits(model, tensor, gpu, fmt, isl, osl)
            for rt in (runtime, unpadded):
                server = servers[(model, platform, fmt, rt.name)]
                plan = server.plan({"tensor": tensor, "pipeline": 1, "replicas": 1, "max_batch": batch,
                                    "chunk": tokens})
                reqs = arrivals([Arrival(None, isl, osl)] * n, float("inf"), 0)
                try:
                    out = server.run(plan, reqs, Slo())
                except InfeasibleError as err:
                    print(f"  {isl:>5}/{osl:<5} {n:>8,} {published:>10,.0f} {'-':>10} {'-':>6}  ({err})")
                    break
                got.append((float(out.metrics["output_tokens_per_s"]), out))  # type: ignore[arg-type]
            if len(got) < 2:
                continue
            (tps, out), (flat, _) = got
            ratios.setdefault(gpu, []).append(tps / published)
            plain.setdefault(gpu, []).append(flat / published)
            print(f"  {isl:>5}/{osl:<5} {n:>8,} {published:>10,.0f} {tps:>10,.0f} {tps / published:>6.2f} "
                  f"{out.metrics['kv_capacity_tokens']:>10,} {out.metrics['max_concurrency']:>10,} {batch:>9,} "
                  f"{tokens:>10,} {flat / published:>8.2f}")
    for title, table in (("trtllm-pytorch", ratios), ("unpadded (trtllm)", plain)):
        print(f"\nSummary, {title} (predicted / published):")
        every = [r for rs in table.values() for r in rs]
        for label, rs in (*table.items(), ("all", every)):
            within = sum(1 for r in rs if 0.8 <= r <= 1.25)
            outside = sum(1 for r in rs if not 0.67 <= r <= 1.5)
            print(f"  {label}: {len(rs)} rows, {within} within 0.8-1.25x, {outside} outside 0.67-1.5x, geometric "
                  f"mean {statistics.geometric_mean(rs):.2f}, range {min(rs):.2f}-{max(rs):.2f}")
    print(f"simulated in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Serving predictions against published latencies: FasterTransformer's GPT tables, gpt-fast's
tensor-parallel decode rates and TensorRT-LLM's first-token latencies and throughputs, with the
two fitted parameters printed on their fitting rows.

    python benchmarks/inference.py [--quick]

FasterTransformer (NVIDIA/FasterTransformer docs/gpt_guide.md, "Performance"): GPT models in
FP16 on A100-80GB SXM nodes (NVSwitch inside, 8 x 200 Gb/s InfiniBand between), batch B,
input length S_IN, output length L; latency of the whole request (context phase, then the
generation loop). FasterTransformer's context phase yields the first output token, so L output
tokens are ``--inference prefill=S_IN,decode=L-1,batch=B``. Each row is priced with its
published layout (``--parallel tensor=T,pipeline=P``) on ``dgx-a100`` (one node) or
``selene --nodes N``, runtime ``graph`` (a C++ runtime: kernel launches only), with
examples/gpt.tg (learned positions, GELU MLP of 4h, vocabulary 51,200, fused attention).
Nothing is fitted to these rows.

Two parameters are fitted, each on one row of PyTorch's "Accelerating Generative AI with
PyTorch II: GPT, Fast" (2023), Llama-2-7B on one A100 at batch 1: the memory efficiency of
small-M GEMMs (mapper/costing/efficiency.py, EFF_MEMORY_GEMM) on its CUDA-graph run, 107
tokens/s, and the eager dispatch per framework op (mapper/serving/request.py,
EAGER_DISPATCH_US) on its eager run, 25.5 tokens/s. The first is checked on every
FasterTransformer row; the second on Megatron-LM's eager latencies in the same tables.
gpt-fast's own tensor-parallel table (its README, batch 1) checks the collectives' latency: the
model prices NCCL's low-latency ring with the constants of NCCL's tuning model (not from any
row); gpt-fast runs PyTorch's intra-node all-reduce (ENABLE_INTRA_NODE_COMM=1) on a hybrid
cube mesh, so the rows say the model's all-reduce costs what a latency-minded one does, and
TensorRT-LLM's A100 tables (docs/source/performance.md) check first tokens of 128 and 2,048
prompt tokens and static-batch throughputs up to batch 1,280, and its v0.5 post's A100 row a
batch of 64 (throughput and first token). Then ``--parallel auto`` is run on
each FasterTransformer layout's nodes and must be no slower than the published layout.

Predictions do not depend on the machine's load; the planning time printed last does (the load
average is printed beside it).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mapper.costing.efficiency import EFF_MEMORY_GEMM  # noqa: E402
from mapper.errors import InfeasibleError  # noqa: E402
from mapper.frontend.sources import ModelFile  # noqa: E402
from mapper.mapping.base import MapOptions  # noqa: E402
from mapper.pipeline import compile_graph  # noqa: E402
from mapper.platform.cluster import with_nodes  # noqa: E402
from mapper.platform.loader import load_platform  # noqa: E402
from mapper.serving.driver import Serving  # noqa: E402

GPT = str(ROOT / "examples" / "gpt.tg")
LLAMA = str(ROOT / "examples" / "llama.tg")
FT = "NVIDIA/FasterTransformer docs/gpt_guide.md, A100-80GB, FP16"
#: name -> (layers, heads, head size)
MODELS = {"GPT-6.7B": (32, 32, 128), "GPT-20B": (44, 48, 128), "GPT-89B": (48, 96, 128),
          "GPT-175B": (96, 96, 128), "Megatron-530B": (105, 128, 160)}
#: Llama 2 (Touvron et al., arXiv 2307.09288, Table 1 and the released configs) as examples/llama.tg prices it.
LLAMA2 = {"Llama-2-7B": (("LAYERS", 32), ("HIDDEN", 4096), ("HEADS", 32), ("KV_HEADS", 32), ("FFN", 11008),
                         ("VOCAB", 32000)),
          "Llama-2-70B": (("LAYERS", 80), ("HIDDEN", 8192), ("HEADS", 64), ("KV_HEADS", 8), ("FFN", 28672),
                          ("VOCAB", 32000))}
#: (model, tensor, pipeline, batch, input, output, published ms)
ROWS = [
    *(("GPT-6.7B", 1, 1, b, 128, 8, ms) for b, ms in ((1, 98.29), (8, 162.51), (64, 718.07))),
    *(("GPT-6.7B", 1, 1, b, 512, 32, ms) for b, ms in ((1, 384.70), (8, 699.62), (64, 3306.41))),
    *(("GPT-20B", t, 1, b, i, o, ms) for t, table in (
        (1, ((1, 20, 8, 225), (16, 20, 8, 268), (128, 20, 8, 726), (1, 60, 20, 560), (16, 60, 20, 748),
             (1, 128, 20, 566), (32, 128, 20, 1335), (1, 80, 200, 5609), (32, 200, 200, 8111))),
        (2, ((1, 20, 8, 147), (16, 20, 8, 191), (128, 20, 8, 484), (1, 60, 20, 358), (16, 60, 20, 510),
             (1, 128, 20, 362), (32, 128, 20, 862), (1, 80, 200, 3532), (32, 200, 200, 5488))),
        (4, ((1, 20, 8, 102), (16, 20, 8, 133), (128, 20, 8, 318), (1, 60, 20, 248), (16, 60, 20, 345),
             (1, 128, 20, 254), (32, 128, 20, 547), (1, 80, 200, 2438), (32, 200, 200, 3634))),
        (8, ((1, 20, 8, 89), (16, 20, 8, 113), (128, 20, 8, 256), (1, 60, 20, 212), (16, 60, 20, 272),
             (1, 128, 20, 217), (32, 128, 20, 418), (1, 80, 200, 2053), (32, 200, 200, 2811))))
      for b, i, o, ms in table),
    *(("GPT-89B", 8, 1, b, i, o, ms) for b, i, o, ms in (
        (1, 128, 8, 279.44), (8, 128, 8, 377.50), (32, 128, 8, 786.57), (1, 512, 32, 887.52), (16, 512, 32, 1952.2))),
    *(("GPT-175B", 8, 1, b, i, o, ms) for b, i, o, ms in (
        (1, 128, 8, 488.86), (8, 128, 8, 749.86), (32, 128, 8, 1547.44), (1, 512, 32, 1719.96),
        (16, 512, 32, 3706.23))),
    *(("Megatron-530B", t, p, b, i, o, ms) for (t, p), table in (
        ((16, 1), ((1, 20, 8, 565), (16, 20, 8, 730), (128, 20, 8, 1862), (1, 60, 20, 1379), (16, 60, 20, 1868),
                   (1, 128, 8, 585), (16, 128, 8, 1377))),
        ((32, 1), ((1, 20, 8, 431), (16, 20, 8, 575), (128, 20, 8, 1431), (1, 60, 20, 1037), (16, 60, 20, 1454),
                   (1, 128, 8, 451), (16, 128, 8, 1074))),
        ((8, 3), ((1, 20, 8, 842), (16, 20, 8, 1049), (128, 20, 8, 2124), (1, 60, 20, 2085), (16, 60, 20, 2753),
                  (1, 128, 8, 866), (16, 128, 8, 2104))))
      for b, i, o, ms in table),
]


def gpt_params(model: str) -> tuple[tuple[str, int], ...]:
    layers, heads, size = MODELS[model]
    return (("LAYERS", layers), ("HEADS", heads), ("HIDDEN", heads * size), ("VOCAB", 51200), ("FLASH", 1))


def platform_for(gpus: int):
    return load_platform("dgx-a100") if gpus <= 8 else with_nodes(load_platform("selene"), -(-gpus // 8))


@functools.cache
def predict(source: ModelFile, platform, parallel: str, request: str, runtime: str = "graph") -> dict:
    """The request's ``inference`` JSON; each (model, platform, layout, request, runtime) is priced once
    (the ranking and ``--parallel auto`` checks reuse the table's rows)."""
    compiled = compile_graph(source, platform, mapper="heft", options=MapOptions(), parallel=parallel,
                             serving=Serving.parse(request, runtime))
    assert compiled.serving is not None
    return compiled.serving.to_json()


def ft_rows(quick: bool) -> list[tuple[str, float]]:
    """(row label, predicted / published) per FasterTransformer row, printed as it goes."""
    out = []
    rows = ROWS[::4] if quick else ROWS
    print(f"FasterTransformer GPT ({FT}); runtime graph\n")
    print(f"{'model':14} {'layout':>9} {'batch':>5} {'in':>4} {'out':>4} {'published':>10} {'predicted':>10} "
          f"{'ratio':>6}")
    for model, t, p, b, i, o, ms in rows:
        parallel = f"tensor={t},pipeline={p}" if t * p > 1 else "none"
        got = predict(ModelFile(GPT, params=gpt_params(model)), platform_for(t * p), parallel,
                      f"prefill={i},decode={o - 1},batch={b}")
        ratio = got["latency"] * 1e3 / ms
        label = f"TP{t}" + (f"xPP{p}" if p > 1 else "")
        out.append((f"{model} {label} b{b} {i}/{o}", ratio))
        print(f"{model:14} {label:>9} {b:5d} {i:4d} {o:4d} {ms:10.1f} {got['latency'] * 1e3:10.1f} {ratio:6.2f}")
    return out


def ranking_530b(quick: bool) -> tuple[int, int]:
    """Rows of the 530B table where the predicted order of TP16, TP32 and TP8 x PP3 is the published."""
    if quick:
        return 0, 0
    groups: dict[tuple[int, int, int], dict[str, tuple[float, float]]] = {}
    for model, t, p, b, i, o, ms in ROWS:
        if model != "Megatron-530B":
            continue
        got = predict(ModelFile(GPT, params=gpt_params(model)), platform_for(t * p), f"tensor={t},pipeline={p}",
                      f"prefill={i},decode={o - 1},batch={b}")
        groups.setdefault((b, i, o), {})[f"{t}x{p}"] = (ms, got["latency"])
    right = sum(1 for g in groups.values()
                if sorted(g, key=lambda k: g[k][0]) == sorted(g, key=lambda k: g[k][1]))
    return right, len(groups)


def auto_check(quick: bool) -> tuple[int, int]:
    """``--parallel auto`` on the nodes of each published run (one DGX A100, or selene nodes), for
    the batch-1 and the largest-batch row of every (model, layout) group: (rows where auto's
    predicted latency is no more than the published layout's, rows)."""
    firsts: dict[tuple[str, int, int, int], tuple] = {}
    for row in ROWS:
        model, t, p, b = row[:4]
        key = (model, t, p, b)
        if key not in firsts and (b == 1 or b == max(r[3] for r in ROWS if r[:3] == row[:3])):
            firsts[key] = row
    rows = list(firsts.values())[::3] if quick else list(firsts.values())
    print(f"\n--parallel auto on the published run's nodes ({len(rows)} rows)")
    good = 0
    for model, t, p, b, i, o, _ in rows:
        source, platform = ModelFile(GPT, params=gpt_params(model)), platform_for(t * p)
        request = f"prefill={i},decode={o - 1},batch={b}"
        given = predict(source, platform, f"tensor={t},pipeline={p}" if t * p > 1 else "none", request)
        auto = predict(source, platform, "auto", request)
        plan = auto["plan"]
        ok = auto["latency"] <= given["latency"] * (1 + 1e-9)
        good += ok
        print(f"  {model:14} b{b:<3} {i}/{o}: published TP{t}xPP{p} {given['latency'] * 1e3:8.1f} ms, auto "
              f"TP{plan['tensor']}xPP{plan['pipeline']} (m {plan['micro_batches']}) {auto['latency'] * 1e3:8.1f} ms"
              f"{'' if ok else '  SLOWER'}")
    return good, len(rows)


#: Megatron-LM's own (PyTorch eager) latencies beside FasterTransformer's in the same tables, TP 8:
#: (model, batch, input, output, Megatron ms, FasterTransformer ms).
MEGATRON = (("GPT-89B", 1, 128, 8, 342.86, 279.44), ("GPT-89B", 2, 128, 8, 369.43, 280.24),
            ("GPT-89B", 1, 512, 32, 1244.81, 887.52), ("GPT-89B", 2, 512, 32, 1357.54, 940.11),
            ("GPT-175B", 1, 128, 8, 660.38, 488.86), ("GPT-175B", 2, 128, 8, 687.34, 509.47),
            ("GPT-175B", 1, 512, 32, 2384.78, 1719.96), ("GPT-175B", 2, 512, 32, 2503.24, 1830.56))


def eager_check() -> None:
    """The eager dispatch cost and the small-M GEMM efficiency on their fitting rows, then the
    dispatch checked on a second source: Megatron-LM (eager) against FasterTransformer (a C++
    runtime) in the same tables, batches 1 and 2 (beyond them Megatron's latency grows with the
    batch far faster than any kernel's cost: its generation loop, not dispatch, dominates there).
    The ratio eager / graph is compared, as both runs share the model's tensor-parallel error."""
    llama2 = ModelFile(LLAMA, params=LLAMA2["Llama-2-7B"])
    print("\nfitted on one row each (PyTorch gpt-fast blog, Llama-2-7B, A100, batch 1, 200 tokens):")
    for runtime, published, what in (("graph", 1 / 107.0, f"small-M GEMM memory efficiency {EFF_MEMORY_GEMM['gpu']}"),
                                     ("eager", 1 / 25.5, "eager dispatch 23 us per framework op")):
        got = predict(llama2, load_platform("dgx-a100"), "none", "prefill=16,decode=200,batch=1", runtime)
        print(f"  {runtime:5} published {published * 1e3:6.2f} ms per token, predicted {got['tpot'] * 1e3:6.2f}, "
              f"ratio {got['tpot'] / published:.2f}  ({what})")
    print("checked: Megatron-LM (eager) over FasterTransformer (graph), TP 8 on dgx-a100 "
          "(NVIDIA/FasterTransformer docs/gpt_guide.md)")
    ratios = []
    for model, b, i, o, meg, ft in MEGATRON:
        got = {rt: predict(ModelFile(GPT, params=gpt_params(model)), load_platform("dgx-a100"), "tensor=8,pipeline=1",
                           f"prefill={i},decode={o - 1},batch={b}", rt)["latency"] * 1e3 for rt in ("eager", "graph")}
        ratios.append((got["eager"] / got["graph"]) / (meg / ft))
        print(f"  {model:9} b{b} {i}/{o}: eager {got['eager']:7.1f} ms (Megatron {meg:7.1f}), graph "
              f"{got['graph']:7.1f} (FT {ft:7.1f}); eager/graph predicted {got['eager'] / got['graph']:.2f}, "
              f"published {meg / ft:.2f}")
    print(f"  eager/graph, predicted over published: {min(ratios):.2f} to {max(ratios):.2f}")


#: gpt-fast's tensor-parallel table (pytorch-labs/gpt-fast README, "Tensor Parallelism"): batch 1, a
#: 5-token prompt, 8 x A100-80GB (power-limited to 330 W, hybrid cube mesh), torch.compile with CUDA
#: graphs, PyTorch's intra-node all-reduce: (model, tensor ranks, tokens/s).
GPT_FAST_TP = (("Llama-2-7B", 1, 104.9), ("Llama-2-7B", 2, 168.84), ("Llama-2-7B", 4, 254.02),
               ("Llama-2-7B", 8, 328.43), ("Llama-2-70B", 2, 21.32), ("Llama-2-70B", 4, 38.01),
               ("Llama-2-70B", 8, 62.50))


def tensor_parallel_check() -> list[float]:
    """Checked, nothing fitted: gpt-fast's batch-1 decode rates over 1-8 tensor ranks. Its all-reduces
    are a few kilobytes, so the rows test the collective's latency besides the memory-bound kernels.
    gpt-fast reduces with PyTorch's intra-node all-reduce (its README runs tensor parallelism with
    ENABLE_INTRA_NODE_COMM=1) on a machine that joins its GPUs in a hybrid cube mesh; the model
    prices NCCL's low-latency ring (mapper/parallel/collectives.py) on dgx-a100's NVSwitch. The
    rows thus check the latency of a latency-minded all-reduce, not of NCCL as measured."""
    print("\nchecked: gpt-fast tensor parallelism (pytorch-labs/gpt-fast README; batch 1, PyTorch's intra-node "
          "all-reduce on a hybrid cube mesh; priced: graph runtime, NCCL's LL ring on dgx-a100)")
    ratios = []
    for model, t, published in GPT_FAST_TP:
        got = predict(ModelFile(LLAMA, params=LLAMA2[model]), load_platform("dgx-a100"),
                      f"tensor={t},pipeline=1" if t > 1 else "none", "prefill=5,decode=200,batch=1")
        ratio = got["tpot"] * published
        ratios.append(ratio)
        print(f"  {model:11} TP{t}: published {1e3 / published:6.2f} ms per token, predicted "
              f"{got['tpot'] * 1e3:6.2f}, ratio {ratio:.2f}")
    return ratios


#: TensorRT-LLM's A100 (FP16) tables (NVIDIA/TensorRT-LLM docs/source/performance.md, v0.6.1 page):
#: first-token latency at batch 1 (v0.5): (model, tensor ranks, input, ms), and peak throughput
#: (static batches, v0.6.1): (model, batch, tensor ranks, input, output, output tokens/s; per GPU
#: where TP > 1, as the page's H100 table of the same update labels it).
TRT_TTFT = (("GPT-J 6B", 1, 128, 12), ("GPT-J 6B", 1, 2048, 129), ("LLaMA 7B", 1, 128, 16),
            ("LLaMA 7B", 1, 2048, 133), ("LLaMA 70B", 4, 128, 47), ("LLaMA 70B", 4, 2048, 377))
TRT_THROUGHPUT = (("GPT-J 6B", 512, 1, 128, 128, 6374), ("GPT-J 6B", 120, 2, 128, 2048, 2192),
                  ("GPT-J 6B", 60, 1, 2048, 128, 670), ("GPT-J 6B", 64, 2, 2048, 2048, 903),
                  ("LLaMA 7B", 384, 1, 128, 128, 5586), ("LLaMA 7B", 60, 1, 128, 2048, 1928),
                  ("LLaMA 7B", 52, 1, 2048, 128, 591), ("LLaMA 7B", 64, 2, 2048, 2048, 782),
                  ("LLaMA 70B", 1280, 4, 128, 128, 670), ("LLaMA 70B", 240, 4, 128, 2048, 525),
                  ("LLaMA 70B", 120, 4, 2048, 128, 79))
#: TensorRT-LLM v0.5's A100 row of its H100-against-A100 post (NVIDIA/TensorRT-LLM
#: docs/source/blogs/H100vsA100.md; FP16, TP 1, the largest batch of a sweep of 1-64): (model, batch,
#: input, output, output tokens/s, first-token latency in ms at that batch).
TRT_BLOG = ("GPT-J 6B", 64, 128, 128, 3679, 481)
#: GPT-J 6B (Wang and Komatsuzaki, 2021: 28 layers, 4,096 wide, 16 heads, vocabulary 50,400) as
#: examples/gpt.tg prices it (its rotary embedding and parallel attention and MLP cost the same).
GPTJ = (("LAYERS", 28), ("HEADS", 16), ("HIDDEN", 4096), ("VOCAB", 50400), ("FLASH", 1))


def _trt_model(name: str) -> ModelFile:
    if name == "GPT-J 6B":
        return ModelFile(GPT, params=GPTJ)
    return ModelFile(LLAMA, params=LLAMA2["Llama-2-7B" if name == "LLaMA 7B" else "Llama-2-70B"])


def tensorrt_check(quick: bool) -> list[float]:
    """Checked, nothing fitted: TensorRT-LLM's first-token latencies and static-batch throughputs
    on A100s (graph runtime); a request the model says does not fit counts as a miss (ratio 0)."""
    print("\nchecked: TensorRT-LLM on A100-80GB, FP16 (NVIDIA/TensorRT-LLM docs/source/performance.md)")
    ratios = []
    for name, t, i, ms in (TRT_TTFT[::3] if quick else TRT_TTFT):
        got = predict(_trt_model(name), load_platform("dgx-a100"), f"tensor={t},pipeline=1" if t > 1 else "none",
                      f"prefill={i},batch=1")
        ratios.append(got["ttft"] * 1e3 / ms)
        print(f"  first token  {name:9} TP{t} input {i:5}: published {ms:6.1f} ms, predicted "
              f"{got['ttft'] * 1e3:6.1f}, ratio {ratios[-1]:.2f}")
    for name, b, t, i, o, tps in (TRT_THROUGHPUT[::3] if quick else TRT_THROUGHPUT):
        try:
            got = predict(_trt_model(name), load_platform("dgx-a100"), f"tensor={t},pipeline=1" if t > 1 else "none",
                          f"prefill={i},decode={o - 1},batch={b}")
        except InfeasibleError as err:
            ratios.append(0.0)
            print(f"  throughput   {name:9} TP{t} b{b:<4} {i}/{o}: published {tps:6}, predicted: does not fit "
                  f"({err.message})")
            continue
        per_gpu = b * o / got["latency"] / t
        ratios.append(per_gpu / tps)
        print(f"  throughput   {name:9} TP{t} b{b:<4} {i}/{o}: published {tps:6} tokens/s per GPU, predicted "
              f"{per_gpu:6.0f}, ratio {ratios[-1]:.2f}")
    name, b, i, o, tps, ms = TRT_BLOG
    got = predict(_trt_model(name), load_platform("dgx-a100"), "none", f"prefill={i},decode={o - 1},batch={b}")
    ratios += [b * o / got["latency"] / tps, got["ttft"] * 1e3 / ms]
    print(f"  v0.5 blog    {name:9} TP1 b{b:<4} {i}/{o}: published {tps:6} tokens/s, predicted "
          f"{b * o / got['latency']:6.0f}, ratio {ratios[-2]:.2f}; first token published {ms} ms, predicted "
          f"{got['ttft'] * 1e3:.0f}, ratio {ratios[-1]:.2f}")
    return ratios


def by_tensor(ratios: list[tuple[str, float]]) -> None:
    """FasterTransformer's ratios by tensor degree (the geometric mean of each)."""
    groups: dict[str, list[float]] = {}
    for label, r in ratios:
        groups.setdefault(label.split()[1], []).append(r)
    print("by layout: " + ", ".join(f"{k} {statistics.geometric_mean(v):.2f} ({len(v)})"
                                     for k, v in sorted(groups.items(), key=lambda kv: (len(kv[0]), kv[0]))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="every fourth row, no ranking")
    args = ap.parse_args()
    start = time.perf_counter()
    ratios = ft_rows(args.quick)
    values = [r for _, r in ratios]
    inside = sum(1 for r in values if 0.8 <= r <= 1.25)
    wide = sum(1 for r in values if 0.67 <= r <= 1.5)
    print(f"\n{len(values)} rows: {inside} ({inside / len(values):.0%}) within 0.8-1.25x, {wide} "
          f"({wide / len(values):.0%}) within 0.67-1.5x; geometric mean "
          f"{statistics.geometric_mean(values):.3f}, min {min(values):.2f}, max {max(values):.2f}")
    by_tensor(ratios)
    right, groups = ranking_530b(args.quick)
    if groups:
        print(f"Megatron-530B: the order of TP16, TP32 and TP8 x PP3 is right in {right} of {groups} rows")
    good, rows = auto_check(args.quick)
    print(f"auto no slower than the published layout (its own prediction): {good} of {rows}")
    eager_check()
    tp = tensor_parallel_check()
    print(f"  gpt-fast rows within {min(tp):.2f}-{max(tp):.2f}x")
    trt = tensorrt_check(args.quick)
    ok = [r for r in trt if r > 0] or [0.0]
    print(f"  TensorRT-LLM rows: {sum(1 for r in trt if 0.8 <= r <= 1.25)} of {len(trt)} within 0.8-1.25x "
          f"(range {min(ok):.2f}-{max(ok):.2f}; {sum(1 for r in trt if r == 0)} the model says do not fit)")
    print(f"\nplanning wall time {time.perf_counter() - start:.1f} s (load average {os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Split plans on real DNNs: what ``--parallel auto`` chooses, against one GPU
and against the hand-written recipes, priced by the same model.

For BERT-large (examples/bert_large.tg: 24 layers, H 1024, seq 384, f16),
GPT-2 small (12 layers, D 768, seq 1024, f16, causal; the transformer body
without the LM head) and ResNet-50 (examples/resnet50.tg, f32: TF32 tensor
cores on Ampere), inference and an Adam training step, at several batch
sizes, on dgx-a100 (8 A100 on NVSwitch) and mixed-gpu (2 A100 + 2 V100 over
PCIe, a CPU): the best single GPU, the plan auto keeps (step time, speedup,
peak memory per device), and side by side the plans a user would write by
hand: PyTorch DDP over every GPU (data = all), and Megatron-LM's recipe
(tensor parallel inside the node, Shoeybi et al. 2019; data 1 x tensor 8 on a
DGX, tensor over the GPUs of one generation otherwise). Every time is the
HEFT makespan of the split, fused (and trained) graph: docs/parallel.md says
what the model counts.

    python benchmarks/parallel.py [--quick]

The last lines check issue 20's target: BERT-large, batch 128, seq 384,
f16, on dgx-a100: auto at least 5x faster than the best single GPU, every GPU
used, memory within 80 GB each.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mapper.costing.cost import build_cost_table  # noqa: E402
from mapper.costing.fusion import fuse_for  # noqa: E402
from mapper.costing.training import training_step  # noqa: E402
from mapper.frontend.lowering.program import lower  # noqa: E402
from mapper.frontend.parse import parse  # noqa: E402
from mapper.parallel.plan import Plan  # noqa: E402
from mapper.parallel.rewrite import SplitError  # noqa: E402
from mapper.parallel.search import build, choose_plan, score  # noqa: E402
from mapper.platform.loader import load_platform  # noqa: E402

GIB = float(2**30)

GPT2 = """
param B = 8, S = 1024, D = 768, A = 12, L = 12, V = 50304
graph gpt2 {
  input tokens : i32[B*S]
  input positions : i32[B*S]
  emb = add(embedding(tokens, weight f16[V, D]), embedding(positions, weight f16[1024, D]))
  template block(x) {
    ln1 = layernorm(x)
    qkv = add(matmul(ln1, weight f16[D, 3*D]), weight f16[3*D])
    att = attention(qkv, heads = A, seq = S, causal = 1)
    proj = add(matmul(att, weight f16[D, D]), weight f16[D])
    r1 = add(x, proj)
    ln2 = layernorm(r1)
    fc = gelu(add(matmul(ln2, weight f16[D, 4*D]), weight f16[4*D]))
    mlp = add(matmul(fc, weight f16[4*D, D]), weight f16[D])
    out = add(r1, mlp)
    return out
  }
  h0 = emb
  for l in 0..L { h{l+1} = block(h{l}) }
  hf = layernorm(h{L})
  output hf
}
"""


def bert_large(batch: int) -> str:
    return (ROOT / "examples" / "bert_large.tg").read_text().replace("param B = 128,", f"param B = {batch},")


def gpt2(batch: int) -> str:
    return GPT2.replace("param B = 8,", f"param B = {batch},")


def resnet50(batch: int) -> str:
    return (ROOT / "examples" / "resnet50.tg").read_text().replace("param N = 1\n", f"param N = {batch}\n")


def recipes(graph, platform, gpus: list[str]) -> list[tuple[str, Plan]]:
    """The hand-written plans: DDP over every GPU, Megatron's tensor parallelism within a generation."""
    out = [("DDP", Plan(data=len(gpus), devices=tuple(gpus)))]
    kinds: dict[str, list[str]] = {}
    for name in gpus:
        dev = platform.devices[platform.device_index(name)]
        kinds.setdefault(str(dev.tensor_gflops), []).append(name)
    group = max(kinds.values(), key=len)
    out.append((f"Megatron tp{len(group)}", Plan(tensor=len(group), devices=tuple(group))))
    return out


def row(model: str, text: str, platform_name: str, train: str | None) -> dict:
    platform = load_platform(platform_name)
    graph = lower(parse(text, model))
    prepare = lambda g: fuse_for(g, platform)  # noqa: E731
    step = lambda g: training_step(g, train or "sgd")  # noqa: E731
    t0 = time.perf_counter()
    choice = choose_plan(graph, platform, "auto", prepare=prepare, train=train, step=step)
    search = time.perf_counter() - t0
    gpus = [d.name for d in platform.devices if d.kind == "gpu"]
    hand = []
    for label, plan in recipes(graph, platform, gpus):
        try:
            _, g = build(graph, plan, platform, prepare, train, step)
            hand.append((label, score(plan, build_cost_table(g, platform))))
        except SplitError as err:
            hand.append((label, err.message))
    return {"choice": choice, "hand": hand, "search": search}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the target row and one row per model only")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    cases = [("BERT-large", bert_large, 128, "dgx-a100", None), ("BERT-large", bert_large, 128, "dgx-a100", "adam")]
    if not args.quick:
        cases += [("BERT-large", bert_large, 32, "dgx-a100", "adam"),
                  ("BERT-large", bert_large, 128, "mixed-gpu", "adam")]
    cases += [("GPT-2", gpt2, 32, "dgx-a100", "adam")]
    if not args.quick:
        cases += [("GPT-2", gpt2, 8, "dgx-a100", None), ("GPT-2", gpt2, 8, "mixed-gpu", "adam")]
    cases += [("ResNet-50", resnet50, 256, "dgx-a100", "adam")]
    if not args.quick:
        cases += [("ResNet-50", resnet50, 64, "dgx-a100", None), ("ResNet-50", resnet50, 256, "mixed-gpu", "adam")]
    print(f"\n{'model':10} {'batch':>5} {'step':9} {'platform':10} {'1 GPU ms':>9} {'auto plan':44} {'ms':>8} "
          f"{'speedup':>7} {'GiB/dev':>7}  hand-written plans (ms)")
    target = None
    for model, make, batch, plat, train in cases:
        r = row(model, make(batch), plat, train)
        c = r["choice"]
        single = c.single.step_time if c.single is not None else float("nan")
        best = c.best
        hand = "; ".join(f"{label} {v.step_time * 1e3:.1f}" + ("" if v.fits else " (too big)")
                         if not isinstance(v, str) else f"{label}: cannot split" for label, v in r["hand"])
        print(f"{model:10} {batch:5d} {'train' if train else 'infer':9} {plat:10} {single * 1e3:9.2f} "
              f"{best.plan.label():44} {best.step_time * 1e3:8.2f} {single / best.step_time:7.2f} "
              f"{best.max_peak / GIB:7.2f}  {hand}  [search {r['search']:.0f} s, {len(c.candidates)} plans]")
        if model == "BERT-large" and batch == 128 and plat == "dgx-a100" and train is None:
            target = c
    assert target is not None
    b = target.best
    used = set(b.plan.devices) == {f"gpu{i}" for i in range(8)}
    speedup = target.single.step_time / b.step_time if target.single else 0.0
    fits = all(x <= 80 * GIB for _, x in b.peak)
    print(f"\ntarget: BERT-large b128 s384 f16 on dgx-a100, --parallel auto: {b.plan.label()}, "
          f"speedup {speedup:.2f}x (>= 5: {'yes' if speedup >= 5 else 'NO'}), every GPU used: "
          f"{'yes' if used else 'NO'}, peak {b.max_peak / GIB:.2f} GiB per GPU (<= 80: {'yes' if fits else 'NO'})")
    return 0 if speedup >= 5 and used and fits else 1


if __name__ == "__main__":
    raise SystemExit(main())

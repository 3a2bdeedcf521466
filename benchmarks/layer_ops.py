"""One GPT-3 layer's operators on an A100, predicted against measured: prefill and decode.

    python benchmarks/layer_ops.py

The measurements are LLMCompass's real-hardware runs (Zhang, Ning, Prabhakar, Wentzlaff,
"LLMCompass: Enabling Efficient Hardware Design for Large Language Model Inference", ISCA 2024;
PrincetonUniversity/LLMCompass ae/figure5/ijkl/real_hardware/transformer_A100.csv and
transformerAR_A100.csv, their Figure 5i and 5k): one GPT-3 175B layer (hidden 12,288, 96 heads)
split over 4 A100-80GB by Megatron's tensor parallelism, batch 8, FP16; prefill of 2,048
tokens per sequence, and one decode step against 3,072 cached positions. Each operator was
timed alone in PyTorch (unfused attention: the two batched GEMMs and the softmax; their all-
reduce over 4 GPUs). Nothing is fitted to these rows.

Each operator here is one task on ``dgx-a100``'s gpu0, priced by the cost model alone
(``build_cost_table``: kernel time with its launch, no framework dispatch); the all-reduces by
the collective model over 4 of the node's GPUs (mapper/parallel/collectives.py). A decode step's small
element-wise ops take a few microseconds on the GPU; timed alone, one after another, a PyTorch
op takes the longer of its kernel and the framework's dispatch, which ``--runtime eager`` puts at
23 us an op (``EAGER_DISPATCH_US``, fitted on another source): the decode table prints both.

Predictions do not depend on the machine's load.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mapper.costing.cost import build_cost_table
from mapper.frontend.load import graph_from_text
from mapper.parallel.collectives import collective, network
from mapper.platform.loader import load_platform
from mapper.serving.request import EAGER_DISPATCH_US

SOURCE = "LLMCompass (ISCA 2024) ae/figure5/ijkl/real_hardware, A100-80GB, FP16"
HIDDEN, HEADS, TP, BATCH, PROMPT, CONTEXT = 12288, 96, 4, 8, 2048, 3072
#: measured seconds per operator, in LLMCompass's order (Q_K_V, Q_mul_K, A_mul_V, Wo_proj,
#: W1_proj, W2_proj, Softmax, LayerNorm_MHA, LayerNorm_FFN, GeLU, AllReduce_MHA, AllReduce_FFN)
PREFILL = (13.721823692321777e-3, 1.8811225891113281e-3, 1.183152198791504e-3, 4.5403242111206055e-3,
           17.464280128479004e-3, 17.485618591308594e-3, 2.80153751373291e-3, 0.6816387176513672e-3,
           0.6816387176513672e-3, 0.5242824554443359e-3, 2.8909e-3, 2.8909e-3)
DECODE = (212.4309539794922e-6, 106.09626770019531e-6, 138.6404037475586e-6, 68.90296936035156e-6,
          185.96649169921875e-6, 186.08570098876953e-6, 16.689300537109375e-6, 48.041343688964844e-6,
          48.041343688964844e-6, 47.92213439941406e-6, 26.04e-6, 26.04e-6)


def layer_graph(tokens: int, seq: int, cache: int) -> str:
    """One rank's share of the layer's operators, each its own task (the measurement's split)."""
    h, r = HIDDEN, HIDDEN // TP
    return f"""graph layer {{
  input x : f16[{tokens}, {h}]
  input a : f16[{tokens}, {r}]
  input f : f16[{tokens}, {4 * r}]
  input q : f16[{tokens}, {3 * r}]
  qkv = matmul(x, weight f16[{h}, {3 * r}])
  att = attention(q, heads = {HEADS // TP}, seq = {seq}, causal = 1, fused = 0, cache = {cache})
  wo = matmul(a, weight f16[{r}, {h}])
  w1 = matmul(x, weight f16[{h}, {4 * r}])
  w2 = matmul(f, weight f16[{4 * r}, {h}])
  ln = layernorm(x)
  ge = gelu(f)
  output qkv
  output att
  output wo
  output w1
  output w2
  output ln
  output ge
}}
"""


def predicted(tokens: int, seq: int, cache: int) -> list[tuple[str, float, tuple[int, ...]]]:
    """(operator, seconds, indices of the measured operators it stands for)."""
    dgx = load_platform("dgx-a100")
    graph = graph_from_text(layer_graph(tokens, seq, cache))
    times = build_cost_table(graph, dgx).time
    gpu = dgx.device_index("gpu0")
    t = {task.name: times[i][gpu] for i, task in enumerate(graph.tasks)}
    allreduce = collective(network(dgx), "allreduce", tokens * HIDDEN * 2, TP, TP)[0]
    return [("Q_K_V", t["qkv"], (0,)), ("attention (QK, softmax, AV)", t["att"], (1, 6, 2)),
            ("Wo_proj", t["wo"], (3,)), ("W1_proj", t["w1"], (4,)), ("W2_proj", t["w2"], (5,)),
            ("LayerNorm (each)", t["ln"], (7,)), ("LayerNorm (each)", t["ln"], (8,)), ("GeLU", t["ge"], (9,)),
            ("AllReduce (each)", allreduce, (10,)), ("AllReduce (each)", allreduce, (11,))]


def check(phase: str, measured: tuple[float, ...], rows: list[tuple[str, float, tuple[int, ...]]],
          unit: float, label: str, eager: bool = False) -> list[float]:
    """Print ``rows`` against ``measured``; with ``eager`` also each op alone in eager PyTorch (its
    parts each dispatched); the ratios returned are those of the kernels."""
    print(f"\n{phase} ({label})")
    ratios, alone = [], []
    for name, seconds, which in rows:
        got = sum(measured[i] for i in which)
        ratios.append(seconds / got)
        line = f"  {name:28} measured {got / unit:9.3f}  kernel {seconds / unit:9.3f}  ratio {ratios[-1]:.2f}"
        if eager:
            alone.append(max(seconds, len(which) * EAGER_DISPATCH_US * 1e-6))
            line += f"  alone in eager PyTorch {alone[-1] / unit:8.3f}  ratio {alone[-1] / got:.2f}"
        print(line)
    total_measured, total = sum(measured), sum(s for _, s, _ in rows)
    line = f"  {'layer':28} measured {total_measured / unit:9.3f}  kernel {total / unit:9.3f}  " \
           f"ratio {total / total_measured:.2f}"
    if eager:
        line += f"  alone in eager PyTorch {sum(alone) / unit:8.3f}  ratio {sum(alone) / total_measured:.2f}"
    print(line)
    return ratios


def main() -> int:
    print(f"GPT-3 175B layer, tensor parallel over {TP} A100s, batch {BATCH} ({SOURCE})")
    pre = check("prefill", PREFILL, predicted(BATCH * PROMPT, PROMPT, 0), 1e-3,
                f"{PROMPT} tokens per sequence; ms")
    dec = check("decode step", DECODE, predicted(BATCH, 1, CONTEXT), 1e-6, f"{CONTEXT} cached positions; us",
                eager=True)
    big = pre + [r for (name, _, _), r in zip(predicted(BATCH, 1, CONTEXT), dec)
                 if name not in ("LayerNorm (each)", "GeLU")]
    print(f"\nwithin 0.8-1.25x: prefill {sum(1 for r in pre if 0.8 <= r <= 1.25)} of {len(pre)}, decode "
          f"{sum(1 for r in dec if 0.8 <= r <= 1.25)} of {len(dec)}; geometric mean over the operators "
          f"of more than a few microseconds on the GPU {statistics.geometric_mean(big):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

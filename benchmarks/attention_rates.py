"""Fused causal attention's rates: the backward's share of the forward's rate and the half-lengths.

    python benchmarks/attention_rates.py

Two parameters of the cost model's attention price (docs/cost_model.md) are fitted here, both on
one source, cuDNN 9.10.2's causal BF16 attention on a B200 (NVIDIA/cudnn-frontend,
``benchmark/sdpa_benchmark_training/artifacts/sdpa_bf16_benchmark_results_NVIDIA_B200.csv``: batch 1,
128 query and 8 key-value heads of 128, PyTorch's cuDNN backend, forward and backward timed apart):

* the backward's share of the forward's rate (:data:`mapper.costing.efficiency.ATTENTION_BACKWARD_SHARE`):
  the median of backward over forward TFLOP/s over sequences 2,048-32,768 (the backward recomputes
  the scores and runs five matrix products against two, with more shared-memory traffic: Dao,
  "FlashAttention-2", arXiv 2307.08691, section 3.1.2);
* Blackwell's half-length ``s_1/2`` (the ``half_length`` of ``attention.causal`` on ``dgx-b200`` and
  ``gb200-tray``): the forward at ``r_f s / (s + s_1/2)`` and the backward at the share times that,
  ``r_f`` the GPU default attention efficiency (0.60, not refitted); least squares of the log ratio
  of modelled to measured forward-plus-backward reach over sequences 1,024-32,768 (longer runs lose
  clock as well: printed, not fitted). On a B200 the tensor cores doubled over the H100's while the
  exponential units and the shared memory did not (Zadouri et al., "FlashAttention-4", 2026): the
  softmax, whose cost per score does not shrink with the head's work, weighs on short sequences.

FlashAttention-2's own Hopper rate (the ``fa2`` entry of ``attention_kernels`` on the H100 and H200
platforms, :mod:`mapper.platform.kernels`) is fitted on its H100 sweep (forward efficiency and
half-length, the backward at the same share), checked on its H200 rows of 2024 and on FlashAttention-3's
"35 %" (fit 5).

Two more are fitted the same way (least squares of the log ratio, the same forward and share),
each on one published sweep and checked on another. The A100's half-length (the ``half_length`` of
``attention.causal`` on ``dgx-a100`` and every A100-based platform) on FlashAttention-2's causal
forward plus backward at head dimension 128 on an A100 80GB SXM4, sequences 512-16,384 (Dao,
"FlashAttention-2", arXiv 2307.08691, Figure 4d; the repository's
``assets/flash2_a100_fwd_bwd_benchmark.png``: 16,384 tokens a batch, hidden 2,048), checked on head
dimension 64 (Figure 4c). Hopper's is fitted on an H200 (the H100's SMs and tensor peak): Hopper's half-length (the
``half_length`` of ``attention.causal`` on ``dgx-h100``, ``dgx-h200`` and ``h100-mig``), the same
least squares with the same forward and share, on cuDNN 9.19's causal forward plus backward in 2026
(``results/h200_919_only_cudnn/llama3.1_20260227_034703.csv``: batch 1, 64 query and 8 key-value heads
of 128, sequences 2,048-32,768). Checks, not fitted: the README's separate cuDNN-frontend run on the
B200 (sequence 32,768); on the H200 cuDNN 9.1 and PyTorch's FlashAttention-2 in 2024 (the
repository's first ``benchmark/benchmark_results.csv``, commit b740542: 16 heads of 128, causal rows,
4,096-65,536). End to end the parameters are checked on NVIDIA's long-sequence
tables (``benchmarks/long_context.py``) and recipe rows (``benchmarks/recipes.py``).
"""

from __future__ import annotations

import math
import statistics

R_F = 0.60  # the GPU default attention efficiency (mapper.costing.efficiency.EFF_COMPUTE), the forward's
PEAK = {"B200": 2250.0, "H200": 989.0, "A100": 312.0}  # dense BF16 tensor TFLOP/s (datasheets; H200 = H100 SXM)
BACKWARD_FLOPS = 2.5  # the backward's FLOPs over the forward's (mapper.costing.training.ATTENTION_BACKWARD)
#: sequence, forward ms, backward ms, forward TFLOP/s, backward TFLOP/s (pyt_cudnn rows of the B200 CSV)
ROWS = [
    (512, 0.102, 0.160, 83.991, 134.164),
    (1024, 0.135, 0.278, 254.501, 308.529),
    (2048, 0.287, 0.925, 478.921, 371.486),
    (4096, 0.642, 1.960, 855.678, 701.265),
    (8192, 1.877, 5.833, 1171.278, 942.509),
    (16384, 6.602, 20.460, 1332.415, 1074.776),
    (32768, 24.795, 79.338, 1419.000, 1108.688),
    (65536, 101.812, 327.889, 1382.330, 1073.059),
    (131072, 415.333, 1343.117, 1355.418, 1047.843),
]
SHARE_FIT = (2048, 32768)
FIT = (1024, 32768)
HOPPER_SOURCE = "cuDNN 9.19 (2026)"  # the H200 rows Hopper's half-length is fitted on
#: FlashAttention-2, causal, forward plus backward TFLOP/s on an A100 80GB SXM4 (Figure 4d and 4c):
#: (head dimension, sequence, TFLOP/s); head dimension 128 fitted, 64 a check
A100 = [(128, 512, 99.0), (128, 1024, 133.0), (128, 2048, 155.0), (128, 4096, 173.0), (128, 8192, 182.0),
        (128, 16384, 189.0),
        (64, 512, 88.0), (64, 1024, 119.0), (64, 2048, 140.0), (64, 4096, 156.0), (64, 8192, 165.0),
        (64, 16384, 171.0)]
A100_FIT_HEAD = 128
#: FlashAttention-2, causal, head dimension 128, forward plus backward TFLOP/s on an H100 80GB SXM5 (the
#: repository's ``assets/flash2_h100_fwd_bwd_benchmark.png``, panel d): a check of Hopper's shape
H100_FA2 = [(512, 163.0), (1024, 221.0), (2048, 265.0), (4096, 294.0), (8192, 308.0), (16384, 328.0)]
#: The README's cuDNN-frontend run: sequence, forward ms, backward ms, forward and backward TFLOP/s.
CHECK = (32768, 24.543, 73.210, 1434.0, 1201.0)
#: H200, causal BF16, head dim 128: (source, sequence, forward TFLOP/s, backward TFLOP/s)
H200 = [
    ("cuDNN 9.1 (2024)", 4096, 542.3, 443.6), ("cuDNN 9.1 (2024)", 8192, 572.9, 463.5),
    ("cuDNN 9.1 (2024)", 16384, 586.8, 497.7), ("cuDNN 9.1 (2024)", 32768, 577.3, 499.7),
    ("cuDNN 9.1 (2024)", 65536, 567.0, 503.8),
    ("FlashAttention-2 (2024)", 4096, 314.1, 248.8), ("FlashAttention-2 (2024)", 8192, 325.1, 277.4),
    ("FlashAttention-2 (2024)", 16384, 324.8, 305.2), ("FlashAttention-2 (2024)", 32768, 345.3, 317.3),
    ("FlashAttention-2 (2024)", 65536, 342.7, 323.2),
    ("cuDNN 9.19 (2026)", 2048, 484.0, 370.0), ("cuDNN 9.19 (2026)", 4096, 591.0, 474.0),
    ("cuDNN 9.19 (2026)", 8192, 644.0, 541.0), ("cuDNN 9.19 (2026)", 16384, 673.0, 579.0),
    ("cuDNN 9.19 (2026)", 32768, 688.0, 581.0),
]


def reach(fwd_ms: float, bwd_ms: float, fwd_tf: float, bwd_tf: float, peak: float = PEAK["B200"]) -> float:
    """Forward plus backward FLOPs over their time, as a share of the peak."""
    return (fwd_tf * fwd_ms + bwd_tf * bwd_ms) / (fwd_ms + bwd_ms) / peak


def combined(fwd: float, share: float) -> float:
    """The forward-plus-backward rate of a forward at ``fwd`` and a backward at ``share`` of it."""
    return (1.0 + BACKWARD_FLOPS) / (1.0 / fwd + BACKWARD_FLOPS / (share * fwd))


def model(seq: int, half: float, share: float) -> float:
    """The model's forward-plus-backward reach at sequence ``seq``."""
    return combined(R_F, share) * seq / (seq + half)


def fit_share() -> float:
    """The backward's share of the forward's rate (to 0.01): the median over the fitted sequences."""
    ratios = [b / f for s, _, _, f, b in ROWS if SHARE_FIT[0] <= s <= SHARE_FIT[1]]
    return round(statistics.median(ratios), 2)


def least_squares(rows: list[tuple[int, float]], share: float) -> float:
    """The half-length (to 10 elements) of least squared log ratio of model to measured ``rows``."""
    return min((10.0 * i for i in range(1, 2001)),
               key=lambda h: sum(math.log(model(s, h, share) / e) ** 2 for s, e in rows))


def fit(share: float | None = None) -> float:
    """Blackwell's half-length: the least squares over the B200's fitted sequences."""
    share = fit_share() if share is None else share
    return least_squares([(s, reach(*r)) for s, *r in ROWS if FIT[0] <= s <= FIT[1]], share)


def fit_a100(share: float | None = None) -> float:
    """The A100's half-length: the least squares over FlashAttention-2's head-dimension-128 sweep."""
    share = fit_share() if share is None else share
    return least_squares([(s, tf / PEAK["A100"]) for d, s, tf in A100 if d == A100_FIT_HEAD], share)


def h200_reach(fwd_tf: float, bwd_tf: float) -> float:
    """An H200 row's forward-plus-backward reach from its forward and backward TFLOP/s."""
    return combined(fwd_tf / PEAK["H200"], bwd_tf / fwd_tf)


def fit_hopper(share: float | None = None) -> float:
    """Hopper's half-length: the least squares over cuDNN 9.19's causal rows on an H200."""
    share = fit_share() if share is None else share
    return least_squares([(s, h200_reach(f, b)) for src, s, f, b in H200 if src == HOPPER_SOURCE], share)


def fit_fa2_hopper(share: float) -> tuple[float, float]:
    """FlashAttention-2's forward efficiency (to 0.01) and half-length (to 10) on Hopper: the least squares
    over its H100 sweep (:data:`H100_FA2`), with the backward at ``share`` of the forward as elsewhere."""
    rows = [(s, tf / PEAK["H200"]) for s, tf in H100_FA2]

    def err(rf: float, h: float) -> float:
        return sum(math.log(combined(rf, share) * s / (s + h) / e) ** 2 for s, e in rows)

    return min(((i / 100, 10.0 * j) for i in range(20, 80) for j in range(0, 201)), key=lambda p: err(*p))


def main() -> None:
    share = fit_share()
    print(f"fit 1, backward share of the forward's rate: {share:.2f} (cuDNN 9.10.2 on a B200, median over "
          f"sequences {SHARE_FIT[0]:,}-{SHARE_FIT[1]:,})")
    print(f"{'seq':>8} {'fwd':>6} {'bwd':>6} {'bwd/fwd':>8}")
    for s, _, _, f, b in ROWS:
        note = "" if SHARE_FIT[0] <= s <= SHARE_FIT[1] else "  (not fitted)"
        print(f"{s:>8,} {f / PEAK['B200']:>6.3f} {b / PEAK['B200']:>6.3f} {b / f:>8.2f}{note}")
    half = fit(share)
    print(f"\nfit 2, Blackwell half-length: s_1/2 = {half:,.0f} (forward {R_F}, backward {share:.2f} of it, "
          f"fwd+bwd asymptote {combined(R_F, share):.3f}; sequences {FIT[0]:,}-{FIT[1]:,})")
    print(f"{'seq':>8} {'measured':>9} {'model':>6} {'ratio':>6}")
    for s, *r in ROWS:
        e = reach(*r)
        note = "" if FIT[0] <= s <= FIT[1] else "  (not fitted)"
        print(f"{s:>8,} {e:>9.3f} {model(s, half, share):>6.3f} {model(s, half, share) / e:>6.2f}{note}")
    s, *r = CHECK
    e = reach(*r)
    print(f"check, cuDNN frontend on the B200 at {s:,}: measured {e:.3f}, model {model(s, half, share):.3f}, "
          f"ratio {model(s, half, share) / e:.2f}; backward share {r[3] / r[2]:.2f}")
    hopper = fit_hopper(share)
    print(f"\nfit 3, Hopper half-length: s_1/2 = {hopper:,.0f} (same forward and share; {HOPPER_SOURCE} on an "
          f"H200); the other H200 rows are checks")
    print(f"{'source':<24} {'seq':>7} {'fwd':>6} {'bwd':>6} {'bwd/fwd':>8} {'fwd+bwd':>8} {'model':>6} "
          f"{'model/measured':>15}")
    for src, s, f, b in H200:
        both = h200_reach(f, b)
        m = model(s, hopper, share)
        note = "" if src == HOPPER_SOURCE else "  (check)"
        print(f"{src:<24} {s:>7,} {f / PEAK['H200']:>6.3f} {b / PEAK['H200']:>6.3f} {b / f:>8.2f} {both:>8.3f} "
              f"{m:>6.3f} {m / both:>15.2f}{note}")
    longest = H100_FA2[-1][1]
    print("check, FlashAttention-2 on an H100 relative to its 16,384 (the shape; its level is FlashAttention-2's, "
          "below cuDNN's):\n  " + ", ".join(
              f"{s:,} measured {tf / longest:.2f} model {model(s, hopper, share) / model(16384, hopper, share):.2f}"
              for s, tf in H100_FA2))
    rf, h = fit_fa2_hopper(share)
    print(f"\nfit 5, FlashAttention-2 on Hopper (platforms' attention_kernels fa2): forward {rf:.2f} of the 16-bit "
          f"peak, s_1/2 = {h:,.0f}, backward {share:.2f} of the forward (fwd+bwd asymptote {combined(rf, share):.3f}); "
          "fitted on its H100 sweep, checked on the H200 rows of 2024 and FlashAttention-3's 35 %")
    print(f"{'source':<34} {'seq':>7} {'measured':>9} {'model':>6} {'ratio':>6}")
    for s, tf in H100_FA2:
        e, m = tf / PEAK["H200"], combined(rf, share) * s / (s + h)
        print(f"{'FA2 H100 (fitted)':<34} {s:>7,} {e:>9.3f} {m:>6.3f} {m / e:>6.2f}")
    for src, s, f, b in H200:
        if src.startswith("FlashAttention-2"):
            e, m = h200_reach(f, b), combined(rf, share) * s / (s + h)
            print(f"{src + ' (check)':<34} {s:>7,} {e:>9.3f} {m:>6.3f} {m / e:>6.2f}")
    fwd = rf * 16384 / (16384 + h)
    print(f"check, forward at 16,384: model {fwd:.3f} of the peak; FlashAttention-3 (Shah et al., arXiv 2407.08608, "
          f"abstract): FlashAttention-2 reaches 35 % on an H100 ({fwd / 0.35:.2f})")
    a100 = fit_a100(share)
    print(f"\nfit 4, A100 half-length: s_1/2 = {a100:,.0f} (same forward and share; FlashAttention-2, causal, "
          f"head dimension {A100_FIT_HEAD}, Dao 2023 Figure 4d); head dimension 64 (Figure 4c) is the check")
    print(f"{'head dim':>8} {'seq':>7} {'measured':>9} {'model':>6} {'ratio':>6}")
    for d, s, tf in A100:
        e, m = tf / PEAK["A100"], model(s, a100, share)
        note = "" if d == A100_FIT_HEAD else "  (check)"
        print(f"{d:>8} {s:>7,} {e:>9.3f} {m:>6.3f} {m / e:>6.2f}{note}")
    print("model at short chunks on the A100: " + ", ".join(
        f"{s:,} {s / (s + a100):.2f}" for s in (512, 1024, 2048, 4096, 8192)) + " of the long-sequence rate")
    print("model at short chunks on Hopper: " + ", ".join(
        f"{s:,} {s / (s + hopper):.2f}" for s in (512, 1024, 2048, 4096, 8192)) + " of the long-sequence rate")


if __name__ == "__main__":
    main()

"""Fused causal attention on a B200: the half-length the Blackwell platforms declare, fitted and checked.

    python benchmarks/blackwell_attention.py

On a B200 the tensor cores doubled over the H100's while the exponential units and the shared
memory did not (Zadouri, Hoehnerbach, Shah, Liu, Thakkar, Dao, "FlashAttention-4: Algorithm and
Kernel Pipelining Co-Design for Asymmetric Hardware Scaling", 2026): the softmax and the
backward's shared-memory traffic, whose cost per score does not shrink with the head's work,
weigh on short sequences. The model prices that as Hockney's half-length over the sequence
(``r = r_inf s / (s + s_1/2)``, :func:`mapper.costing.work.vector_length`) with ``r_inf`` the
GPU default attention efficiency (0.60, docs/cost_model.md, not refitted), and fits the one
parameter ``s_1/2`` to cuDNN 9.10.2's causal BF16 attention on a B200, forward plus backward
(NVIDIA/cudnn-frontend, ``benchmark/sdpa_benchmark_training/artifacts/
sdpa_bf16_benchmark_results_NVIDIA_B200.csv``: batch 1, 128 query and 8 key-value heads of
128, PyTorch's cuDNN backend), over sequences of 1,024-32,768 (longer runs lose clock as well:
printed, not fitted). It checks the fit on the same README's separate cuDNN-frontend run
(sequence 32,768, forward 1,434 and backward 1,201 TFLOP/s) and, end to end, on
``benchmarks/recipes.py``'s B200 and GB200 rows.
"""

from __future__ import annotations

R_INF = 0.60  # the GPU default attention efficiency (mapper.costing.efficiency.EFF_COMPUTE)
PEAK = 2250.0  # B200 dense BF16 tensor TFLOP/s (HGX B200 datasheet)
#: sequence, forward ms, backward ms, forward TFLOP/s, backward TFLOP/s (pyt_cudnn rows of the CSV)
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
FIT = (1024, 32768)
#: The README's cuDNN-frontend run: sequence, forward ms, backward ms, forward and backward TFLOP/s.
CHECK = (32768, 24.543, 73.210, 1434.0, 1201.0)


def reach(fwd_ms: float, bwd_ms: float, fwd_tf: float, bwd_tf: float) -> float:
    """Forward plus backward FLOPs over their time, as a share of the peak."""
    return (fwd_tf * fwd_ms + bwd_tf * bwd_ms) / (fwd_ms + bwd_ms) / PEAK


def model(seq: int, half: float) -> float:
    return R_INF * seq / (seq + half)


def fit() -> float:
    """The half-length (to 10 elements) of least squared error over the fitted sequences."""
    rows = [(s, reach(*r)) for s, *r in ROWS if FIT[0] <= s <= FIT[1]]
    return min((10.0 * i for i in range(2001)), key=lambda h: sum((model(s, h) - e) ** 2 for s, e in rows))


def main() -> None:
    half = fit()
    print(f"fit: s_1/2 = {half:,.0f} (r_inf {R_INF}, sequences {FIT[0]:,}-{FIT[1]:,})")
    print(f"{'seq':>8} {'measured':>9} {'model':>6} {'ratio':>6}")
    for s, *r in ROWS:
        e = reach(*r)
        note = "" if FIT[0] <= s <= FIT[1] else "  (not fitted)"
        print(f"{s:>8,} {e:>9.3f} {model(s, half):>6.3f} {model(s, half) / e:>6.2f}{note}")
    s, *r = CHECK
    e = reach(*r)
    print(f"check, cuDNN frontend at {s:,}: measured {e:.3f}, model {model(s, half):.3f}, "
          f"ratio {model(s, half) / e:.2f}")


if __name__ == "__main__":
    main()

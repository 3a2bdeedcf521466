"""Predicted against published measured times on accelerators.

Every row is a workload, a shipped platform and device, and a time someone
else measured and published, with its source. The prediction is the cost
model's time for the workload on that one device (its fused tasks one after
the other, no transfers: the makespan of the whole graph on that device).
The model is not fitted per row: the parameters it uses are listed at the
end with their sources.

    python benchmarks/published.py            # the table and the summary
    python benchmarks/published.py --csv      # the rows as CSV

No timing happens here, so the machine's load does not matter.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mapper.core.graph import TaskGraph  # noqa: E402
from mapper.costing.cost import build_cost_table  # noqa: E402
from mapper.costing.fusion import fuse_for  # noqa: E402
from mapper.frontend.load import graph_from_text  # noqa: E402
from mapper.platform.loader import load_platform  # noqa: E402

TRT_BERT = "NVIDIA/TensorRT demo/BERT/README.md, 'Inference performance: NVIDIA A100 (40GB)', FP16 average latency"
XLA_GEMM = ("openxla/xla (tensorflow/tensorflow third_party/xla) xla/service/gpu/model/matmul_interpolator_data.h, "
            "sm_90 (H100 SXM) entries")
GEMM_HLS = ("spcl/gemm_hls README.md (de Fine Licht, Kwasniewski, Hoefler, FPGA 2020): 301 and 132 GFLOP/s f32 and f64 "
            "on a VCU1525 (three-SLR UltraScale+, as the U280); the model prices the U280")


@dataclass(frozen=True)
class Row:
    case: str
    text: str  # the workload as DSL
    platform: str
    device: str
    measured_s: float
    source: str


def bert(layers: int, hidden: int, heads: int, ffn: int, batch: int, seq: int, dtype: str) -> str:
    """examples/bert_base.tg with other sizes and dtype."""
    text = (ROOT / "examples" / "bert_base.tg").read_text()
    text = text.replace("param B = 8, S = 128, H = 768, A = 12, F = 3072, L = 12",
                        f"param B = {batch}, S = {seq}, H = {hidden}, A = {heads}, F = {ffn}, L = {layers}")
    return text.replace("f32[", f"{dtype}[")


def gemm(b: int, m: int, n: int, k: int, dtype: str) -> str:
    """One (batched) GEMM ``C[b, m, n] = A[b, m, k] B[b, k, n]``."""
    a = f"{dtype}[{b}, {m}, {k}]" if b > 1 else f"{dtype}[{m}, {k}]"
    bb = f"{dtype}[{b}, {k}, {n}]" if b > 1 else f"{dtype}[{k}, {n}]"
    return f"graph gemm {{\n  input a : {a}\n  input b : {bb}\n  c = matmul(a, b)\n  output c\n}}\n"


#: BERT-base and BERT-large, TensorRT 8 on an A100 40GB (FP16): (seq, batch, ms).
TRT_BASE = ((128, 1, 0.67), (128, 2, 0.83), (128, 4, 1.02), (128, 8, 1.38), (128, 16, 2.18), (128, 32, 4.10),
            (128, 64, 8.05), (128, 128, 16.14), (384, 1, 1.31), (384, 4, 2.31), (384, 8, 3.62), (384, 32, 13.51),
            (384, 128, 51.26))
TRT_LARGE = ((128, 1, 1.64), (128, 8, 4.51), (128, 32, 13.85), (128, 128, 51.61), (384, 1, 3.12), (384, 8, 11.53),
             (384, 32, 43.01), (384, 128, 163.70))
#: H100 GEMMs measured by XLA's matmul cost model: every b = 1 entry of the
#: table's first 16,000 characters, (m, n, k, bf16 FLOP/s, f32 FLOP/s).
XLA_H100 = (
    (1024, 2048, 256, 139519467775467, 82342164417177), (256, 2048, 256, 41838443890274, 32140260536398),
    (4096, 512, 512, 238821580071174, 116711067826086), (512, 256, 512, 21788592207792, 15650388059701),
    (256, 2048, 4096, 285873755058572, 119890779812416), (4096, 1024, 512, 343707370038412, 144709140700808),
    (2048, 2048, 2048, 631984593290170, 329166714898835), (256, 512, 4096, 91678775956284, 46442120415224),
    (256, 1024, 256, 22671913513513, 16810837675350), (4096, 4096, 256, 392162828341855, 183985919122686),
    (4096, 4096, 4096, 783328793548203, 401589990188086), (512, 4096, 1024, 373345557719054, 162098705314009),
    (512, 256, 4096, 91056803256445, 79044598351001), (256, 1024, 4096, 172294901155327, 73143176021798),
    (4096, 2048, 512, 447019910074937, 193886208739617), (2048, 256, 1024, 135847902834008, 65728564152791),
    (2048, 1024, 2048, 523265996101364, 254561835941204), (512, 256, 256, 11459846994535, 9731563805104),
    (1024, 256, 1024, 68338965376782, 39709386982248), (4096, 256, 2048, 304694047673098, 178718679094540),
    (1024, 1024, 2048, 349981037809648, 160361695702497), (256, 512, 256, 11459846994535, 9731563805104),
    (256, 4096, 2048, 324589426844014, 131521536501714), (1024, 512, 2048, 220029062295081, 94586136715997),
    (512, 2048, 1024, 232613046793760, 111848106666666), (4096, 512, 1024, 370767204419889, 177771825165562),
    (1024, 2048, 2048, 524288000000000, 224069662771285),
)
#: FPGA GEMMs (n = 4096 square), (dtype, GFLOP/s) from de Fine Licht et al.
FPGA_GEMM = (("f32", 301.0), ("f64", 132.0))


def rows() -> list[Row]:
    out = []
    for name, sizes, table in (("BERT-base", (12, 768, 12, 3072), TRT_BASE),
                               ("BERT-large", (24, 1024, 16, 4096), TRT_LARGE)):
        for seq, batch, ms in table:
            out.append(Row(f"{name} f16 seq {seq} batch {batch}", bert(*sizes, batch, seq, "f16"),
                           "cpu-gpu-fpga", "gpu0", ms / 1e3, TRT_BERT))
    for m, n, k, bf16, f32 in XLA_H100:
        flops = 2.0 * m * n * k
        out.append(Row(f"GEMM bf16 {m}x{n}x{k}", gemm(1, m, n, k, "bf16"), "dgx-h100", "gpu0", flops / bf16, XLA_GEMM))
        out.append(Row(f"GEMM f32 (tf32) {m}x{n}x{k}", gemm(1, m, n, k, "f32"), "dgx-h100", "gpu0", flops / f32,
                       XLA_GEMM))
    for dtype, gflops in FPGA_GEMM:
        n = 4096
        out.append(Row(f"FPGA GEMM {dtype} {n}^3", gemm(1, n, n, n, dtype), "cpu-gpu-fpga", "fpga0",
                       2.0 * n ** 3 / (gflops * 1e9), GEMM_HLS))
    return out


def predict(row: Row, split: int | None = None, overlap: float | None | str = "as shipped") -> float:
    """The model's time of the row's workload on its device, in seconds
    (with another ``gemm_split_k`` / ``overlap_exponent`` on the GPUs if given)."""
    graph: TaskGraph = graph_from_text(row.text, row.case)
    platform = load_platform(row.platform)
    if split is not None or overlap != "as shipped":
        devices = tuple(replace(d, gemm_split_k=split if split is not None else d.gemm_split_k,
                                overlap_exponent=d.overlap_exponent if overlap == "as shipped" else overlap)
                        if d.kind == "gpu" else d for d in platform.devices)
        platform = replace(platform, devices=devices)
    cost = build_cost_table(fuse_for(graph, platform), platform)
    d = platform.device_index(row.device)
    return sum(cost.time[t][d] for t in range(cost.n_tasks))


#: The model's parameters the rows use, with their sources (docs/cost_model.md).
#: Two are fitted on the rows themselves (split-K and the overlap exponent),
#: and the FPGA efficiency is its source's own measurement: say so when reading
#: the table.
PARAMETERS = (
    ("peak_gflops / tensor_gflops per dtype", "vendor datasheets and architecture whitepapers (A100, H100, U280)"),
    ("mem_bandwidth_gbs", "vendor datasheets"),
    ("launch_us = 3 (GPU), 50 (FPGA)", "per-call overhead: an empty CUDA kernel's launch, about 3 us (NVIDIA "
                                       "developer forums, 2022); XRT"),
    ("GPU GEMM efficiency 0.78", "cuBLAS at 4096^3: 238.8 of 312 TFLOP/s on A100 (DefTruth/CUDA-Learn-Notes) and "
                                 "783 of 989 on H100 (XLA's table): 0.77 and 0.79"),
    ("gemm_tile 128x128x32, compute_units (SMs)", "CUTLASS tensor-op tile; SM counts from the whitepapers"),
    ("gemm_stages = 3", "CUTLASS's default kStages for SM80 tensor-op GEMMs (default_gemm_configuration.h): the K "
                        "blocks loaded before the first multiply, at each SM's share of the memory bandwidth"),
    ("gemm_split_k = 8, overlap_exponent = 1.5 (GPUs)", "fitted together on these rows: of split 1-16 and p 1, 1.5, "
                                                       "2, 3 or max, the pair with most rows within 0.8-1.25x and "
                                                       "none past 1.5x"),
    ("GPU attention efficiency 0.60, conv 0.75, memory efficiency 0.90", "docs/cost_model.md"),
    ("FPGA gemm efficiency 0.30", "de Fine Licht et al. FPGA'20: 301 (f32) and 132 (f64) GFLOP/s against the DSP "
                                  "peaks 1083 and 387 (0.28, 0.34); these two rows are its calibration points"),
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", action="store_true", help="print the rows as CSV")
    ap.add_argument("--fit", action="store_true",
                    help="the grid the two fitted GPU parameters were chosen from: rows within 0.8-1.25x and "
                         "outside 0.67-1.5x for each gemm_split_k and overlap_exponent")
    args = ap.parse_args()
    if args.fit:
        print(f"{'split':>5} {'p':>4} {'within':>6} {'outside':>7}")
        for split in (1, 2, 4, 8, 16):
            for p in (1.0, 1.5, 2.0, 3.0, None):
                ratios = [predict(r, split, p) / r.measured_s for r in rows()]
                print(f"{split:>5} {'max' if p is None else f'{p:g}':>4} "
                      f"{sum(1 for x in ratios if 0.8 <= x <= 1.25):>6} "
                      f"{sum(1 for x in ratios if not 0.67 <= x <= 1.5):>7}")
        return 0
    results = [(r, predict(r)) for r in rows()]
    if args.csv:
        print("case,platform,device,measured_ms,predicted_ms,ratio,source")
        for r, p in results:
            print(f"\"{r.case}\",{r.platform},{r.device},{r.measured_s * 1e3:.4g},{p * 1e3:.4g},"
                  f"{p / r.measured_s:.3f},\"{r.source}\"")
        return 0
    print(f"{'case':42s} {'platform':13s} {'dev':5s} {'measured':>10s} {'predicted':>10s} {'pred/meas':>9s}")
    for r, p in results:
        print(f"{r.case:42s} {r.platform:13s} {r.device:5s} {r.measured_s * 1e3:9.4f}m {p * 1e3:9.4f}m "
              f"{p / r.measured_s:9.2f}")
    ratios = [p / r.measured_s for r, p in results]
    inside = sum(1 for x in ratios if 0.8 <= x <= 1.25)
    wide = sum(1 for x in ratios if 0.67 <= x <= 1.5)
    geo = math.exp(statistics.fmean(math.log(x) for x in ratios))
    print(f"\n{len(ratios)} rows: {inside} ({100 * inside / len(ratios):.0f} %) within 0.8-1.25x, "
          f"{wide} ({100 * wide / len(ratios):.0f} %) within 0.67-1.5x; geometric mean ratio {geo:.3f}, "
          f"median {statistics.median(ratios):.3f}, min {min(ratios):.2f}, max {max(ratios):.2f}")
    print("\nsources:")
    for src in sorted({r.source for r in rows()}):
        print(f"  {src}")
    print(f"\nmodel parameters the rows use ({len(PARAMETERS)} groups, none fitted per row):")
    for name, src in PARAMETERS:
        print(f"  {name}: {src}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Where the planner reads fast on B200 and GB200: the residual of ``benchmarks/recipes.py`` broken down.

    python benchmarks/blackwell_residual.py [--rows N,...] [--all]

Three parts, each printed with its sources:

1. **The MXFP8 cast** (the one mechanism fitted here, :data:`mapper.costing.precision.CAST_MEMORY_SHARE`):
   Transformer Engine's MXFP8 quantiser on a B200 reaches 0.69 of the HBM bandwidth, not the 0.90
   a streaming kernel is priced at. One parameter, fitted on one timing (ROCm/TransformerEngine pull
   request 598, "CAST_ONLY", B200 column: a BF16 8,192 x 8,192 tensor quantised row- and column-wise
   in 52.34 us); checked on that table's FP16 and FP32 inputs and on NVIDIA/TransformerEngine pull
   request 2634's B200 timings of small tensors (launch-bound, 8-10 us, which the model does not
   reach: a training step's casts are far larger).
2. **Release drift**: the published tokens/s of one and the same row (model, system, GPUs, format,
   batch, TP, PP, CP, VP, EP) in successive releases of NVIDIA's summaries (:data:`recipes.ROWS`).
   A hardware model gives one number per row; where the software moved the published figure by
   more than the 0.8-1.25 band, a ratio against an older release measures the software of that
   release, not the GPU.
3. **16-bit GEMMs at the shapes training runs** (printed, not fitted): the B200's 16-bit share
   (0.753) rests on the best rate of a sweep of shapes (stas00/ml-engineering's Maximum Achievable
   Matmul FLOPS, 1,745 TFLOP/s); cuBLAS through ``torch.mm`` at square shapes of 4,096-8,192
   reached 1,410-1,450 (pytorch/ao pull request 2427) and at Llama 3 8B's shapes 1,433-1,513
   (vllm-project/vllm pull requests 18778 and 19566, ``torch-bf16``): the model's rate is 1.10-1.17
   times cuBLAS's at M of 4,096 and more, 0.90-0.92 at M of 1,024-2,048 (the tile model's tiles
   and split-K, not refitted for Blackwell). Not changed here: the identical-layout BF16 -> FP8
   pairs on GB200 agree with the model's BF16 : FP8 ratio (1.50 against 1.48), so a lower 16-bit
   share alone would break them, and no cuBLAS FP8 rate at training shapes is published.
4. **The residual by group and the predicted step by part**: predicted / published tokens/s per
   GPU of the newest release of each layout (``--all``: every row), grouped by family (dense, MoE),
   system, format and layout (EP, TP, PP, CP); and for each B200/GB200 row the predicted step cut
   into its parts: GEMMs (dense and the experts' grouped GEMMs), attention, the other kernels
   (norms, activations, routing, casts' own kernels are inside the GEMMs' backward), the
   communication left exposed and recomputation, the pipeline's bubble and hops, and the
   gradient synchronisation with the optimizer step, each as a share of the step.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import recipes

import mapper.cluster.profile as profile_mod
import mapper.cluster.search as search_mod
from mapper.core.ops import ATTENTION_OPS
from mapper.costing.efficiency import EFF_MEMORY, op_class
from mapper.costing.latency import estimate
from mapper.costing.precision import CAST_MEMORY_SHARE, ELEMENT_BYTES
from mapper.frontend.load import graph_from_text
from mapper.platform.loader import load_platform

TE598 = "ROCm/TransformerEngine#598 (CAST_ONLY table, B200 column: NVIDIA TE on a B200)"
TE2634 = "NVIDIA/TransformerEngine#2634 (B200, MXFP8Quantizer.update_quantized, bidirectional 1D, after the PR)"
#: (input bytes per element, rows, cols, measured us, source, role): MXFP8 row- and column-wise casts
CASTS = (
    (2, 8192, 8192, 52.34, TE598, "fit"),  # BF16
    (2, 8192, 8192, 51.16, TE598, "check"),  # FP16
    (4, 8192, 8192, 76.95, TE598, "check"),  # FP32
    (2, 512, 4096, 9.260, TE2634, "check"),  # BF16, launch-bound
    (2, 512, 8192, 9.208, TE2634, "check"),
)
TORCHAO = "pytorch/ao#2427 (B200, torch.bfloat16 = cuBLAS, bench_matmul.py)"
VLLM = "vllm-project/vllm#18778, #19566 (B200, torch-bf16 column)"
#: (M, N, K, measured TFLOP/s, source): B200 BF16 GEMMs through cuBLAS
BF16 = (
    (4096, 4096, 4096, 1410.0, TORCHAO), (6144, 6144, 6144, 1450.0, TORCHAO), (8192, 8192, 8192, 1420.0, TORCHAO),
    (1024, 6144, 4096, 1433.0, VLLM), (2048, 4096, 4096, 1444.4, VLLM), (16384, 6144, 4096, 1512.8, VLLM),
)
#: The B200 the casts ran on (platforms/dgx-b200.toml): HBM bandwidth, GB/s, and launch, us.
B200_BW, B200_LAUNCH = 8000.0, 3.0


def cast_fit() -> None:
    """Part 1: the share fitted on the one row marked ``fit``, and every row predicted with it."""
    e = ELEMENT_BYTES["mxfp8"]
    item, rows, cols, us, _, _ = next(c for c in CASTS if c[5] == "fit")
    nbytes = rows * cols * (item + 2 * e)
    share = nbytes / ((us - B200_LAUNCH) * 1e-6 * B200_BW * 1e9)
    print("1. MXFP8 casts (read 16- or 32-bit, write row- and column-wise MXFP8) on a B200:")
    print(f"   fitted share of {B200_BW:,.0f} GB/s: {share:.3f} (mapper uses {CAST_MEMORY_SHARE['mxfp8']}; "
          f"a streaming kernel: {EFF_MEMORY['gpu']})")
    print(f"   {'in':>3} {'rows':>6} {'cols':>6} {'MB':>7} {'measured':>9} {'predicted':>9} {'ratio':>6}  "
          "role   source")
    for item, rows, cols, us, src, role in CASTS:
        nbytes = rows * cols * (item + 2 * e)
        pred = B200_LAUNCH + nbytes / (CAST_MEMORY_SHARE["mxfp8"] * B200_BW * 1e9) * 1e6
        print(f"   {8 * item:>3} {rows:>6} {cols:>6} {nbytes / 1e6:>7.1f} {us:>8.2f}u {pred:>8.2f}u {pred / us:>6.2f}  "
              f"{role:<6} {src}")


def bf16_gemms() -> None:
    """Part 3: the model's B200 BF16 GEMM rate against cuBLAS's at the published shapes."""
    plat = load_platform("dgx-b200")
    gpu = next(d for d in plat.devices if d.kind == "gpu")
    print("3. B200 BF16 GEMMs (cuBLAS), TFLOP/s: measured, the model's, model / measured rate")
    for m, n, k, tf, src in BF16:
        text = f"graph g {{\n input x : bf16[{m}, {k}]\n y = matmul(x, weight bf16[{k}, {n}])\n  output y\n}}\n"
        task = graph_from_text(text).tasks[0]
        model = 2.0 * m * n * k / estimate(task, "gemm", gpu).time / 1e12
        print(f"   {m:>6} {n:>6} {k:>6} {tf:>8,.0f} {model:>8,.0f} {model / tf:>6.2f}  {src}")


def drift() -> list[tuple[float, str]]:
    """Part 2: rows published in several releases, lowest to highest tokens/s per GPU."""
    same: dict[tuple[Any, ...], list[tuple[tuple[int, ...], str, float]]] = defaultdict(list)
    for row in recipes.ROWS:
        if row[0] in ("mb", "nemo-ug"):
            when = tuple(int(x) for x in row[1].lstrip("v").split("."))
            same[row[2:16]].append((when, row[1], float(row[16])))
    out = []
    for key, seen in same.items():
        if len({w for w, _, _ in seen}) < 2:
            continue
        seen.sort()
        lo, hi = min(v for _, _, v in seen), max(v for _, _, v in seen)
        text = " -> ".join(f"{rel} {v:,.0f}" for _, rel, v in seen)
        label = f"{key[1]:<13} {key[2]:<5} {key[3]:>4} {key[4]:<6} {layout(key)}"
        out.append((hi / lo, f"   {label:<44} {hi / lo:>5.2f}x  {text}"))
    return sorted(out, reverse=True)


def layout(key: tuple[Any, ...]) -> str:
    """TP/PP/CP/VP/EP of a row key (``ROWS[i][2:16]``)."""
    tp, pp, cp, vp, ep = key[9:14]
    parts = [f"TP{tp}", f"PP{pp}"] + [f"CP{cp}"] * (cp > 1) + [f"VP{vp}"] * (vp > 1) + [f"EP{ep}"] * (ep > 1)
    return " ".join(parts) + f" MBS{key[6]}"


@contextmanager
def kernel_parts() -> Iterator[tuple[dict[int, Counter[str]], list[Any]]]:
    """While open, each block price the planner makes records its rank-0 kernel seconds by part
    (keyed by the price's ``id``), and each plan's setup is kept (its plan model): the cost table
    and setup the planner builds anyway, read on the way."""
    parts: dict[int, Counter[str]] = {}
    setups: list[Any] = []
    tables: list[tuple[Any, Any, Any]] = []
    build, price, setup = profile_mod.build_cost_table, profile_mod.Profile._price, search_mod._setup

    def build_kept(g: Any, node: Any, *a: Any, **k: Any) -> Any:
        table = build(g, node, *a, **k)
        tables.append((g, node, table))
        return table

    def price_split(self: Any, sub: Any, tensor: int, chunks: int) -> Any:
        first = len(tables)
        cost = price(self, sub, tensor, chunks)
        g, node, _ = tables[first]
        rank0 = self._platform(tensor)[1][0]
        # the block's table, then the one without memory limits it prices outsized expert kernels on
        parts[id(cost)] = split_kernels(g, [t for _, _, t in tables[first:]], node.device_index(rank0), rank0)
        return cost

    def setup_kept(*a: Any, **k: Any) -> Any:
        s = setup(*a, **k)
        setups.append(s)
        return s

    profile_mod.build_cost_table = build_kept  # type: ignore[assignment]
    profile_mod.Profile._price = price_split  # type: ignore[method-assign]
    search_mod._setup = setup_kept
    try:
        yield parts, setups
    finally:
        profile_mod.build_cost_table = build
        profile_mod.Profile._price = price  # type: ignore[method-assign]
        search_mod._setup = setup


def split_kernels(g: Any, tables: list[Any], d: int, rank0: str) -> Counter[str]:
    """Seconds of rank 0's kernels of a priced block by part (collectives left to the plan model),
    each from the first of ``tables`` that gives it a finite time (as the block's price takes it)."""
    out: Counter[str] = Counter()
    for task in g.tasks:
        if task.placement.allow[:1] != (rank0,) or task.explicit_cost or task.name.endswith(".update"):
            continue
        ops = [p.op for p in (task.parts or (task,))]
        if any(o in ATTENTION_OPS for o in ops):
            part = "attention"
        elif "grouped_matmul" in ops:
            part = "experts"
        elif any(op_class(o, None) == "gemm" for o in ops):
            part = "gemm"
        else:
            part = "other"
        out[part] += next((t.time[task.index][d] for t in tables if math.isfinite(t.time[task.index][d])), 0.0)
    return out


PARTS = ("gemm", "experts", "attention", "other", "comm", "bubble", "sync")


def step_parts(choice: Any, model: Any, parts: dict[int, Counter[str]]) -> dict[str, float]:
    """The predicted step of ``choice`` by part, shares of the step (module docstring, part 3)."""
    est = choice.best
    lay = est.layout
    costs = model.block_costs(lay.tensor, lay.micro_batch, lay.context)
    fw, bw = model._block_times(lay)  # the blocks' seconds with their collectives and recomputation
    per = lay.pipeline / est.micro_batches * est.step  # step seconds per micro-batch and pipeline rank
    kernels: Counter[str] = Counter()
    for c in costs:
        kernels.update(parts.get(id(c), Counter()))
    blocks = sum(fw) + sum(bw)
    out = {k: kernels[k] / per for k in PARTS[:4]}
    out["comm"] = (blocks - sum(kernels.values())) / per
    out["bubble"] = (est.pipeline - blocks * est.micro_batches / lay.pipeline) / est.step
    out["sync"] = est.sync / est.step
    return out


def groups_of(row: tuple[Any, ...]) -> list[str]:
    """The groups a row's ratio counts in."""
    model, system, prec = row[3], row[4], row[6]
    tp, pp, cp, ep = row[11], row[12], row[13], row[15]
    family = "MoE" if model in recipes.MOE else "dense"
    out = [f"{system} {family}", f"{system} {prec}", f"{system} {family} {prec}"]
    out += [f"{system} {name}" for name, on in (("EP>1", ep > 1), ("TP>1", tp > 1), ("PP>1", pp > 1), ("CP>1", cp > 1))
            if on]
    return out


def residual(pick: set[int], every: bool, printer: Callable[[str], None] = print) -> None:
    """Part 3: price the rows, print the groups' medians and each Blackwell row's step by part."""
    newest: dict[tuple[Any, ...], tuple[tuple[int, ...], int]] = {}
    for i, row in enumerate(recipes.ROWS, 1):
        when = tuple(int(x) for x in row[1].lstrip("v").split("."))
        if row[2:16] not in newest or newest[row[2:16]][0] < when:
            newest[row[2:16]] = (when, i)
    chosen = {i for _, i in newest.values()} if not every else set(range(1, len(recipes.ROWS) + 1))
    if pick:
        chosen &= pick
    groups: dict[str, list[float]] = defaultdict(list)
    lines = []
    with kernel_parts() as (parts, setups):
        kept: list[Any] = []
        plan_one = search_mod._plan_one

        def plan_kept(*a: Any, **k: Any) -> Any:
            c = plan_one(*a, **k)
            kept.append(c)
            return c

        search_mod._plan_one = plan_kept
        try:
            for i in sorted(chosen):
                row = recipes.ROWS[i - 1]
                if recipes.why_not(row):
                    continue
                try:
                    pred, _ = recipes.price(row, True)
                except recipes.MapperError:
                    continue
                ratio = pred / row[16]
                for g in groups_of(row):
                    groups[g].append(ratio)
                if row[4] != "h100":
                    share = step_parts(kept[-1], setups[-1].model, parts)
                    lines.append(f"   {i:>3} {row[1]:<9} {row[3]:<14} {row[4]:<5} {row[6]:<6} {ratio:>5.2f}  "
                                 + " ".join(f"{share[k]:>6.2f}" for k in PARTS)
                                 + f"  {recipes.layout_text(row)}")
        finally:
            search_mod._plan_one = plan_one
    printer(f"4. predicted / published tokens/s per GPU, {'every row' if every else 'newest release per layout'}:")
    for label in sorted(groups):
        r = groups[label]
        inside = sum(0.8 <= x <= 1.25 for x in r)
        printer(f"   {label:<24} {len(r):>4} rows, within 0.8-1.25: {inside:>4}, median {statistics.median(r):.2f}, "
                f"range {min(r):.2f}-{max(r):.2f}")
    printer("\n   B200/GB200 rows, the predicted step by part (shares of the step):")
    printer(f"   {'#':>3} {'rel':<9} {'model':<14} {'sys':<5} {'prec':<6} {'ratio':>5}  "
            + " ".join(f"{k:>6}" for k in PARTS) + "  layout")
    for line in lines:
        printer(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="", help="comma-separated row numbers of benchmarks/recipes.py (1-based)")
    ap.add_argument("--all", action="store_true", help="every row, not only the newest release of each layout")
    args = ap.parse_args()
    cast_fit()
    print("\n2. release drift: one row's published tokens/s/GPU over releases (Megatron-Bridge, NeMo user guide)")
    for ratio, line in drift():
        if ratio >= 1.05:
            print(line)
    print()
    bf16_gemms()
    print()
    residual({int(x) for x in args.rows.split(",") if x.strip()}, args.all)


if __name__ == "__main__":
    main()

"""DLRM on one DGX A100: mapper's embedding plan against TorchRec's greedy plan, and the step time.

    python benchmarks/dlrm.py

1. Plan against greedy, under the same estimator (mapper.parallel.embedding_plan: the cost
   model's times for each shard's lookups, gradient and update, plus its exchange over
   NVSwitch), on two table sets: MLPerf's 26 DLRM tables (examples/dlrm.tg, from the MLPerf
   reference github.com/mlcommons/training recommendation_v2/torchrec_dlrm/README.MD) and a
   synthetic set of 400 tables with Zipf-distributed row counts (exponent 1.2, seed 0, 2000 rows
   per unit, at most 5M rows, dim 64 or 128, pooling 1-40). The rating is the largest GPU's embedding load
   (TorchRec's NoopPerfModel); mapper's plan is the exact MILP started from the greedy one.
2. The DLRM training step (SGD) on one DGX A100 at MLPerf's global batch 65536 (the
   reference's GLOBAL_BATCH_SIZE), from `mapper compile examples/dlrm.tg --platform dgx-a100
   --train --optimizer sgd --parallel hybrid`. Constants: GPU rates, HBM bandwidth and memory
   from platforms/dgx-a100.toml (A100 SXM4 80GB datasheet), NVSwitch 300 GB/s per direction
   per GPU (A100 datasheet), PCIe 4.0 25 GB/s to the host (CUDA bandwidthTest), the collective
   model's alpha-beta terms and its all-to-all with unequal blocks (mapper.parallel.collectives:
   Thakur et al. 2005; NVSwitch at NCCL's collective efficiency), the UVM cache load factor 0.2
   (FBGEMM's default), SGD with one f32 state per parameter (mapper.costing.training).
   The reference README's own figure for 8 GPUs at a 65536 global batch (a run with Adagrad
   and DCNv2, so only a scale check): about 5.37 M samples/s, 12.2 ms a step.

3. TorchRec estimator parity: mapper.parallel.torchrec_parity reproduces TorchRec's
   EmbeddingPerfEstimator (commit a48cef79ebc333da92af1311c04b041ee21a8e75); its 38 published
   test values (test_shard_estimators.py, test_1_table_perf, both bandwidth settings) must agree
   to 1e-9 relative. The plan-vs-greedy comparison is also run under that estimator.

--parallel burst (DeepPool) is replayed by benchmarks/deeppool.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from mapper.frontend.load import read_program
from mapper.frontend.lowering.program import lower
from mapper.frontend.parse import parse
from mapper.parallel.embedding_plan import Table, options
from mapper.parallel.embedding_solve import exact_plan, greedy_plan
from mapper.parallel.hybrid import fabric_of, tables_of
from mapper.parallel.torchrec_parity import parity, torchrec_options
from mapper.platform.loader import load_platform

ROOT = Path(__file__).resolve().parents[1]
GIB = float(2**30)


def mlperf_tables() -> list[Table]:
    text, _ = read_program(str(ROOT / "examples" / "dlrm.tg"))
    return list(tables_of(lower(parse(text, "dlrm.tg"), {"BATCH": 65536})))


def synthetic_tables(n: int = 400, batch: int = 65536) -> list[Table]:
    rng = np.random.default_rng(0)
    rows = np.minimum(rng.zipf(1.2, n), 2_500) * 2000
    dims = rng.choice([64, 128], n)
    pool = rng.integers(1, 41, n)
    return [Table(f"t{i}", int(r), int(d), int(p), batch) for i, (r, d, p) in enumerate(zip(rows, dims, pool))]


def compare(label: str, tables: list[Table], estimator: str = "mapper") -> None:
    plat = load_platform("dgx-a100")
    gpus = [d for d in plat.devices if d.kind == "gpu"]
    fabric = fabric_of(plat)
    caps = [d.memory_gib * GIB * 0.9 for d in gpus]  # 10 % kept for the dense part
    host = 2048 * GIB
    t0 = time.perf_counter()
    choices = [options(t, gpus, fabric, "sgd") for t in tables]
    if estimator == "torchrec":
        choices = [torchrec_options(t, opts, len(gpus)) for t, opts in zip(tables, choices)]
    greedy = greedy_plan(choices, caps, host, len(gpus))
    exact = exact_plan(choices, caps, host, len(gpus), greedy, time_limit=20)
    dt = time.perf_counter() - t0
    total = sum(t.nbytes for t in tables) / GIB
    scale = 1e3 if estimator == "mapper" else 1.0  # TorchRec's perfs are in ms already
    g = f"{greedy.rating * scale:.4f} ms" if greedy.plan is not None else "no plan"
    print(f"{label} ({estimator} estimator): {len(tables)} tables, {total:.1f} GiB; greedy {g}, mapper "
          f"{exact.rating * scale:.4f} ms ({exact.status}, bound {exact.bound * scale:.4f} ms), {dt:.1f} s")
    assert greedy.plan is None or exact.rating <= greedy.rating * (1 + 1e-12)


def step() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "dlrm.json"
        subprocess.run([sys.executable, "-m", "mapper", "compile", str(ROOT / "examples" / "dlrm.tg"), "--platform",
                        "dgx-a100", "--train", "--optimizer", "sgd", "--parallel", "hybrid", "--param", "BATCH=65536",
                        "-q", "--json", str(out)], check=True)
        r = json.loads(out.read_text())
    p = r["parallel"]
    print(f"DLRM step, one DGX A100, batch 65536: {r['makespan'] * 1e3:.3f} ms "
          f"({65536 / r['makespan'] / 1e6:.2f} M samples/s); all-to-all {p['alltoall'] * 1e3:.3f} ms each way, "
          f"dense all-reduce {p['dense_allreduce'] * 1e3:.3f} ms, largest embedding load "
          f"{p['embedding_load'] * 1e3:.3f} ms (greedy {p['greedy_load'] * 1e3:.3f} ms)")
    print("  reference README (8 GPUs, 65536, DCNv2 + Adagrad): ~5.37 M samples/s, 12.2 ms a step")


if __name__ == "__main__":
    cases = parity()
    worst = max(err for _, err in cases)
    print(f"TorchRec estimator parity: {len(cases)} published values, worst relative error {worst:.3g} "
          f"({'all' if worst <= 1e-9 else 'NOT all'} within 1e-9)")
    for est in ("mapper", "torchrec"):
        compare("MLPerf DLRM tables", mlperf_tables(), est)
        compare("synthetic skewed tables", synthetic_tables(), est)
    step()

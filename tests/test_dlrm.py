"""Embedding bags, the hybrid (DLRM) plan and its sharding options."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from mapper.core.graph import TensorType
from mapper.core.ops import infer
from mapper.kernels.registry import reference, run_kernel
from mapper.parallel.collectives import Network, alltoallv
from mapper.parallel.embedding_plan import Fabric, Table, options, state_bytes
from mapper.parallel.embedding_solve import exact_plan, greedy_plan
from mapper.platform.loader import load_platform

ROOT = Path(__file__).resolve().parents[1]
DLRM = str(ROOT / "examples" / "dlrm.tg")


def test_embedding_bag_work_matches_hand_counts():
    # 4 bags of 3 ids (i64) into an f32 [50, 8] table: reads 12 * 8 ids bytes + 12 rows * 8 * 4,
    # writes 4 * 8 * 4; 2 adds per bag and column, a mean adds one divide
    info = infer("embedding_bag", [TensorType("i64", (12,)), TensorType("f32", (50, 8))], {"pooling": 3})
    assert info.output == TensorType("f32", (4, 8))
    assert (info.flops, info.bytes_read, info.bytes_written) == (4 * 8 * 2, 96 + 384, 128)
    mean = infer("embedding_bag", [TensorType("i32", (12,)), TensorType("f16", (50, 8))], {"pooling": 3, "mode": "mean"})
    assert (mean.flops, mean.bytes_read, mean.bytes_written) == (4 * 8 * 3, 48 + 12 * 8 * 2, 4 * 8 * 2)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_kernel_matches_numpy(mode):
    rng = np.random.default_rng(1)
    table = rng.standard_normal((40, 6)).astype(np.float32)
    ids = rng.integers(0, 40, size=20)
    got = run_kernel("embedding_bag", [ids, table], {"pooling": 4, "mode": mode})
    want = getattr(table[ids.reshape(5, 4)], mode)(axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(reference("embedding_bag", [ids, table], {"pooling": 4, "mode": mode}), want, rtol=1e-6)


def _gpus(n=4):
    plat = load_platform("dgx-a100")
    return [d for d in plat.devices if d.kind == "gpu"][:n]


FABRIC = Fabric(beta=1 / 300e9, host_beta=1 / 25e9)


def test_sharding_memory_and_exchange_against_brute_force():
    table = Table("t", rows=1003, dim=16, pooling=3, bags=64)
    gpus = _gpus(4)
    per = state_bytes(table, "sgd")
    for o in options(table, gpus, FABRIC, "sgd"):
        # every parameter of every shard, counted one by one
        params = [0] * 4
        for s in o.shards:
            params[s.device] += sum(1 for _ in itertools.product(range(s.rows), range(s.cols)))
        if o.tier == "hbm":
            assert list(o.memory) == pytest.approx([p * per for p in params])
        else:
            assert o.host == pytest.approx(sum(params) * per)
        replicas = 4 if o.sharding == "data_parallel" else 1
        assert sum(params) == table.rows * table.dim * replicas
        # lookups: every sample's ids served once (row-wise: each id by the shard holding its row)
        assert sum(s.ids for s in o.shards) == table.bags * table.pooling * (1 if o.sharding != "column_wise" else 4)


def test_alltoall_volume_against_brute_force():
    # table-wise tables on owners; each sample's pooled row goes from its table's owner to its GPU
    g, batch, dim, item = 4, 32, 8, 4
    owners = [0, 0, 2, 3, 1]
    sent, received = [0.0] * g, [0.0] * g
    for owner in owners:
        for sample in range(batch):
            dst = sample // (batch // g)
            if dst != owner:
                sent[owner] += dim * item
                received[dst] += dim * item
    # the planner's per-shard formula: (g - 1) / g of the pooled output leaves, 1 / g reaches each peer
    s2, r2 = [0.0] * g, [0.0] * g
    for owner in owners:
        out = batch * dim * item
        s2[owner] += out * (g - 1) / g
        for r in range(g):
            if r != owner:
                r2[r] += out / g
    assert s2 == pytest.approx(sent) and r2 == pytest.approx(received)
    # the pooled rows' blocks, priced by the one collective model: the busiest port finishes last
    blocks = [[0.0] * g for _ in range(g)]
    for owner in owners:
        for r in range(g):
            if r != owner:
                blocks[owner][r] += batch * dim * item / g
    net = Network(g, 300.0, 1e-6, 1200.0, 1e-6, 1)
    assert alltoallv(net, blocks, g)[0] == pytest.approx(3e-6 + max(sent + received) / 300e9)


def test_exact_plan_never_worse_than_greedy():
    rng = np.random.default_rng(7)
    gpus = _gpus(4)
    tables = [Table(f"t{i}", int(rows), 32, int(p), 512) for i, (rows, p) in
              enumerate(zip(np.minimum(rng.zipf(1.3, 40), 1000) * 5000, rng.integers(1, 20, 40)))]
    choices = [options(t, gpus, FABRIC, "sgd") for t in tables]
    caps = [2e9] * 4
    greedy = greedy_plan(choices, caps, 1e12, 4)
    exact = exact_plan(choices, caps, 1e12, 4, greedy, time_limit=10)
    assert greedy.plan is not None and exact.plan is not None
    assert exact.rating <= greedy.rating * (1 + 1e-12)
    for d in range(4):
        assert sum(o.memory[d] for o in exact.plan) <= caps[d]


def _compile(capsys, *extra):
    from mapper.cli import main

    code = main(["compile", DLRM, "--platform", "dgx-a100", "--train", "--optimizer", "sgd", "--parallel", "hybrid",
                 "--mapper", "heft", "-q", *extra])
    return code, capsys.readouterr().err


def test_hybrid_plan_validates_and_reports_tables(tmp_path, capsys):
    out = tmp_path / "r.json"
    code, err = _compile(capsys, "--param", "BATCH=2048", "--json", str(out))
    assert code == 0, err
    import json

    report = json.loads(out.read_text())
    plan = report["parallel"]["embedding"]
    assert [p["table"] for p in plan] == [f"emb{t}" for t in range(26)]
    assert all(set(p) == {"table", "sharding", "devices", "tier"} for p in plan)
    assert report["parallel"]["embedding_load"] <= report["parallel"]["greedy_load"] * (1 + 1e-12)
    assert report["makespan"] > 0


def test_table_too_large_exits_3_naming_it(capsys):
    code, err = _compile(capsys, "--param", "BATCH=1024", "--param", "ROWS9=10000000000000")
    assert code == 3, err
    assert "emb9" in err and "Traceback" not in err


def test_validated_plan_from_the_api():
    from mapper.frontend.sources import ModelFile
    from mapper.pipeline import compile_graph

    res = compile_graph(ModelFile(DLRM, params=(("BATCH", 512),)), "dgx-a100", mapper="heft", train="sgd",
                        parallel="hybrid")
    assert res.result.schedule is not None or res.result.makespan > 0


# nvidia-smi mig -lgip, NVIDIA MIG User Guide ("Supported MIG Profiles"): SMs and GiB per profile
PUBLISHED_MIG = {
    "A100-SXM4-40GB": {"1g.5gb": (14, 4.75), "2g.10gb": (28, 9.75), "3g.20gb": (42, 19.62), "4g.20gb": (56, 19.62),
                       "7g.40gb": (98, 39.50)},
    "A100-SXM4-80GB": {"1g.10gb": (14, 9.50), "2g.20gb": (28, 19.50), "3g.40gb": (42, 39.25), "4g.40gb": (56, 39.25),
                       "7g.80gb": (98, 79.25)},
    "H100-SXM5-80GB": {"1g.10gb": (16, 9.75), "1g.20gb": (26, 19.62), "2g.20gb": (32, 19.62), "3g.40gb": (60, 39.50),
                       "4g.40gb": (64, 39.50), "7g.80gb": (132, 79.25)},
}


def test_mig_slices_match_the_published_tables():
    from mapper.platform.slices import MIG_PROFILES

    for gpu, profiles in PUBLISHED_MIG.items():
        for name, (sms, gib) in profiles.items():
            assert MIG_PROFILES[gpu][name][:2] == (sms, gib), (gpu, name)
    plat = load_platform("a100-mig")
    got = {d.name: (d.compute_units, d.memory_gib) for d in plat.devices if d.kind == "gpu"}
    assert got == {"mig3g": (42, 39.25), "mig2g": (28, 19.5), "mig1a": (14, 9.5), "mig1b": (14, 9.5)}
    whole = next(d for d in load_platform("dgx-a100").devices if d.kind == "gpu")
    slice3 = next(d for d in plat.devices if d.name == "mig3g")
    assert dict(slice3.peak_gflops)["f32"] == pytest.approx(dict(whole.peak_gflops)["f32"] * 42 / 108)
    assert slice3.mem_bandwidth_gbs == pytest.approx(whole.mem_bandwidth_gbs * 4 / 8)


def _sliced_platform(tmp_path, key: str) -> str:
    text = (ROOT / "platforms" / "dgx-a100.toml").read_text()
    text = text.replace('name = "gpu"\ncount = 8', f'name = "gpu"\ncount = 8\n{key}', 1)
    path = tmp_path / "sliced.toml"
    path.write_text(text)
    return str(path)


def test_mig_profile_the_gpu_lacks_exits_2(tmp_path, capsys):
    from mapper.cli import main

    code = main(["compile", str(ROOT / "examples" / "heft_paper.tg"), "--platform",
                 _sliced_platform(tmp_path, 'mig = "3g.20gb"'), "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "3g.20gb" in err and "A100-SXM4-80GB" in err and "Traceback" not in err


def test_mps_share_scales_sms(tmp_path):
    plat = load_platform(_sliced_platform(tmp_path, "mps_percent = 50"))
    gpu = next(d for d in plat.devices if d.kind == "gpu")
    assert gpu.compute_units == 54 and gpu.memory_gib == 80


def test_torchrec_estimator_parity_on_its_published_values():
    from mapper.parallel.torchrec_parity import parity

    cases = parity()
    assert len(cases) == 38
    assert all(err <= 1e-9 for _, err in cases), [c for c in cases if c[1] > 1e-9]


def test_exact_plan_never_worse_than_greedy_under_torchrec_estimator():
    from mapper.parallel.torchrec_parity import torchrec_options

    gpus = _gpus(4)
    tables = [Table(f"t{i}", 1000 * (i + 1) ** 2, 64, 1 + i % 5, 2048) for i in range(12)]
    choices = [torchrec_options(t, options(t, gpus, FABRIC, "sgd"), 4) for t in tables]
    greedy = greedy_plan(choices, [1e12] * 4, 1e12, 4)
    exact = exact_plan(choices, [1e12] * 4, 1e12, 4, greedy, time_limit=10)
    assert exact.rating <= greedy.rating * (1 + 1e-12)


def test_hybrid_on_a_cluster_uses_every_node(tmp_path, capsys):
    import json

    from mapper.cli import main

    out = tmp_path / "r.json"

    code = main(["compile", DLRM, "--platform", "selene", "--nodes", "2", "--train", "--optimizer", "sgd",
                 "--parallel", "hybrid", "--mapper", "heft", "-q", "--param", "BATCH=4096", "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    report = json.loads(out.read_text())
    assert len(report["parallel"]["gpus"]) == 16
    assert report["parallel"]["status"] == "optimal"


def test_dlrm_example_has_mlperf_sizes():
    from mapper.frontend.load import load_graph

    g = load_graph(DLRM)
    weights = {o.name: o.type for t in g.tasks for o in t.operands if o.kind == "weight"}
    tables = sorted((t for t in g.tasks if t.op == "embedding_bag"), key=lambda t: int(t.name[3:]))
    rows = [t.operands[1].type.shape[0] for t in tables]
    # the MLPerf reference's --num_embeddings_per_feature (recommendation_v2/torchrec_dlrm/README.MD)
    assert rows == [40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10, 2209,
                    11938, 155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36]
    dense = sum(w.numel for w in weights.values()) - sum(r * 128 for r in rows)
    mlp = [(13, 512), (512, 256), (256, 128), (128 + 351, 1024), (1024, 1024), (1024, 512), (512, 256), (256, 1)]
    assert dense == sum(i * o + o for i, o in mlp)

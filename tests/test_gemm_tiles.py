"""GEMMs priced from tiles, waves and bandwidth (mapper/costing/tiles.py), the eager runtime's
per-call floor, and the L40S/L4 platforms with their prices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mapper.cli import main
from mapper.cluster.profile import BlockCost
from mapper.costing.efficiency import EFF_COMPUTE, EFF_MEMORY, EFF_MEMORY_GEMM
from mapper.costing.latency import estimate
from mapper.costing.tiles import overlap_share, tile_time
from mapper.costing.work import gemm_dims
from mapper.frontend.load import graph_from_text
from mapper.platform.loader import load_platform
from mapper.serving.iteration import _split
from mapper.serving.mix import KINDS, parse_gpus
from mapper.serving.request import EAGER_DISPATCH_US, EAGER_OPS
from mapper.serving.runtimes import RUNTIMES, get_runtime

ROOT = Path(__file__).resolve().parent.parent


def _gemm(m: int, n: int, k: int, dtype: str = "f16"):
    g = graph_from_text(f"graph g {{\n input x : {dtype}[{m}, {k}]\n y = matmul(x, weight {dtype}[{k}, {n}])\n"
                        "  output y\n}\n")
    return g.tasks[0]


def _gpu(platform: str):
    return next(d for d in load_platform(platform).devices if d.kind == "gpu")


@pytest.mark.parametrize("m, tile_rows, blocks, split, waves, useful", [
    # A100: 108 SMs, 128 x 128 x 32 tiles, up to 8 K slices
    (64, 64, 96, 1, 1, 64 * 12288 / (108 * 64 * 128)),  # a decode batch: 64-row tiles, one wave of 96
    (128, 128, 96, 1, 1, 96 / 108),  # 96 tiles: one wave, 12 SMs idle; 108 // 96 = 1 slice
    (256, 128, 192, 1, 2, 192 / 216),  # 192 tiles: a full wave and 84 of the second
    (1024, 128, 768, 1, 8, 768 / 864),  # 768 tiles: 7.1 waves, paid as 8
])
def test_waves_of_a_mid_size_gemm_by_hand(m, tile_rows, blocks, split, waves, useful):
    task, gpu = _gemm(m, 12288, 12288), _gpu("dgx-a100")
    plan = tile_time(task, gemm_dims(task), gpu, 1e12)
    assert plan.tile == (tile_rows, 128, 32)
    assert (plan.blocks, plan.split, plan.waves) == (blocks, split, waves)
    assert plan.iterations == 12288 // 32
    assert plan.efficiency == pytest.approx(useful)
    assert plan.t_tiles == pytest.approx(waves * 2 * tile_rows * 128 * 12288 / (1e12 / 108))


def test_split_k_where_the_tiles_cannot_fill_the_sms():
    task, gpu = _gemm(256, 512, 4096, "bf16"), _gpu("dgx-h100")  # 132 SMs
    plan = tile_time(task, gemm_dims(task), gpu, 1e12)
    assert (plan.blocks, plan.split, plan.waves) == (8, 8, 1)  # 2 x 4 tiles, 8 slices of 512: 64 blocks
    assert plan.iterations == 4096 // 8 // 32
    assert plan.efficiency == pytest.approx(256 * 512 * 4096 / (132 * 128 * 128 * 512))
    assert overlap_share(plan, 3) == pytest.approx(3 / 16)
    assert overlap_share(tile_time(_gemm(256, 12288, 12288), gemm_dims(_gemm(256, 12288, 12288)),
                                   _gpu("dgx-a100"), 1e12), 3) == pytest.approx(3 / 384)


def test_mid_size_gemm_is_the_longer_of_its_tiles_and_its_weight_stream():
    gpu = _gpu("dgx-a100")
    for m in (64, 256):
        task = _gemm(m, 12288, 12288)
        est = estimate(task, "gemm", gpu)
        flops = 2 * m * 12288 * 12288
        plan = tile_time(task, gemm_dims(task), gpu, EFF_COMPUTE["gpu"]["gemm"] * 312e12)
        e_m = EFF_MEMORY_GEMM["gpu"] if m <= 128 else EFF_MEMORY["gpu"]
        t_mem = task.bytes / (e_m * 2039e9)
        assert est.t_parallel == pytest.approx(flops / (EFF_COMPUTE["gpu"]["gemm"] * 312e12 * plan.efficiency))
        assert est.t_memory == pytest.approx(t_mem)
        body = max(est.t_parallel, t_mem)
        blend = (est.t_parallel ** 1.5 + t_mem ** 1.5) ** (1 / 1.5)
        want = 3e-6 + est.t_overhead + body + overlap_share(plan, 3) * (blend - body)
        assert est.time == pytest.approx(want)
    # a decode batch of 64 rows streams the weight; 256 rows are bound by their two waves of tiles
    assert estimate(_gemm(64, 12288, 12288), "gemm", gpu).bound == "memory"
    assert estimate(_gemm(256, 12288, 12288), "gemm", gpu).bound == "compute"


class _Cost:
    """The part of a BlockCost that _split reads."""

    def __init__(self, kernels, collectives=()):
        self.kernels, self.collectives = kernels, collectives


def test_eager_runtime_floors_each_call_at_its_dispatch():
    assert get_runtime("eager").dispatch_us == EAGER_DISPATCH_US
    assert RUNTIMES["trtllm"].dispatch_us == RUNTIMES["vllm"].dispatch_us == 0.0  # CUDA graphs: no floor
    from mapper.parallel.collectives import network

    net = network(load_platform("dgx-a100"), 1)
    cost: BlockCost = _Cost([(2e-6, ("rmsnorm",), -1), (500e-6, ("matmul",), -1), (1e-6, ("add",), -1),
                             (4e-6, ("attention",), -1)])  # type: ignore[assignment]
    d = EAGER_DISPATCH_US * 1e-6
    gemm, other, att = _split(cost, net, 1, d)
    assert gemm == pytest.approx(500e-6)  # the GEMM is longer than its dispatch
    assert other == pytest.approx(EAGER_OPS["rmsnorm"] * d + d)
    assert att == pytest.approx((EAGER_OPS["attention"] + 2) * d)  # a decode's attention: its ops and the cache's
    assert _split(cost, net, 1, 0.0) == pytest.approx((500e-6, 3e-6, 4e-6))


def test_eager_serving_is_slower_than_cuda_graphs(tmp_path):
    llama = str(ROOT / "examples" / "llama.tg")
    small = [a for k, v in (("LAYERS", 2), ("HIDDEN", 512), ("HEADS", 8), ("KV_HEADS", 8), ("FFN", 1024),
                            ("VOCAB", 1000)) for a in ("--param", f"{k}={v}")]
    tpot = {}
    for runtime in ("vllm", "eager"):
        out = tmp_path / f"{runtime}.json"
        assert main(["serve", llama, *small, "--platform", "dgx-a100", "--workload", "isl=32,osl=8,requests=4",
                     "--rate", "inf", "--runtime", runtime, "--parallel", "tensor=1,pipeline=1,replicas=1",
                     "--json", str(out)]) == 0
        tpot[runtime] = json.loads(out.read_text())["serving"]["tpot"]["mean"]
    assert tpot["eager"] > 2 * tpot["vllm"]  # a small model's decode step is all per-call floors


def test_l40s_and_l4_nodes_load_with_cited_rates_and_prices():
    l40s, l4 = _gpu("l40s-node"), _gpu("l4-node")
    assert len([d for d in load_platform("l40s-node").devices if d.kind == "gpu"]) == 8
    assert l40s.tensor_peak("fp8") == 733000.0 and l40s.tensor_peak("bf16") == 362050.0
    assert l40s.tensor_peak("i8") == 733000.0 and l40s.memory_gib == 48 and l40s.mem_bandwidth_gbs == 864.0
    assert l4.tensor_peak("fp8") == 242500.0 and l4.memory_gib == 24
    assert l40s.price_per_hour == pytest.approx(30.131 / 8, abs=1e-3)
    assert l4.price_per_hour == pytest.approx(13.3504 / 8, abs=1e-3)
    assert _gpu("dgx-a100").price_per_hour == pytest.approx(27.44705 / 8, abs=1e-3)
    assert _gpu("dgx-h100").price_per_hour == pytest.approx(55.04 / 8, abs=1e-3)
    assert _gpu("dgx-h200").price_per_hour == pytest.approx(63.296 / 8, abs=1e-3)
    assert _gpu("dgx-b200").price_per_hour == pytest.approx(113.9328 / 8, abs=1e-3)
    assert _gpu("gb200-nvl72").price_per_hour == pytest.approx(42.00 / 4, abs=1e-3)
    assert KINDS["l40s"] == "l40s-node" and parse_gpus("l40s=8,l4=4")[0].price is None


@pytest.mark.parametrize("price, message", [("0", "price_per_hour"), ("-2", "price_per_hour"), ('"x"', "")])
def test_a_bad_price_exits_2(tmp_path, capsys, price, message):
    text = (ROOT / "platforms" / "l40s-node.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("price_per_hour = 3.766", f"price_per_hour = {price}"))
    assert main(["compile", str(ROOT / "examples" / "llama.tg"), "--platform", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and message in err

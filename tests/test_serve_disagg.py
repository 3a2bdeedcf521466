"""``mapper serve --disaggregate`` (prefill and decode pools, the KV transfer) and ``--gpus`` (Melange's mix)."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import pytest

from mapper.cli import main
from mapper.errors import InfeasibleError
from mapper.serving.disagg import DisaggPlan, Pool, run_disaggregated
from mapper.serving.inflight import Scheduler, simulate
from mapper.serving.metrics import Slo
from mapper.serving.mix import cheapest_mix, parse_gpus
from mapper.serving.runtimes import get_runtime
from mapper.serving.serve import server_for
from mapper.serving.workload import Arrival

ROOT = Path(__file__).resolve().parent.parent
LLAMA = str(ROOT / "examples" / "llama.tg")
PARAMS = (("LAYERS", 2), ("HIDDEN", 512), ("HEADS", 8), ("KV_HEADS", 2), ("FFN", 1024), ("VOCAB", 1000))
SMALL = [a for k, v in PARAMS for a in ("--param", f"{k}={v}")]


def _server():
    from mapper.frontend.sources import ModelFile

    src = ModelFile(LLAMA, params=PARAMS)
    return server_for(src, "dgx-a100", get_runtime("trtllm"))


def test_kv_transfer_against_a_hand_value():
    """One request of 512 prompt tokens: its cache is 2 (K, V) x 2 layers x 2 KV heads x 64 (head dim)
    x 2 bytes = 1,024 bytes a token, 524,288 bytes in all, sent over NVSwitch inside the node."""
    server = _server()
    net = server.net
    hand = net.intra_latency + 512 * 1024 / (net.intra_gbs * 1e9)
    plan = DisaggPlan(Pool(1, 1, 1), Pool(1, 1, 1), 8192, 256)
    out = run_disaggregated(server, plan, [Arrival(0.0, 512, 4)], Slo())
    assert out.transfer["mean"] == pytest.approx(hand, rel=1e-12)
    (r,) = out.served
    # the decode replica admits it when the cache has arrived and runs three decode steps
    dec = server.step_model(1, 1, 8192)
    steps = [r.first + hand]
    from mapper.serving.iteration import Batch
    for k in range(3):
        steps.append(steps[-1] + dec.step(Batch(1, 1, 512 + k + 1, 0.0, 1)) + server.runtime.overhead)
    assert r.done == pytest.approx(steps[-1], rel=1e-12)
    # tensor 2 in both pools halves each GPU's shard
    two = run_disaggregated(server, DisaggPlan(Pool(2, 1, 1), Pool(2, 1, 1), 8192, 256), [Arrival(0.0, 512, 4)],
                            Slo())
    assert two.transfer["mean"] == pytest.approx(net.intra_latency + 512 * 512 / (net.intra_gbs * 1e9), rel=1e-12)


def test_decode_pool_admits_cached_requests_at_the_capacity_edge():
    """With the cache arriving, a request is admitted only when blocks for it (and, reserving, its
    whole output) are free; it decodes from the first step on and gives no first token of its own."""
    log = []

    def step(b):
        log.append(b)
        return 1.0

    run = simulate([Arrival(0.0, 4, 5), Arrival(0.0, 4, 5)], step, Scheduler(8, 4, 8, 64, True), cached=True)
    a, b = run.served
    assert (a.admitted, a.done) == (0.0, 4.0)  # four decodes give tokens 2 to 5
    assert b.admitted == 4.0 and b.done == 8.0  # 4 + 5 - 1 = 8 tokens: waits for the first's blocks
    assert all(x.pairs == 0 for x in log)  # no prefill work in the decode pool
    # blocks taken as tokens come (vLLM): A's second block preempts B, which recomputes its prompt
    # and first token (5 tokens, 4 x 0 + 5 x 6 / 2 = 15 pairs) once A has ended, then decodes 3 more
    log.clear()
    run = simulate([Arrival(0.0, 4, 5), Arrival(0.0, 4, 5)], step, Scheduler(8, 4, 8, 64, False), cached=True)
    a, b = run.served
    assert run.preemptions == 1 and a.done == 4.0 and b.done == 8.0
    assert [(x.tokens, x.pairs) for x in log] == [(1, 0)] * 4 + [(5, 15.0)] + [(1, 0)] * 3


def test_disaggregated_json_has_both_pools(tmp_path, capsys):
    out = tmp_path / "s.json"
    code = main(["serve", LLAMA, *SMALL, "--platform", "dgx-a100", "--workload", "isl=256,osl=8,requests=24",
                 "--rate", "50", "--disaggregate", "--parallel", "prefill=3,decode=5", "--json", str(out)])
    assert code == 0
    plan = json.loads(out.read_text())["serving"]["plan"]
    assert plan["prefill"] == {"replicas": 3, "tensor": 1, "pipeline": 1, "gpus": 3}
    assert plan["decode"] == {"replicas": 5, "tensor": 1, "pipeline": 1, "gpus": 5}
    assert plan["gpus"] == 8
    assert "kv transfer" in capsys.readouterr().out
    assert main(["serve", LLAMA, *SMALL, "--platform", "dgx-a100", "--workload", "isl=64,osl=8", "--rate", "inf",
                 "--parallel", "prefill=2"]) == 2  # pool keys need --disaggregate


def _brute(loads, caps, prices, sizes, limits, slices):
    """Every assignment of slices to instance types; each type's instances rounded up."""
    types = list(caps)
    parts = [(b, load / slices) for b, load in enumerate(loads) if load > 0 for _ in range(slices)]
    best = math.inf
    for pick in itertools.product(types, repeat=len(parts)):
        if any(caps[g][b] <= 0 for g, (b, _) in zip(pick, parts)):
            continue
        need = {g: 0.0 for g in types}
        for g, (b, share) in zip(pick, parts):
            need[g] += share / caps[g][b]
        counts = {g: math.ceil(need[g] - 1e-9) for g in types}
        used = {k: sum(sizes[g][1] * counts[g] for g in types if sizes[g][0] == k) for k in limits}
        if all(used[k] <= limits[k] for k in limits):
            best = min(best, sum(prices[g] * counts[g] for g in types))
    return best


def test_gpu_mix_against_brute_force():
    """Small random cases: two or three instance types over one or two GPU kinds, one or two buckets."""
    rng = random.Random(7)
    for _ in range(30):
        types = ["a/1", "a/2", "b/1"][: rng.randint(2, 3)]
        sizes = {g: (g[0], int(g[2])) for g in types}
        buckets = rng.randint(1, 2)
        slices = 3
        loads = [rng.uniform(0.5, 6.0) for _ in range(buckets)]
        caps = {g: [rng.choice([0.0, rng.uniform(0.5, 4.0)]) for _ in range(buckets)] for g in types}
        prices = {g: round(rng.uniform(0.5, 5.0), 2) * sizes[g][1] for g in types}
        limits = {k: rng.randint(1, 8) for k in {s[0] for s in sizes.values()}}
        want = _brute(loads, caps, prices, sizes, limits, slices)
        if math.isinf(want):
            with pytest.raises(InfeasibleError):
                cheapest_mix(loads, caps, prices, sizes, limits, slices)
            continue
        got = cheapest_mix(loads, caps, prices, sizes, limits, slices)
        assert got.cost == pytest.approx(want, abs=1e-6)
        assert got.bound is None or got.bound <= got.cost + 1e-6
        for k in limits:
            assert sum(sizes[g][1] * got.counts[g] for g in types if sizes[g][0] == k) <= limits[k]


@pytest.mark.parametrize("bad", ["a100", "a100=0", "a100=x", "a100=2,a100=3", "a100=2@-1", "a100=2@x", "=4",
                                 "nosuchgpu=2@1"])
def test_bad_gpus_exit_2(bad, capsys):
    code = main(["serve", LLAMA, *SMALL, "--gpus", bad, "--workload", "isl=64,osl=8,requests=8", "--rate", "5",
                 "--slo-ttft", "1"])
    assert code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Error" not in err.split(":")[0]


def test_gpu_mix_end_to_end(tmp_path):
    out = tmp_path / "m.json"
    args = ["serve", LLAMA, *SMALL, "--workload", "isl=128,osl=8,requests=20", "--rate", "40", "--slo-ttft", "0.05",
            "--slo-tpot", "0.01"]
    bare = tmp_path / "bare.toml"  # dgx-b200 without its price
    bare.write_text("\n".join(line for line in (ROOT / "platforms" / "dgx-b200.toml").read_text().splitlines()
                              if not line.startswith("price_per_hour")))
    assert main([*args, "--gpus", f"{bare}=2"]) == 2  # no price anywhere
    assert main([*args, "--gpus", "a100=2@1.5", "--platform", "dgx-a100"]) == 2
    listed = tmp_path / "listed.json"
    assert main([*args, "--gpus", "a100=2,l4=4", "--json", str(listed)]) == 0  # the platforms' own prices
    prices = {m["kind"]: m["price_per_gpu_hour"] for m in json.loads(listed.read_text())["serving"]["mix"]}
    assert prices == {"a100": pytest.approx(3.431), "l4": pytest.approx(1.669)}
    assert main([*args, "--gpus", "a100=2@1.5,l4=4@0.5", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())["serving"]
    assert doc["cost_per_hour"] == pytest.approx(sum(m["gpus"] * m["price_per_gpu_hour"] for m in doc["mix"]))
    assert doc["cost_bound"] is None or doc["cost_bound"] <= doc["cost_per_hour"] + 1e-6
    for kind, available in doc["available"].items():
        assert sum(m["gpus"] for m in doc["mix"] if m["kind"] == kind) <= available
    assert doc["cost_per_million_tokens"] > 0 and sum(m["replicas"] for m in doc["mix"]) >= 1
    assert parse_gpus("h100=8@2.5")[0].platform == "dgx-h100"


def test_disaggregated_auto_searches_pool_splits(tmp_path):
    out = tmp_path / "a.json"
    code = main(["serve", LLAMA, *SMALL, "--platform", "dgx-a100", "--workload", "isl=256,osl=16,requests=16",
                 "--rate", "100", "--slo-ttft", "0.5", "--slo-tpot", "0.05", "--disaggregate", "--parallel", "auto",
                 "--json", str(out), "--quiet"])
    assert code == 0
    doc = json.loads(out.read_text())["serving"]
    pre, dec = doc["plan"]["prefill"], doc["plan"]["decode"]
    assert pre["gpus"] + dec["gpus"] == doc["plan"]["gpus"] <= 8
    assert doc["plans_simulated"] > 36  # every pair of pool shapes, and splits of the GPUs

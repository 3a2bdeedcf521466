"""``mapper serve --disaggregate --dispatch``: both pools dealt round-robin or to the least-loaded replica."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from mapper.cli import main
from mapper.serving import disagg
from mapper.serving.disagg import DisaggPlan, Pool, Pools, auto_disaggregated, run_disaggregated
from mapper.serving.inflight import Scheduler, simulate
from mapper.serving.iteration import Batch
from mapper.serving.metrics import Slo
from mapper.serving.workload import Arrival, arrivals
from tests.test_serve_disagg import LLAMA, SMALL, _server

SCHED = Scheduler(capacity=1024, block=1, max_batch=8, chunk=8, reserve_output=True)


def _second(_: Batch) -> float:
    return 1.0


def _transfer(k: int, i: int, j: int) -> float:
    """0.125 s between a prefill and a decode replica of the same index, 0.375 s otherwise."""
    return 0.125 if i == j else 0.375


#: A's 16-token prompt takes two 8-token chunks; the others one step each.
REQS = [Arrival(0.0, 16, 4), Arrival(0.25, 4, 6), Arrival(1.5, 4, 2), Arrival(1.75, 4, 3)]


def _pools(policy: str) -> Pools:
    return Pools(2, 2, _second, _second, SCHED, SCHED, policy)


def test_least_loaded_pools_hand_worked():
    """One second a step, 2 prefill + 2 decode replicas.

    Prefill, least-loaded: A (0) -> p0 (tie), chunks [0, 1] and [1, 2], first token 2.0; B (0.25)
    -> p1 (p0 has A), [0.25, 1.25]; C (1.5) -> p1 (B ended at 1.25, p0 still has A; round-robin
    gives p0), [1.5, 2.5]; D (1.75): one in flight on each -> p0, whose next step is [2, 3].
    Decode, at each first token in time order: B (1.25) -> d0 (tie), 0.375 s from p1, arrives
    1.625, five decode steps to 6.625; A (2.0) -> d1 (d0 has B), arrives 2.375, three steps to
    5.375; C (2.5): one on each -> d0, arrives 2.875, admitted at d0's step [3.625, 4.625];
    D (3.0): d0 has B and C, d1 has A -> d1, arrives 3.375, joins A's step [3.375, 4.375], ends
    5.375."""
    times, runs_d, runs_p, moved = _pools("least-loaded").serve(REQS, _transfer)
    assert [(s.first - s.arrival, s.done - s.arrival) for s in times] == [
        (2.0, 5.375), (1.0, 6.375), (1.0, 3.125), (1.25, 3.625)]
    assert moved == {0: 0.375, 1: 0.375, 2: 0.375, 3: 0.375}  # every pair crosses: each transfer counted
    assert [[s.input_tokens for s in r.served] for r in runs_p] == [[16, 4], [4, 4]]  # p0: A, D; p1: B, C
    assert [[s.output_tokens for s in r.served] for r in runs_d] == [[6, 2], [4, 3]]  # d0: B, C; d1: A, D
    assert [s.admitted for s in runs_d[0].served] == [1.625, 3.625]


def test_round_robin_pools_hand_worked():
    """Request k on p(k mod 2) and d(k mod 2), each pair of one index (0.125 s). Prefill: C waits
    for A's second chunk on p0 ([2, 3]); D runs alone on p1 at [1.75, 2.75]. Decode: A at 2.125
    on d0, three steps to 5.125, C joining its second step (3.125) to 4.125; B at 1.375 on d1,
    five steps to 6.375, D admitted at d1's step 3.375, two steps to 5.375."""
    times, _, _, moved = _pools("round-robin").serve(REQS, _transfer)
    assert [(s.first - s.arrival, s.done - s.arrival) for s in times] == [
        (2.0, 5.125), (1.0, 6.125), (1.5, 2.625), (1.0, 3.625)]
    assert moved == {k: 0.125 for k in range(4)}


def _old_round_robin(reqs, rp, rd, transfer):
    """The dealing before pools honoured --dispatch: k to prefill k mod R_p and decode k mod R_d."""
    n = len(reqs)
    pre = {}
    for r in range(rp):
        ids = list(range(r, n, rp))
        run = simulate([Arrival(reqs[k].arrival, reqs[k].input_tokens, 1) for k in ids], _second, SCHED)
        pre.update(zip(ids, run.served))
    moved = {k: transfer(k, k % rp, k % rd) for k in range(n) if reqs[k].output_tokens > 1}
    done = {}
    for r in range(rd):
        ids = sorted((k for k in range(r, n, rd) if k in moved), key=lambda k: (pre[k].done + moved[k], k))
        run = simulate([Arrival(pre[k].done + moved[k], reqs[k].input_tokens, reqs[k].output_tokens) for k in ids],
                       _second, SCHED, cached=True)
        done.update((k, s.done) for k, s in zip(ids, run.served))
    return [(pre[k].first, done.get(k, pre[k].done)) for k in range(n)], moved


def test_round_robin_pools_unchanged():
    rng = random.Random(5)
    reqs = arrivals([Arrival(None, rng.randint(1, 30), rng.randint(1, 12)) for _ in range(80)], 2.0, 1)
    times, _, _, moved = Pools(3, 2, _second, _second, SCHED, SCHED).serve(reqs, _transfer)
    assert ([(s.first, s.done) for s in times], moved) == _old_round_robin(reqs, 3, 2, _transfer)


def test_least_loaded_pools_deterministic_and_complete():
    rng = random.Random(6)
    reqs = arrivals([Arrival(None, rng.randint(1, 30), rng.randint(1, 12)) for _ in range(120)], 3.0, 2)
    one, two = (Pools(3, 3, _second, _second, SCHED, SCHED, "least-loaded").serve(reqs, _transfer)
                for _ in range(2))
    assert one == two
    times, runs_d, runs_p, moved = one
    assert sorted(moved) == [k for k, r in enumerate(reqs) if r.output_tokens > 1]
    assert sum(len(r.served) for r in runs_p) == len(reqs)
    assert sum(len(r.served) for r in runs_d) == len(moved)
    for r, s in zip(reqs, times, strict=True):
        assert s.arrival == r.arrival and s.arrival <= s.admitted < s.first <= s.done
    assert times != Pools(3, 3, _second, _second, SCHED, SCHED).serve(reqs, _transfer)[0]


def test_disaggregated_runs_under_either_policy(tmp_path):
    """Through the cost model on dgx-a100: the KV transfer is priced per pair, metrics complete."""
    server = _server()
    reqs = arrivals([Arrival(None, 64 + 37 * k % 400, 2 + k % 9) for k in range(60)], 400.0, 3)
    plan = DisaggPlan(Pool(1, 1, 3), Pool(1, 1, 5), 8192, 256)
    rr = run_disaggregated(server, plan, reqs, Slo(0.05, 0.01))
    server.runtime = replace(server.runtime, dispatch="least-loaded")
    ll = run_disaggregated(server, plan, reqs, Slo(0.05, 0.01))
    for out in (rr, ll):
        assert out.transfer["mean"] > 0 and out.transfer["max"] >= out.transfer["mean"]
        assert sorted(s.arrival for s in out.served) == sorted(r.arrival for r in reqs)
        assert all(s.done >= s.first >= s.arrival for s in out.served)
        assert out.metrics["requests_per_s"] > 0 and out.metrics["output_tokens_per_s"] > 0
    args = ["serve", LLAMA, *SMALL, "--platform", "dgx-a100", "--workload", "isl=256,osl=8,requests=24", "--rate",
            "200", "--disaggregate", "--parallel", "prefill=3,decode=5", "--dispatch", "least-loaded"]
    path = tmp_path / "ll.json"
    assert main([*args, "--json", str(path)]) == 0
    doc = json.loads(path.read_text())["serving"]
    assert doc["plan"]["prefill"]["replicas"] == 3 and doc["kv_transfer_s"]["mean"] > 0


@pytest.mark.parametrize("policy", ["round-robin", "least-loaded"])
def test_auto_disaggregated_uses_the_policy(policy, monkeypatch):
    calls = []
    real = disagg.balance

    def spy(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(disagg, "balance", spy)
    server = _server()
    server.gpus = 4  # fewer plans
    server.runtime = replace(server.runtime, dispatch=policy)
    reqs = arrivals([Arrival(None, 128, 4) for _ in range(12)], 300.0, 0)
    best, tried = auto_disaggregated(server, {}, reqs, Slo())
    assert tried > 1
    assert bool(calls) == (policy == "least-loaded")
    assert best.metrics == run_disaggregated(server, best.plan, reqs, Slo()).metrics

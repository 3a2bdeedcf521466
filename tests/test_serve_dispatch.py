"""``mapper serve`` dispatch: requests dealt round-robin or to the least-loaded replica."""

from __future__ import annotations

import json
import random

from mapper.cli import main
from mapper.serving.dispatch import assign
from mapper.serving.inflight import Scheduler, simulate
from mapper.serving.iteration import Batch
from mapper.serving.workload import Arrival
from tests.test_serve import LLAMA, SMALL

SCHED = Scheduler(capacity=1024, block=1, max_batch=8, chunk=8, reserve_output=True)


def _second(_: Batch) -> float:
    return 1.0


def _trace(n: int, seed: int) -> list[Arrival]:
    rng = random.Random(seed)
    t, reqs = 0.0, []
    for _ in range(n):
        t += rng.expovariate(3.0)
        reqs.append(Arrival(t, rng.randint(1, 12), rng.randint(1, 10)))
    return reqs


def test_least_loaded_hand_worked():
    """Two replicas, one second a step. A (0 s, out 3) -> 0 (tie, lowest index); B (0.5 s, out 1)
    -> 1 (0 has A); B ends at 1.5; C (1.5 s, out 5) -> 1 (B ended at 1.5, 0 still has A;
    round-robin gives 0); D (1.6 s, out 1): each has one in flight -> 0, where it joins A's
    third step [2, 3] (round-robin gives 1)."""
    reqs = [Arrival(0.0, 4, 3), Arrival(0.5, 1, 1), Arrival(1.5, 1, 5), Arrival(1.6, 1, 1)]
    where, runs = assign(reqs, 2, _second, SCHED, "least-loaded")
    assert where == (0, 1, 1, 0)
    a, d = runs[0].served
    b, c = runs[1].served
    assert (a.first, a.done) == (1.0, 3.0)
    assert (b.first, b.done) == (1.5, 1.5)
    assert (c.admitted, c.first, c.done) == (1.5, 2.5, 6.5)
    assert (d.admitted, d.first, d.done) == (2.0, 3.0, 3.0)
    assert assign(reqs, 2, _second, SCHED)[0] == (0, 1, 0, 1)


def test_round_robin_deals_in_turn_and_simulates_each_replica_alone():
    reqs = _trace(60, 1)
    where, runs = assign(reqs, 3, _second, SCHED, "round-robin")
    assert where == tuple(k % 3 for k in range(60))
    assert runs == tuple(simulate(reqs[r::3], _second, SCHED) for r in range(3))


def test_least_loaded_with_every_request_at_once_is_round_robin():
    reqs = [Arrival(0.0, 1 + k % 5, 1 + k % 7) for k in range(20)]
    assert assign(reqs, 4, _second, SCHED, "least-loaded") == assign(reqs, 4, _second, SCHED, "round-robin")


def test_least_loaded_is_deterministic_and_balances():
    reqs = _trace(200, 2)
    one, two = (assign(reqs, 4, _second, SCHED, "least-loaded") for _ in range(2))
    assert one == two
    where, runs = one
    assert sorted(s.arrival for run in runs for s in run.served) == [r.arrival for r in reqs]
    assert where != tuple(k % 4 for k in range(200))


def test_one_replica_engine_matches_simulate():
    reqs = _trace(50, 3)
    assert assign(reqs, 1, _second, SCHED, "least-loaded")[1] == (simulate(reqs, _second, SCHED),)


def test_dispatch_option(tmp_path, capsys):
    args = ["serve", LLAMA, *SMALL, "--platform", "dgx-a100", "--workload", "isl=64,osl=8,requests=24", "--rate",
            "50", "--parallel", "tensor=1,replicas=4"]
    assert main([*args, "--dispatch", "nearest"]) == 2
    assert "unknown dispatch policy" in capsys.readouterr().err
    out = tmp_path / "s.json"
    assert main([*args, "--dispatch", "least-loaded", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["serving"]["requests_per_s"] > 0

"""``mapper serve`` scheduler policies: prefill-first steps, multi-step scheduling, late outputs."""

from __future__ import annotations

import random
from dataclasses import replace

from mapper.serving.inflight import Scheduler, simulate
from mapper.serving.iteration import Batch
from mapper.serving.runtimes import RUNTIMES
from mapper.serving.workload import Arrival

BASE = Scheduler(capacity=1024, block=1, max_batch=8, chunk=8, reserve_output=True)


def _steps(log: list[Batch]):
    def step(b: Batch) -> float:
        log.append(b)
        return 1.0

    return step


def _times(run) -> list[tuple[float, float]]:
    return [(s.first, s.done) for s in run.served]


def test_mixed_steps_let_decodes_run_beside_a_prompt():
    """A (0 s, 2 in, 3 out) and B (0.5 s, 2 in, 2 out), one second a step, stall-free batching."""
    reqs = [Arrival(0.0, 2, 3), Arrival(0.5, 2, 2)]
    log: list[Batch] = []
    run = simulate(reqs, _steps(log), BASE)
    # step 1 [0,1]: A's prompt: its first token at 1
    # step 2 [1,2]: A decodes beside B's prompt: B's first token at 2
    # step 3 [2,3]: both decode: A's third and B's second token, both end at 3
    assert _times(run) == [(1.0, 3.0), (2.0, 3.0)]
    assert [b.tokens for b in log] == [2, 3, 2]


def test_prefill_first_steps_stall_the_decodes():
    """The same requests with prompts and decodes in separate steps, prompts first (vLLM V0, SGLang)."""
    reqs = [Arrival(0.0, 2, 3), Arrival(0.5, 2, 2)]
    log: list[Batch] = []
    run = simulate(reqs, _steps(log), replace(BASE, mixed=False))
    # step 1 [0,1]: A's prompt: first token at 1
    # step 2 [1,2]: B waits, so the step is B's prompt alone (A stalls): B's first token at 2
    # step 3 [2,3]: A and B decode: B ends at 3
    # step 4 [3,4]: A decodes its third token: ends at 4
    assert _times(run) == [(1.0, 4.0), (2.0, 3.0)]
    assert [(b.tokens, b.sequences) for b in log] == [(2, 1), (2, 1), (2, 2), (1, 1)]
    assert log[1].pairs == 3 and log[1].decode_context == 0  # a prompt step reads no decode's cache


def test_prefill_first_decodes_when_no_waiting_prompt_fits():
    """A waiting request whose blocks are not free does not stall the running decodes forever."""
    reqs = [Arrival(0.0, 2, 3), Arrival(0.5, 3, 2)]
    sched = replace(BASE, capacity=6, mixed=False)  # A holds 4 tokens (2 + 3 - 1); B needs 4 more
    log: list[Batch] = []
    run = simulate(reqs, _steps(log), sched)
    # steps 1-3: A's prompt, then two decodes while B waits for blocks; A ends at 3
    # step 4 [3,4]: B's prompt: first token at 4; step 5 [4,5]: B decodes and ends
    assert _times(run) == [(1.0, 3.0), (4.0, 5.0)]


def test_multi_step_runs_hold_new_prompts_until_the_run_ends():
    """A (0 s, 2 in, 5 out), B (1.5 s, 2 in, 2 out), prefill-first, three decode steps a decision."""
    reqs = [Arrival(0.0, 2, 5), Arrival(1.5, 2, 2)]
    log: list[Batch] = []
    run = simulate(reqs, _steps(log), replace(BASE, mixed=False, steps=3))
    # step 1 [0,1]: A's prompt (first token at 1)
    # steps 2-4 [1,4]: a run of three decode steps of A; B, arrived at 1.5, waits for its end
    # step 5 [4,5]: B's prompt (first token at 5); step 6 [5,6]: A's fifth and B's second token
    assert _times(run) == [(1.0, 6.0), (5.0, 6.0)]
    one = simulate(reqs, lambda b: 1.0, replace(BASE, mixed=False))
    # one step a decision: B's prompt runs at [2,3], A's decodes at [1,2], [3,4], [4,5], [5,6]
    assert _times(one) == [(1.0, 6.0), (3.0, 4.0)]


def test_host_overhead_is_paid_once_per_scheduling_decision():
    """The requests above with 0.25 s of host time per decision (vLLM RFC 6854): a multi-step run pays it once."""
    reqs = [Arrival(0.0, 2, 5), Arrival(1.5, 2, 2)]
    log: list[Batch] = []
    multi = simulate(reqs, _steps(log), replace(BASE, mixed=False, steps=3, overhead=0.25))
    # step 1 [0,1.25]: A's prompt; steps 2-4 one decision: [1.25,2.5], [2.5,3.5], [3.5,4.5]
    # step 5 [4.5,5.75]: B's prompt; step 6 [5.75,7]: a new decision, A's fifth and B's second token
    assert _times(multi) == [(1.25, 7.0), (5.75, 7.0)]
    one = simulate(reqs, lambda b: 1.0, replace(BASE, mixed=False, overhead=0.25))
    # every step a decision, 1.25 s each: A [0,1.25], A [1.25,2.5], B's prompt [2.5,3.75],
    # A and B [3.75,5], A [5,6.25], A [6.25,7.5]
    assert _times(one) == [(1.25, 7.5), (3.75, 5.0)]


def test_a_lag_of_one_step_delays_first_tokens_and_ends():
    """Outputs processed while the next step runs reach the client one step later (or at the last step)."""
    reqs = [Arrival(0.0, 2, 3), Arrival(0.5, 2, 2)]
    run = simulate(reqs, lambda b: 1.0, replace(BASE, lag=1))
    # the mixed schedule above ends steps at 1, 2, 3: A's first token (step 1) is seen at 2, B's
    # (step 2) at 3; both end in the last step, seen at its end
    assert _times(run) == [(2.0, 3.0), (3.0, 3.0)]


def test_a_front_end_latency_moves_first_tokens_and_ends_not_the_steps_between():
    """The scheduler sees each request 0.25 s after it arrives: the mixed schedule above shifted."""
    reqs = [Arrival(0.0, 2, 3), Arrival(0.5, 2, 2)]
    run = simulate(reqs, lambda b: 1.0, replace(BASE, front=0.25))
    # A reaches the scheduler at 0.25: steps end at 1.25, 2.25, 3.25 (B, seen at 0.75, joins step 2)
    assert _times(run) == [(1.25, 3.25), (2.25, 3.25)]
    assert [s.arrival for s in run.served] == [0.0, 0.5]  # latencies count from the arrival


def test_policies_default_to_what_trtllm_and_vllm_v1_do():
    for name, rt in RUNTIMES.items():
        assert (rt.mixed, rt.steps, rt.lag) == ((name != "sglang"), 1, 0)
        assert rt.front == 0.0 or name in ("sglang", "trtllm", "trtllm-pytorch")


def test_policies_serve_every_request_on_random_streams():
    rng = random.Random(7)
    for _ in range(150):
        reqs = sorted((Arrival(round(rng.uniform(0, 5), 2), rng.randint(1, 40), rng.randint(1, 30))
                       for _ in range(rng.randint(1, 12))), key=lambda a: a.arrival or 0.0)
        reserve = rng.random() < 0.5
        sched = Scheduler(rng.choice((80, 200, 1000)), rng.choice((1, 4, 16)), rng.randint(1, 8),
                          rng.randint(1, 64), reserve, window=rng.choice((0, 0, 24)), mixed=rng.random() < 0.5,
                          steps=rng.randint(1, 4), lag=rng.randint(0, 2),
                          front=rng.choice((0.0, 0.3)))
        run = simulate(reqs, lambda b: 0.01 + 0.001 * b.tokens, sched)
        for a, s in zip(reqs, run.served):
            assert a.arrival is not None and a.arrival <= s.admitted <= s.first <= s.done

"""``mapper serve``: host time per streamed token (a runtime's ``stream``), hand-worked schedules."""

from __future__ import annotations

import pytest

from mapper.serving.inflight import Scheduler, simulate
from mapper.serving.runtimes import RUNTIMES
from mapper.serving.workload import Arrival


def _sched(stream: float) -> Scheduler:
    return Scheduler(4096, 16, 8, 64, False, stream=stream)


def test_built_in_runtimes_do_not_stream():
    assert all(rt.stream == 0.0 for rt in RUNTIMES.values())


def test_each_step_pays_for_the_tokens_it_returns():
    """Two requests at 0 (8-token prompts, 3 outputs), 10 ms steps, 1 ms per streamed token:
    step 1 runs both prompts and returns 2 first tokens (12 ms), steps 2 and 3 decode both
    (12 ms each): first tokens at 12 ms, ends at 36 ms; TPOT (36 - 12) / 2 = 12 ms."""
    reqs = [Arrival(0.0, 8, 3), Arrival(0.0, 8, 3)]
    run = simulate(reqs, lambda b: 0.010, _sched(0.001))
    assert run.steps == 3
    for s in run.served:
        assert s.first == pytest.approx(0.012)
        assert s.done == pytest.approx(0.036)
    plain = simulate(reqs, lambda b: 0.010, _sched(0.0))
    assert [s.done for s in plain.served] == [pytest.approx(0.030)] * 2


def test_a_part_way_prompt_returns_nothing():
    """A 100-token prompt in 64-token chunks: the first chunk returns no token (10 ms), the second
    its first (11 ms), then one decode (11 ms): first token at 21 ms, end at 32 ms."""
    run = simulate([Arrival(0.0, 100, 2)], lambda b: 0.010, _sched(0.001))
    (s,) = run.served
    assert s.first == pytest.approx(0.021)
    assert s.done == pytest.approx(0.032)


"""``mapper serve``: TensorRT-LLM's fitted cost per request outside the steps (its ``front``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mapper.serving.inflight import Scheduler, simulate
from mapper.serving.runtimes import RUNTIMES, TRTLLM_FRONT
from mapper.serving.workload import Arrival


def test_trtllm_carries_the_fitted_cost_and_vllm_none():
    assert RUNTIMES["trtllm"].front == TRTLLM_FRONT == 0.0025
    assert RUNTIMES["vllm"].front == RUNTIMES["eager"].front == 0.0


def test_a_batch_one_first_token_is_the_cost_plus_the_prompt_step():
    """One 128-token prompt, one output token, a 4.5 ms prompt step (the fitted row's steps): 7.0 ms."""
    rt = RUNTIMES["trtllm"]
    sched = Scheduler(4096, rt.block, rt.max_batch, rt.chunk, rt.reserve_output, front=rt.front)
    run = simulate([Arrival(0.0, 128, 1)], lambda b: 0.0045, sched)
    (s,) = run.served
    assert s.first - s.arrival == s.done - s.arrival == pytest.approx(0.007)
    plain = simulate([Arrival(0.0, 128, 1)], lambda b: 0.0045, replace(sched, front=0.0))
    assert plain.served[0].first == 0.0045

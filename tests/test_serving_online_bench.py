"""benchmarks/serving_online.py's steady-state Offline rate (``sustained``): hand-worked timelines."""

from __future__ import annotations

import runpy
from pathlib import Path

from mapper.serving.inflight import Run
from mapper.serving.serve import Outcome, Plan

BENCH = runpy.run_path(str(Path(__file__).resolve().parents[1] / "benchmarks" / "serving_online.py"))


def _outcome(*timelines: tuple[tuple[float, int, int, int], ...]) -> Outcome:
    runs = tuple(Run((), len(t), 0, 0, 0, t) for t in timelines)
    return Outcome(Plan(1, 1, len(runs), 8, 8), runs, (), {"output_tokens_per_s": 123.0}, 0, {})


def test_sustained_counts_the_second_half_of_the_waiting_time():
    # steps end at 1..5 s running 2, 2, 4, 4, 1 sequences; requests wait until the step ending at 4 s:
    # the second half of [0, 4] is the steps ending at 3 and 4 (from 2 s): 4 + 4 tokens in 2 s
    timeline = ((1.0, 2, 0, 3), (2.0, 2, 0, 2), (3.0, 4, 0, 1), (4.0, 4, 0, 1), (5.0, 1, 0, 0))
    assert BENCH["sustained"](_outcome(timeline)) == 4.0
    assert BENCH["sustained"](_outcome(timeline, timeline)) == 8.0  # replicas add


def test_sustained_is_the_whole_rate_when_nothing_waits():
    assert BENCH["sustained"](_outcome(((1.0, 2, 0, 0), (2.0, 2, 0, 0)))) == 123.0

"""Which replica serves each request: the dispatch policies of ``mapper serve`` (docs/serving.md).

* ``round-robin``: request ``k`` goes to replica ``k mod R``; the replicas never interact, so each
  is simulated on its own (:func:`mapper.serving.inflight.simulate`).
* ``least-loaded``: a request goes to the replica with the fewest requests in flight when it
  arrives (given to it and not yet ended), ties to the lowest index: join the shortest queue
  (Winston, "Optimality of the shortest line discipline", J. Appl. Prob. 14, 1977; Gupta et al.,
  "Analysis of join-the-shortest-queue routing for web server farms", Performance Evaluation 64,
  2007). This is NVIDIA's MLPerf Inference LLM harness (inference_results_v4.1, closed/NVIDIA,
  code/harness/harness_llm: ``traffic_distribution_policy`` default 2, ``loadBalancing``, takes
  the ``std::min_element`` of each inference group's transactions in flight, counted up when a
  sample is issued to the group and down when its last response completes). The replicas run
  on one clock (:func:`mapper.serving.inflight.engine`): before request ``k`` (arriving at
  ``t``) is given out, every replica runs the steps that start before ``t``, so what has ended
  by ``t`` is known; a request that ends in a step still running at ``t`` counts as in flight.
  The count is taken at the request's arrival (the harness issues it then), before the
  runtime's front end; with a runtime's ``lag`` a request counts as ended when its step ends.

Both are deterministic: same requests, same replicas, same runs.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable

from mapper.errors import OptionsError
from mapper.serving.inflight import Feed, Run, Scheduler, check, drain, engine, simulate
from mapper.serving.iteration import Batch
from mapper.serving.workload import Arrival

DISPATCH = ("round-robin", "least-loaded")


def dispatch_policy(name: str) -> str:
    if name not in DISPATCH:
        raise OptionsError(f"unknown dispatch policy {name!r}; choose one of {', '.join(DISPATCH)}",
                           obj="--dispatch")
    return name


def assign(requests: list[Arrival], replicas: int, step: Callable[[Batch], float], sched: Scheduler,
           policy: str = "round-robin") -> tuple[tuple[int, ...], tuple[Run, ...]]:
    """The replica of each request (in the order given) and the runs of the replicas that got
    any (in replica order) under ``policy`` (module docstring)."""
    if policy == "round-robin" or replicas == 1:
        where = tuple(k % replicas for k in range(len(requests)))
        runs = tuple(simulate(requests[r::replicas], step, sched) for r in range(replicas) if requests[r::replicas])
        return where, runs
    check(requests, sched)
    feeds = [Feed() for _ in range(replicas)]
    gens = [engine(f, step, sched) for f in feeds]
    starts = [next(g) for g in gens]  # each replica's next step start (inf: idle)
    got: list[int] = []
    for r in requests:
        t = r.arrival or 0.0
        for j, g in enumerate(gens):
            while starts[j] < t:
                starts[j] = next(g)
        load = [len(f.given) - bisect_right(f.ended, t) for f in feeds]
        j = load.index(min(load))
        feeds[j].add(r)
        got.append(j)
        if math.isinf(starts[j]):
            starts[j] = next(gens[j])
    ran: list[Run] = []
    for f, g in zip(feeds, gens, strict=True):
        f.closed = True
        ran.append(drain(g))
    return tuple(got), tuple(run for run, f in zip(ran, feeds, strict=True) if f.given)

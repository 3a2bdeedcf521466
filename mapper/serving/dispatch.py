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
  A disaggregated plan's decode pool gives a request out at its first token and it reaches the
  replica chosen after its KV transfer (:func:`balance`'s ``delay``); it counts as in flight
  from the moment it is given out (:mod:`mapper.serving.disagg`).

Both are deterministic: same requests, same replicas, same runs.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable
from heapq import heappop, heappush

from mapper.errors import OptionsError
from mapper.serving.inflight import Feed, Run, Scheduler, Served, check, drain, engine, simulate
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
    where, runs, _ = balance(requests, replicas, step, sched)
    return where, runs


def served(where: tuple[int, ...], runs: tuple[Run, ...], order: tuple[tuple[int, ...], ...] | None = None
           ) -> list[Served]:
    """Each request's times (in the order given) from :func:`assign`'s or :func:`balance`'s
    answer; ``order``: :func:`balance`'s, else each replica's requests in the order given."""
    if order is None:
        order = tuple(tuple(k for k, j in enumerate(where) if j == r) for r in sorted(set(where)))
    got: dict[int, Served] = {}
    for ids, run in zip((o for o in order if o), runs, strict=True):
        got.update(zip(ids, run.served, strict=True))
    return [got[k] for k in range(len(where))]


def balance(requests: list[Arrival], replicas: int, step: Callable[[Batch], float], sched: Scheduler,
            cached: bool = False, delay: Callable[[int, int], float] | None = None
            ) -> tuple[tuple[int, ...], tuple[Run, ...], tuple[tuple[int, ...], ...]]:
    """``least-loaded`` on one clock (module docstring). Request ``k`` is given out at its arrival
    (the requests in order of it) and reaches replica ``j`` ``delay(k, j)`` seconds later (0 by
    default, never negative; a disaggregated plan's KV transfer, :mod:`mapper.serving.disagg`),
    each replica taking its requests in order of reaching it (ties: the order given). Returns
    each request's replica, the runs of the replicas that got any and, per replica, its
    requests in the order of its run; ``cached`` as for :func:`mapper.serving.inflight.engine`."""
    check(requests, sched)
    feeds = [Feed() for _ in range(replicas)]
    gens = [engine(f, step, sched, cached) for f in feeds]
    starts = [next(g) for g in gens]  # each replica's next step start (inf: idle)
    coming: list[list[tuple[float, int]]] = [[] for _ in range(replicas)]  # given out, not yet in its feed
    order: list[list[int]] = [[] for _ in range(replicas)]
    got: list[int] = []

    def feed(j: int, upto: float) -> None:
        """Replica ``j`` takes what reaches it by ``upto`` (nothing given out later reaches it sooner)."""
        while coming[j] and coming[j][0][0] <= upto:
            at, k = heappop(coming[j])
            r = requests[k]
            feeds[j].add(Arrival(at, r.input_tokens, r.output_tokens))
            order[j].append(k)
            if math.isinf(starts[j]):
                starts[j] = next(gens[j])

    for k, r in enumerate(requests):
        t = r.arrival or 0.0
        for j, g in enumerate(gens):
            feed(j, t)
            while starts[j] < t:  # every arrival by t is in the feed
                starts[j] = next(g)
        load = [len(f.given) + len(c) - bisect_right(f.ended, t) for f, c in zip(feeds, coming, strict=True)]
        j = load.index(min(load))
        heappush(coming[j], (t + (delay(k, j) if delay is not None else 0.0), k))
        feed(j, t)
        got.append(j)
    ran: list[Run] = []
    for j, (f, g) in enumerate(zip(feeds, gens, strict=True)):
        feed(j, math.inf)
        f.closed = True
        ran.append(drain(g))
    return (tuple(got), tuple(run for run, f in zip(ran, feeds, strict=True) if f.given),
            tuple(tuple(o) for o in order))

"""Disaggregated serving: a prefill pool and a decode pool (``mapper serve --disaggregate``).

Prefill and decode run on separate replicas, each pool with its own tensor and pipeline degrees
and replica count (Zhong et al., "DistServe", OSDI 2024; Patel et al., "Splitwise", ISCA 2024).
Each pool deals its requests by the runtime's ``dispatch`` policy (:mod:`mapper.serving.dispatch`).
Under ``round-robin`` request ``k`` is prefilled on prefill replica ``k mod R_p`` and decoded on
decode replica ``k mod R_d``, each replica simulated on its own. Under ``least-loaded`` each pool
runs on one clock: a request goes, at its arrival, to the prefill replica with the fewest
requests in flight, and at its first token to the decode replica with the fewest requests in
flight (given to it, its cache on the way or arrived, and not yet ended), ties to the lowest
index. That is the decode choice of vLLM's disaggregated proxy
(examples/online_serving/disaggregated_serving/disagg_proxy_demo.py, ``LoadBalancedScheduler``,
its default: after the prefill response returns, the decode instance of least
``decode_bs_counter``, counted up when a request is sent to it and down when its decode ends;
that proxy weighs prefill instances by the prompt characters sent since they were last all idle
instead, and the prefill choice here is the MLPerf harness's count of requests).

A prefill replica is an in-flight batching replica that runs prompts only
(:func:`mapper.serving.inflight.engine` with one output token, chunked prefill and the
runtime's limits), whose last chunk gives the first token. The prompt's KV cache then moves to
its decode replica: every GPU of the prefill replica sends its shard of
the cache over its own link while every GPU of the decode replica receives its shard, so the
transfer takes the longer of the two per-GPU shards at the link's rate plus its latency
(:func:`mapper.parallel.collectives.send`; across nodes when the two replicas do not share one node,
the NIC's rate), so its time depends on the pair (:func:`crosses`). The decode replica admits the
request when its cache has arrived and its blocks are free (``cached=True``) and runs
decode-only batches. A request of one output token ends at its prefill.

The pools take the GPUs in order: the prefill replicas first, then the decode replicas.
``--parallel auto`` tries every pair of pool layouts (tensor and pipeline degrees as for one
pool) and every split of the GPUs between them (decode replicas filling what the prefill pool
leaves), and keeps the plan of most goodput when SLOs are given (ties: most output tokens per
second), else of most output tokens per second; ties go to fewer GPUs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from mapper.core.opdefs.dnn import held_positions
from mapper.errors import InfeasibleError, OptionsError
from mapper.parallel.collectives import send
from mapper.serving.dispatch import assign, balance, served
from mapper.serving.inflight import Run, Scheduler, Served, simulate
from mapper.serving.iteration import Batch, StepModel
from mapper.serving.metrics import Slo, max_concurrency, metrics
from mapper.serving.workload import Arrival

#: ``--parallel`` keys of a disaggregated plan: each pool's degrees and replicas.
POOL_KEYS = ("prefill_tensor", "prefill_pipeline", "prefill", "decode_tensor", "decode_pipeline", "decode")


@dataclass(frozen=True, slots=True)
class Pool:
    tensor: int
    pipeline: int
    replicas: int

    @property
    def size(self) -> int:
        return self.tensor * self.pipeline

    @property
    def gpus(self) -> int:
        return self.size * self.replicas

    def to_json(self) -> dict[str, int]:
        return {"replicas": self.replicas, "tensor": self.tensor, "pipeline": self.pipeline, "gpus": self.gpus}


@dataclass(frozen=True, slots=True)
class DisaggPlan:
    prefill: Pool
    decode: Pool
    chunk: int
    max_batch: int

    @property
    def gpus(self) -> int:
        return self.prefill.gpus + self.decode.gpus

    def label(self) -> str:
        p, d = self.prefill, self.decode
        return (f"prefill {p.replicas} x (tensor {p.tensor} x pipeline {p.pipeline}) + decode {d.replicas} x "
                f"(tensor {d.tensor} x pipeline {d.pipeline})")


@dataclass(frozen=True, slots=True)
class DisaggOutcome:
    plan: DisaggPlan
    runs: tuple[Run, ...]  # the decode replicas', then the prefill replicas'
    served: tuple[Served, ...]
    metrics: dict[str, object]
    memory: dict[str, float]  # bytes per GPU by part, the decode pool's fullest stage
    transfer: dict[str, float]  # KV transfer seconds per request: mean and max


def kv_shard_bytes(model: StepModel) -> float:
    """Bytes of one token's KV cache on the fullest GPU of a replica (its stage's blocks, its
    tensor shard)."""
    return max(sum(model.kv_per_token[b] for b in stage) for stage in model.stages)


def transfer_time(tokens: int, sender: StepModel, receiver: StepModel, across: bool) -> float:
    """Seconds to move a prompt's KV cache of ``tokens`` tokens between replicas (module docstring)."""
    shard = max(kv_shard_bytes(sender), kv_shard_bytes(receiver))
    return send(sender.net, tokens * shard, across)


def _nodes(first: int, size: int, per_node: int) -> set[int]:
    return {g // per_node for g in range(first, first + size)}


def crosses(plan: DisaggPlan, i: int, j: int, per_node: int) -> bool:
    """Whether prefill replica ``i`` and decode replica ``j`` lie on more than one node."""
    p, d = plan.prefill, plan.decode
    nodes = _nodes(i * p.size, p.size, per_node) | _nodes(p.gpus + j * d.size, d.size, per_node)
    return len(nodes) > 1


@dataclass(frozen=True, slots=True)
class Pools:
    """The two pools' replicas, step times and scheduling limits, and how requests are dealt
    (:mod:`mapper.serving.dispatch`)."""

    prefill: int
    decode: int
    prefill_step: Callable[[Batch], float]
    decode_step: Callable[[Batch], float]
    prefill_sched: Scheduler
    decode_sched: Scheduler
    policy: str = "round-robin"

    def serve(self, requests: list[Arrival], transfer: Callable[[int, int, int], float]
              ) -> tuple[tuple[Served, ...], list[Run], list[Run], dict[int, float]]:
        """Each request's times, the decode and prefill replicas' runs and each moved request's
        transfer seconds (module docstring); ``transfer(k, i, j)``: seconds to move request
        ``k``'s KV cache from prefill replica ``i`` to decode replica ``j``."""
        n, rd = len(requests), self.decode
        arrive = [r.arrival or 0.0 for r in requests]
        pre_where, runs_p = assign([Arrival(arrive[k], requests[k].input_tokens, 1) for k in range(n)], self.prefill,
                                   self.prefill_step, self.prefill_sched, self.policy)
        prefilled = served(pre_where, runs_p)
        ids = [k for k in range(n) if requests[k].output_tokens > 1]
        moved: dict[int, float] = {}

        def move(k: int, j: int) -> float:
            moved[k] = transfer(k, pre_where[k], j)
            return moved[k]

        final: dict[int, Served] = {}
        runs_d: list[Run] = []
        if self.policy == "round-robin" or rd == 1:
            at = {k: prefilled[k].done + move(k, k % rd) for k in ids}
            for r in range(rd):
                mine = sorted((k for k in ids if k % rd == r), key=lambda k: (at[k], k))
                if mine:
                    runs_d.append(simulate([Arrival(at[k], requests[k].input_tokens, requests[k].output_tokens)
                                            for k in mine], self.decode_step, self.decode_sched, cached=True))
                    final.update(zip(mine, runs_d[-1].served))
        else:  # each to the decode replica with the fewest in flight at its first token
            ids.sort(key=lambda k: (prefilled[k].done, k))
            where, runs, order = balance([Arrival(prefilled[k].done, requests[k].input_tokens,
                                                  requests[k].output_tokens) for k in ids],
                                         rd, self.decode_step, self.decode_sched, True, lambda i, j: move(ids[i], j))
            runs_d.extend(runs)
            final.update(zip(ids, served(where, runs, order)))
        times = tuple(Served(arrive[k], prefilled[k].admitted, prefilled[k].first, final[k].done,
                             final[k].input_tokens, final[k].output_tokens) if k in final else prefilled[k]
                      for k in range(n))
        return times, runs_d, list(runs_p), moved


def run_disaggregated(server, plan: DisaggPlan, requests: list[Arrival], slo: Slo) -> DisaggOutcome:
    """``requests`` through ``plan``'s two pools (module docstring); ``server`` a
    :class:`mapper.serving.serve.Server`."""
    if plan.gpus > server.gpus:
        raise OptionsError(f"{plan.label()} needs {plan.gpus} GPUs; the platform has {server.gpus}",
                           obj="--parallel")
    rt = server.runtime
    pre = server.step_model(plan.prefill.tensor, plan.prefill.pipeline, plan.chunk)
    dec = server.step_model(plan.decode.tensor, plan.decode.pipeline, plan.chunk)
    capacity = (server.prices.gpu.memory_gib or 0.0) * 2.0 ** 30
    _, pre_tokens = pre.memory(capacity, rt)
    memory, dec_tokens = dec.memory(capacity, rt)
    for name, tokens in (("prefill", pre_tokens), ("decode", dec_tokens)):
        if tokens < rt.block:
            raise InfeasibleError(f"{plan.label()}: the {name} pool's weights and workspace leave no room for a "
                                  "KV cache: give it more GPUs per replica")
    rp, rd = plan.prefill.replicas, plan.decode.replicas
    psched = Scheduler(pre_tokens, rt.block, plan.max_batch, plan.chunk, rt.reserve_output, rt.overhead,
                       pre.window, mixed=rt.mixed, steps=rt.steps, lag=rt.lag, front=rt.front, stream=rt.stream)
    dsched = Scheduler(dec_tokens, rt.block, plan.max_batch, plan.chunk, rt.reserve_output, rt.overhead,
                       dec.window, mixed=rt.mixed, steps=rt.steps, lag=rt.lag, stream=rt.stream)
    per_node = server.net.gpus_per_node
    sizes: dict[tuple[int, bool], float] = {}

    def transfer(k: int, i: int, j: int) -> float:
        key = (held_positions(requests[k].input_tokens, pre.window), crosses(plan, i, j, per_node))
        if key not in sizes:
            sizes[key] = transfer_time(key[0], pre, dec, key[1])
        return sizes[key]

    pools = Pools(rp, rd, pre.step, dec.step, psched, dsched, rt.dispatch)
    times, runs_d, runs_p, moved = pools.serve(requests, transfer)
    got = metrics(times, slo)
    got["max_concurrency"] = max_concurrency(times)
    got["kv_capacity_tokens"] = dec_tokens * rd
    runs = (*runs_d, *runs_p)
    got["preemptions"] = sum(r.preemptions for r in runs)
    got["steps"] = sum(r.steps for r in runs)
    sent = [moved[k] for k in sorted(moved)] or [0.0]
    return DisaggOutcome(plan, runs, times, got, memory, {"mean": sum(sent) / len(sent), "max": max(sent)})


def given_plan(server, given: dict[str, int]) -> DisaggPlan:
    """The plan ``--parallel`` names with ``--disaggregate`` (pools of tensor/pipeline by default;
    prefill and decode replicas splitting the GPUs in half by default)."""
    t, p = given.get("tensor", 1), given.get("pipeline", 1)
    pt, pp = given.get("prefill_tensor", t), given.get("prefill_pipeline", p)
    dt, dp = given.get("decode_tensor", t), given.get("decode_pipeline", p)
    half = server.gpus // 2
    rp = given.get("prefill", max(half // (pt * pp), 1))
    rd = given.get("decode", max((server.gpus - rp * pt * pp) // (dt * dp), 1))
    return DisaggPlan(Pool(pt, pp, rp), Pool(dt, dp, rd), given.get("chunk", server.runtime.chunk),
                      given.get("max_batch", server.runtime.max_batch))


def candidates(gpus: int, chunk: int, max_batch: int) -> list[DisaggPlan]:
    """Every pair of pool layouts and split of ``gpus`` that ``--parallel auto`` tries."""
    degrees = [d for d in (1, 2, 4, 8, 16, 32, 64) if d < gpus]
    shapes = [(t, p) for t in degrees for p in degrees if t * p < gpus]
    out = []
    for pt, pp in shapes:
        for dt, dp in shapes:
            for rp in range(1, gpus // (pt * pp) + 1):
                rd = (gpus - rp * pt * pp) // (dt * dp)
                if rd >= 1:
                    out.append(DisaggPlan(Pool(pt, pp, rp), Pool(dt, dp, rd), chunk, max_batch))
    return out


def _rank(o: DisaggOutcome, slo: Slo) -> tuple[float, float, int]:
    m = o.metrics
    good = m["goodput"] if slo.any else 0.0
    assert isinstance(good, float) and isinstance(m["output_tokens_per_s"], float)
    return good, m["output_tokens_per_s"], -o.plan.gpus


def auto_disaggregated(server, given: dict[str, int], requests: list[Arrival], slo: Slo,
                       progress: Callable[[str], None] | None = None) -> tuple[DisaggOutcome, int]:
    """The best disaggregated plan (module docstring) and how many were simulated."""
    plans = candidates(server.gpus, given.get("chunk", server.runtime.chunk),
                       given.get("max_batch", server.runtime.max_batch))
    if not plans:
        raise OptionsError("--disaggregate needs at least 2 GPUs: one for each pool", obj="--disaggregate")
    best: DisaggOutcome | None = None
    tried = 0
    first_error: Exception | None = None
    start = time.perf_counter()
    for k, plan in enumerate(plans):
        if progress is not None:
            progress(f"serve: plan {k + 1}/{len(plans)}: {plan.label()} ({time.perf_counter() - start:.0f} s)")
        try:
            out = run_disaggregated(server, plan, requests, slo)
        except (OptionsError, InfeasibleError) as err:
            first_error = first_error or err
            continue
        tried += 1
        if best is None or _rank(out, slo) > _rank(best, slo):
            best = out
    if best is None:
        raise InfeasibleError(f"no disaggregated plan serves the requests on {server.gpus} GPUs: "
                              f"{first_error}") from None
    return best, tried

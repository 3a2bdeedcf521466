"""``mapper serve``: a request stream through in-flight batching replicas (docs/serving.md).

A plan is ``replicas`` copies of ``tensor`` x ``pipeline`` GPUs, each with the runtime's
``max_batch`` and ``chunk``. Requests go to the replicas by the runtime's ``dispatch`` policy
(:mod:`mapper.serving.dispatch`: round-robin, each replica simulated on its own, unless the
runtime sends each to the least-loaded replica), each replica in-flight batching
(:func:`mapper.serving.inflight.simulate`, step times from
:class:`mapper.serving.iteration.StepModel`) and the metrics are taken over all requests
(:func:`mapper.serving.metrics.metrics`).

``--parallel auto`` tries every tensor and pipeline degree (powers of two whose product divides
the GPUs; the rest serve as replicas) and the chunks :data:`AUTO_CHUNKS` (with the runtime's
own), and keeps the plan of most goodput when SLOs are given (ties: most output tokens per
second), else of most output tokens per second; ties go to fewer GPUs per replica.
"""

from __future__ import annotations

import copy
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from mapper.core.graph import TaskGraph
from mapper.errors import InfeasibleError, OptionsError
from mapper.frontend.sources import ModelFile
from mapper.parallel.collectives import Network
from mapper.platform.devices import Platform
from mapper.serving.dispatch import assign
from mapper.serving.inflight import Run, Scheduler, Served
from mapper.serving.iteration import Prices, StepModel
from mapper.serving.metrics import Slo, max_concurrency, metrics
from mapper.serving.runtimes import Runtime, captured
from mapper.serving.workload import Arrival

#: Prefill chunks ``--parallel auto`` tries besides the runtime's own.
AUTO_CHUNKS = (2048,)
#: The largest tensor or pipeline degree tried or accepted.
MAX_DEGREE = 64
#: ``--parallel`` keys of ``mapper serve``.
KEYS = ("tensor", "pipeline", "replicas", "chunk", "max_batch", "prefill_tensor", "prefill_pipeline", "prefill",
        "decode_tensor", "decode_pipeline", "decode")


@dataclass(frozen=True, slots=True)
class Plan:
    tensor: int
    pipeline: int
    replicas: int
    chunk: int
    max_batch: int

    @property
    def gpus(self) -> int:
        return self.tensor * self.pipeline * self.replicas

    def label(self) -> str:
        return (f"{self.replicas} x (tensor {self.tensor} x pipeline {self.pipeline}), chunk {self.chunk:,}, "
                f"max batch {self.max_batch:,}")


@dataclass(frozen=True, slots=True)
class Outcome:
    plan: Plan
    runs: tuple[Run, ...]
    served: tuple[Served, ...]
    metrics: dict[str, object]
    kv_capacity_tokens: int  # per replica
    memory: dict[str, float]  # bytes per GPU by part, fullest stage


def parse_parallel(text: str) -> dict[str, int] | None:
    """``--parallel tensor=T,pipeline=P[,replicas=R][,chunk=C][,max_batch=B]`` (None: ``auto``)."""
    if text.strip() == "auto":
        return None
    out: dict[str, int] = {}
    for item in (p.strip() for p in text.split(",")):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in KEYS:
            raise OptionsError(f"expected auto or tensor=T,pipeline=P[,replicas=R][,chunk=C][,max_batch=B], "
                               f"got {item!r}", obj="--parallel")
        if key in out:
            raise OptionsError(f"{key} is given twice", obj="--parallel")
        digits = value.strip()
        if not (digits.isascii() and digits.isdigit()) or len(digits) > 7 or int(digits) < 1:
            raise OptionsError(f"{key} must be a positive whole number, got {digits!r}", obj="--parallel")
        out[key] = int(digits)
    for key in ("tensor", "pipeline", "prefill_tensor", "prefill_pipeline", "decode_tensor", "decode_pipeline"):
        if out.get(key, 1) > MAX_DEGREE:
            raise OptionsError(f"{key} must be at most {MAX_DEGREE}", obj="--parallel")
    return out


class Server:
    """Plans of one model on one platform's GPUs under one runtime."""

    def __init__(self, prices: Prices, net: Network, runtime: Runtime, gpus: int) -> None:
        self.prices, self.net, self.runtime, self.gpus = prices, net, runtime, gpus
        self.formats = ("fp16", "fp16")  # weights and KV cache, as ``--precision`` and ``--kv-precision`` name them
        self._steps: dict[tuple[int, int, int, tuple[int, ...]], StepModel] = {}

    def step_model(self, tensor: int, pipeline: int, chunk: int, max_batch: int | None = None) -> StepModel:
        """The step model of one replica layout; ``max_batch`` (default the runtime's) bounds the
        CUDA graphs a padding runtime captures (:func:`mapper.serving.runtimes.captured`)."""
        graphs = captured(self.runtime.graphs, max_batch or self.runtime.max_batch, chunk)
        key = (tensor, pipeline, chunk, graphs)
        if key not in self._steps:
            base = next((m for (t, p, c, _), m in self._steps.items() if (t, p, c) == key[:3]), None)
            if base is None:
                self._steps[key] = StepModel(self.prices, self.net, tensor, pipeline, chunk,
                                              self.runtime.dispatch_us * 1e-6, graphs)
            else:  # the same prices, other graphs: a shallow copy shares them
                self._steps[key] = copy.copy(base)
                self._steps[key].graphs = graphs
        return self._steps[key]

    def plan(self, given: dict[str, int]) -> Plan:
        t, p = given.get("tensor", 1), given.get("pipeline", 1)
        if t * p > self.gpus:
            raise OptionsError(f"tensor {t} x pipeline {p} needs {t * p} GPUs; the platform has {self.gpus}",
                               obj="--parallel")
        replicas = given.get("replicas", self.gpus // (t * p))
        if replicas * t * p > self.gpus:
            raise OptionsError(f"{replicas} replicas of {t * p} GPUs need {replicas * t * p}; the platform has "
                               f"{self.gpus}", obj="--parallel")
        return Plan(t, p, replicas, given.get("chunk", self.runtime.chunk),
                    given.get("max_batch", self.runtime.max_batch))

    def run(self, plan: Plan, requests: list[Arrival], slo: Slo) -> Outcome:
        """``requests`` (arrivals set) through ``plan`` (module docstring)."""
        model = self.step_model(plan.tensor, plan.pipeline, plan.chunk, plan.max_batch)
        capacity = (self.prices.gpu.memory_gib or 0.0) * 2.0 ** 30
        memory, tokens = model.memory(capacity, self.runtime)
        if tokens < self.runtime.block:
            raise InfeasibleError(f"{plan.label()}: the weights and workspace leave no room for a KV cache "
                                  f"({memory['weights'] / 2 ** 30:.1f} GiB of weights per GPU of "
                                  f"{capacity / 2 ** 30:.0f} GiB): give more GPUs per replica")
        rt = self.runtime
        sched = Scheduler(tokens, rt.block, plan.max_batch, plan.chunk, rt.reserve_output, rt.overhead, model.window,
                          mixed=rt.mixed, steps=rt.steps, lag=rt.lag, front=rt.front, stream=rt.stream)
        _, runs = assign(requests, plan.replicas, model.step, sched, rt.dispatch)
        served = tuple(s for run in runs for s in run.served)
        got = metrics(served, slo)
        got["max_concurrency"] = max_concurrency(served)
        got["kv_capacity_tokens"] = tokens * plan.replicas
        got["preemptions"] = sum(r.preemptions for r in runs)
        got["steps"] = sum(r.steps for r in runs)
        return Outcome(plan, runs, served, got, tokens, memory)

    def auto(self, given: dict[str, int], requests: list[Arrival], slo: Slo,
             progress: Callable[[str], None] | None = None) -> tuple[Outcome, int]:
        """The best plan (module docstring) and how many were simulated."""
        degrees = [d for d in (1, 2, 4, 8, 16, 32, 64) if d <= self.gpus and self.gpus % d == 0]
        chunks = sorted({self.runtime.chunk, *AUTO_CHUNKS})
        layouts = [(t, p, c) for t in degrees for p in degrees if t * p in degrees for c in chunks]
        best: Outcome | None = None
        tried = 0
        errors: list[Exception] = []
        start = time.perf_counter()
        for k, (t, p, c) in enumerate(layouts):
            if progress is not None:
                progress(f"serve: plan {k + 1}/{len(layouts)}: tensor {t} x pipeline {p}, chunk {c:,} "
                         f"({time.perf_counter() - start:.0f} s)")
            try:
                out = self.run(self.plan({**given, "tensor": t, "pipeline": p, "chunk": c}), requests, slo)
            except (OptionsError, InfeasibleError) as err:
                errors.append(err)
                continue
            tried += 1
            if best is None or _rank(out, slo) > _rank(best, slo):
                best = out
        if best is None:
            raise InfeasibleError(f"no plan serves the requests on {self.gpus} GPUs: {errors[0]}") from None
        return best, tried


def _rank(o: Outcome, slo: Slo) -> tuple[float, float, int]:
    m = o.metrics
    good = m["goodput"] if slo.any else 0.0
    assert isinstance(good, float) and isinstance(m["output_tokens_per_s"], float)
    return good, m["output_tokens_per_s"], -o.plan.tensor * o.plan.pipeline


def cost_per_million(outcome: Outcome, price_per_gpu_hour: float | None) -> float | None:
    """Dollars per million output tokens at the run's throughput (None without a price)."""
    rate = outcome.metrics["output_tokens_per_s"]
    if price_per_gpu_hour is None or not isinstance(rate, float) or not (rate > 0 and math.isfinite(rate)):
        return None
    return outcome.plan.gpus * price_per_gpu_hour / 3600.0 / rate * 1e6


def server_for(src: str | os.PathLike[str] | ModelFile, platform: str | Platform, runtime: Runtime,
               fuse: str = "auto", precision: str | None = None, kv_precision: str | None = None) -> Server:
    """The :class:`Server` of the DSL model ``src`` (params SEQ, BATCH, CACHE) or exported decoder
    (:func:`mapper.frontend.load.model_lowerer`) on ``platform``'s GPUs,
    weights and cache in ``precision`` and ``kv_precision`` (:mod:`mapper.serving.precision`)."""
    from mapper.costing.fusion import fuse_for
    from mapper.costing.precision import require_format
    from mapper.frontend.load import model_lowerer, read_program
    from mapper.frontend.parse import parse
    from mapper.frontend.sources import is_model
    from mapper.parallel.collectives import network
    from mapper.platform.loader import load_platform
    from mapper.serving.driver import lowerer
    from mapper.serving.precision import KV, kv_format, weight_format

    fmt = weight_format(precision)
    kv = kv_format(kv_precision, fmt, runtime.name)
    plat = platform if isinstance(platform, Platform) else load_platform(platform)
    if fmt is not None:
        require_format(plat, fmt)
    if is_model(os.fspath(src)):  # an exported decoder, imported at each step's sizes
        lower = model_lowerer(src if isinstance(src, ModelFile) else ModelFile(os.fspath(src)), "mapper serve")
    else:
        text, blame = read_program(src)
        with blame:
            program = parse(text, os.fspath(src))
        lower = lowerer(program, blame, src, True, "mapper serve")

    def prepare(g: TaskGraph) -> TaskGraph:
        return fuse_for(g, plat, fuse)

    prices = Prices(lower, plat, prepare, fmt, KV[kv])
    net = network(plat)
    server = Server(prices, net, runtime, prices.gpus * net.nodes)
    server.formats = (precision or "fp16", kv)
    return server

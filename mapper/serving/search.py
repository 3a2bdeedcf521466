"""Choosing a serving layout (:mod:`mapper.serving`): every tensor degree, pipeline depth and
micro-batch count the GPUs allow is scored by :class:`~mapper.serving.model.ServingModel`.

Without bounds the layout of least request latency wins (fewer GPUs break ties). With
``--max-tpot`` / ``--max-ttft`` (or ``batch=auto``) the one of most output tokens per second
over all the platform's GPUs (as many replicas as fit) among those that meet both bounds, as
serving systems choose (Zhong et al., "DistServe", OSDI 2024: goodput under TTFT and TPOT
targets).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mapper.cluster.profile import MAX_STAGES, MAX_TENSOR, check_tensor
from mapper.cluster.search import memory_parts
from mapper.core.units import fmt_bytes, fmt_n, fmt_rate, fmt_time
from mapper.errors import InfeasibleError, OptionsError
from mapper.parallel.layout import LayoutSpec
from mapper.serving.model import ServingEstimate, ServingLayout, ServingModel
from mapper.serving.request import Request
from mapper.serving.request_graph import MAX_CELLS, MAX_TASKS, buildable, request_tasks

#: Layouts listed in reports besides the chosen one.
RUNNERS_UP = 4
#: Keys of a training layout that mean nothing when serving.
TRAINING_ONLY = ("interleave", "recompute", "zero", "sequence", "grad", "first", "last", "overlap", "context", "cp",
                 "cp_a2a", "allocator", "attn", "fsdp", "fp8_param", "fp4_param")


@dataclass(frozen=True, slots=True)
class Bounds:
    """Latency targets per request (seconds; None: no bound)."""

    tpot: float | None = None
    ttft: float | None = None

    def met(self, est: ServingEstimate, request: Request) -> bool:
        tpot = est.decode / request.decode if request.decode else 0.0
        return ((self.tpot is None or tpot <= self.tpot) and (self.ttft is None or est.ttft <= self.ttft))

    @property
    def any(self) -> bool:
        return self.tpot is not None or self.ttft is not None


def layouts(gpus: int, heads: int, blocks: int, batch: int, given: LayoutSpec) -> list[ServingLayout]:
    """Every layout of at most ``gpus`` GPUs that ``given`` allows: tensor degrees dividing the
    heads (powers of two), pipelines of 1 .. ``blocks`` stages, micro-batch counts dividing the
    batch (up to twice the stages: more only shrink the GEMMs)."""
    bad = [k for k in TRAINING_ONLY if k in given.fixed()]
    if bad:
        raise OptionsError(f"{', '.join(bad)} applies to training layouts, not to serving", obj="--parallel")
    check_tensor(given)
    out = []
    t = 1
    while t <= min(gpus, MAX_TENSOR):
        if heads % t == 0 and given.tensor in (None, t):
            for p in range(1, min(blocks, gpus // t, MAX_STAGES) + 1):
                if given.pipeline not in (None, p):
                    continue
                for m in range(1, min(batch, 2 * p) + 1):
                    if batch % m or (given.micro_batch is not None and given.micro_batch * m != batch):
                        continue
                    if p == 1 and m > 1:
                        continue  # one stage: micro-batches only serialise the batch
                    replicas = gpus // (t * p)
                    if given.data is not None:
                        if given.data * t * p > gpus:
                            continue
                        replicas = given.data
                    out.append(ServingLayout(t, p, m, replicas))
        t *= 2
    return out


@dataclass(frozen=True, slots=True)
class ServingChoice:
    """The layout kept and the runners-up, with what the request was."""

    best: ServingEstimate
    ranked: tuple[ServingEstimate, ...]
    request: Request
    runtime: str
    gpus: int
    bounds: Bounds
    gpu_name: str
    latency: float = 0.0  # the built request graph's makespan (set by the driver)
    ttft: float = 0.0  # and its first token
    kind: str = ""  # on a fleet: the node kind that serves
    precision: str = "fp16"  # the linear layers' weights and GEMMs (--precision; the model's 16-bit by default)
    step: Any = None  # the MapResult of one decode step per GPU (mapper.serving.decode_step), or None
    step_note: str = ""  # why there is none
    unbuilt: int = 0  # layouts left unscored: their request graph would pass MAX_TASKS tasks
    batch_note: str = ""  # with batch=auto, how the batch was chosen (mapper.serving.batch)
    failed: tuple[ServingLayout, ...] = ()  # layouts scored that do not fit or meet the bounds

    @property
    def tpot(self) -> float:
        r = self.request
        return (self.latency - self.ttft) / r.decode if r.decode else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second of all replicas."""
        lat = self.latency or self.best.latency
        return self.request.tokens * self.best.layout.replicas / lat if lat > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        b, lay = self.best, self.best.layout
        used = lay.gpus * lay.replicas
        return {"ttft": self.ttft, "tpot": self.tpot, "latency": self.latency, "tokens_per_s": self.tokens_per_s,
                "tokens_per_s_per_gpu": self.tokens_per_s / used if used else 0.0, "batch": self.request.batch,
                "max_batch": b.max_batch, "kv_cache_bytes": b.memory.get("kv_cache", 0.0),
                **self.request.to_json(), "runtime": self.runtime, "precision": self.precision,
                "gpus": self.gpus, "kind": self.kind or None,
                "plan": lay.to_json(), "label": lay.label(), "fits": b.fits,
                "peak_memory": {**b.memory, "total": b.peak},
                "bounds": {"tpot": self.bounds.tpot, "ttft": self.bounds.ttft},
                "predicted": {"ttft": b.ttft, "latency": b.latency},
                "decode_step": None if self.step is None else {
                    "makespan": self.step.schedule.makespan, "tasks": len(self.step.schedule.slots),
                    "gpus": b.layout.gpus},
                "candidates": [{"label": e.layout.label(), "plan": e.layout.to_json(), "ttft": e.ttft,
                                "latency": e.latency, "fits": e.fits} for e in self.ranked[1:RUNNERS_UP + 1]]}

    def parallel_json(self) -> dict[str, Any]:
        b = self.best
        return {"mode": "serving", "plan": b.layout.to_json(), "label": b.layout.label(), "fits": b.fits,
                "peak_memory": {**b.memory, "total": b.peak}, "gpus": self.gpus}

    def where(self) -> str:
        """``8 of 8 GPUs (dgx-a100)``: how many GPUs the layout uses, replicas included."""
        used = self.best.layout.gpus * self.best.layout.replicas
        return (f"{used} of {fmt_n(self.gpus, 'GPU')}"
                + (f" ({self.kind} nodes of the fleet)" if self.kind else ""))

    def notes(self) -> tuple[str, ...]:
        b, r = self.best, self.request
        out = [f"inference: prefill {r.prefill} tokens x {r.batch} sequences, then {r.decode} decode steps "
               f"({self.runtime} runtime: "
               + ("kernel launches only" if self.runtime == "graph" else "framework dispatch per op") + ")",
               f"inference: {b.layout.label()} on {self.where()}: first token {fmt_time(self.ttft)}, "
               f"{fmt_time(self.tpot)} per output token, request {fmt_time(self.latency)}, "
               f"{fmt_rate(self.tokens_per_s, 'tokens/s')}",
               f"inference: memory {memory_parts(b.memory, b.capacity)}" + ("" if b.fits else ": does not fit")
               + f"; this layout holds at most {b.max_batch:,} sequences per replica"]
        phase = "decode step" if r.decode else "prefill"
        if self.step is not None:
            out.append(f"inference: one {phase} built per GPU ({len(self.step.schedule.slots):,} tasks, tensor "
                       f"all-reduces included) and validated: {fmt_time(self.step.schedule.makespan)}; "
                       "the HTML report shows its Gantt")
        elif self.step_note:
            out.append(f"inference: one {phase} per GPU is not built: {self.step_note}")
        if self.batch_note:
            out.append(f"inference: {self.batch_note}")
        if self.unbuilt:
            out.append(f"inference: {self.unbuilt} layouts not scored: their request graphs would pass "
                       f"{MAX_TASKS:,} tasks (stages x micro-batches x steps) or {MAX_CELLS:,} tasks x stages")
        others = self.ranked[1:RUNNERS_UP]
        if others:
            out.append("inference: runners-up " + "; ".join(
                f"{e.layout.label()} {fmt_time(e.latency)}" + ("" if e.fits else " (too big)") for e in others))
        return tuple(out)

    def plan_facts(self) -> tuple[tuple[str, str], ...]:
        """The plan section of the reports: layout, GPUs, stages, batch, latency and memory."""
        b, r = self.best, self.request
        lay = b.layout
        rows = [("layout", lay.label()),
                ("GPUs", f"{self.where()}: {fmt_n(lay.replicas, 'replica')} x "
                         f"{fmt_n(lay.pipeline, 'pipeline stage')} x {fmt_n(lay.tensor, 'tensor-parallel GPU')}")]
        ends = [*b.stages[1:], None]
        for s, (a, e) in enumerate(zip(b.stages, ends)):
            blocks = f"blocks {a}-{e - 1}" if e is not None else f"blocks from {a}"
            blocks = blocks if len(b.stages) > 1 else "every block"
            mem = f", {fmt_bytes(b.stage_memory[s])} per GPU" if s < len(b.stage_memory) else ""
            rows.append((f"stage {s}", blocks + mem))
        rows += [("batch", f"{r.batch:,} sequences per replica" + (f" in {lay.micro_batches} micro-batches"
                                                                    if lay.micro_batches > 1 else "")
                  + (f" (batch=auto; this layout holds at most {b.max_batch:,})" if r.auto_batch
                     else f" (this layout holds at most {b.max_batch:,})")),
                 ("request", f"first token {fmt_time(self.ttft)}, {fmt_time(self.tpot)} per output token, "
                             f"{fmt_time(self.latency)} in all, {fmt_rate(self.tokens_per_s, 'tokens/s')}"),
                 ("memory", memory_parts(b.memory, b.capacity) + ("" if b.fits else ": does not fit"))]
        return tuple(rows)


def choose(model: ServingModel, gpus: int, given: LayoutSpec, bounds: Bounds, runtime: str,
           skip: Callable[[ServingLayout], bool] | None = None) -> ServingChoice:
    """The layout :mod:`this module <mapper.serving.search>` prefers; exit 3 when none fits or
    meets the bounds, naming the nearest. ``skip``: layouts known to fail (a batch search's)."""
    heads = next((int(t.attr("heads")) for t in model.graphs["prefill"].tasks if t.op == "attention"), 1)
    cands = layouts(gpus, heads, len(model.blocks), model.request.batch, given)
    if not cands:
        raise OptionsError(f"no serving layout of {gpus} GPUs fits the keys given "
                           f"({given.text()}) with {heads} heads "
                           f"and a batch of {model.request.batch}", obj="--parallel")
    r = model.request
    built = [lay for lay in cands if buildable(lay, r.decode)]
    if not built:
        small = min(cands, key=lambda lay: (request_tasks(lay, r.decode) * lay.pipeline))
        raise OptionsError(f"a request of {r.decode} decode steps on {small.pipeline} stages and "
                           f"{small.micro_batches} micro-batches is {request_tasks(small, r.decode):,} tasks, "
                           f"more than {MAX_TASKS:,} (or {MAX_CELLS:,} tasks x stages): ask for fewer decode steps",
                           obj="--inference")
    unbuilt = len(cands) - len(built)
    if skip is not None:
        built = [lay for lay in built if not skip(lay)]
        if not built:
            raise InfeasibleError("no layout fits and meets the bounds at this batch", obj="--inference")
    scored = [e for e in (model.estimate(lay) for lay in built) if e is not None]
    if not scored:
        raise OptionsError("the model has fewer blocks than any layout's stages", obj="--parallel")
    fitting = [e for e in scored if e.fits]
    if not fitting:
        least = min(scored, key=lambda e: e.peak)
        raise InfeasibleError(
            f"no layout fits in memory: the least needs {memory_parts(least.memory, least.capacity)} "
            f"({least.layout.label()}) on {model.gpu.name}", obj="--inference")
    if bounds.any or r.auto_batch:
        ok = [e for e in fitting if bounds.met(e, r)]
        if not ok:
            near = min(fitting, key=lambda e: e.latency)
            tpot = near.decode / r.decode if r.decode else 0.0
            raise InfeasibleError(
                f"no layout meets the bounds: the fastest ({near.layout.label()}) has first token "
                f"{fmt_time(near.ttft)} and {fmt_time(tpot)} per output token", obj="--max-tpot")
        ranked = sorted(ok, key=lambda e: (-r.tokens * e.layout.replicas / e.latency, e.latency, e.layout.gpus))
    else:
        ranked = sorted(fitting, key=lambda e: (e.latency, e.layout.gpus, e.peak))
    kept = {e.layout for e in ranked}
    return ServingChoice(ranked[0], tuple(ranked), r, runtime, gpus, bounds, model.gpu.name,
                         unbuilt=unbuilt,
                         failed=tuple(e.layout for e in scored if e.layout not in kept))

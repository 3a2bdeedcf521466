"""The serving model: a layout's time to first token, decode steps and memory per GPU.

A request (:class:`~mapper.serving.request.Request`) runs three graphs of the
same model, each lowered with its own sizes: the prefill (``SEQ = S_IN``), the
first decode step (one token per sequence against ``S_IN`` cached positions)
and the last (``S_IN + S_OUT - 1`` of them). Each is cut into blocks and each
block priced per tensor degree and micro-batch by the cost model
(:class:`mapper.cluster.profile.Profile`, forward only), exactly as training
plans price theirs.

A layout of ``t`` tensor ranks, ``p`` pipeline stages and ``m`` micro-batches:

* a stage's time is its blocks' kernels, in order, with their tensor-parallel
  all-reduces on the critical path (:func:`mapper.parallel.collectives.collective`),
  issued by the runtime (:func:`mapper.serving.request.stream_time`), plus the
  send of its output to the next stage (each tensor rank sends ``1/t``);
* the prefill of ``m`` micro-batches through ``p`` stages takes the sum of the
  stages plus ``m - 1`` times the slowest (a pipeline's fill and drain);
* a decode round gives every sequence one token: a micro-batch cannot start
  its next token before its last one left the last stage, so a round takes the
  longer of one pass through all stages and ``m`` passes through the slowest
  (FasterTransformer's pipeline of micro-batches; Pope et al., MLSys 2023);
* a decode step's time is affine in its context (only attention reads the
  cache), so ``S_OUT`` steps take ``S_OUT`` times the mean of the first and
  the last; with a sliding window of ``W`` it is affine in the positions the
  cache holds, ``min(context, W)``, and the steps are summed exactly over them
  (:func:`decode_growth`);
* the prefill's last block, where it holds no attention (the final norm and
  the LM head), runs on each sequence's last token only, as serving runtimes
  keep only the logits they sample from (vLLM's logits processor prunes the
  hidden states to the last tokens; TensorRT-LLM's ``gather_last_token_logits``):
  it is priced, and its activations counted, from a graph of one token per
  sequence.

Memory per GPU on the fullest stage: its weights, its layers' KV cache at the
full context (``2 layers kv_heads/t dh context batch`` elements,
:func:`cache_bytes`), the largest kernel's activations of one micro-batch and the reserve of
the tensor group and pipeline sends it opens (:mod:`mapper.cluster.reserve`, as training counts it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from mapper.cluster.profile import BlockCost, Profile, kv_bytes
from mapper.cluster.reserve import ServingGroups, reserve
from mapper.core.graph import TaskGraph
from mapper.core.opdefs.dnn import held_positions, visible_keys
from mapper.costing.precision import with_precision
from mapper.errors import OptionsError
from mapper.mapping.pipeline import decode_round, partition, pipelined
from mapper.parallel.collectives import Network, collective, send
from mapper.serving.precision import stored_fraction
from mapper.serving.request import EAGER_DISPATCH_US, Request, framework_ops, stream_time


@dataclass(frozen=True, slots=True)
class ServingLayout:
    """``tensor`` x ``pipeline`` GPUs per replica, ``micro_batches`` of the batch in flight;
    ``replicas`` copies serve other requests at the same time."""

    tensor: int = 1
    pipeline: int = 1
    micro_batches: int = 1
    replicas: int = 1

    @property
    def gpus(self) -> int:
        return self.tensor * self.pipeline

    def label(self) -> str:
        return (f"tensor {self.tensor} x pipeline {self.pipeline}"
                + (f", {self.micro_batches} micro-batches" if self.micro_batches > 1 else "")
                + (f", {self.replicas} replicas" if self.replicas > 1 else ""))

    def to_json(self) -> dict[str, int]:
        return {"tensor": self.tensor, "pipeline": self.pipeline, "data": self.replicas,
                "micro_batches": self.micro_batches}


@dataclass(frozen=True, slots=True)
class ServingEstimate:
    """A layout's predicted request (the closed forms above) and memory per GPU."""

    layout: ServingLayout
    stages: tuple[int, ...]  # first block of each stage
    prefill: tuple[float, ...]  # seconds per stage and micro-batch, sends included
    decode_first: tuple[float, ...]  # the first decode step, per stage and micro-batch
    decode_last: tuple[float, ...]  # the last decode step
    ttft: float
    decode: float  # all decode steps
    memory: dict[str, float] = field(hash=False)  # bytes per GPU by part, on the fullest stage
    capacity: float = 0.0
    max_batch: int = 0  # the largest batch whose memory fits (same layout and micro-batches)
    stage_memory: tuple[float, ...] = ()  # bytes per GPU of each stage (the fullest's is ``peak``)

    @property
    def latency(self) -> float:
        return self.ttft + self.decode

    @property
    def peak(self) -> float:
        return sum(self.memory.values())

    @property
    def fits(self) -> bool:
        """Its memory fits and every kernel has a finite time (one whose footprint exceeds the GPU has none)."""
        return self.peak <= self.capacity and math.isfinite(self.latency)


def cache_bytes(graph: TaskGraph, block_tasks: list[int], tensor: int, context: int) -> float:
    """KV-cache bytes one tensor rank holds for the attention ops among ``block_tasks`` at
    ``context`` positions of every sequence (:func:`mapper.cluster.profile.kv_bytes`)."""
    return sum(kv_bytes(graph.tasks[i], context, tensor) for i in block_tasks)


class ServingModel:
    """Block prices of a request's three graphs on one kind of GPU (module docstring)."""

    def __init__(self, lower: Callable[[int, int, int], TaskGraph], request: Request, platform,
                 prepare: Callable[[TaskGraph], TaskGraph], net: Network, runtime: str,
                 shared: dict[tuple[str, int, int, int], BlockCost] | None = None,
                 precision: str | None = None) -> None:
        """``shared``: block prices kept across the models of one model file at other batches,
        by phase, signature, tensor degree and sequences per micro-batch (a block cut in ``m``
        micro-batches of a batch ``b`` costs what it costs at batch ``b/m`` in one); ``precision``:
        the format ``prepare`` marks the linear layers' GEMMs with (``--precision``), whose weights
        are stored in it (:func:`mapper.serving.precision.stored_fraction`)."""
        self.shared = shared
        self.precision = precision
        #: each block's kernels as its rank's stream sees them, by phase, block, tensor degree, micro-batches
        self._streams: dict[tuple[str, int, int, int], list[tuple[float, int]]] = {}
        gpus = [d for d in platform.devices if d.kind == "gpu"]
        if not gpus:
            raise OptionsError(f"platform {platform.name} has no GPU to serve the model on", obj="--inference")
        self.gpu = gpus[0]
        #: the GPUs of a node that serve: those identical to the first (a node of several GPU models
        #: serves on its first model's)
        self.peers = tuple(d.name for d in gpus if replace(d, index=0, name="") == replace(gpus[0], index=0, name=""))
        self.request = request
        self.net = net
        self.dispatch = EAGER_DISPATCH_US * 1e-6 if runtime == "eager" else 0.0
        r = request
        self.graphs = {"prefill": lower(r.prefill, r.batch, 0)}
        if r.decode:
            self.graphs["first"] = lower(1, r.batch, r.prefill)
            self.graphs["last"] = lower(1, r.batch, r.prefill + r.decode - 1)
        elif r.prefill > 1:
            self.graphs["token"] = lower(1, r.batch, 0)  # the prefill's last block on one token per sequence
        self.profiles = {k: Profile(g, platform, self.gpu.name, prepare, None) for k, g in self.graphs.items()}
        windows = {int(t.attr("window") or 0) for t in self.graphs["prefill"].tasks if t.op == "attention"}
        #: the decode steps' growth past the first, in units of the last step's (:func:`decode_growth`)
        self.growth = decode_growth(r.prefill, r.decode, windows.pop() if len(windows) == 1 else 0)
        counts = {len(p.blocks) for p in self.profiles.values()}
        if len(counts) > 1:
            raise OptionsError("the prefill and decode graphs cut into different blocks: the model's structure "
                               "must not depend on SEQ or CACHE", obj="--inference")
        self.blocks = self.profiles["prefill"].blocks
        #: the prefill graph with the GEMMs ``prepare`` marks in ``precision`` (what its weights are stored in)
        self.marked = self.graphs["prefill"] if precision is None else with_precision(self.graphs["prefill"], precision)
        graph = self.graphs["prefill"]
        last = len(self.blocks) - 1
        one = "first" if r.decode else "token"
        #: the prefill's last block priced on one token per sequence (module docstring), or None
        self.head = (last, one) if one in self.graphs and not any(
            graph.tasks[i].op == "attention" for i in self.blocks[last].tasks) else None
        self.capacity = (self.gpu.memory_gib or 0.0) * 2.0 ** 30

    def block(self, phase: str, b: int, tensor: int, chunks: int, pruned: bool = True) -> BlockCost:
        """Block ``b`` of ``phase``'s graph on a rank; the prefill's last block on its last tokens
        only unless not ``pruned``."""
        if pruned and phase == "prefill" and self.head is not None and b == self.head[0]:
            phase = self.head[1]
        prof = self.profiles[phase]
        sig = prof.blocks[b].signature
        if self.shared is None or self.request.batch % chunks:
            return prof.cost(sig, tensor, chunks)
        key = (phase, sig, tensor, self.request.batch // chunks)
        got = self.shared.get(key)
        if got is None:
            got = self.shared[key] = prof.cost(sig, tensor, chunks)
        return got

    def _kernels(self, cost: BlockCost, tensor: int, decode: bool) -> list[tuple[float, int]]:
        per_node = min(tensor, self.net.gpus_per_node)
        out = []
        for seconds, ops, ci in cost.kernels:
            if ci >= 0:
                kind, nbytes, _ = cost.collectives[ci]
                seconds = collective(self.net, kind, nbytes, tensor, per_node)[0]
                out.append((seconds, 1))
            else:
                out.append((seconds, framework_ops(ops, decode)))
        return out

    def stage_times(self, phase: str, lay: ServingLayout, starts: tuple[int, ...]) -> tuple[float, ...]:
        """Seconds of each stage for one micro-batch in ``phase``, the send to the next included."""
        t, m = lay.tensor, lay.micro_batches
        ends = [*starts[1:], len(self.blocks)]
        out = []
        for s, (a, b) in enumerate(zip(starts, ends)):
            kernels: list[tuple[float, int]] = []
            for i in range(a, b):
                key = (phase, i, t, m)
                got = self._streams.get(key)
                if got is None:
                    got = self._streams[key] = self._kernels(self.block(phase, i, t, m), t, phase != "prefill")
                kernels += got
            seconds = stream_time(kernels, self.dispatch)
            if s + 1 < len(starts):
                nbytes = self.block(phase, b, t, m, pruned=False).input_bytes / t  # every token's state
                edge = (s + 1) * t  # the next stage's first rank
                across = (edge - 1) // self.net.gpus_per_node != edge // self.net.gpus_per_node
                seconds += send(self.net, nbytes, across)
            out.append(seconds)
        return tuple(out)

    def memory(self, lay: ServingLayout, starts: tuple[int, ...]) -> tuple[dict[str, float], int, tuple[float, ...]]:
        """Bytes per GPU by part on the fullest stage, the largest batch that fits, each stage's bytes."""
        t, m = lay.tensor, lay.micro_batches
        ends = [*starts[1:], len(self.blocks)]
        graph = self.graphs["prefill"]
        best: dict[str, float] = {}
        room = math.inf
        held: list[float] = []
        kept = reserve(self.capacity, ServingGroups(t, lay.pipeline))
        for a, b in zip(starts, ends):
            weights = sum(self.block("prefill", i, t, m).param_bytes
                          * stored_fraction(self.marked, self.blocks[i], self.precision)
                          for i in range(a, b))
            tasks = [k for i in range(a, b) for k in self.blocks[i].tasks]
            kv = cache_bytes(graph, tasks, t, self.request.context)
            act = max(max(self.block(ph, i, t, m).working for ph in self.profiles if ph != "token")
                      for i in range(a, b))
            parts = {"weights": weights, "kv_cache": kv, "activations": act, "reserve": kept}
            held.append(sum(parts.values()))
            if sum(parts.values()) > sum(best.values()):
                best = parts
            per_seq = (kv + act * m) / self.request.batch  # activations: one micro-batch of b/m sequences
            if per_seq > 0:
                fit = (self.capacity - weights - kept) / per_seq
                room = min(room, fit)
        return best, int(room) if math.isfinite(room) and room > 0 else 0, tuple(held)

    def estimate(self, lay: ServingLayout) -> ServingEstimate | None:
        """The request under ``lay`` (None when the blocks cannot be cut into its stages)."""
        p, m = lay.pipeline, lay.micro_batches
        main = "first" if "first" in self.profiles else "prefill"
        weights = [self.block(main, i, lay.tensor, m).forward + self.block("prefill", i, lay.tensor, m).forward
                   / max(self.request.decode, 1) for i in range(len(self.blocks))]
        starts = partition(weights, p)
        if starts is None:
            return None
        pre = self.stage_times("prefill", lay, starts)
        ttft = pipelined(sum(pre), max(pre), m)
        first: tuple[float, ...] = ()
        last: tuple[float, ...] = ()
        decode = 0.0
        if self.request.decode:
            first = self.stage_times("first", lay, starts)
            last = self.stage_times("last", lay, starts)
            rounds = [decode_round(x, m) for x in (first, last)]
            decode = self.request.decode * rounds[0] + (rounds[1] - rounds[0]) * self.growth
        memory, max_batch, held = self.memory(lay, starts)
        return ServingEstimate(lay, starts, pre, first, last, ttft, decode, memory, self.capacity, max_batch, held)


def decode_growth(prefill: int, decode: int, window: int) -> float:
    """``sum_k (h(S_IN + k) - h(S_IN)) / (h(S_IN + S_OUT - 1) - h(S_IN))`` over the ``S_OUT`` decode
    steps ``k``, ``h`` the cached positions a step reads (``min(context, W)`` with a window of
    ``W``): the steps' time is ``S_OUT`` first steps plus this many times the last's excess
    (``S_OUT / 2`` without a window: the mean of the first and the last)."""
    first, end = held_positions(prefill, window), held_positions(prefill + decode - 1, window)
    if decode <= 1 or end == first:
        return 0.0
    return (visible_keys(decode, prefill - 1, window) - decode * first) / (end - first)

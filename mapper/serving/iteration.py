"""The time of one in-flight batching step, from the cost model (:mod:`mapper.serving.inflight`).

A step runs some sequences' next token (decodes) and some prompts' next chunk (chunked prefill,
Agrawal et al., "Taming Throughput-Latency Tradeoff in LLM Inference with Sarathi-Serve", OSDI
2024) as one batch of ``n`` tokens. Its kernels split in two:

* every kernel but attention works on the ``n`` tokens alone (the GEMMs, norms, rotary, the
  tensor-parallel all-reduces, priced by :func:`mapper.parallel.collectives.collective`): each block is
  priced by the same cost model as ``--inference`` (:class:`mapper.cluster.profile.Profile`,
  forward only) at :data:`POINTS` token counts and interpolated linearly between them, except its
  GEMMs in a block-scaled format (MXFP8, NVFP4) from 128 up to :data:`TILED_UP_TO` tokens:
  Blackwell's block-scaled MMA takes 128 rows per CTA
  (:data:`mapper.costing.work.SCALED_MMA_ROWS`), so such a GEMM pays whole 128-row MMAs whatever
  tile its library picks, as the cost model prices it (:mod:`mapper.costing.tiles`: 385 token
  rows cost four tiles, as 512 do); there they are priced at every multiple of 128 rows and a
  step takes the price of the next one at or above its tokens (a line from 128 to 512 tokens
  would price the NVFP4 GEMMs of 385 rows at 83 % of their four tiles on a B200). Other formats
  issue 16-row MMAs and their libraries choose among tile shapes, which the cost model's one
  tile shape per GPU steps harder than (tried: A100 FP16 70B TP4 at 131 sequences read 0.82 of
  TensorRT-LLM's published rate against 1.12 on the line), so the line stands there; the last
  block, when it holds no attention (the final norm and the LM head), runs on the sequences that
  sample a token only, as serving runtimes keep only those logits;
* attention depends on what each token attends: a decode token reads its sequence's whole cache
  (memory-bound), a prefill chunk of ``c`` tokens after ``p`` cached ones computes ``c p +
  c (c+1)/2`` query-key pairs. Both are priced by the cost model's attention kernel: a decode
  batch at two cache lengths gives seconds per cached position read, a prompt at two lengths
  seconds per pair. With a sliding window of ``W`` (every attention's ``window``) a decode reads
  at most ``W`` positions and a query computes at most ``W`` pairs
  (:func:`mapper.core.opdefs.dnn.visible_keys`); the two cache lengths then lie within ``W``.

A replica of ``t`` tensor ranks and ``p`` pipeline stages cuts the blocks into stages as
``--inference`` does (:func:`mapper.cluster.model.partition`); the batch runs as ``p``
micro-batches in flight (vLLM's virtual engines, TensorRT-LLM's micro-batches), so a step that
gives every scheduled sequence its token takes the longer of one pass through the stages and
``p`` passes through the slowest (FasterTransformer's pipeline; Pope et al., MLSys 2023), sends
between stages included; a step of fewer sequences than stages runs one micro-batch a sequence.

A runtime that replays its decode steps from CUDA graphs captured at fixed batch sizes and pads
a batch up to the next of them (``graphs``: TensorRT-LLM's PyTorch backend with
``cuda_graph_config.enable_padding``, "batches are rounded up to the nearest
cuda_graph_batch_size", ``tensorrt_llm/llmapi/llm_args.py``; its CUDA-graph runner appends
copies of one dummy generation request, and only batches of decodes alone run from a graph)
runs a decode-only step of ``b`` sequences as one of the smallest captured size ``B >= b``:
every kernel but attention (GEMMs, norms, the LM head) on ``B`` rows; the dummies' attention
reads next to nothing and is not priced. A step with a prompt chunk, or of more sequences than
the largest graph, runs as it is.

Memory per GPU on the fullest stage: its weights, the activation workspace of a full step
(the largest kernel's at ``chunk`` tokens) and the reserve no tensor can use, counted part by part
as training counts it for the communicators a replica opens (:mod:`mapper.cluster.reserve`:
driver, CUDA context, NCCL buffers of the tensor group and the pipeline's sends, GEMM
workspaces); the KV cache gets what the runtime leaves (:mod:`mapper.serving.runtimes`).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from mapper.cluster.profile import BlockCost, Profile, kv_bytes
from mapper.cluster.reserve import ServingGroups, reserve
from mapper.core.graph import TaskGraph
from mapper.core.opdefs.dnn import held_positions, visible_keys
from mapper.costing.precision import with_precision
from mapper.costing.work import BLOCK_SCALED, SCALED_MMA_ROWS
from mapper.errors import OptionsError
from mapper.mapping.pipeline import decode_round, partition
from mapper.parallel.collectives import Network, collective, send
from mapper.platform.devices import Platform
from mapper.serving.precision import stored_fraction
from mapper.serving.request import framework_ops
from mapper.serving.runtimes import Runtime

#: Token counts a step's non-attention kernels are priced at (and the chunk itself).
POINTS = (1, 8, 32, 128, 512, 2048, 8192)
#: Tokens up to which a step's block-scaled GEMMs are priced at every multiple of 128 rows and taken
#: at the next (module docstring): eight 128-row MMAs; past them one is under an eighth of the rows.
TILED_UP_TO = 1024
#: A decode batch and two cache lengths, and two prompt lengths, that price attention.
ATT_BATCH, ATT_CACHES, ATT_PROMPTS = 16, (1024, 8192), (512, 2048)

Lower = Callable[[int, int, int], TaskGraph]


class Prices:
    """The model's block prices at each token count, shared by every layout of one GPU kind;
    ``precision`` the format of the linear layers' GEMMs and stored weights, ``kv_bytes`` the bytes
    of a cached element (:mod:`mapper.serving.precision`)."""

    def __init__(self, lower: Lower, platform: Platform, prepare: Callable[[TaskGraph], TaskGraph],
                 precision: str | None = None, kv_bytes: float = 2.0) -> None:
        gpus = [d for d in platform.devices if d.kind == "gpu"]
        if not gpus:
            raise OptionsError(f"platform {platform.name} has no GPU to serve the model on", obj="--platform")
        self.gpu = gpus[0]
        self.gpus = len(gpus)
        self.platform = platform
        self.lower = lower
        self.prepare = prepare
        self.precision = precision
        self.kv_bytes = kv_bytes
        self._profiles: dict[tuple[int, int, int], Profile] = {}

    def profile(self, seq: int, batch: int = 1, cache: int = 0) -> Profile:
        key = (seq, batch, cache)
        got = self._profiles.get(key)
        if got is None:
            graph = with_precision(self.lower(seq, batch, cache), self.precision)
            got = self._profiles[key] = Profile(graph, self.platform, self.gpu.name, self.prepare, None)
        return got

    def cost(self, prof: Profile, b: int, tensor: int) -> BlockCost:
        return prof.cost(prof.blocks[b].signature, tensor, 1)


def _split(cost: BlockCost, net: Network, tensor: int, dispatch: float = 0.0) -> tuple[float, float, float]:
    """Seconds of a block's GEMM kernels, of its other kernels but attention (collectives priced),
    and of attention; each call at least its framework ops' ``dispatch`` (the runtime's per-op CPU
    time: a kernel shorter than its dispatch leaves the GPU waiting, :mod:`mapper.serving.runtimes`)."""
    per_node = min(tensor, net.gpus_per_node)
    gemm = other = att = 0.0
    for seconds, ops, ci in cost.kernels:
        if ci >= 0:
            kind, nbytes, _ = cost.collectives[ci]
            seconds, ops = collective(net, kind, nbytes, tensor, per_node)[0], ()
        seconds = max(seconds, framework_ops(ops, True) * dispatch if ops else dispatch)
        if "attention" in ops:
            att += seconds
        elif "matmul" in ops:
            gemm += seconds
        else:
            other += seconds
    return gemm, other, att


@dataclass(frozen=True, slots=True)
class Batch:
    """What one step runs: ``tokens`` in all, ``sampled`` sequences that emit a token, the cached
    positions the decodes read and the query-key pairs the prefill chunks compute."""

    tokens: int
    sampled: int
    decode_context: float
    pairs: float
    sequences: int = 1


class StepModel:
    """Step times and memory of one replica of ``tensor`` x ``pipeline`` GPUs (module docstring)."""

    def __init__(self, prices: Prices, net: Network, tensor: int, pipeline: int, chunk: int,
                 dispatch: float = 0.0, graphs: tuple[int, ...] = ()) -> None:
        self.tensor, self.pipeline, self.chunk = tensor, pipeline, chunk
        self.dispatch = dispatch  # the runtime's CPU seconds per framework op (0: CUDA graphs)
        self.graphs = tuple(sorted(set(graphs)))  # the runtime's padded CUDA-graph batch sizes (module docstring)
        self.net = net
        tile = SCALED_MMA_ROWS if prices.precision in BLOCK_SCALED else 0
        #: the token counts from which to the last GEMMs are priced at the next point (module docstring)
        self.tiled = (tile, min(TILED_UP_TO, chunk)) if tile else (0, 0)
        tiles = range(tile, self.tiled[1] + 1, tile) if tile else range(0)
        self.points = tuple(sorted({p for p in (*POINTS, *tiles) if p < chunk} | {chunk}))
        profs = [prices.profile(n) for n in self.points]
        nblocks = len(profs[0].blocks)
        if any(len(p.blocks) != nblocks for p in profs):
            raise OptionsError("the model cuts into different blocks at different sequence lengths: its "
                               "structure must not depend on SEQ", obj="MODEL")
        graph = profs[0].graph
        self.attention_blocks = [any(graph.tasks[i].op == "attention" for i in b.tasks) for b in profs[0].blocks]
        if not any(self.attention_blocks):
            raise OptionsError("the model has no attention op: nothing keeps a KV cache to serve from", obj="MODEL")
        windows = sorted({int(t.attr("window") or 0) for t in graph.tasks if t.op == "attention"})
        if len(windows) > 1:
            raise OptionsError("serving prices one sliding window for every attention layer; the model's differ "
                               f"({', '.join(str(w) if w else 'none' for w in windows)})", obj="MODEL")
        #: the sliding window every attention keeps (0: none)
        self.window = windows[0]
        self.head = not self.attention_blocks[-1]
        t = tensor
        #: per block, seconds of its GEMMs and of its other kernels but attention at each of ``points``
        parts = [[_split(prices.cost(p, b, t), net, t, dispatch) for p in profs] for b in range(nblocks)]
        self.gemms = [[g for g, _, _ in row] for row in parts]
        self.curve = [[o for _, o, _ in row] for row in parts]
        ones = [prices.cost(profs[0], b, t) for b in range(nblocks)]
        kv_scale = prices.kv_bytes / 2.0  # the graph's cache is 16-bit
        self.kv_per_token = [kv_scale * sum(kv_bytes(graph.tasks[i], 1, t) for i in blk.tasks)
                             for blk in profs[0].blocks]
        self.weights = [c.param_bytes * stored_fraction(graph, blk, prices.precision)
                        for c, blk in zip(ones, profs[0].blocks)]
        self.working = [prices.cost(profs[-1], b, t).working for b in range(nblocks)]
        self.state_bytes = [c.input_bytes / t for c in ones]  # a token's state entering each block, per rank
        self.alpha, self.beta_decode, self.beta_pair = self._attention(prices, net, t)
        self.beta_decode *= kv_scale  # a decode's attention streams its cache
        mid = self.points.index(min(self.points, key=lambda n: abs(n - 256)))
        weights = [c[mid] + g[mid] + (self.alpha if a else 0.0)
                   for c, g, a in zip(self.curve, self.gemms, self.attention_blocks)]
        starts = partition(weights, pipeline)
        if starts is None:
            raise OptionsError(f"pipeline={pipeline} needs at least as many blocks; the model has {nblocks}",
                               obj="--parallel")
        self.starts = starts
        ends = [*starts[1:], nblocks]
        self.stages = [range(a, b) for a, b in zip(starts, ends)]
        last = nblocks - 1
        width = len(self.points)
        #: per stage: its blocks' curves (the head apart) and the head's, each (GEMMs, other kernels), and
        #: its attention blocks
        self.bodies = [tuple([sum(c[b][j] for b in r if not (self.head and b == last)) for j in range(width)]
                             for c in (self.gemms, self.curve)) for r in self.stages]
        self.heads = [(self.gemms[last], self.curve[last]) if self.head and last in r else None for r in self.stages]
        self.layers = [sum(1 for b in r if self.attention_blocks[b]) for r in self.stages]
        self._bases: dict[tuple[int, int, int], list[float]] = {}
        gpn = net.gpus_per_node
        self.across = [((s + 1) * t - 1) // gpn != ((s + 1) * t) // gpn for s in range(pipeline)]

    def _attention(self, prices: Prices, net: Network, t: int) -> tuple[float, float, float]:
        """Per attention block: seconds of a step's fixed part, per cached position a decode reads,
        per query-key pair a prefill computes."""
        def att(prof: Profile) -> float:
            b = next(i for i, a in enumerate(self.attention_blocks) if a)
            return _split(prices.cost(prof, b, t), net, t, self.dispatch)[2]

        w = self.window
        caches = ATT_CACHES if not w else (min(ATT_CACHES[0], w // 8), min(ATT_CACHES[1], w))
        lo, hi = (att(prices.profile(1, ATT_BATCH, c)) for c in caches)
        read = [held_positions(c, w) for c in caches]  # cached positions a decode reads
        beta = max(hi - lo, 0.0) / (ATT_BATCH * (read[1] - read[0])) if read[1] > read[0] else 0.0
        alpha = max(lo - beta * ATT_BATCH * read[0], 0.0)
        p_lo, p_hi = (att(prices.profile(n)) for n in ATT_PROMPTS)
        pairs = [visible_keys(n, 0, w) for n in ATT_PROMPTS]
        return alpha, beta, max(p_hi - p_lo, 0.0) / (pairs[1] - pairs[0])

    def _at(self, ys: list[float], n: float) -> float:
        """A curve over :attr:`points` at ``n`` tokens, linear between (and past) the points."""
        if n <= 0:
            return 0.0
        pts = self.points
        if len(pts) == 1:
            return ys[0] * n / pts[0]
        i = min(max(bisect.bisect_left(pts, n), 1), len(pts) - 1)
        x0, x1 = pts[i - 1], pts[i]
        return ys[i - 1] + (ys[i] - ys[i - 1]) * (n - x0) / (x1 - x0)

    def _tiles(self, ys: list[float], n: float) -> float:
        """A GEMM curve over :attr:`points` at ``n`` tokens: within :attr:`tiled`, the next point's
        price (whole tiles), else as :meth:`_at`."""
        lo, hi = self.tiled
        if lo <= n <= hi and lo > 0:
            return ys[bisect.bisect_left(self.points, n)]
        return self._at(ys, n)

    def _base(self, tokens: int, sampled: int, m: int) -> list[float]:
        """Each stage's seconds but attention's for one of ``m`` micro-batches of a step of ``tokens``
        and ``sampled``."""
        key = (tokens, sampled, m)
        got = self._bases.get(key)
        if got is None:
            p = self.pipeline
            n, k = tokens / m, sampled / m
            got = []
            for s, (body, head) in enumerate(zip(self.bodies, self.heads)):
                seconds = self._tiles(body[0], n) + self._at(body[1], n)
                if head:
                    seconds += self._tiles(head[0], k) + self._at(head[1], k)
                if s + 1 < p:
                    seconds += send(self.net, n * self.state_bytes[self.stages[s].stop], self.across[s])
                got.append(seconds)
            self._bases[key] = got
        return got

    def micro_batches(self, batch: Batch) -> int:
        """The pipeline's micro-batches: one per stage, or one per sequence when fewer."""
        return max(min(self.pipeline, batch.sequences), 1)

    def stage_times(self, batch: Batch) -> list[float]:
        """Seconds of each stage for one of the micro-batches of ``batch``."""
        m = self.micro_batches(batch)
        att = self.alpha + (self.beta_decode * batch.decode_context + self.beta_pair * batch.pairs) / m
        return [b + a * att for b, a in zip(self._base(batch.tokens, batch.sampled, m), self.layers)]

    def padded(self, batch: Batch) -> Batch:
        """``batch`` as the GPU runs it: a decode-only step of ``b`` sequences, under a runtime that
        pads its CUDA graphs, as the smallest captured batch of at least ``b`` (module docstring)."""
        graphs = self.graphs
        if not graphs or batch.pairs > 0 or batch.tokens != batch.sequences or batch.tokens > graphs[-1]:
            return batch
        n = graphs[bisect.bisect_left(graphs, batch.tokens)]
        return replace(batch, tokens=n, sampled=n, sequences=n)

    def step(self, batch: Batch) -> float:
        """Seconds of a step that gives every scheduled sequence its tokens (module docstring)."""
        if batch.tokens <= 0:
            return 0.0
        batch = self.padded(batch)
        times = self.stage_times(batch)
        return decode_round(times, self.micro_batches(batch))

    def memory(self, capacity: float, runtime: Runtime) -> tuple[dict[str, float], int]:
        """Bytes per GPU by part on the fullest stage, and the KV cache's tokens per replica
        (whole blocks; the stage that holds fewest sets it)."""
        best: dict[str, float] = {}
        tokens = math.inf
        held = reserve(capacity, ServingGroups(self.tensor, self.pipeline))
        for blocks in self.stages:
            weights = sum(self.weights[b] for b in blocks)
            act = max(self.working[b] for b in blocks)
            work = act + held
            room = (runtime.kv_fraction * capacity - weights - work if runtime.of_total
                    else runtime.kv_fraction * (capacity - weights - work))
            per_token = sum(self.kv_per_token[b] for b in blocks)
            fit = max(room, 0.0) / per_token if per_token > 0 else math.inf
            parts = {"weights": weights, "activations": act, "reserve": held,
                     "kv_cache": max(room, 0.0) if per_token > 0 else 0.0}
            if sum(parts.values()) > sum(best.values()):
                best = parts
            tokens = min(tokens, fit)
        if not math.isfinite(tokens):
            raise OptionsError("the model has no attention: nothing to keep a KV cache for", obj="MODEL")
        return best, int(tokens) // runtime.block * runtime.block

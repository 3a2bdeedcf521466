"""``--parallel`` on a cluster: the layout with the shortest predicted step that fits.

:func:`plan_cluster` prices the graph's blocks once per tensor degree and
micro-batch size (:mod:`mapper.cluster.profile`) and then scores every layout
of the plan space with the layer-level model (:mod:`mapper.cluster.model`),
never building a per-GPU task graph: the plan space of
:mod:`mapper.cluster.space` (tensor, pipeline, context, data, micro-batch,
interleaving, recomputation by module sets, ZeRO, sequence parallelism, experts;
context parallelism, ring, all-gather or all-to-all, where the sequence cuts into ``2 C``
chunks). Keys a given layout fixes are not searched. The
fastest layout that fits wins; when none fits, the one that needs least memory
is reported as not fitting. The space is bounded before any work: a global
batch of at most :data:`MAX_SAMPLES` sequences, and layouts whose pipeline
schedule has at most :data:`MAX_SCHEDULE_OPS` forward and backward ops (each
is simulated, and the chosen one becomes a task graph of that many tasks).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from mapper.cluster import overlap
from mapper.cluster.context import a2a_heads, check_context, context_ranks, sequence_of
from mapper.cluster.flops import model_flops
from mapper.cluster.layers import layer_starts, uneven_reason
from mapper.cluster.lowparam import NONE, LowParams, resolve
from mapper.cluster.model import DEFAULT_ALLOCATOR, GIB, Estimate, PlanModel, lower_bound, refine
from mapper.cluster.profile import Profile, check_tensor
from mapper.cluster.recompute import ladder, mask, module_flops
from mapper.cluster.space import MAX_SCHEDULE_OPS, Variants, layouts, pow2
from mapper.cluster.sweep import more, score
from mapper.cluster.zero3 import check_fsdp
from mapper.core.graph import TaskGraph
from mapper.core.ops import ATTENTION_OPS
from mapper.core.units import fmt_bytes, fmt_bytes_pair, fmt_count, fmt_n, fmt_rate, fmt_time
from mapper.errors import OptionsError
from mapper.mapping.base import Progress
from mapper.parallel.collectives import network
from mapper.parallel.layout import FREE, FSDP, Layout, LayoutSpec
from mapper.parallel.rewrite import SplitError
from mapper.platform.cluster import domain_view
from mapper.platform.devices import Platform
from mapper.platform.kernels import default as default_kernel
from mapper.platform.kernels import with_kernel

#: Layouts listed in reports besides the chosen one.
RUNNERS_UP = 8
#: Leading layouts whose pipeline is simulated before the final choice.
REFINED = 8
#: The largest global batch planned, in sequences (2^20: over 300 times the largest of Megatron-LM's
#: runs, 3,072 sequences; Narayanan et al., SC'21, Table 1).
MAX_SAMPLES = 2**20


@dataclass(frozen=True, slots=True)
class ClusterChoice:
    """The layout kept, the estimates scored, and what the model was built on."""

    best: Estimate
    ranked: tuple[Estimate, ...]  # by step time, fitting first
    gpus: int
    samples: int
    model_flops: float  # FLOPs of one training step as NVIDIA counts them (mapper.cluster.flops)
    peak_tflops: float  # a GPU's 16-bit tensor peak
    scored: int
    redo_flops: tuple[tuple[int, float], ...] = ()  # forward FLOPs by recomputable module bits (recompute.py)

    seq: int = 1  # rows of the batch per sample (tokens per sequence)
    kind: str = ""  # on a fleet: the node kind the layout runs on
    others: tuple[tuple[str, float, bool], ...] = ()  # on a fleet: the other kinds' best (step, fits)
    stage_layers: tuple[int, ...] = ()  # Transformer layers (blocks with attention) per pipeline rank
    shares: tuple[tuple[str, int, float], ...] = ()  # data parallel over kinds: (kind, replicas, batch share each)
    previous: tuple[str, float, int, str] | None = None  # --without: (layout, step, GPUs, kind) before
    kinds_used: tuple[str, ...] = ()  # a mixed layout over some of a fleet's kinds: which (the rest idle)
    bound: float | None = None  # no layout of the plan space is faster under the model (model.lower_bound)
    precision: str = ""  # the GEMMs' format (--precision, else the graph's own: fp16)
    grad: str = ""  # the gradient buffer's format (fp32, bf16, or the weights' own)
    allocator: str = ""  # the caching allocator's mode (allocator=, mapper.cluster.model.FRAGMENTATION)
    attn: str = ""  # the attention kernel the GPUs run (attn=, mapper.platform.kernels); "": none named
    fsdp: str = ""  # ZeRO-3's implementation (fsdp=, mapper.cluster.zero3); "": no ZeRO-3 plan
    low: LowParams = NONE  # how quantised GEMMs' weights are held (fp8_param=, mapper.cluster.lowparam)

    @property
    def proven(self) -> bool:
        """The layout kept is the fastest of the plan space under the model."""
        return self.bound is not None and self.best.fits and self.best.step <= self.bound * (1 + 1e-9)
    @property
    def tokens_per_s(self) -> float:
        return self.samples * self.seq / self.best.step if self.best.step > 0 else 0.0

    def tflops_per_gpu(self, est: Estimate | None = None) -> float:
        """Model FLOP/s per GPU in TFLOP/s: the step's FLOPs as NVIDIA's performance tables count them
        (:mod:`mapper.cluster.flops`: for a Llama, per sequence s [12 L h^2 (1 + g/a + s/h) + 18 L F h k
        + 6 V h]; for a GPT, Megatron-LM's 72 B s l h^2 (1 + s/(6h) + V/(12 l h))) over the step time
        and GPUs."""
        e = est or self.best
        return self.model_flops / e.step / self.gpus / 1e12 if e.step > 0 else 0.0

    def hardware_tflops_per_gpu(self, est: Estimate | None = None) -> float:
        """The same with the recomputed forward work counted (SC'21, equation 3, counts it: its
        96 B s l h^2 ... is four passes with full recomputation)."""
        e = est or self.best
        bits = mask(e.layout.recompute)
        redo = self.model_flops / 3 if e.layout.recompute == "full" else sum(f for b, f in self.redo_flops if b & bits)
        return (self.model_flops + redo) / e.step / self.gpus / 1e12 if e.step > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        b = self.best
        lay = b.layout
        kinds = b.kinds or (self.kind or None,) * len(self.stage_layers)
        stages = [{"kind": kind, "devices": lay.tensor * lay.replicas, "data": lay.data,
                   "tensor": lay.tensor, "layers": layers, "share": 1.0 / lay.data}
                  for kind, layers in zip(kinds, self.stage_layers)]
        if self.shares:  # one stage, its replicas on several kinds with their own batch shares
            stages = [{"kind": kind, "devices": lay.tensor * r, "data": r, "tensor": lay.tensor,
                       "layers": sum(self.stage_layers), "share": share} for kind, r, share in self.shares]
        est = b.to_json()
        est["plan"] = {**est["plan"], "grad": self.grad, "precision": self.precision,
                       **({"allocator": self.allocator} if self.allocator else {}),
                       **({"attn": self.attn} if self.attn else {}),
                       **({"fsdp": self.fsdp} if self.fsdp and lay.zero == 3 else {}), **self.low.plan(lay.zero)}
        return {"mode": "cluster", **est, "gpus": self.gpus, "global_batch": self.samples,
                "stages": stages, "kind": self.kind or None,
                **({"kinds_used": list(self.kinds_used)} if self.kinds_used else {}),
                "tokens_per_s": self.tokens_per_s, "model_tflops_per_gpu": self.tflops_per_gpu(),
                "hardware_tflops_per_gpu": self.hardware_tflops_per_gpu(),
                "mfu": self.tflops_per_gpu() / self.peak_tflops if self.peak_tflops else None,
                "plans_scored": self.scored, "proven": self.proven, "bound": self.bound,
                **({"previous": {"label": self.previous[0], "step_time": self.previous[1], "gpus": self.previous[2],
                                 "kind": self.previous[3] or None}} if self.previous else {}),
                "candidates": [{**e.to_json(), "model_tflops_per_gpu": self.tflops_per_gpu(e)}
                               for e in self.ranked[1:RUNNERS_UP + 1]]}

    def notes(self) -> tuple[str, ...]:
        b = self.best
        out = [f"parallel cluster: {describe(b)} on {self.gpus} GPUs ({fmt_n(b.micro_batches, 'micro-batch')}, "
               f"{b.schedule}{' interleaved' if b.layout.interleave > 1 else ''}): step {fmt_time(b.step)} "
               f"predicted by the layer-level model, {self.tflops_per_gpu():.4g} model TFLOP/s per GPU "
               f"(MFU {self.tflops_per_gpu() / self.peak_tflops:.1%}), {fmt_rate(self.tokens_per_s, 'tokens/s')}",
               f"parallel: peak memory {memory_parts(b.memory, b.capacity)}" + ("" if b.fits else ": does not fit")]
        others = "".join(f"; {_named(k)}: best {fmt_time(step)}" + ("" if fits else " (does not fit)")
                         for k, step, fits in self.others)
        if self.kind == MIXED and self.kinds_used:
            out.append(f"parallel fleet: the layout uses the {', '.join(self.kinds_used)} nodes only; "
                       "the other kinds stay idle (they would slow it down)")
        if self.kind == MIXED and self.shares:
            out.append("parallel fleet: data parallel over " + ", ".join(
                f"{r} {k} replicas taking {share:.3%} of the batch each" for k, r, share in self.shares) + others)
        elif self.kind == MIXED:
            out.append("parallel fleet: pipeline stages on " + ", ".join(
                f"{k} x{b.kinds.count(k)}" for k in dict.fromkeys(b.kinds)) + " (layers per stage by speed: "
                + ", ".join(str(n) for n in self.stage_layers) + ")" + others)
        elif self.kind:
            out.append(f"parallel fleet: the layout runs on the {self.kind} nodes alone" + others)
        if self.proven:
            out.append("parallel: proven the fastest layout of the plan space under the model (every other "
                       "layout's simulated step or lower bound is no lower)")
        elif self.bound is not None and b.fits and b.step > 0:
            out.append(f"parallel: not proven the fastest: some layout's lower bound {fmt_time(self.bound)} is "
                       f"{(b.step - self.bound) / b.step:.1%} below the step kept")
        others_ = [e for e in self.ranked[1:4]]
        if others_:
            out.append("parallel: runners-up " + "; ".join(
                f"{describe(e)} {fmt_time(e.step)}" + ("" if e.fits else " (too big)") for e in others_))
        return tuple(out)

    def plan_facts(self) -> tuple[tuple[str, str], ...]:
        """The plan section of the reports: the layout, its stages and groups, the batch, step and memory."""
        b = self.best
        lay = b.layout
        rows = [("layout", describe(b)),
                ("GPUs", f"{self.gpus:,}: {fmt_n(lay.data, 'data-parallel replica')} x {context_ranks(lay)}"
                         f"{fmt_n(lay.pipeline, 'pipeline stage')} x {fmt_n(lay.tensor, 'tensor-parallel GPU')}"
                         + (f" ({self.kind} nodes)" if self.kind and self.kind != MIXED else ""))]
        held = b.rank_memory or (b.peak,)
        kinds = b.kinds or (self.kind if self.kind != MIXED else "",) * len(self.stage_layers)
        for s, layers in enumerate(self.stage_layers):
            kind = f"{kinds[s]} GPUs, " if s < len(kinds) and kinds[s] else ""
            mem = f", {fmt_bytes(held[s])} per GPU" if s < len(held) else ""
            rows.append((f"stage {s}", f"{kind}{layers} layers{mem}"))
        for kind, r, share in self.shares:
            rows.append((f"{kind} replicas", f"{r} taking {share:.3%} of the batch each"))
        rows += [("batch", f"{self.samples:,} sequences ({self.samples * self.seq:,} tokens) per step, "
                           f"{fmt_n(b.micro_batches, 'micro-batch')} of {lay.micro_batch} per replica, {b.schedule}"
                           + (f" interleaved over {lay.interleave} chunks per stage" if lay.interleave > 1 else "")),
                 ("step", f"{fmt_time(b.step)} ({fmt_rate(self.tokens_per_s, 'tokens/s')}, "
                          f"MFU {self.tflops_per_gpu() / self.peak_tflops:.1%})" if self.peak_tflops else
                          fmt_time(b.step)),
                 ("work", f"{fmt_count(self.model_flops, 'FLOP')} per step (the model's, without recomputation)"),
                 ("memory", memory_parts(b.memory, b.capacity) + ("" if b.fits else ": does not fit"))]
        return tuple(rows)


def describe(e: Estimate) -> str:
    """A layout as the reports name it: its keys, and on a fleet the kind of each pipeline stage
    (two layouts with the same keys differ there)."""
    return e.layout.label() + (f", stages on {', '.join(e.kinds)}" if len(set(e.kinds)) > 1 else "")


def memory_parts(memory: dict[str, float], capacity: float) -> str:
    """``23.1 GiB per GPU of 32 GiB (weights 4.71 GiB, ...)``: one unit, the digits that tell them apart."""
    held, has = fmt_bytes_pair(sum(memory.values()), capacity)
    return f"{held} per GPU of {has} (" + ", ".join(f"{k} {fmt_bytes(v)}" for k, v in memory.items()) + ")"


def plan_cluster(graph: TaskGraph, platform: Platform, given: LayoutSpec, optimizer: str,
                 prepare: Callable[[TaskGraph], TaskGraph],
                 progress: Callable[[Progress], None] | None = None, precision: str | None = None) -> ClusterChoice:
    """The best layout of ``graph``'s training step on ``platform`` (module docstring);
    ``progress`` hears how far the search is about twice a second. On a fleet, each node kind
    is planned as a cluster of its own, and so are layouts over every kind
    (:mod:`mapper.cluster.mixed`); the fastest that fits wins. ``precision``: the
    ``--precision`` the graph's GEMMs were marked with (:mod:`mapper.costing.precision`); with
    one, the gradient buffer is f32 unless ``given`` says ``grad`` (Megatron-Core's default for
    bf16 and the FP8 recipes, which keep bf16 weights); without, the weights' own 16-bit format
    (Megatron-LM's fp16 training, as SC'21 ran it)."""
    check_tensor(given)
    grad = given.grad or ("fp32" if precision else "")
    allocator = given.allocator or DEFAULT_ALLOCATOR
    attn = given.attn or default_kernel(platform)
    platform = with_kernel(platform, attn) if given.attn else platform
    fsdp = check_fsdp(given)
    low = resolve(given, precision, False)  # fp8_param / fp4_param (each GPU's layouts: _setup)
    given = replace(given, grad=None, allocator=None, attn=None, fsdp=None, fp8_param=None, fp4_param=None)
    choice = _plan_kinds(graph, platform, given, optimizer, prepare, progress, Framework(grad, allocator, fsdp, low))
    own = FORMAT_NAMES.get(next((t.dtype for t in graph.tasks if t.op == "matmul"), "f16"), "fp16")
    choice = replace(choice, precision=precision or own, grad=grad or own, allocator=allocator, attn=attn,
                     fsdp=fsdp, low=low)
    gpu = next((d for d in platform.devices if d.kind == "gpu"), None)
    peak = gpu.tensor_peak(precision) if precision is not None and gpu is not None else None
    if peak and platform.fleet is None:
        choice = replace(choice, peak_tflops=peak / 1e3)  # MFU against the format's peak
    return choice


#: How reports name the graph's own GEMM and gradient formats.
FORMAT_NAMES = {"f16": "fp16", "bf16": "bf16", "f32": "fp32"}


@dataclass(frozen=True, slots=True)
class Framework:
    """What the training framework keeps one way for a whole plan, not per layout: the gradient
    buffer's format (``grad``; "": the weights' own), the caching allocator's mode, ZeRO-3's
    implementation and how quantised GEMMs' weights are held (:mod:`mapper.cluster.lowparam`)."""

    grad: str = ""
    allocator: str = ""
    fsdp: str = FSDP[0]
    low: LowParams = NONE


def _plan_kinds(graph: TaskGraph, platform: Platform, given: LayoutSpec, optimizer: str,
                prepare: Callable[[TaskGraph], TaskGraph], progress: Callable[[Progress], None] | None,
                frame: Framework = Framework()) -> ClusterChoice:
    """:func:`plan_cluster` with the framework's plan-wide choices resolved (``frame``)."""
    if platform.fleet is not None:
        choices = []
        setups: list[_Setup] = []  # each kind's priced blocks, for its own plans and the mixed ones
        for k in platform.fleet.kinds:
            try:
                setups.append(_setup(graph, k.platform, optimizer, prepare, frame))
                choices.append(replace(_plan_one(graph, k.platform, given, optimizer, prepare, progress,
                                                 setups[-1]), kind=k.kind))
            except OptionsError:
                if len(platform.fleet.kinds) == 1:
                    raise
        if not choices:
            return _plan_one(graph, platform.fleet.kinds[0].platform, given, optimizer, prepare, progress,
                             frame=frame)
        whole = len(setups) == len(platform.fleet.kinds) > 1
        if whole:  # every kind, and every subset of two or more kinds (the slowest may only slow it down)
            for subset in _subsets(len(setups)):
                sub = replace(platform, fleet=replace(platform.fleet,
                                                      kinds=tuple(platform.fleet.kinds[i] for i in subset)))
                done = [c.best.step for c in choices if c.best.fits]
                mixed = _plan_mixed(graph, sub, given, optimizer, [setups[i] for i in subset],
                                    incumbent=min(done, default=math.inf))
                if mixed is not None:
                    choices.append(replace(mixed, kinds_used=tuple(platform.fleet.kinds[i].kind for i in subset)))
        best = min(choices, key=lambda c: (not c.best.fits, c.best.step if c.best.fits else c.best.peak))
        every = len(platform.fleet.kinds)

        def label(c: ClusterChoice) -> str:
            """A kind alone, ``mixed`` over every kind, or ``a100+v100`` over some of them."""
            return "+".join(c.kinds_used) if c.kind == MIXED and 1 < len(c.kinds_used) < every else c.kind

        bounds = [c.bound for c in choices if c.bound is not None]
        return replace(best, others=tuple((label(c), c.best.step, c.best.fits) for c in choices if c is not best),
                       kinds_used=best.kinds_used if len(best.kinds_used) < every else (),
                       bound=min(bounds) if bounds else None)
    return _plan_one(graph, platform, given, optimizer, prepare, progress, frame=frame)


#: The ``kind`` of a choice whose pipeline stages sit on several node kinds.
MIXED = "mixed"


def _named(label: str) -> str:
    """How the notes name another choice of a fleet: a kind alone, every kind, or some of them."""
    if label == MIXED:
        return "every kind together"
    return f"{label} together" if "+" in label else f"{label} alone"


def _space_bound(simulated: list[Estimate], fitting: list[Estimate]) -> float | None:
    """The least step any fitting layout can have under the model: the simulated ones' steps and
    the others' :func:`~mapper.cluster.model.lower_bound` (``fitting`` sorted by closed-form step,
    its first :data:`REFINED` the simulated ones)."""
    steps = [e.step for e in simulated if e.fits] + [lower_bound(e) for e in fitting[REFINED:]]
    return min(steps) if steps and fitting else None


def _subsets(n: int) -> list[tuple[int, ...]]:
    """Every subset of ``range(n)`` with two or more members, the whole first."""
    from itertools import combinations

    return [c for size in range(n, 1, -1) for c in combinations(range(n), size)]


def plan_even_split(graph: TaskGraph, platform: Platform, optimizer: str,
                    prepare: Callable[[TaskGraph], TaskGraph]) -> ClusterChoice | None:
    """The best layout over every GPU of a fleet when layers and data shares are split evenly,
    blind to the kinds' speeds (the baseline of benchmarks/hetero.py), or None."""
    assert platform.fleet is not None
    setups = [_setup(graph, k.platform, optimizer, prepare) for k in platform.fleet.kinds]
    return _plan_mixed(graph, platform, FREE, optimizer, setups, even=True)


def _plan_mixed(graph: TaskGraph, platform: Platform, given: LayoutSpec, optimizer: str,
                setups: list[_Setup], even: bool = False, incumbent: float = math.inf) -> ClusterChoice | None:
    """The best layout that uses every GPU of every kind (:mod:`mapper.cluster.mixed`), from
    each kind's ``setups``, or None when none matches ``given``; ``even``: layers and shares split
    evenly; ``incumbent``: the best step of the plans made so far (mixed layouts that cannot beat
    it keep their bottleneck split)."""
    found = [e for e in _mixed_found(platform, optimizer, setups, even, incumbent=incumbent, given=given)
             if given.allows(e.layout)]
    if not found:
        return None
    fitting = sorted((e for e in found if e.fits), key=lambda e: e.step)
    pool = fitting or sorted(found, key=lambda e: e.peak)
    top = sorted((refine(e) for e in pool[:REFINED]), key=lambda e: (e.step, e.peak) if fitting else (e.peak, e.step))
    first = setups[0]
    best = top[0]
    dtype = next((t.dtype for t in graph.tasks if t.op == "matmul"), "f16")
    # MFU against the mean peak of the GPUs in use (every GPU of every kind)
    peaks = [((st.gpu.tensor_peak(dtype) or st.gpu.peak(dtype) or 0.0) / 1e3, st.gpus) for st in setups]
    peak = sum(pk * n for pk, n in peaks) / sum(n for _, n in peaks)
    used = best.layout.tensor * best.layout.data * best.layout.pipeline
    flops = model_flops(graph)
    attention = module_flops(graph, first.model.profile.blocks, first.model.profile.rep)
    if best.shares:
        used = best.layout.tensor * best.layout.data
    return ClusterChoice(best, tuple(top), used, first.samples, flops, peak, len(found), attention, first.seq,
                         kind=MIXED, stage_layers=_stage_layers(graph, first.model.profile, best), shares=best.shares,
                         bound=_space_bound(top, fitting))


def mixed_space(graph: TaskGraph, platform: Platform, optimizer: str, prepare: Callable[[TaskGraph], TaskGraph],
                exhaustive: bool = False) -> list[Estimate]:
    """Every layout over all of a fleet's kinds in closed form (not simulated), as the planner
    scores them before it simulates the best; with ``exhaustive``, each once per contiguous
    layer split and per division of the batch among the kinds, so that enumeration of the same
    space checks the planner's exact split and greedy shares on small instances
    (benchmarks/hetero.py)."""
    assert platform.fleet is not None
    setups = [_setup(graph, k.platform, optimizer, prepare) for k in platform.fleet.kinds]
    return _mixed_found(platform, optimizer, setups, False, exhaustive)


def _mixed_found(platform: Platform, optimizer: str, setups: list[_Setup], even: bool,
                 exhaustive: bool = False, incumbent: float = math.inf,
                 given: LayoutSpec = FREE) -> list[Estimate]:
    """The closed-form estimates of :func:`mixed_space` from each kind's ``setups`` (the pipelines
    among them only those matching ``given``)."""
    from mapper.cluster.mixed import KindModel, Splits, mixed_estimates, shared_estimates

    def keep(lay: Layout) -> bool:
        return given.allows(lay)

    fleet = platform.fleet
    assert fleet is not None
    kinds = [KindModel(k.kind, st.gpus, st.model) for k, st in zip(fleet.kinds, setups)]
    per_node = min(st.per_node for st in setups)
    try:
        found = mixed_estimates(kinds, setups[0].samples, optimizer, fleet.bandwidth_gbs, fleet.latency_us * 1e-6,
                                per_node, Splits(even, exhaustive, incumbent, keep))
    except SplitError:
        return []
    return found + shared_estimates(kinds, setups[0].samples, optimizer, fleet.bandwidth_gbs, per_node, even,
                                    every_share=exhaustive)


@dataclass(frozen=True, slots=True)
class _Setup:
    """What planning on one kind of node starts from."""

    model: PlanModel
    gpu: Any  # the kind's GPU (a Device)
    per_node: int
    gpus: int
    samples: int
    seq: int


def _setup(graph: TaskGraph, platform: Platform, optimizer: str,
           prepare: Callable[[TaskGraph], TaskGraph], frame: Framework = Framework()) -> _Setup:
    gpus_here = [d for d in platform.devices if d.kind == "gpu"]
    if not gpus_here:
        raise OptionsError(f"platform {platform.name} has no GPUs to lay the model out on",
                           obj="--parallel")
    gpu = gpus_here[0]
    nodes = platform.cluster.nodes if platform.cluster is not None else 1
    profile = Profile(graph, platform, gpu.name, prepare, optimizer)
    seq = _sequence(graph)
    if profile.batch % seq:
        raise OptionsError(f"the batch of {profile.batch} rows is not whole sequences of {seq}",
                           obj="--parallel")
    samples = profile.batch // seq
    if samples > MAX_SAMPLES:
        raise OptionsError(f"a global batch of {samples:,} sequences of {seq}; the cluster planner plans at most "
                           f"{MAX_SAMPLES:,} (set the batch param, e.g. --param BATCH, lower)", obj="--parallel")
    # collectives see a scale-up domain larger than a node (NVL72) as one node of its GPUs
    view = domain_view(platform)
    low = replace(frame.low, non_tn=gpu.tensor_peak("mxfp8") is not None)  # Blackwell: FP8 GEMMs of any layout
    model = PlanModel(profile, network(view), samples, optimizer, (gpu.memory_gib or 0.0) * GIB, frame.grad,
                      frame.allocator or DEFAULT_ALLOCATOR, frame.fsdp, low)
    per_node = sum(1 for d in view.devices if d.kind == "gpu")
    return _Setup(model, gpu, per_node, len(gpus_here) * nodes, samples, seq)


def _plan_one(graph: TaskGraph, platform: Platform, given: LayoutSpec, optimizer: str,
              prepare: Callable[[TaskGraph], TaskGraph],
              progress: Callable[[Progress], None] | None = None, setup: _Setup | None = None,
              frame: Framework = Framework()) -> ClusterChoice:
    """:func:`plan_cluster` on one cluster (or machine) of one kind of node (``setup``: its
    blocks priced already)."""
    start = time.perf_counter()
    setup = setup or _setup(graph, platform, optimizer, prepare, frame)
    model, gpu, per_node, gpus, samples, seq = (setup.model, setup.gpu, setup.per_node, setup.gpus, setup.samples,
                                                setup.seq)
    profile = model.profile
    experts = _check_experts(graph, gpus, given)
    check_context(graph, gpus, given)
    attention = module_flops(graph, profile.blocks, profile.rep)
    present = 0  # the recomputable modules the graph's blocks hold
    for bits, _ in attention:
        present |= bits
    heads = a2a_heads(graph)
    cands = layouts(gpus, per_node, samples, len(profile.blocks), given, experts, sequence_of(graph), ladder(present),
                    heads)
    variants = Variants(given, heads, len(layer_starts(graph, profile.blocks)))
    if not cands:
        raise OptionsError(f"no layout of {gpus} GPUs fits the keys given "
                           f"({given.text()}) and a global batch "
                           f"of {samples}: {_why_none(gpus, samples, len(profile.blocks), given)}", obj="--parallel")
    sweep = score(model, cands, progress, start, variants)
    scored = sweep.estimates()
    if not scored:
        reasons = sweep.reasons + ([uneven_reason(profile, cands[0])]
                                   if given.first is not None or given.last is not None else [])
        raise OptionsError("no layout can cut this graph" + (f" ({reasons[0]})" if reasons else ""),
                           obj="--parallel")
    while True:
        fitting = sorted((e for e in scored if e.fits), key=lambda e: (e.step, e.peak))
        rest = sorted((e for e in scored if not e.fits), key=lambda e: (e.peak, e.step))
        # the leaders' pipelines simulated in their schedule's order, then ranked again
        top = sorted((refine(e) for e in (fitting or rest)[:REFINED]),
                     key=lambda e: (e.step, e.peak) if fitting else (e.peak, e.step))
        if not (fitting and any(w[0] <= top[0].step for w in sweep.waiting)):
            break
        # layouts set aside that the simulated best no longer beats
        more(model, cands, sweep, top[0].step, _space_bound(top, fitting) or math.inf, REFINED)
        scored = sweep.estimates()
    ranked = tuple(top + (fitting[REFINED:] if fitting else []) + (rest if fitting else rest[REFINED:]))
    dtype = next((t.dtype for t in graph.tasks if t.op == "matmul"), "f16")
    peak = (gpu.tensor_peak(dtype) or gpu.peak(dtype) or 0.0) / 1e3
    flops = model_flops(graph)
    layers = _stage_layers(graph, profile, ranked[0])
    return ClusterChoice(ranked[0], ranked, gpus, samples, flops, peak, sum(map(variants.count, cands)), attention, seq,
                         stage_layers=layers, bound=_space_bound(top, fitting))


def _stage_layers(graph: TaskGraph, profile: Profile, est: Estimate) -> tuple[int, ...]:
    """Blocks holding an attention op (a Transformer layer's) on each pipeline rank."""
    p = est.layout.pipeline
    ends = [*est.chunks[1:], len(profile.blocks)]
    out = [0] * p
    for ci, (a, e) in enumerate(zip(est.chunks, ends)):
        out[ci % p] += sum(1 for b in profile.blocks[a:e] if any(graph.tasks[t].op in ATTENTION_OPS for t in b.tasks))
    return tuple(out)


def _why_none(gpus: int, samples: int, units: int, given: LayoutSpec) -> str:
    """Why :func:`layouts` found nothing for the keys ``given``."""
    t, p, d = given.tensor or 1, given.pipeline or 1, given.data
    if gpus % (t * p):
        return f"tensor x pipeline = {t * p} does not divide the {gpus} GPUs"
    if d is not None and t * p * d != gpus:
        return f"tensor x pipeline x data = {t * p * d}, not the {gpus} GPUs (set --nodes to match)"
    if p > units:
        return f"pipeline {p} is more stages than the graph's {units} blocks"
    d = d or gpus // (t * p)
    if samples % d:
        return f"the batch of {samples} does not split into {d} data-parallel replicas"
    if samples % (d * (given.micro_batch or 1)):
        return f"a replica's {samples // d} samples do not split into micro-batches of {given.micro_batch}"
    b = given.micro_batch or max(k for k in pow2(samples // d) if samples % (d * k) == 0)
    m = samples // (d * b)
    if 2 * m * p > MAX_SCHEDULE_OPS:
        return (f"{m:,} micro-batches of {b} per replica through {p} pipeline stage{'s' if p > 1 else ''} make a "
                f"schedule of {2 * m * p:,} ops, more than the {MAX_SCHEDULE_OPS:,} planned (a larger micro-batch "
                "that divides the batch makes fewer)")
    if why := overlap.why_given(given):
        return why
    if given.cp in ("a2a", "a2a+p2p"):
        return (f"cp={given.cp} needs tensor x its all-to-all's ranks to divide every attention's heads and "
                "key-value heads, and cp_a2a to divide the context degree")
    if given.expert or given.expert_tensor:
        return (f"expert x expert_tensor must divide the data x tensor = {gpus // p} ranks of a stage "
                "(experts are folded inside them)")
    return "interleaving needs a pipeline, and a number of micro-batches that is a multiple of its stages"


def _check_experts(graph: TaskGraph, gpus: int, given: LayoutSpec) -> int:
    """The experts per MoE layer of ``graph`` (0 without any); an OptionsError (exit 2) for an
    ``expert`` or ``expert_tensor`` that does not divide them or the GPUs."""
    experts = max((int(t.operands[2].type.shape[0]) for t in graph.tasks
                   if t.op == "grouped_matmul" and len(t.operands) == 3), default=0)
    e, et = given.expert, given.expert_tensor
    if (e or 1) > 1 or (et or 1) > 1:
        if not experts:
            raise OptionsError("expert= and expert_tensor= shard a mixture of experts; this graph has no "
                               "grouped_matmul experts", obj="--parallel")
        if e is not None and experts % e:
            raise OptionsError(f"expert={e} does not divide the graph's {experts} experts", obj="--parallel")
        if gpus % ((e or 1) * (et or 1)):
            raise OptionsError(f"expert x expert_tensor = {(e or 1) * (et or 1)} does not divide the {gpus} GPUs",
                               obj="--parallel")
    return experts


def _sequence(graph: TaskGraph) -> int:
    """Rows per sample: the sequence length of the graph's attention ops (1 without one)."""
    return next((int(t.attr("seq")) for t in graph.tasks if t.op in ATTENTION_OPS), 1)


__all__ = ["ClusterChoice", "layouts", "plan_cluster"]

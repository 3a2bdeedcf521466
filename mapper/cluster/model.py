"""The layer-level plan model: a layout's step time and memory per GPU from block prices
(:mod:`mapper.cluster.profile`) and collectives (:mod:`mapper.parallel.collectives`).

For a :class:`~mapper.parallel.layout.Layout` on ``N = t p d`` GPUs (tensor ranks
innermost, then data, then pipeline, as Megatron-LM orders them) and a global
batch of ``B`` samples, ``m = B / (d b)`` micro-batches:

* the blocks are cut into ``p v`` contiguous chunks of balanced time
  (:func:`mapper.mapping.pipeline.partition`, Bokhari's bottleneck partition by bisection): stages are
  uneven in layers when blocks differ (the embedding and the LM head); with ``first``/``last``,
  into chunks of whole Transformer layers as Megatron-Core cuts them (:mod:`mapper.cluster.layers`);
* a chunk's time per micro-batch is its blocks' forward and backward kernels,
  their tensor-parallel collectives (on the critical path), the recomputation
  (full: the whole forward again; selective or named modules: those modules' forward
  again, :mod:`mapper.cluster.recompute`) and the sends
  to the next chunk (across nodes each tensor rank sends ``1/t`` of it and the
  ranks all-gather it over NVSwitch: SC'21, 4.1);
* the pipeline takes :func:`mapper.cluster.schedule.step_time`; then each rank
  synchronises its gradient buffer over its ``d`` replicas (all-reduce; ZeRO
  1-2, the distributed optimizer: reduce-scatter of the gradients and
  all-gather of the updated 16-bit weights), overlapped with the last micro-batch's
  backward pass except the last bucket (Li et al., VLDB 2020), and steps its
  optimizer (on ``1/d`` of the weights from ZeRO 1 on). ZeRO 3 all-gathers the
  weights for every micro-batch's forward and backward and reduce-scatters the
  gradients (Rajbhandari et al., SC'20; Zhao et al., "PyTorch FSDP", VLDB
  2023), hidden under the neighbouring block's compute and no further (:mod:`mapper.cluster.zero3`).

Expert parallelism (``expert = E``, each expert cut over ``expert_tensor = ET``
ranks, folded inside the ``t d`` ranks of a stage as Megatron-Core's MoE
parallel folding does, Liu et al., "MoE Parallel Folding", arXiv 2504.14960):
a rank holds ``1/(E ET)`` of the experts' weights and their gradients and
optimizer states, replicated over ``t d / (E ET)`` expert-data ranks that
synchronise their gradients apart from the dense ones. Routing is balanced and
dropless, so a rank's grouped GEMMs see as many rows as without it (its
``EXPERTS / E`` experts get ``E`` times the rows each): their time is the
block's price. Each MoE layer adds a dispatch and a combine all-to-all over
the ``E`` ranks in the forward pass and their two transposes in the backward
(each rank sends its ``T k / t`` routed rows, sequence-parallel tokens when
``t > 1``), priced by :func:`mapper.parallel.collectives.collective` on the
critical path, as Megatron-Core runs them unless
``--overlap-moe-expert-parallel-comm`` is set (its MoE guide: an option of the
(interleaved) 1F1B schedule, off by default): with ``overlap=a2a`` they hide
under the other micro-batch's computation of a merged forward and backward, and
with ``overlap=tp`` the tensor-parallel collectives under their GEMMs, as far as
that computation lasts (:mod:`mapper.cluster.overlap`).

Context parallelism (``context = C``, :mod:`mapper.cluster.context`): blocks priced at ``S / C``
tokens a sequence, attention as ``C`` steps plus the ring's or all-gather's exposed communication
(all-to-all forms at their shapes, :mod:`mapper.cluster.ulysses`); ``d`` below is ``data x context``
for the gradient synchronisation and the optimizer's shards, the ranks holding the same weights (the
micro-batches are still ``B / (data b)``); the kind's buffers add to the memory of the block running.

Memory per GPU: weights (quantised ones: :mod:`mapper.cluster.lowparam`), gradients and optimizer
state in the bytes Megatron-Core keeps (:func:`state_bytes`), divided by ``d`` as the ZeRO stage
says (ZeRO 1 is Megatron-Core's distributed optimizer); the activations of the micro-batches
in flight (1F1B: ``min(p - s, m)`` on rank ``s``; interleaved: its warm-up
count plus one; GPipe: ``m``), per Korthikanti et al. with sequence
parallelism dividing them by ``t`` (what each op keeps: :mod:`mapper.cluster.profile`); the
caching allocator's fragmentation of them (:data:`FRAGMENTATION`, ``allocator=``); and the ``reserve``
no tensor can use: what the driver does not report, the CUDA context, NCCL's buffers of the
layout's communicators and GEMM workspaces (:mod:`mapper.cluster.reserve`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from itertools import accumulate
from typing import Any

from mapper.cluster import overlap, zero3
from mapper.cluster.context import Ring, context_profile, cp_times
from mapper.cluster.layers import chunk_starts, layer_counts, layer_starts
from mapper.cluster.lowparam import NONE, LowParams
from mapper.cluster.placement import Placement
from mapper.cluster.profile import BlockCost, Profile
from mapper.cluster.recompute import BIT, mask
from mapper.cluster.reserve import reserve
from mapper.cluster.schedule import orders, simulate, step_time
from mapper.cluster.states import GRAD_BYTES, activation_parts, state_bytes
from mapper.cluster.ulysses import KINDS, AttentionPrices, alltoall_times
from mapper.costing.training import OPTIMIZERS, OTHER_BACKWARD
from mapper.mapping.pipeline import partition
from mapper.parallel.collectives import Network, collective, send
from mapper.parallel.layout import Layout

GIB = float(2**30)
#: Share of the activations' memory the caching allocator holds but cannot hand out, by its mode
#: (``--parallel ...,allocator=``): activations are freed and allocated anew in every micro-batch,
#: in sizes that split the cached blocks, while weights, gradients and optimizer states live in
#: buffers allocated once. ``caching``: PyTorch's default splitting allocator, which GMLake measures
#: at 15 % fragmentation on average over eight LLMs' training on A100 80 GB (Guo et al., ASPLOS
#: 2024, abstract: 9.2 GB on average); ``expandable``: its ``expandable_segments`` mode, which maps
#: more memory into a segment instead of splitting cached blocks (PyTorch's CUDA semantics notes),
#: counted as none.
FRAGMENTATION = {"caching": 0.15, "expandable": 0.0}
#: The mode a plan assumes unless given.
DEFAULT_ALLOCATOR = "expandable"


#: Gradient bucket of the data-parallel all-reduce (PyTorch DDP's bucket_cap_mb, Li et al., VLDB 2020).
BUCKET = 25.0 * 2**20


@dataclass(frozen=True, slots=True)
class Estimate:
    """A layout's predicted step and memory (the plan model's answer)."""

    layout: Layout
    schedule: str
    micro_batches: int
    step: float
    pipeline: float  # the pipeline's part of the step
    sync: float  # gradient synchronisation and optimizer step after the pipeline
    chunks: tuple[int, ...]  # first block of each chunk (virtual stage), p v of them
    rank_times: tuple[float, ...]  # each pipeline rank's time per micro-batch
    chunk_times: tuple[tuple[float, float], ...]  # forward and backward seconds per micro-batch of each chunk
    rank_sync: tuple[float, ...]  # each rank's exposed gradient synchronisation and optimizer step
    memory: dict[str, float] = field(hash=False)  # bytes per GPU by part, on the fullest rank
    capacity: float = 0.0
    fullest: int = 0  # the pipeline rank whose GPUs hold the most
    kinds: tuple[str, ...] = ()  # on a fleet, a mixed layout: each pipeline rank's node kind
    shares: tuple[tuple[str, int, float], ...] = ()  # data parallel over kinds: (kind, replicas, batch share each)
    split_floor: float | None = None  # a mixed pipeline: a bound on the step of every split of its layers
    rank_memory: tuple[float, ...] = ()  # bytes per GPU of each pipeline rank (the fullest's is ``peak``)
    blocked: str = ""  # a kernel no GPU of the layout can run, and why (its footprint alone is too large)
    #: context parallelism: each chunk's ring sends not hidden under attention, forward and backward
    #: seconds per micro-batch (inside ``chunk_times``; the plan graph shows them as tasks of their own)
    chunk_ring: tuple[tuple[float, float], ...] = ()
    chunk_sends: tuple[tuple[float, ...], ...] = ()  # overlap=p2p: each chunk's, overlap.p2p_sends (in chunk_times)

    @property
    def peak(self) -> float:
        return sum(self.memory.values())

    @property
    def fits(self) -> bool:
        """Its memory fits, and every kernel can run (a step of finite time)."""
        return self.peak <= self.capacity and not self.blocked and math.isfinite(self.step)

    def to_json(self) -> dict[str, Any]:
        return {"plan": {**self.layout.to_json(), "micro_batches": self.micro_batches, "schedule": self.schedule},
                "label": self.layout.label(), "step_time": self.step, "pipeline_time": self.pipeline,
                "sync_time": self.sync, "fits": self.fits, "peak_memory": {**self.memory, "total": self.peak},
                **({"stage_kinds": list(self.kinds)} if self.kinds else {}),
                "stage_blocks": list(self.chunks)}


class PlanModel:
    """Step time and memory of layouts of one graph on one cluster (module docstring)."""

    def __init__(self, profile: Profile, net: Network, samples: int, optimizer: str, capacity: float,
                 grad: str = "", allocator: str = DEFAULT_ALLOCATOR, fsdp: str = "deepspeed",
                 low: LowParams = NONE) -> None:
        self.profile, self.fsdp, self.low = profile, fsdp, low  # fsdp: ZeRO-3's (zero3.sharded); low: lowparam
        self.grad = grad  # the gradient buffer's format (state_bytes)
        self.fragmentation = FRAGMENTATION[allocator]  # of the activations' memory (activation_parts)
        self.net = net
        self.samples = samples
        self.optimizer = optimizer
        self.capacity = capacity
        self._parts: dict[tuple, tuple[tuple[int, ...], list[float], list[float]] | None] = {}
        self._times: dict[tuple, tuple[list[float], list[float]]] = {}
        self._layers: tuple[int, ...] | None = None  # blocks where Transformer layers begin
        # memos of the layout search (each layout reads them per chunk, not per block)
        self._costs: dict[tuple[int, int], list[BlockCost]] = {}
        self._colls: dict[tuple, float] = {}
        self._sums: dict[tuple, tuple[list[float], ...]] = {}
        self._acts: dict[tuple, tuple[list[float], list[float], list[float]]] = {}
        self._rings: dict[tuple, list[Ring]] = {}
        self._pair_lists: dict[tuple, list[tuple[float, float]]] = {}  # each block's collectives, by price list
        self._profiles: dict[int, Profile] = {1: profile}
        self.attend = AttentionPrices(profile)  # attention at the shapes the all-to-all forms run
        self._context_costs: dict[tuple[int, int, int], list[BlockCost]] = {}
        self._extras: dict[tuple, tuple[list[float], list[float]]] = {}  # each block's all-to-alls and recomputation
        self._totals: dict[int, float] = {}  # seconds of all blocks forward and backward, by the kept lists
        self.placed = Placement(net.gpus_per_node)  # where each layout's groups lie on the nodes
        self.ranks, self.shares = self.placed.ranks, self.placed.shares

    def _slowest(self, kind: str, nbytes: float, ranks: int, shares: tuple[int, ...]) -> float:
        """Seconds of collective ``kind`` over groups of ``ranks`` lying as ``shares`` says, the slowest's."""
        return max(self._coll(kind, nbytes, ranks, g) for g in shares)

    def block_costs(self, t: int, b: int, c: int = 1) -> list[BlockCost]:
        """Each block's price on one of ``t`` ranks for micro-batches of ``b`` samples, each
        sequence cut over ``c`` context ranks (kept)."""
        if c > 1:
            key = (t, b, c)
            if key not in self._context_costs:
                prof = self.context_profile(c)
                self._context_costs[key] = [prof.cost(blk.signature, t, self.samples * c // b) for blk in prof.blocks]
            return self._context_costs[key]
        chunks = self.samples // b
        if (t, chunks) not in self._costs:
            self._costs[(t, chunks)] = [self.profile.cost(blk.signature, t, chunks) for blk in self.profile.blocks]
        return self._costs[(t, chunks)]

    def context_profile(self, c: int) -> Profile:
        """The block prices at ``S / c`` tokens a sequence (:mod:`mapper.cluster.context`)."""
        if c not in self._profiles:
            self._profiles[c] = context_profile(self.profile, c)
        return self._profiles[c]

    def rings(self, lay: Layout) -> list[Ring]:
        """What context parallelism adds to each block (:func:`mapper.cluster.context.cp_times`,
        :func:`mapper.cluster.ulysses.alltoall_times`), its slowest group's."""
        t, c = lay.tensor, lay.context
        key = (t, lay.micro_batch, c, lay.cp, lay.cp_a2a, lay.gpus)
        if key not in self._rings:
            prof = self.context_profile(c)
            seq = max(1, self.profile.batch // self.samples)  # tokens per sequence
            costs = zip(self.block_costs(t, lay.micro_batch, c), prof.blocks)
            if lay.cp in KINDS:  # the all-to-all's groups (all c ranks for Ulysses), the rings of the rest
                k = c if lay.cp == "a2a" else lay.cp_a2a
                shares = self.shares(lay, "context" if lay.cp == "a2a" else "cp_a2a")
                across = lay.cp != "a2a" and min(self.shares(lay, "cp_p2p")) < c // k
                self._rings[key] = [alltoall_times(cost, self.profile.graph, blk.tasks, lay.micro_batch, seq, c, k,
                                                   t, self.net, shares, across, self.attend) for cost, blk in costs]
            else:
                self._rings[key] = [max((cp_times(cost, self.profile.graph, blk.tasks, lay.micro_batch * seq // c,
                                                  c, self.net, t, lay.cp, g) for g in self.shares(lay, "context")),
                                        key=lambda r: r.forward + r.backward) for cost, blk in costs]
        return self._rings[key]

    def _coll(self, kind: str, nbytes: float, ranks: int, per_node: int) -> float:
        """:func:`mapper.parallel.collectives.collective`'s seconds, kept."""
        key = (kind, nbytes, ranks, per_node)
        if key not in self._colls:
            self._colls[key] = collective(self.net, kind, nbytes, ranks, per_node)[0]
        return self._colls[key]

    def _held_sums(self, lay: Layout) -> tuple[list[float], ...]:
        """Prefix sums over the blocks of :meth:`held`'s four parts and of the optimizer's time
        (dense blocks; blocks with experts: their dense share, their experts' share), kept."""
        key = (lay.tensor, lay.expert, lay.etp, self.low.active(lay.zero))  # none of it depends on the micro-batch
        if key not in self._sums:
            rows = []
            priced = next((n for t, n in self._costs if t == lay.tensor), None)
            for c in self._costs[(lay.tensor, priced)] if priced else self.block_costs(lay.tensor, lay.micro_batch,
                                                                                      lay.context):
                dp_, db_, ep_, eb_ = self.held(c, lay)
                moe = c.update / c.params if c.expert_params else 0.0
                rows.append((dp_, db_, ep_, eb_, 0.0 if c.expert_params else c.update, moe * dp_, moe * ep_,
                             *self.low.block(c, lay)))
            self._sums[key] = tuple([0.0, *accumulate(col)] for col in zip(*rows))
        return self._sums[key]

    def _comm(self, c: BlockCost, lay: Layout, backward: bool, etp: int | None = None, only: int = 0) -> float:
        """Seconds of a block's tensor-parallel collectives in one pass (the experts' own among their ``etp``
        ranks); ``only``: those of the modules with these bits alone (:mod:`mapper.cluster.recompute`)."""
        each = self._comm_each(c, lay, etp)
        return sum(x for i, ((_, _, bwd), x) in enumerate(zip(c.collectives, each))
                   if bwd == backward and not (only and not (i < len(c.comm_modules) and c.comm_modules[i] & only)))

    def _comm_each(self, c: BlockCost, lay: Layout, etp: int | None = None) -> list[float]:
        """Seconds of each of a block's tensor-parallel collectives, both passes (:meth:`_comm`'s terms)."""
        out = []
        for i, (kind, nbytes, _) in enumerate(c.collectives):
            expert = etp is not None and i < len(c.expert_comm) and c.expert_comm[i]
            k = etp if expert and etp is not None else lay.tensor
            out.append(self._slowest(kind, nbytes, k, self.shares(lay, "expert_tensor" if expert else "tensor")))
        return out

    def _alltoalls(self, c: BlockCost, lay: Layout) -> float:
        """Seconds of a block's dispatch and combine all-to-alls over the ``expert`` ranks (module
        docstring); the expert ranks are consecutive global ranks (tensor innermost), ``expert_tensor``
        apart."""
        e = lay.expert
        if e <= 1 or not c.routed:
            return 0.0
        shares = self.shares(lay, "expert")
        return sum(2 * self._slowest("alltoall", r / lay.tensor, e, shares) for r in c.routed)

    def _redo(self, c: BlockCost, lay: Layout, bits: int, etp: int | None) -> float:
        """Seconds of recomputing modules ``bits`` of a block: their forward kernels, their
        tensor-parallel collectives, and a recomputed ``moe``'s all-to-alls once more."""
        if not bits:
            return 0.0
        comm = self._comm(c, lay, False, etp, only=bits)
        a2a = self._alltoalls(c, lay) if bits & BIT["moe"] else 0.0
        return c.redo_seconds(bits) + comm + a2a

    def held(self, c: BlockCost, lay: Layout) -> tuple[float, float, float, float]:
        """Parameters and their bytes a rank holds of block price ``c``: the dense ones, then its
        share of the experts' (priced cut over ``tensor`` ranks, held over ``expert x expert_tensor``)."""
        share = lay.tensor / (lay.expert * lay.etp)
        return (c.params - c.expert_params, c.param_bytes - c.expert_param_bytes, c.expert_params * share,
                c.expert_param_bytes * share)

    def _block_times(self, lay: Layout) -> tuple[list[float], list[float]]:
        """Forward and backward seconds per micro-batch of each block, collectives and
        recomputation included (the same lists for layouts that agree on them)."""
        t = lay.tensor
        key = (t, lay.micro_batch, lay.recompute, lay.sequence, lay.expert, lay.etp, lay.overlap, lay.context, lay.cp,
               lay.cp_a2a, lay.gpus)
        if key in self._times:
            return self._times[key]
        fw, bw, bits = [], [], mask(lay.recompute)
        costs = self.block_costs(t, lay.micro_batch, lay.context)
        hide = overlap.parts(lay.overlap)  # communication hidden under computation (mapper.cluster.overlap)
        etp = lay.etp if lay.expert > 1 else None
        a2as, redos = self._expert_parts(lay, costs, bits, etp)
        if (pk := (id(costs), t, etp, lay.gpus)) not in self._pair_lists:  # each block's collectives (lists kept)
            self._pair_lists[pk] = [(self._comm(c, lay, False, etp), self._comm(c, lay, True, etp)) for c in costs]
        pairs = self._pair_lists[pk]  # the same for every recomputation and overlap
        cut_seq, share, full = lay.sequence and t > 1, 1 - 1 / t, lay.recompute == "full"
        again, tp, a2a_hidden = bits & BIT["core_attn"] and not full, "tp" in hide, "a2a" in hide
        for n, (c, ring) in enumerate(zip(costs, self.rings(lay))):
            f, b = c.forward + ring.forward, c.backward + ring.backward  # every ring step, its sends as exposed
            if cut_seq:  # norms and residual adds cut by the sequence too
                f -= c.replicated * share
                b -= min(OTHER_BACKWARD * c.replicated, c.backward) * share  # never more than it holds
            cf, cb = pairs[n]
            if tp:
                cf, cb = overlap.tp_exposed(c, self._comm_each(c, lay, etp), [x[2] for x in c.collectives], t,
                                            overlap.first_gemm(costs[n + 1]) if n + 1 < len(costs) else 0.0)
            a2a = a2as[n]  # dispatch and combine, forward and backward alike
            if a2a_hidden:
                a2a = overlap.alltoall_exposed(a2a, f, b)
            cf, cb = cf + a2a, cb + a2a
            redo = f + cf if full else redos[n]
            redo += ring.forward if again else 0.0  # the whole ring again
            fw.append(f + cf if not c.unrunnable else math.inf)  # inf, never inf - inf (nan)
            bw.append(b + cb + redo if not c.unrunnable else math.inf)
        self._times[key] = (fw, bw)
        return fw, bw

    def _expert_parts(self, lay: Layout, costs: list[BlockCost], bits: int,
                      etp: int | None) -> tuple[list[float], list[float]]:
        """Each block's :meth:`_alltoalls` and :meth:`_redo` of modules ``bits``, kept: the same for
        every kind of context parallelism, overlap, sequence parallelism and cut."""
        key = (lay.tensor, lay.micro_batch, lay.context, lay.expert, lay.etp, lay.gpus, bits)
        if key not in self._extras:
            self._extras[key] = ([self._alltoalls(c, lay) for c in costs],
                                 [self._redo(c, lay, bits, etp) for c in costs])
        return self._extras[key]

    def cut(self, lay: Layout) -> tuple[tuple[int, ...], list[float], list[float]] | None:
        """The first block of each of ``lay``'s ``p v`` chunks (by time, or by layers with ``first``/``last``)
        and each block's forward and backward seconds; None when the blocks cannot be cut so (kept)."""
        key = (lay.tensor, lay.micro_batch, lay.recompute, lay.sequence, lay.expert, lay.etp, lay.overlap, lay.context,
               lay.cp, lay.cp_a2a, lay.pipeline * lay.interleave, lay.first, lay.last, lay.gpus)
        if key not in self._parts:
            fw, bw = self._block_times(lay)
            starts = self._by_layers(lay) if lay.first is not None or lay.last is not None else partition(
                [f + b for f, b in zip(fw, bw)], lay.pipeline * lay.interleave)
            self._parts[key] = None if starts is None else (starts, fw, bw)
        return self._parts[key]

    def estimate(self, lay: Layout, schedule: str = "1f1b") -> Estimate | None:
        """The layout's :class:`Estimate`, or None when its blocks cannot be cut into its chunks."""
        t, p, v = lay.tensor, lay.pipeline, lay.interleave
        m = self.samples // (lay.data * lay.micro_batch)
        d = lay.replicas  # the ranks that reduce gradients together: data x context
        cut = self.cut(lay)
        if cut is None:
            return None
        starts, fw, bw = cut
        costs = self.block_costs(t, lay.micro_batch, lay.context)
        sums = self._held_sums(lay)
        blocks = self.profile.blocks
        ends = [*starts[1:], len(blocks)]
        rank_time, rank_bwd, rank_params, rank_pbytes = ([0.0] * p for _ in range(4))
        rank_eparams = [0.0] * p  # the rank's expert shards (held over expert x expert_tensor)
        rank_ebytes = [0.0] * p
        rank_w = [[0.0] * p for _ in range(4)]  # weights held and all-gathered, dense and experts (LowParams.block)
        rank_act = [0.0] * p  # activation bytes of one micro-batch through all the rank's chunks
        rank_work = [0.0] * p  # bytes of the block being recomputed (once, whatever is in flight)
        rank_z3, rank_live = [0.0] * p, [0.0] * p  # ZeRO 3: bytes of the gathered weights of two blocks (running, next)
        chunk_times: list[tuple[float, float]] = []
        rings = self.rings(lay)
        chunk_ring = tuple((sum(r.exposed_forward for r in rings[a:e]), sum(r.exposed_backward for r in rings[a:e]))
                           for a, e in zip(starts, ends)) if lay.context > 1 else ()
        comp, hops = [(sum(fw[a:e]), sum(bw[a:e])) for a, e in zip(starts, ends)], [0.0] * (p * v)  # and sends
        for ci, e in enumerate(ends[:-1]):
            out = blocks[e - 1].out_bytes / self.samples * lay.micro_batch / lay.context  # the tensor sent on
            across = self.ranks(lay.gpus).send_crosses(ci % p, (ci + 1) % p, p)  # where any rank pair crosses
            if out > 0:  # across nodes each tensor rank sends 1/t and they all-gather it (SC'21, 4.1)
                hops[ci] = send(self.net, out, across) if not (across and t > 1) else send(
                    self.net, out / t, True) + self._slowest("allgather", out, t, self.shares(lay, "tensor"))
        sends = overlap.p2p_sends(hops, comp, p, v, m) if "p2p" in overlap.parts(lay.overlap) and v > 1 else ()
        for ci, (a, e) in enumerate(zip(starts, ends)):
            s = ci % p
            f, b = (x + y for x, y in zip(comp[ci], sends[ci][3:] if sends else (hops[ci], hops[ci])))
            rank_time[s] += f + b
            rank_bwd[s] += b
            chunk_times.append((f, b))
            rank_params[s] += sums[0][e] - sums[0][a]
            rank_pbytes[s] += sums[1][e] - sums[1][a]
            rank_eparams[s] += sums[2][e] - sums[2][a]
            rank_ebytes[s] += sums[3][e] - sums[3][a]
            for k in range(4):
                rank_w[k][s] += sums[7 + k][e] - sums[7 + k][a]
            kept, work = self._activations(lay, range(a, e))
            redone = lay.recompute == "full" or mask(lay.recompute) & BIT["core_attn"]  # cp=a2a's output copy freed
            rank_act[s] += kept + (0.0 if redone else sum(r.kept for r in rings[a:e]))
            ring = max((r.buffers for r in rings[a:e]), default=0.0)  # the ring's, while a layer runs
            rank_work[s] = max(rank_work[s], work + ring)
            if lay.zero == 3 and d > 1:  # each block gathered for forward and backward, its gradients scattered
                gathers, scatters = self._sharded(lay, costs, range(a, e), s)
                zf = zero3.forward(fw[a:e], gathers) - sum(fw[a:e])
                zb = zero3.backward(bw[a:e], gathers, scatters) - sum(bw[a:e])
                rank_z3[s] += zf + zb
                whole = [self.low.held_bytes(costs[i], lay) for i in range(a, e)]
                rank_live[s] = max(rank_live[s], zero3.live(whole))
                chunk_times[-1] = (f + zf, b + zb)
        rank_time = [x + z for x, z in zip(rank_time, rank_z3)]
        pipe = step_time(rank_time, m, v)
        opt = OPTIMIZERS[self.optimizer]
        sync = 0.0
        rank_sync = []
        updates = [0.0] * p
        moe_updates = [0.0] * p  # blocks with experts: the optimizer's time splits as its parameters
        shards = (d, lay.expert_data) if lay.zero >= 1 else (1, 1)
        for ci, (a, e) in enumerate(zip(starts, ends)):
            updates[ci % p] += sums[4][e] - sums[4][a]
            moe_updates[ci % p] += (sums[5][e] - sums[5][a]) / shards[0] + (sums[6][e] - sums[6][a]) / shards[1]
        de = lay.expert_data
        for s in range(p):
            total = 0.0
            grads = 0.0
            for group, kind, params, pbytes, moved in ((d, "data", rank_params[s], rank_pbytes[s], rank_w[2][s]),
                                                       (de, "expert_data", rank_eparams[s], rank_ebytes[s],
                                                        rank_w[3][s])):
                g = self._grad_bytes(params, pbytes)  # the buffer reduced
                grads += g
                if group <= 1 or lay.zero >= 3 or g <= 0:
                    continue
                shares = self.shares(lay, kind, s)  # the stage's groups, its slowest
                if lay.zero >= 1:  # the distributed optimizer: gradients scattered, new weights gathered
                    total += max(self._coll("reducescatter", g, group, pn) + self._coll("allgather", moved, group, pn)
                                 for pn in shares)
                else:
                    total += self._slowest("allreduce", g, group, shares)
            buckets = max(1, math.ceil(grads / BUCKET))
            exposed = max(total - rank_bwd[s] / max(1, v), total / buckets) if total > 0 else 0.0
            upd = updates[s] / shards[0] + moe_updates[s]
            sync = max(sync, exposed + upd)
            rank_sync.append(exposed + upd)
        fullest, memory, ranks = self._memory(lay, (rank_params, rank_eparams), (rank_pbytes, rank_ebytes),
                                              rank_act, rank_work, m, opt.states, schedule == "gpipe", rank_w[:2])
        if any(rank_live):  # ZeRO 3's gathered blocks beside the shards
            ranks = tuple(r + x for r, x in zip(ranks, rank_live))
            fullest = max(range(p), key=lambda r: ranks[r])
            memory = {**memory, "weights": memory["weights"] + rank_live[fullest]}
        return Estimate(lay, schedule, m, pipe + sync, pipe, sync, tuple(starts), tuple(rank_time),
                        tuple(chunk_times), tuple(rank_sync), memory, self.capacity, fullest, rank_memory=ranks,
                        blocked=next((c.unrunnable for c in costs if c.unrunnable), ""), chunk_ring=chunk_ring,
                        chunk_sends=tuple(sends))

    def _sharded(self, lay: Layout, costs: list[BlockCost], indices: range, stage: int = 0) -> tuple[list[float], ...]:
        """Seconds of ZeRO-3's all-gather of each block's weights and reduce-scatter of its gradients over
        the ``data x context`` ranks of stage ``stage``, its slowest group's (:func:`.zero3.sharded`)."""
        d = lay.replicas  # the ranks holding the same weights: data x context
        shares = self.shares(lay, "data", stage)
        gathers, scatters = [], []
        for i in indices:
            dp_, db_, ep_, eb_ = self.held(costs[i], lay)
            moved = self.low.gathered_bytes(costs[i], lay)  # as the run gathers them (lowparam)
            gathers.append(max(zero3.sharded(self.net, "allgather", moved, d, g, self.fsdp) for g in shares))
            scatters.append(max(zero3.sharded(self.net, "reducescatter", self._grad_bytes(dp_ + ep_, db_ + eb_), d, g,
                                              self.fsdp) for g in shares))
        return gathers, scatters

    def memory_floor(self, lay: Layout) -> float:
        """Bytes per GPU the fullest pipeline rank of ``lay`` holds at least, whatever its cut: the
        weights, gradients and optimizer state of all blocks and one micro-batch's activations
        (every rank keeps at least one in flight) over its ``pipeline`` ranks (the fullest holds
        no less than their mean), the allocator's fragmentation of those activations, and
        the reserve (:mod:`mapper.cluster.reserve`). Activations grow linearly with the
        micro-batch, so they are scaled from a micro-batch already priced (no block is priced for
        it). Rank ``s`` holds ``x_s = S_s +
        A_s f_s`` (states, one micro-batch's activations, ``f_s`` in flight), so the fullest also
        holds at least the mean of ``x_s`` weighted by ``1 / f_s``: ``(A + S / max f) / sum
        1/f``; the larger of the two floors. A layout above the GPU's memory cannot fit
        (:mod:`mapper.cluster.sweep`)."""
        sums = self._held_sums(lay)
        states = OPTIMIZERS[self.optimizer].states
        dense = state_bytes(sums[0][-1], sums[1][-1], states, self.grad, lay.zero, lay.replicas, sums[7][-1])
        experts = state_bytes(sums[2][-1], sums[3][-1], states, self.grad, lay.zero, lay.expert_data, sums[8][-1])
        chunks = next((n for t, n in self._costs if t == lay.tensor), self.samples // lay.micro_batch)
        priced = next((b for t, b, c in self._context_costs if (t, c) == (lay.tensor, lay.context)), lay.micro_batch)
        ref = self.samples // chunks if lay.context == 1 else priced
        kept, inputs, _ = self._act_sums(lay, ref)
        act = (inputs if lay.recompute == "full" else kept)[-1] * lay.micro_batch / ref
        held = sum(dense.values()) + sum(experts.values())
        act = sum(activation_parts(act, self.fragmentation).values()) * (1 - 1e-9)  # and its fragmentation
        # and the mean over ranks weighted by 1/flight: rank s holds its states and act_s flight_s
        flights = in_flight(lay.pipeline, lay.interleave, self.samples // (lay.data * lay.micro_batch))
        weighted = (act + held / max(flights)) / sum(1 / f for f in flights)
        return max((held + act) / lay.pipeline, weighted) + reserve(self.capacity, lay)

    def time_floor(self, lay: Layout) -> float:
        """Seconds no step of ``lay`` goes below (closed form or simulated): each of ``m``
        micro-batches passes every block forward and backward, spread at best evenly over the
        ``pipeline`` ranks."""
        fw, bw = self._block_times(lay)
        if id(fw) not in self._totals:  # the lists are kept, so their ids stay theirs
            self._totals[id(fw)] = sum(fw) + sum(bw)
        return self.samples // (lay.data * lay.micro_batch) * self._totals[id(fw)] / lay.pipeline * (1 - 1e-9)

    def _by_layers(self, lay: Layout) -> tuple[int, ...] | None:
        """Chunk starts with ``first``/``last`` layers at the ends and equal shares between
        (:mod:`mapper.cluster.layers`); None when the layers do not divide so."""
        if self._layers is None:
            self._layers = layer_starts(self.profile.graph, self.profile.blocks)
        counts = layer_counts(len(self._layers), lay.pipeline * lay.interleave, lay.first, lay.last)
        return None if isinstance(counts, str) else chunk_starts(self._layers, counts, len(self.profile.blocks))

    def _grad_bytes(self, params: float, pbytes: float) -> float:
        """Bytes of the gradient buffer of ``params`` parameters held in ``pbytes`` (:func:`state_bytes`)."""
        per = GRAD_BYTES.get(self.grad)
        return pbytes if per is None else per * params

    def _activations(self, lay: Layout, indices: range) -> tuple[float, float]:
        """Activation bytes one micro-batch leaves in blocks ``indices`` until its backward pass, and
        with full recomputation the bytes of the largest block while it is recomputed."""
        kept, inputs, stash = self._act_sums(lay)
        a, e = indices.start, indices.stop
        if lay.recompute == "full":  # each block's input, and one block's worth while recomputing
            return inputs[e] - inputs[a], max(stash[a:e], default=0.0)
        return kept[e] - kept[a], 0.0

    def _act_sums(self, lay: Layout, b: int = 0) -> tuple[list[float], list[float], list[float]]:
        """Prefix sums over the blocks of what one micro-batch (of ``b``, else the layout's) keeps
        (recomputed modules freed: :mod:`mapper.cluster.recompute`; sequence parallelism cuts every
        activation by ``t``, Korthikanti et al., 4.2.2) and of the block inputs full recomputation
        keeps, and each block's stash (kept)."""
        t, sp, b = lay.tensor, lay.sequence and lay.tensor > 1, b or lay.micro_batch
        key = (t, b, lay.recompute, lay.sequence, lay.context)
        if key not in self._acts:
            costs = self.block_costs(t, b, lay.context)
            whole = self.block_costs(1, b, lay.context) if sp else costs
            bits = mask(lay.recompute)
            kept = [(c.stash - c.dropped(bits)) / (t if sp else 1) for c in whole]
            inputs = [c.input_bytes / (t if lay.sequence else 1) if c.params > 0 else 0.0 for c in costs]
            self._acts[key] = ([0.0, *accumulate(kept)], [0.0, *accumulate(inputs)], [c.stash for c in costs])
        return self._acts[key]

    def _memory(self, lay: Layout, params: tuple[list[float], list[float]], pbytes: tuple[list[float], list[float]],
                act: list[float], work: list[float], m: int, states: int, gpipe: bool = False,
                held: list[list[float]] | None = None) -> tuple[int, dict[str, float], tuple[float, ...]]:
        """The pipeline rank whose GPUs hold the most, what they hold by part, and each rank's bytes
        (``params`` and ``pbytes``: the dense ones, sharded over ``data``, and the expert shards, over
        the expert-data ranks; ``held``: the weights' bytes as held, dense and experts)."""
        p, d, v, kept = lay.pipeline, lay.replicas, lay.interleave, reserve(self.capacity, lay)  # the same on each rank
        best: dict[str, float] = {}
        fullest = 0
        ranks: list[float] = []
        for s, flight in enumerate(in_flight(p, v, m, gpipe)):
            dense = state_bytes(params[0][s], pbytes[0][s], states, self.grad, lay.zero, d, held and held[0][s])
            experts = state_bytes(params[1][s], pbytes[1][s], states, self.grad, lay.zero, lay.expert_data,
                                  held and held[1][s])
            parts = {**{k: dense[k] + experts[k] for k in dense},
                     **activation_parts(act[s] * flight + work[s], self.fragmentation),
                     "reserve": kept}
            ranks.append(sum(parts.values()))
            if sum(parts.values()) > sum(best.values()):
                best, fullest = parts, s
        return fullest, best, tuple(ranks)


def in_flight(p: int, v: int, m: int, gpipe: bool = False) -> list[float]:
    """Micro-batches whose activations each pipeline rank holds at its peak (module docstring)."""
    if gpipe:  # every micro-batch's forward before the first backward
        return [float(m)] * p
    if v > 1:  # interleaved: its warm-up forwards plus one, over its v chunks
        return [min(m * v, 2 * (p - s - 1) + (v - 1) * p + 1) / v for s in range(p)]
    return [float(min(p - s, m)) for s in range(p)]


def refine(est: Estimate) -> Estimate:
    """``est`` with its pipeline time simulated op by op in the schedule's order
    (:func:`mapper.cluster.schedule.simulate`) instead of the closed form, which is exact for
    equal chunks and within a few per cent otherwise."""
    times = est.chunk_times
    pipe = simulate(orders(est.schedule, est.layout.pipeline, est.layout.interleave, est.micro_batches),
                    lambda op: times[op[1]][0 if op[0] == "F" else 1])
    return replace(est, pipeline=pipe, step=pipe + est.sync)


def lower_bound(est: Estimate) -> float:
    """A bound no schedule of ``est``'s chunks beats, under the model: some rank ``r`` works
    ``m`` times its time per micro-batch; before its first op the first micro-batch's forward
    passes every chunk before ``r``'s first (chunk ``r``), and after its last op (a backward)
    that backward passes them again: ``max_r (sum_{c<r} (F_c + B_c) + m T_r)``, plus the
    synchronisation after the pipeline. No schedule's simulated step is below it (the
    interleaved closed form can be: it ranks, it does not bound), so the best simulated layout
    is proven best when no other layout's bound is lower (:mod:`mapper.cluster.search`). A mixed
    pipeline's bound covers every split of its layers (:mod:`mapper.cluster.split`)."""
    times = est.chunk_times
    prefix = 0.0
    best = 0.0
    for r, rank in enumerate(est.rank_times):
        best = max(best, prefix + est.micro_batches * rank)
        if r < len(times):
            prefix += times[r][0] + times[r][1]
    if est.split_floor is not None:
        return min(best + est.sync, est.split_floor)
    return best + est.sync

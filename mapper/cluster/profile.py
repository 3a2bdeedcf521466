"""Block prices for the plan model, from the cost model (:mod:`mapper.cluster`).

:class:`Profile` prices one block of each signature (:mod:`mapper.cluster.blocks`)
for a tensor degree ``t`` and a micro-batch (the batch cut in ``chunks``) as
the single-node planner does, on one node of the platform: the block is split
(:func:`mapper.parallel.rewrite.split_graph`, one chunk), fused, turned into a
training step with its tensor-parallel collectives
(:func:`mapper.parallel.gradients.synchronise`) and priced by
:func:`mapper.costing.cost.device_column` (the cost table's column of rank 0 alone); its times are summed. The kernels
of a rank run one after another, so a block's forward time is the sum of its
forward kernels (and likewise backward and update). Collectives are kept as
``(kind, bytes)`` for the cluster's own pricing (:mod:`mapper.parallel.collectives`).
Without an optimizer the block is priced as inference prices it: its forward
kernels in order (:mod:`mapper.serving`), no training step.

Activation memory (what the backward pass keeps) is counted per op as
Korthikanti et al. count it ("Reducing Activation Recomputation in Large
Transformer Models", MLSys 2023, section 4.1): the activation inputs of
every op but additions and rotary embeddings (:data:`LINEAR_OPS`), and for unfused attention its scores, softmax output
and the dropout of it (``5 a s^2 b`` bytes in 16-bit per layer: :data:`SCORE_BYTES`
per head and query-key pair). Fused attention (FlashAttention, Dao et al.,
NeurIPS 2022, algorithm 2) keeps no scores: its backward pass recomputes them
from Q, K, V, its output and the log-sum-exp of each query row and head, one
f32 each (:data:`LSE_BYTES`; ``softmax_lse`` of ``flash_attn``'s forward), so
a fused layer keeps ``34 s b h`` less the dropout masks plus ``4 a s b``. The
graph has no dropout ops, so their masks (``2 s b h`` bytes of the paper's
``34 s b h``) are not counted. In training the model's outputs (the logits) feed
the loss, which keeps them in f32 (Korthikanti et al., 4.3: ``4 s b v / t``, cut by
the vocabulary). Ops written as PyTorch's composite forms (``fused = 0``) keep what
autograd saves: RMSNorm as the LLaMA reference code writes it
(``norm(x.float()).type_as(x) * weight``) its input in f32 and its output before the
gain, SwiGLU (``silu(gate) * up``) silu's output besides its input. A GEMM run in a
low-precision format (``--precision``) keeps its input as it cast it, ``e`` bytes an element
(Transformer Engine's linear layers save the quantised input for the weight
gradient; :data:`mapper.costing.precision.ELEMENT_BYTES`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from mapper.cluster.blocks import Block, block_graph, cut_blocks
from mapper.cluster.recompute import dropped, names, origin
from mapper.core.graph import DTYPE_BYTES, Task, TaskGraph
from mapper.core.opdefs.dnn import held_positions
from mapper.core.ops import ATTENTION_OPS
from mapper.costing.cost import device_column
from mapper.costing.efficiency import op_class
from mapper.costing.precision import ELEMENT_BYTES
from mapper.costing.training import training_step
from mapper.errors import OptionsError
from mapper.parallel.gradients import synchronise
from mapper.parallel.layout import LayoutSpec
from mapper.parallel.plan import Plan
from mapper.parallel.rewrite import split_graph
from mapper.platform.devices import Platform, Switch
from mapper.platform.schema import switch_links

#: Bytes kept per head and query-key pair by attention: scores and softmax output (16-bit, 2 + 2)
#: and the dropout output (a 1-byte mask and 16-bit values would be 3; Korthikanti et al. count
#: 5 a s^2 b in all: softmax output 2, dropout mask 1, dropout output 2).
SCORE_BYTES = 5.0
#: Ops whose gradient needs none of their inputs: sums, and the rotary embedding (its gradient is
#: the inverse rotation; Megatron-Core's fused RoPE saves only the angles).
LINEAR_OPS = frozenset({"add", "sub", "allreduce", "concat", "rotary"})
#: Bytes fused attention keeps per head and query row: the f32 log-sum-exp of its softmax
#: (FlashAttention's ``softmax_lse``, Dao et al., NeurIPS 2022, algorithm 2 line 13).
LSE_BYTES = 4.0
#: Bytes of an f32 element: what the cross-entropy loss keeps of each logit (Korthikanti et al., 4.3:
#: ``4 s b v / t``, the logits in f32) and PyTorch's composite RMSNorm of each input element.
F32_BYTES = 4.0
#: The widest tensor group priced: a block is split into ``t`` pieces priced on ``t`` GPUs (work
#: that grows as ``t^2``); four times the widest of Megatron-LM, 8 GPUs, one node's NVLink
#: (Narayanan et al., SC'21, Table 1).
MAX_TENSOR = 32
#: The most blocks a model may cut into for the planners, whose every layout is priced block by
#: block: twice the blocks of Megatron-LM's largest model, 128 layers of two (SC'21, Table 1).
MAX_BLOCKS = 512
#: The deepest pipeline the serving planner tries (every depth up to it, each with its
#: micro-batch counts, each priced block by block): Megatron-LM's deepest, 64 stages (SC'21, Table 1).
MAX_STAGES = 64


def check_tensor(given: LayoutSpec) -> None:
    """An OptionsError for a given tensor degree wider than :data:`MAX_TENSOR` (before any pricing)."""
    if (given.tensor or 1) > MAX_TENSOR:
        raise OptionsError(f"tensor={given.tensor}: the planners price tensor groups of at most {MAX_TENSOR} "
                           "GPUs (each block is split and priced that many ways)", obj="--parallel")


@dataclass(frozen=True, slots=True)
class BlockCost:
    """One block on one tensor-parallel rank for one micro-batch."""

    forward: float  # seconds of forward kernels
    backward: float  # seconds of backward kernels (input and weight gradients)
    update: float  # seconds of the optimizer step of the rank's weights (once per step)
    attention: float  # forward seconds of attention kernels (selective recomputation runs them again)
    replicated: float  # forward seconds of kernels every rank repeats (norms, residual adds): SP divides them
    collectives: tuple[tuple[str, float, bool], ...]  # (kind, bytes, in the backward pass)
    params: float  # parameters held by the rank
    param_bytes: float  # their bytes
    stash: float  # activation bytes kept for the backward pass, attention scores included
    scores: float  # of which attention scores (selective recomputation drops them)
    input_bytes: float  # the block's input (what full recomputation keeps)
    #: forward kernels in order: seconds, the ops fused in it, and for a collective its index in
    #: ``collectives`` (its time is the cluster's to price; -1 for a kernel)
    kernels: tuple[tuple[float, tuple[str, ...], int], ...] = ()
    working: float = 0.0  # the largest forward kernel's footprint less its weights (inference's peak)
    unrunnable: str = ""  # a kernel the GPU cannot run at this size, and why (the cost table's reason)
    expert_params: float = 0.0  # of ``params``, the experts' (grouped GEMM weights): expert parallelism shards them
    expert_param_bytes: float = 0.0  # their bytes
    routed: tuple[float, ...] = ()  # bytes of the rows each MoE dispatch sends to the experts (one per MoE layer)
    expert_comm: tuple[bool, ...] = ()  # per collective: the experts' own (cut over expert_tensor ranks)
    #: forward kernels of recomputable modules (:mod:`mapper.cluster.recompute`): (module bits, seconds)
    redo: tuple[tuple[int, float], ...] = ()
    comm_modules: tuple[int, ...] = ()  # per collective: the module bits of the op it belongs to
    #: what the forward keeps, per tensor: (bytes, consumer's module bits, producer's, the tensor's
    #: index in order of first use)
    kept: tuple[tuple[float, int, int, int], ...] = ()
    attention_backward: float = 0.0  # backward seconds of attention kernels (context parallelism's ring steps)
    #: weights read by low-precision GEMMs (mapper.cluster.lowparam): the dense ones' parameters and bytes, the experts'
    low: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)

    def redo_seconds(self, bits: int) -> float:
        """Forward kernel seconds of the modules ``bits`` (their recomputation)."""
        return sum(s for b, s in self.redo if b & bits)

    def dropped(self, bits: int) -> float:
        """Activation bytes recomputing modules ``bits`` frees (:func:`mapper.cluster.recompute.dropped`)."""
        return dropped(self.kept, bits) if bits else 0.0


def _cut(node: Platform, names: tuple[str, ...]) -> Platform:
    """``node`` with only the devices ``names`` and its host (which relays between devices without
    a link), their declared links and their switch ports: a task's time on one of them and the
    route between two are the node's, in a cost table of ``t`` columns instead of the node's."""
    keep = set(names) | ({node.host} if node.host is not None else set())
    devices = tuple(replace(d, index=i) for i, d in enumerate(d for d in node.devices if d.name in keep))
    if len(devices) == len(node.devices):
        return node
    switches = tuple(replace(sw, ports=ports) for sw in node.switches
                     if len(ports := tuple(p for p in sw.ports if p in keep)) >= 2)
    declared = [link for link in node.links if not link.switch and link.src in keep and link.dst in keep]
    links = switch_links(tuple(replace(link, index=i) for i, link in enumerate(declared)), switches)
    return replace(node, devices=devices, links=links, switches=switches)


def kv_bytes(task: Task, positions: int, tensor: int = 1) -> float:
    """Bytes of the keys and values attention ``task`` keeps for ``positions`` of every sequence on
    one of ``tensor`` ranks: ``2 kv_heads/t head_dim`` elements a position (a rank keeps whole
    key-value heads; with fewer heads than ranks each rank keeps one); a sliding window keeps its
    last ``W`` positions only (:func:`~mapper.core.opdefs.dnn.held_positions`)."""
    if task.op != "attention" or task.output is None:
        return 0.0
    heads = int(task.attr("heads"))
    kv = int(task.attr("kv_heads") or heads)
    dh = task.output.shape[1] // heads
    sequences = task.output.shape[0] // int(task.attr("seq"))
    positions = held_positions(positions, int(task.attr("window") or 0))
    return 2.0 * max(kv // tensor, 1) * dh * positions * sequences * DTYPE_BYTES.get(task.output.dtype, 2)


def _kept_items(task: Task) -> list[tuple[float, str, bool]]:
    """What ``task`` keeps for its backward pass, one entry per tensor: bytes, the tensor's
    producer (the part's own name for its attention scores or log-sum-exp rows), and whether
    it is attention scores."""
    out: list[tuple[float, str, bool]] = []
    for p in task.parts or (task,):
        if p.op in LINEAR_OPS or op_class(p.op, None) == "movement":
            continue
        for o in p.operands:
            if o.kind == "weight":
                continue
            per = o.type.numel * ELEMENT_BYTES[p.precision] if p.precision in ELEMENT_BYTES else float(o.type.nbytes)
            if p.op == "rmsnorm" and not p.attr("fused", 1):  # its input in f32 and its output before the gain
                per = o.type.numel * (F32_BYTES + DTYPE_BYTES.get(o.type.dtype, 2))
            out.append((per, o.name, False))  # a quantised GEMM keeps its input as it cast it
        if p.op == "swiglu" and not p.attr("fused", 1) and p.output is not None:  # silu(gate), kept by the product
            out.append((float(p.output.nbytes), p.name, False))
        if p.op in ATTENTION_OPS and p.output is not None:
            tokens, heads = p.output.shape[0], int(p.attr("heads"))
            if p.attr("fused", 1):  # the log-sum-exp rows only
                out.append((LSE_BYTES * heads * tokens, p.name, False))
                continue
            keys = int(p.attr("seq")) + int(p.attr("cache") or 0)
            out.append((SCORE_BYTES * heads * keys * tokens * DTYPE_BYTES.get(p.output.dtype, 2) / 2, p.name, True))
    return out


def _expert_weights(g: TaskGraph) -> tuple[str, ...]:
    """Names of the experts' weights (``grouped_matmul``'s) in a training step ``g``."""
    return tuple(sorted({o.name for t in g.tasks for p in (t.parts or (t,)) if p.op == "grouped_matmul"
                         for o in p.operands if o.kind == "weight"}))


def _touches(task: Task, names: tuple[str, ...]) -> bool:
    """``task`` reads one of the weights ``names`` or their optimizer states (``NAME.adam``)."""
    return any(o.kind == "weight" and o.name.startswith(names) for p in (task.parts or (task,)) for o in p.operands)


class Profile:
    """Prices of a forward graph's blocks on one node (module docstring)."""

    def __init__(self, graph: TaskGraph, node: Platform, gpu: str, prepare: Callable[[TaskGraph], TaskGraph],
                 optimizer: str | None) -> None:
        self.graph = graph
        self.node = node
        self.prepare = prepare
        self.optimizer = optimizer
        self.blocks: tuple[Block, ...] = cut_blocks(graph)
        if len(self.blocks) > MAX_BLOCKS:
            raise OptionsError(f"the model cuts into {len(self.blocks):,} blocks; the planners lay out at most "
                               f"{MAX_BLOCKS} (a GPT layer is two: some 250 layers)", obj="--parallel")
        gpus = [d.name for d in node.devices if d.kind == node.devices[node.device_index(gpu)].kind]
        self.mesh = tuple([gpu] + [g for g in gpus if g != gpu])
        self.gpu = gpu
        self.rep: dict[int, TaskGraph] = {}
        for b in self.blocks:
            if b.signature not in self.rep:
                self.rep[b.signature] = block_graph(graph, b)
        self._cache: dict[tuple[int, int, int], BlockCost] = {}
        self._platforms: dict[int, tuple[Platform, tuple[str, ...]]] = {}

    @property
    def batch(self) -> int:
        """The leading axis of the graph's inputs (tokens, or samples)."""
        return min((ty.shape[0] for _, ty in self.graph.inputs if ty.shape), default=1)

    def cost(self, signature: int, tensor: int, chunks: int) -> BlockCost:
        """Block ``signature`` on one of ``tensor`` ranks, for 1/``chunks`` of the batch."""
        key = (signature, tensor, chunks)
        if key not in self._cache:
            self._cache[key] = self._price(self.rep[signature], tensor, chunks)
        return self._cache[key]

    def platform(self, tensor: int) -> tuple[Platform, tuple[str, ...]]:
        """The node cut to the group's GPUs (and its host), or for a tensor group wider than a node
        as many copies of its GPU on one switch (their times are the GPU's; the collectives are
        priced by the cluster model anyway); one platform per degree, kept."""
        if tensor not in self._platforms:
            if tensor <= len(self.mesh):
                self._platforms[tensor] = _cut(self.node, self.mesh[:tensor]), self.mesh[:tensor]
            else:
                dev = self.node.devices[self.node.device_index(self.gpu)]
                devices = tuple(replace(dev, index=i, name=f"rank{i}") for i in range(tensor))
                names = tuple(d.name for d in devices)
                wide = Platform(f"{self.node.name} x{tensor}", devices, switches=(Switch("ranks", names, 1.0),))
                self._platforms[tensor] = replace(wide, links=switch_links((), wide.switches)), names
        return self._platforms[tensor]

    def _price(self, sub: TaskGraph, tensor: int, chunks: int) -> BlockCost:
        node, mesh = self.platform(tensor)
        plan = Plan(data=1, tensor=tensor, stages=1, micro_batches=chunks, devices=mesh, vocab=True,
                    parallel_loss=self.optimizer is not None)  # training: no logits gathered
        split = split_graph(sub, plan, node, first_chunk=True)
        if self.optimizer is None:  # inference: the forward kernels and their collectives only
            g = self.prepare(split.graph)
        else:
            g = synchronise(training_step(self.prepare(split.graph), self.optimizer), split, node, self.optimizer)
        rank0 = mesh[0]
        d = node.device_index(rank0)
        mine = [t.index for t in g.tasks if t.placement.allow[:1] == (rank0,)]  # rank 0's: its column alone
        times, why_not, footprint = device_column(g, node, d, mine)
        unbounded = None  # the same node without memory limits: expert kernels' times (below)
        shards = _expert_weights(g)
        fwd = bwd = upd = att = att_b = rep = stash = scores = params = pbytes = 0.0
        comms: list[tuple[str, float, bool]] = []
        experts = tuple(t.name + "." for t in sub.tasks if t.op == "grouped_matmul")
        expert_comm: list[bool] = []
        kernels: list[tuple[float, tuple[str, ...], int]] = []
        working = 0.0
        unrunnable = ""
        eparams = ebytes = 0.0
        low = [0.0, 0.0, 0.0, 0.0]  # quantised GEMMs' weights: parameters, bytes; the experts' of them
        routed: list[float] = []
        seen: set[str] = set()
        tags = names(sub)
        redo: list[tuple[int, float]] = []
        comm_modules: list[int] = []
        kept: list[tuple[float, int, int, int]] = []
        tensor_ids: dict[str, int] = {}  # tensors by first use: a block's cost never names its chunk
        # training: the model's outputs (the logits) feed the loss, which keeps them in f32
        loss = set(self.graph.outputs) & set(sub.outputs) if self.optimizer is not None else set()
        for task in g.tasks:
            if task.placement.allow[:1] != (rank0,):
                continue
            seconds = times[task.index]
            if not math.isfinite(seconds) and shards and _touches(task, shards):
                # a kernel of every expert's weights (their gradient or optimizer step) can outgrow one
                # GPU here, but a rank runs it on its 1/expert share: the plan model counts that memory
                if unbounded is None:
                    unbounded = device_column(g, replace(node, devices=tuple(
                        replace(dv, memory_gib=None) for dv in node.devices)), d, mine)[0]
                seconds = unbounded[task.index]
            if not unrunnable and not task.explicit_cost and not math.isfinite(seconds):
                unrunnable = f"{task.name} ({why_not.get(task.index, 'no cost')})"
            if task.explicit_cost:  # a collective: priced by the cluster model
                if ".grads.allreduce" in task.name:  # a weight every rank holds: its gradients agree
                    continue
                kind = "allreduce" if task.op == "allreduce" else "allgather"
                nbytes = task.operands[0].type.nbytes * (1 if kind == "allreduce" else len(task.operands))
                comms.append((kind, float(nbytes), task.backward))
                expert_comm.append(bool(experts) and task.name.startswith(experts))
                comm_modules.append(0 if task.backward else origin(task.name, tags))
                if not task.backward:
                    kernels.append((0.0, (task.op,), len(comms) - 1))
            elif task.backward and task.name.endswith(".update"):
                upd += seconds
            elif task.backward:
                bwd += seconds
                att_b += seconds if any(p.op in ATTENTION_OPS for p in task.parts or (task,)) else 0.0
            else:
                fwd += seconds
                parts = task.parts or (task,)
                kernels.append((seconds, tuple(p.op for p in parts), -1))
                # what the cost table holds resident for it (unfused attention's scores included), its
                # weights and KV cache apart (counted on their own): one footprint decides both the
                # kernel's feasibility and the plan's memory
                held = sum(float(o.type.nbytes) for o in task.operands if o.kind == "weight")
                held += sum(kv_bytes(p, int(p.attr("cache") or 0)) for p in parts)
                working = max(working, footprint[task.index] - held)
                if any(p.op in ATTENTION_OPS for p in parts):
                    att += seconds
                elif tensor > 1 and all(op_class(p.op, None) not in ("gemm", "conv", "embedding") for p in parts):
                    rep += seconds
                items = _kept_items(task)
                if task.name.split(".")[0] in loss and task.output is not None:
                    items.append((F32_BYTES * task.output.numel, task.name, False))
                stash += sum(n for n, _, _ in items)
                scores += sum(n for n, _, sc in items if sc)
                if tags:
                    bits = origin(parts[0].name, tags)
                    if bits:
                        redo.append((bits, seconds))
                    kept += [(n, origin(p_.name, tags), origin(src, tags), tensor_ids.setdefault(src, len(tensor_ids)))
                             for p_ in parts for n, src, _ in _kept_items(p_)]
                for p in parts:
                    if p.op == "moe_dispatch" and p.output is not None:
                        routed.append(float(p.output.nbytes))
                    for o in p.operands:
                        if o.kind == "weight" and o.name not in seen:
                            seen.add(o.name)
                            params += o.type.numel
                            pbytes += o.type.nbytes
                            if p.op == "grouped_matmul":
                                eparams += o.type.numel
                                ebytes += o.type.nbytes
                            if p.precision in ELEMENT_BYTES and p.precision != "bf16":
                                k = 2 if p.op == "grouped_matmul" else 0
                                low[k] += o.type.numel
                                low[k + 1] += o.type.nbytes
        inputs = sum(float(ty.nbytes) for _, ty in split.graph.inputs) / chunks if split.graph.inputs else 0.0
        return BlockCost(fwd, bwd, upd, att, rep, tuple(comms), params, pbytes, stash, scores, inputs,
                         tuple(kernels), working, unrunnable, eparams, ebytes, tuple(routed), tuple(expert_comm),
                         tuple(redo), tuple(comm_modules), tuple(kept),
                         att_b, (low[0], low[1], low[2], low[3]))

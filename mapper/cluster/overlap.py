"""Communication hidden under computation (``--parallel ...,overlap=a2a|tp|p2p``, joined by ``+``)
for the plan model (:mod:`mapper.cluster.model`). All are off unless given, as Megatron-Core
defaults them.

``tp``: Transformer Engine's userbuffers overlap (Megatron-Core ``--tp-comm-overlap``; it needs
sequence parallelism) cuts each tensor-parallel all-gather and reduce-scatter into chunks
pipelined with the GEMM that consumes or produces it: the decomposition of Wang et al.,
"Overlap Communication with Dependent Computation via Decomposition in Large Deep Learning
Models", ASPLOS 2023. With ``n`` chunks a collective of ``c`` seconds beside a GEMM of ``g``
takes ``max(c, g) + min(c, g) / n``: one chunk stays exposed, and what is longer than the GEMM
too (:func:`pipelined`). An all-reduce after a row-parallel GEMM is its reduce-scatter (half
its time, under that GEMM) and the all-gather before the next column-parallel GEMM (the other
half, under that one), as Megatron-LM's sequence parallelism splits it (Korthikanti et al.,
MLSys 2023, 4.2.2). ``n`` is the tensor degree: the ring exchange that NeMo's H100 FP8 configs
use for every forward GEMM passes one chunk per rank (``RingExchangeOverlapCfg``,
``nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py``). In the backward pass a
GEMM becomes two of the same FLOPs (its input and weight gradients), and TE hides each
backward collective under them (ring exchange with the input-gradient GEMM, bulk overlap with
the weight-gradient one): the backward collectives, which mirror the forward ones in reverse
order, hide under twice the forward neighbours' time. Left out: the SMs the communication
kernels take from the GEMM (the same configs give the ring exchange one SM of H100's 132 and
the BF16 configs' pipelined reduce-scatter 16-24, ``set_sm_margin``), no measured slowdown
being published for them.

``a2a``: Megatron-Core's expert-parallel all-to-all overlap (``--overlap-moe-expert-parallel-comm``,
its MoE guide; ``combined_1f1b.py``) merges one micro-batch's forward with another's backward in
the (interleaved) 1F1B steady state and runs each one's dispatch and combine on a second
stream under the other's attention and MLP computation (the dual-stream overlap of
DeepSeek-V3's technical report, 3.2.1). A MoE block's merged forward and backward then takes
``max(a2a, compute)`` for its all-to-alls (four per micro-batch) against both passes'
computation, not their sum; what exceeds the computation stays exposed, split evenly between
the two passes (:func:`alltoall_exposed`). The all-to-all kernels take SMs from the computation
beside them: DeepSeek-V3's report (3.2.2) runs them on 20 of H800's 132 SMs
(:data:`A2A_SM_SHARE`), so the computation under them runs at ``1 - s`` of its rate and a
merged step of ``c`` seconds of all-to-alls beside ``W`` of computation takes
``max(c, W + s c)``: at least ``s c`` of them stays exposed. Megatron-Core allows it with
``expert > 1``, with a pipeline only interleaved, and without full recomputation or the ``moe``
module's (Megatron-Bridge's
``CommOverlapConfig`` checks, ``src/megatron/bridge/training/comm_overlap.py``): other layouts
are refused (:func:`why_not`). Left out: the warm-up and cool-down forwards and backwards of
the pipeline, which have no partner to merge with (a share ``(2 (p-1) + (v-1) p) / (m v)`` of
a rank's passes or less), and the pairing of sub-modules (Megatron-Core pairs each all-to-all
with one of the other micro-batch's attention or MLP, not with both).

``p2p``: Megatron-Core's ``overlap_p2p_comm`` (``--overlap-p2p-communication``; NeMo 2's
``MegatronCommOverlapCallback`` and Megatron-Bridge set it, with ``batch_p2p_comm`` off, whenever
a pipeline is interleaved), read from ``megatron/core/pipeline_parallel/schedules.py``,
``forward_backward_pipelining_with_interleaving``. In the 1F1B steady state each iteration runs
one chunk's forward, then another chunk's backward; ``pp_post_forward`` issues the forward's
send (and the next receive) asynchronously and ``pp_pre_forward`` of the next iteration waits for
it, so a forward send runs beside one chunk's backward; ``pp_post_backward`` and
``pp_pre_backward`` do the same for a backward send, beside the next iteration's forward. A
send of ``x`` seconds beside ``w`` seconds of computation leaves ``max(0, x - w)`` exposed
(:func:`p2p_exposed`). In the warm-up forwards and cool-down backwards, without
``overlap_p2p_comm_warmup_flush`` (off by default and in those recipes) the sends are the
blocking ``send_forward_recv_forward`` and ``send_backward_recv_backward``: whole
(:func:`phases` counts them per chunk). Megatron-Core refuses the overlap with
``batch_p2p_comm`` and only the interleaved schedule has it (:func:`why_not`). The send and
the computation contend for no link (sends on NVLink or the NIC, GEMMs on SMs); left out: the
SMs NCCL's send and receive kernels take (one CUDA block per channel, a few channels for
point-to-point), no measured slowdown being published for them.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from mapper.cluster.profile import BlockCost
from mapper.core.ops import ATTENTION_OPS
from mapper.costing.efficiency import op_class

#: Share of a GPU's SMs the all-to-all kernels take while they run beside computation: 20 of H800's
#: 132 (DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv 2412.19437, 3.2.2), the one published
#: figure, used for every GPU.
A2A_SM_SHARE = 20 / 132


def parts(overlap: str) -> set[str]:
    """The overlaps ``overlap`` names (``none``: none)."""
    return set() if overlap == "none" else set(overlap.split("+"))


def why_not(lay: Any) -> str:
    """Why layout ``lay`` cannot run its overlaps ("" when it can), as Megatron-Core refuses them."""
    want = parts(lay.overlap)
    if "a2a" in want:
        if lay.expert <= 1:
            return "overlap=a2a hides the expert-parallel all-to-alls: it needs expert > 1"
        if lay.pipeline > 1 and lay.interleave <= 1:
            return "overlap=a2a with a pipeline needs the interleaved schedule (interleave > 1)"
        if lay.recompute == "full" or "moe" in lay.recompute.split("+"):
            return f"overlap=a2a does not run with recompute={lay.recompute}"
    if "tp" in want and (lay.tensor <= 1 or not lay.sequence):
        return "overlap=tp overlaps sequence-parallel collectives: it needs tensor > 1 and sequence=on"
    if "p2p" in want and (lay.pipeline <= 1 or lay.interleave <= 1):
        return "overlap=p2p overlaps the interleaved schedule's sends: it needs pipeline > 1 and interleave > 1"
    return ""


def why_given(given: Any) -> str:
    """Why no layout with the keys ``given`` (a LayoutSpec) can run its overlaps ("" when some may):
    :func:`why_not` of a layout with the given keys and the others as the overlaps need them."""
    return why_not(SimpleNamespace(overlap=given.overlap or "none", expert=given.expert or 1,
                                   pipeline=given.pipeline or (2 if "p2p" in parts(given.overlap or "none") else 1),
                                   interleave=given.interleave or 2,
                                   recompute=given.recompute or "none", tensor=given.tensor or 2,
                                   sequence=given.sequence is not False))


def pipelined(comm: float, gemm: float, chunks: int) -> float:
    """Seconds a collective of ``comm`` seconds adds beside a GEMM of ``gemm`` seconds when both are
    cut into ``chunks`` and pipelined (Wang et al., ASPLOS 2023): ``max(comm, gemm) +
    min(comm, gemm) / chunks - gemm``; all of it without a GEMM."""
    if gemm <= 0:
        return comm
    return max(comm, gemm) + min(comm, gemm) / max(1, chunks) - gemm


def _is_gemm(ops: tuple[str, ...]) -> bool:
    return any(op_class(o, None) == "gemm" for o in ops) and not any(o in ATTENTION_OPS for o in ops)


def neighbours(c: BlockCost) -> list[tuple[int, float, float]]:
    """Each forward collective of block ``c``: its index in ``c.collectives`` and the seconds of
    the GEMM kernels just before and just after it in the block (0 for none)."""
    ks = c.kernels
    out = []
    for i, (_, _, idx) in enumerate(ks):
        if idx < 0:
            continue
        before = next((s for s, ops, j in reversed(ks[:i]) if j < 0 and _is_gemm(ops)), 0.0)
        after = next((s for s, ops, j in ks[i + 1:] if j < 0 and _is_gemm(ops)), 0.0)
        out.append((idx, before, after))
    return out


def first_gemm(c: BlockCost) -> float:
    """Seconds of block ``c``'s first GEMM kernel (0 without one): what the previous block's last
    collective's all-gather half hides under."""
    return next((s for s, ops, j in c.kernels if j < 0 and _is_gemm(ops)), 0.0)


def tp_exposed(c: BlockCost, seconds: list[float], backward: list[bool], t: int,
               next_gemm: float) -> tuple[float, float]:
    """Forward and backward seconds of block ``c``'s tensor-parallel collectives (``seconds`` each,
    ``backward`` their pass) that userbuffers overlap leaves exposed (module docstring);
    ``next_gemm``: the next block's first GEMM, under which a last collective's all-gather half
    hides."""
    near = {idx: (before, after) for idx, before, after in neighbours(c)}
    fwd_ids = [i for i, b in enumerate(backward) if not b]
    bwd_ids = [i for i, b in enumerate(backward) if b]
    mirror = [near.get(i, (0.0, 0.0)) for i in reversed(fwd_ids)]
    fwd = bwd = 0.0
    for i in fwd_ids:
        before, after = near.get(i, (0.0, 0.0))
        after = after or next_gemm
        fwd += pipelined(seconds[i] / 2, before, t) + pipelined(seconds[i] / 2, after, t)
    for k, i in enumerate(bwd_ids):
        before, after = mirror[k] if k < len(mirror) else (0.0, 0.0)
        bwd += pipelined(seconds[i] / 2, 2 * before, t) + pipelined(seconds[i] / 2, 2 * (after or next_gemm), t)
    return fwd, bwd


def alltoall_exposed(a2a: float, forward: float, backward: float) -> float:
    """Seconds of a MoE block's all-to-alls (``a2a`` per pass: dispatch and combine) left exposed
    in each pass when a merged forward and backward hides them under the other micro-batch's
    ``forward + backward`` computation, slowed by the SMs the all-to-alls take (module docstring):
    ``max(c - W, s c) / 2`` for ``c = 2 a2a`` and ``W`` that computation."""
    comm = 2 * a2a
    return max(comm - (forward + backward), A2A_SM_SHARE * comm) / 2


def p2p_exposed(send: float, beside: float) -> float:
    """Seconds of a pipeline send of ``send`` seconds left exposed when it runs asynchronously
    beside ``beside`` seconds of another chunk's computation (module docstring)."""
    return max(0.0, send - beside)


def phases(p: int, v: int, m: int, s: int) -> tuple[list[int], list[int]]:
    """On pipeline rank ``s`` of the interleaved schedule (``p`` ranks, ``v`` chunks each, ``m``
    micro-batches): how many of each local chunk's forwards run in the warm-up and how many of its
    backwards in the cool-down, whose sends are not overlapped (module docstring). The rank's
    forward ``k`` runs local chunk ``(k // p) mod v`` and its backward ``k`` chunk ``v - 1 - (k //
    p) mod v`` (:func:`mapper.cluster.schedule.orders`); ``2 (p - s - 1) + (v - 1) p`` of them, at
    most ``m v``, in each phase."""
    total = m * v
    warm = min(total, 2 * (p - s - 1) + (v - 1) * p)
    fwd, bwd = [0] * v, [0] * v
    for k in range(warm):
        fwd[(k // p) % v] += 1
    for k in range(total - warm, total):
        bwd[v - 1 - (k // p) % v] += 1
    return fwd, bwd


def p2p_sends(hops: list[float], comp: list[tuple[float, float]], p: int, v: int,
              m: int) -> tuple[tuple[float, float, float, float, float], ...]:
    """For each chunk ``c`` (on rank ``c mod p``) of an interleaved pipeline with ``overlap=p2p``,
    from its send of ``hops[c]`` seconds to the next chunk and each chunk's forward and backward
    computation ``comp``: the send, what of it stays exposed beside a steady-state backward and
    forward (one of the rank's chunks: their mean), and the forward and backward seconds per
    micro-batch it adds on average over the ``m``, counting those of the warm-up and cool-down
    whole (:func:`phases`; module docstring)."""
    out = []
    for c, hop in enumerate(hops):
        s = c % p
        fwd = sum(x[0] for x in comp[s::p]) / v
        bwd = sum(x[1] for x in comp[s::p]) / v
        warm, cool = (x[c // p] for x in phases(p, v, m, s))
        sf, sb = p2p_exposed(hop, bwd), p2p_exposed(hop, fwd)
        out.append((hop, sf, sb, (warm * hop + (m - warm) * sf) / m, (cool * hop + (m - cool) * sb) / m))
    return tuple(out)

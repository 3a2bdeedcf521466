"""ZeRO-3 and FSDP at scale: each block's weights gathered and its gradients scattered over the
data-parallel ranks, hidden under compute only as far as the neighbouring block's compute lasts.

ZeRO stage 3 (Rajbhandari et al., SC'20, 5.3 and 7.2) and PyTorch FSDP (Zhao et al., VLDB 2023,
3.3) keep ``1/d`` of every weight on each of the ``d`` data-parallel ranks. Before a block's
forward the ranks all-gather its weights; before its backward they gather them again (the
forward's copy is freed); after its backward they reduce-scatter its gradients. Both frameworks
prefetch one block ahead on a communication stream of their own (DeepSpeed's
``stage3_prefetch_bucket_size``; FSDP's ``forward_prefetch`` and ``BackwardPrefetch.BACKWARD_PRE``,
which issues the next block's all-gather before the current block's backward and after its
gradient reduce-scatter is queued). So with ``f_i``, ``b_i`` a block's compute and ``g_i``,
``r_i`` its gather and scatter, one stream of collectives beside one of kernels gives

* forward: ``g_0 + sum_i max(f_i, g_{i+1})``;
* backward (blocks in reverse): ``g_n + sum_i max(b_i, r_{i+1} + g_{i-1}) + r_0``,

each block's collectives hidden under its neighbour's compute and no further: a block whose
compute is shorter than its collectives leaves the rest exposed. With full recomputation ``b_i``
includes the block's forward again, under the one gather (DeepSpeed's activation checkpointing
fetches the block once for the recomputation and its backward).

**The group.** The gathers span every data-parallel rank; once they span nodes they are priced by
:func:`mapper.parallel.collectives.collective` as a ring of all ``d`` ranks (NCCL runs an
all-gather or a reduce-scatter as rings only), with the fabric's latency at every step and each
rank moving its bytes at :data:`SHARDED_EFFICIENCY` of its own share of the node's NICs.
The collective model's NCCL rings, which combine a node's NICs, keep ZeRO-3 far too fast
(2.1x and 3.5x the published throughput on 768 and 1,536 A100s): Narayanan et al. (SC'21, 5.2, Table 2) measure
DeepSpeed's ZeRO-3 on the 175B GPT-3 at 1,536 sequences per step at 144, 88 and 44 TFLOP/s
per GPU on 384, 768 and 1,536 A100s (PTD-P: 153, 149, 141), and the 530B model at 138, 98
and 48 on 640, 1,120 and 2,240. The two larger runs of each model take the same time per step
(74 and 74 days; 137 and 140), so their collectives are bound by a per-GPU rate that does
not depend on the number of GPUs: each GPU moves three times the model's 16-bit bytes per
step whatever ``d`` is, at some 16 GB/s, below one HDR NIC's 25. That rate is the one
parameter here, fitted on the 175B run on 768 GPUs; ``benchmarks/zero3.py`` prints it
against the other five rows. Why DeepSpeed's 2021 ZeRO-3 moved so little is not pinned
down by a published breakdown (MiCS, Zhang et al., VLDB 2022, measure the bandwidth use of
collectives falling with their number of participants).

**The implementation** is an input (``--parallel ...,zero=3,fsdp=deepspeed|megatron``,
:data:`mapper.parallel.layout.FSDP`), as the attention kernel is: ``deepspeed`` (the default) is the rate
above; ``megatron`` is Megatron-FSDP, what NVIDIA's Megatron-Bridge recipes run as FSDP
(``use_megatron_fsdp``), whose gathers and scatters are NCCL's ring collectives on the
data-parallel process group: priced as :func:`mapper.parallel.collectives.collective`'s ring of
the ``d`` ranks as they lie on the nodes (:mod:`mapper.cluster.placement`), every NIC of a node
carrying its ranks' share, no fitted rate. Both are hidden under compute alike (above).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from mapper.errors import OptionsError
from mapper.parallel.collectives import Network, collective
from mapper.parallel.layout import FSDP, LayoutSpec

#: Share of a rank's NIC bandwidth that ZeRO-3's sharded all-gathers and reduce-scatters over
#: data-parallel ranks on several nodes reach: fitted on Narayanan et al., SC'21, Table 2 (175B GPT-3,
#: 768 A100s, micro-batch 2: 88 TFLOP/s per GPU); checked on its other five ZeRO-3 rows
#: (benchmarks/zero3.py).
SHARDED_EFFICIENCY = 0.68


def sharded(net: Network, kind: str, nbytes: float, d: int, per_node: int, impl: str = "deepspeed") -> float:
    """Seconds of ZeRO-3's ``kind`` (all-gather or reduce-scatter) of ``nbytes`` over ``d`` data
    ranks, ``per_node`` of them a node, by implementation ``impl`` (module docstring): inside one
    node the collective model's own; across nodes for ``deepspeed`` a ring at
    :data:`SHARDED_EFFICIENCY` of each rank's NIC share, for ``megatron`` the collective model's ring."""
    if d <= 1 or nbytes <= 0:
        return 0.0
    if d <= per_node:
        return collective(net, kind, nbytes, d, per_node)[0]
    if impl == "megatron":
        return collective(net, kind, nbytes, d, per_node, rings=True)[0]
    fabric = replace(net, node_gbs=net.node_gbs * SHARDED_EFFICIENCY)
    return collective(fabric, kind, nbytes, d, 1, rings=True)[0]


def check_fsdp(given: LayoutSpec) -> str:
    """ZeRO-3's implementation ``given`` names (``fsdp=``, default ``deepspeed``); an OptionsError
    naming --parallel where it is given without ``zero=3`` (it prices ZeRO-3's gathers alone)."""
    if given.fsdp is not None and given.zero != 3:
        raise OptionsError(f"fsdp={given.fsdp} names ZeRO-3's implementation; give it with zero=3 "
                           f"(the layout has {'no zero key' if given.zero is None else f'zero={given.zero}'})",
                           obj="--parallel")
    return given.fsdp or FSDP[0]


def forward(compute: Sequence[float], gathers: Sequence[float]) -> float:
    """Seconds of a forward pass over blocks of ``compute`` seconds whose weights take ``gathers``
    seconds to all-gather, prefetched one block ahead: ``g_0 + sum_i max(f_i, g_{i+1})``."""
    if not compute:
        return 0.0
    nxt = [*gathers[1:], 0.0]
    return gathers[0] + sum(max(f, g) for f, g in zip(compute, nxt))


def backward(compute: Sequence[float], gathers: Sequence[float], scatters: Sequence[float]) -> float:
    """Seconds of a backward pass over the blocks (given in forward order, run in reverse): each
    block's backward hides the scatter of the block after it and the gather of the block before
    it, ``g_n + sum_i max(b_i, r_{i+1} + g_{i-1}) + r_0``."""
    n = len(compute)
    if not n:
        return 0.0
    total = gathers[-1] + scatters[0]
    for i in range(n):
        after = scatters[i + 1] if i + 1 < n else 0.0
        before = gathers[i - 1] if i > 0 else 0.0
        total += max(compute[i], after + before)
    return total


def live(weights: Sequence[float]) -> float:
    """Bytes of gathered weights a rank holds at once: the block running and the one prefetched
    (FSDP's rate limiter lets at most two all-gathers run ahead of the compute, Zhao et al.,
    VLDB 2023; DeepSpeed frees a block's gathered weights after its use): the largest two neighbours."""
    if len(weights) < 2:
        return sum(weights)
    return max(a + b for a, b in zip(weights, weights[1:]))

"""Pipeline schedules: the order each pipeline rank runs its micro-batches in, their step
time in closed form, and a simulation of any order (:mod:`mapper.cluster`).

An op is ``("F" | "B", chunk, micro_batch)``; chunk ``c`` (a virtual stage, ``p v``
of them) runs on rank ``c mod p``. Schedules:

* ``gpipe``: every forward, then every backward (Huang et al., NeurIPS 2019);
* ``1f1b``: ``p - s - 1`` warm-up forwards on rank ``s``, then one forward and one
  backward in turn (PipeDream-Flush; Narayanan et al., SC'21, 2.2.1);
* interleaved 1F1B with ``v`` chunks per rank (SC'21, 2.2.2; Megatron-LM's
  ``forward_backward_pipelining_with_interleaving``): forwards in groups of ``p``
  micro-batches per chunk, ``2 (p - s - 1) + (v - 1) p`` warm-up forwards.

With equal stages of ``F + B`` seconds per micro-batch the step takes
``(m + (p - 1) / v) (F + B)``: bubble ``(p - 1) / (v m)`` of the ideal
(SC'21, equations 1 and 2); :func:`step_time` generalises it to unequal ranks
as ``m T_max + (sum T - T_max) / v``, which :func:`simulate` checks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mapper.mapping.pipeline import pipelined

Op = tuple[str, int, int]
SCHEDULES = ("1f1b", "gpipe")


def orders(schedule: str, p: int, v: int, m: int) -> list[list[Op]]:
    """Each rank's ops in the order it runs them."""
    out: list[list[Op]] = []
    for s in range(p):
        chunks = [j * p + s for j in range(v)]
        if schedule == "gpipe":
            out.append([("F", c, mb) for mb in range(m) for c in chunks]
                       + [("B", c, mb) for mb in range(m) for c in reversed(chunks)])
            continue
        total = m * v

        def fwd(k: int, chunks: list[int] = chunks) -> Op:
            j = (k // p) % v if v > 1 else 0
            return ("F", chunks[j], (k // (p * v)) * p + k % p if v > 1 else k)

        def bwd(k: int, chunks: list[int] = chunks) -> Op:
            j = v - 1 - (k // p) % v if v > 1 else 0
            return ("B", chunks[j], (k // (p * v)) * p + k % p if v > 1 else k)

        warm = min(total, (p - s - 1) * 2 + (v - 1) * p if v > 1 else p - s - 1)
        seq = [fwd(k) for k in range(warm)]
        for i in range(total - warm):
            seq += [fwd(warm + i), bwd(i)]
        seq += [bwd(k) for k in range(total - warm, total)]
        out.append(seq)
    return out


def deps(op: Op, chunks: int) -> list[Op]:
    """The ops ``op`` waits for: the previous chunk's forward, the next chunk's backward."""
    kind, c, mb = op
    if kind == "F":
        return [("F", c - 1, mb)] if c > 0 else []
    return [("B", c + 1, mb)] if c + 1 < chunks else [("F", c, mb)]


def simulate(order: Sequence[Sequence[Op]], duration: Callable[[Op], float],
             send: Callable[[Op, Op], float] = lambda a, b: 0.0) -> float:
    """The makespan of running ``order`` with ``duration`` per op and ``send(src, dst)`` seconds
    between dependent ops on different ranks; ValueError if the order deadlocks."""
    p = len(order)
    chunks = 1 + max(c for seq in order for _, c, _ in seq)
    rank = {op: s for s, seq in enumerate(order) for op in seq}
    done: dict[Op, float] = {}
    free = [0.0] * p
    nxt = [0] * p
    left = sum(len(seq) for seq in order)
    while left:
        progress = False
        for s in range(p):
            while nxt[s] < len(order[s]):
                op = order[s][nxt[s]]
                before = deps(op, chunks)
                if any(d not in done for d in before):
                    break
                ready = max([free[s]] + [done[d] + (send(d, op) if rank[d] != s else 0.0) for d in before])
                done[op] = free[s] = ready + duration(op)
                nxt[s] += 1
                left -= 1
                progress = True
        if not progress:
            raise ValueError("the pipeline order deadlocks")
    return max(free)


def step_time(per_rank: Sequence[float], m: int, v: int) -> float:
    """A step's pipeline time from each rank's time per micro-batch (all its chunks, forward and
    backward): ``m T_max + (sum T - T_max) / v`` (module docstring)."""
    return pipelined(sum(per_rank), max(per_rank), m, v)

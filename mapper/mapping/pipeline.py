"""A pipeline's two formulas: the time of ``m`` micro-batches through its stages, and the cut of
a sequence into stages whose largest is least.

:func:`pipelined`: ``m`` micro-batches through stages of ``T_1 .. T_p`` seconds each take the
stages' sum plus ``m - 1`` times the slowest (the fill and drain of a synchronous pipeline:
GPipe, Huang et al., NeurIPS 2019; 1F1B, Narayanan et al., SC'21, equations 1 and 2); with ``v``
model chunks per rank (the interleaved schedule) the bubble shrinks ``v`` times,
``m T_max + (sum T - T_max) / v``.

:func:`decode_round`: ``m`` micro-batches each giving its sequences one token, a micro-batch
starting its next token only once its last one left the last stage, take the longer of one pass
through all stages and ``m`` passes through the slowest (FasterTransformer's pipeline of
micro-batches; Pope et al., "Efficiently Scaling Transformer Inference", MLSys 2023).

:func:`stage_partition`: contiguous non-empty stages whose largest is least, by bisection on the
bottleneck with a greedy check (Bokhari, "Partitioning problems in parallel, pipelined, and
distributed computing", IEEE TC 37(1), 1988).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from itertools import accumulate
from typing import Any


def pipelined(total: Any, slowest: Any, m: int, v: int = 1) -> Any:
    """Seconds of ``m`` micro-batches through stages whose times add up to ``total`` and the
    slowest of which takes ``slowest``, ``v`` chunks per rank (module docstring). Numbers or
    linear expressions of a solver alike (``v`` 1)."""
    return m * slowest + ((total - slowest) / v if v != 1 else total - slowest)


def decode_round(times: Sequence[float], m: int) -> float:
    """Seconds of one token for each of ``m`` micro-batches through stages of ``times`` seconds
    (module docstring)."""
    return max(sum(times), m * max(times))


def partition(weights: Sequence[float], parts: int, allowed: Sequence[int] | None = None) -> tuple[int, ...] | None:
    """Start indices of ``parts`` contiguous non-empty groups of ``weights`` whose largest sum is
    least (:func:`stage_partition` with one kind of stage); ``allowed``: the only indices a group
    after the first may start at (None: any)."""
    return stage_partition([list(weights)], [0] * parts, allowed=allowed)


def stage_partition(weights: list[list[float]], order: list[int], extra: Sequence[Sequence[float]] | None = None,
                    allowed: Sequence[int] | None = None) -> tuple[int, ...] | None:
    """Start block of each of ``len(order)`` contiguous non-empty stages, stage ``s`` weighing its
    blocks by ``weights[order[s]]`` (a stage priced on its own kind of GPU) plus ``extra[s][end]``
    (its send to the next stage, which depends on where it ends; at least 0), whose largest stage
    is least: bisection on the bottleneck with a greedy check, which is exact for stages in a
    fixed order (Bokhari, IEEE TC 1988; a stage that starts later never costs the stages after it
    more, so the farthest end within the bottleneck is the greedy's choice). ``allowed``: the only
    blocks a stage after the first may start at (None: any). None when no such stages exist."""
    n, parts = len(weights[0]), len(order)
    if allowed is not None:  # the blocks between two allowed starts, merged, are the problem's blocks
        bounds = [0, *sorted({e for e in allowed if 0 < e < n}), n]
        merged = [[sum(w[a:e]) for a, e in zip(bounds, bounds[1:])] for w in weights]
        sent = [[row[e] for e in bounds] for row in extra] if extra is not None else None
        got = stage_partition(merged, order, sent)
        return tuple(bounds[x] for x in got) if got is not None else None
    if parts > n:
        return None
    prefix = [[0.0, *accumulate(w)] for w in weights]
    sends = extra

    def greedy(limit: float) -> tuple[int, ...] | None:
        starts, i = [], 0
        for k, kind in enumerate(order):
            starts.append(i)
            left = parts - k - 1  # stages still to come need a block each
            pre = prefix[kind]
            j = min(bisect.bisect_right(pre, pre[i] + limit, lo=i + 1) - 1, n - left)
            if sends is not None:
                ex = sends[k]
                while j > i and pre[j] - pre[i] + ex[j] > limit:
                    j -= 1
            if j <= i:
                return None
            i = j
        return tuple(starts) if i == n else None

    lo = max(min(w[b] for w in weights) for b in range(n))  # some stage holds each block
    hi = max(p[-1] for p in prefix)
    if sends is not None:
        hi += max(max(row) for row in sends)
    best = greedy(hi * (1 + 1e-9))
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        cut = greedy(mid)
        if cut is not None:
            best, hi = cut, mid
        else:
            lo = mid
        if hi - lo <= 1e-7 * hi:
            break
    return best


"""The batch of a ``batch=auto`` request (:mod:`mapper.serving`).

A serving system runs the largest batch its memory holds and its latency targets
allow: every layout's KV cache and activations grow with the batch, and so do its
time to first token and its time per output token, while output tokens per second
rise (Yu et al., "Orca", OSDI 2022; Kwon et al., "vLLM", SOSP 2023: throughput is
bounded by the batch the KV cache fits). The request is priced at batches 1, 2, 4,
... while some layout fits and meets ``--max-tpot`` / ``--max-ttft``, then the
largest such batch is found by bisection between the last power of two that passed
and the next. Each batch is a full :class:`~mapper.serving.model.ServingModel`
and :func:`~mapper.serving.search.choose` (layouts ranked by output tokens per
second over the platform's GPUs); a layout that does not fit or meet the bounds at a
batch is not scored at larger ones (memory, first-token and per-token times only grow
with the batch). Of every batch priced the one of most tokens per
second wins; when that is not the largest (a smaller batch lets more replicas of a
smaller layout fit or meet the bounds), the winner's tensor and pipeline degrees and
replicas are kept and its own largest batch is found by bisection the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from mapper.errors import InfeasibleError
from mapper.mapping.base import Progress
from mapper.parallel.layout import FREE, LayoutSpec
from mapper.serving.model import ServingLayout, ServingModel
from mapper.serving.request import MAX_TOKENS
from mapper.serving.search import ServingChoice

#: Seconds between progress reports.
PROGRESS_EVERY = 0.5


def search_batch(make: Callable[[int], ServingModel],
                 pick: Callable[[ServingModel, LayoutSpec, Callable[[ServingLayout], bool]], ServingChoice],
                 progress: Callable[[Progress], None] | None = None) -> tuple[ServingChoice, ServingModel]:
    """The choice (and its model) of most output tokens per second over the batches priced
    (module docstring); ``make(b)`` prices batch ``b``, ``pick(model, keys, skip)`` chooses its
    layout among those with the layout ``keys`` given, ``skip`` left out, and raises
    :class:`InfeasibleError` when none fits or meets the bounds."""
    models: dict[int, ServingModel] = {}
    priced: dict[tuple[int, LayoutSpec], ServingChoice | None] = {}
    dead: dict[ServingLayout, int] = {}  # a layout -> the least batch it failed at
    first: list[InfeasibleError] = []
    start = shown = time.perf_counter()

    def at(b: int, keys: LayoutSpec) -> ServingChoice | None:
        nonlocal shown
        key = (b, keys)
        if key not in priced:
            if b not in models:
                models[b] = make(b)
            try:
                got = priced[key] = pick(models[b], keys, lambda lay: dead.get(lay, MAX_TOKENS + 1) <= b)
            except InfeasibleError as err:
                priced[key] = None
                first.append(err)
            else:
                for lay in got.failed:
                    dead[lay] = min(dead.get(lay, b), b)
            now = time.perf_counter()
            if progress is not None and now - shown >= PROGRESS_EVERY:
                shown = now
                progress(Progress(now - start, None, None, f"serving batch {b:,} ({len(models)} priced)"))
        return priced[key]

    def largest(keys: LayoutSpec, b: int) -> None:
        """Price ``b`` and its doubles while they pass, then bisect to the largest that passes."""
        while b <= MAX_TOKENS and at(b, keys) is not None:
            b *= 2
        lo, hi = b // 2, min(b, MAX_TOKENS + 1)
        while lo and hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if at(mid, keys) is not None else (lo, mid)

    largest(FREE, 1)
    found = [c for c in priced.values() if c is not None]
    if not found:
        raise first[0]
    best = max(found, key=lambda c: (c.tokens_per_s, -c.request.batch))
    top = max(c.request.batch for c in found)
    if best.request.batch < top:  # the winner's layout at its own largest batch
        lay = best.best.layout
        largest(LayoutSpec(tensor=lay.tensor, pipeline=lay.pipeline, data=lay.replicas), best.request.batch)
        found = [c for c in priced.values() if c is not None]
        best = max(found, key=lambda c: (c.tokens_per_s, -c.request.batch))
    why = "the largest batch any layout fits and meets the bounds with" if best.request.batch == top else (
        f"more tokens/s than batch {top:,}, the largest any layout fits and meets the bounds with")
    note = f"batch {best.request.batch:,} chosen ({why}; {len(models)} batches priced)"
    return replace(best, batch_note=note), models[best.request.batch]

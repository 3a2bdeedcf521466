"""Pipeline chunks cut by Transformer layers, with uneven first and last chunks (``first=``, ``last=``).

Without these keys the plan model cuts the blocks into ``p v`` chunks of balanced
time (:func:`mapper.mapping.pipeline.partition`). Megatron-Core instead gives
every chunk (virtual stage) the same number of Transformer layers, the embedding
riding on the first and the loss on the last; since those make the end chunks
the slowest, it can give them fewer layers: ``decoder_first_pipeline_num_layers`` /
``num_layers_in_first_pipeline_stage`` and their ``last`` twins, or
``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``,
which count the embedding and the loss as one layer each (Llama 3 trained 405B
so: "we reduce one Transformer layer each from the first and the last stages",
Grattafiori et al., "The Llama 3 Herd of Models", arXiv 2407.21783, section 3.3.2).
``first=N,last=M`` gives the first chunk ``N`` layers and the last ``M`` (0: the
embedding or the LM head alone), the other chunks the rest in equal shares;
either key alone leaves the other end an equal share too. A layer begins at a
block holding attention; the blocks before the first layer go with the first
chunk, those after the last layer with the last. Each pipeline rank's time and
memory then follow from its chunks as for any cut
(:mod:`mapper.cluster.model`): the slowest rank sets the rate,
``m T_max + (sum T - T_max) / v`` (:func:`mapper.mapping.pipeline.pipelined`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mapper.cluster.blocks import Block
from mapper.core.graph import TaskGraph
from mapper.core.ops import ATTENTION_OPS


def layer_starts(graph: TaskGraph, blocks: Sequence[Block]) -> tuple[int, ...]:
    """The blocks at which a Transformer layer begins: those holding an attention op."""
    return tuple(i for i, b in enumerate(blocks) if any(graph.tasks[t].op in ATTENTION_OPS for t in b.tasks))


def layer_counts(layers: int, chunks: int, first: int | None, last: int | None) -> tuple[int, ...] | str:
    """Transformer layers of each of ``chunks`` chunks (module docstring), or why there are none."""
    fixed = {0: first} if first is not None else {}
    if last is not None:
        if chunks == 1 and first is not None:
            return "first= and last= need at least two pipeline chunks (pipeline x interleave)"
        fixed[chunks - 1] = last
    free = chunks - len(fixed)
    rest = layers - sum(fixed.values())
    if rest < 0 or (free == 0 and rest) or (free and (rest % free or rest < free)):
        ends = " and ".join(f"{k}={v}" for k, v in (("first", first), ("last", last)) if v is not None)
        return (f"{ends} leaves {rest} of the {layers} layers for {free} other chunk{'s' if free != 1 else ''} "
                "(pipeline x interleave less the ends), which must be an equal share of one or more each")
    each = rest // free if free else 0
    return tuple(fixed.get(k, each) for k in range(chunks))


def auto_ends(layers: int, chunks: int) -> list[tuple[int, int]]:
    """The ``(first, last)`` cuts ``--parallel auto`` tries beside the cut by time when it chooses the
    pipeline: for ``chunks >= 3``, the middle chunks ``q`` layers each for ``q`` = ``ceil(layers /
    chunks)`` and one more, and the ends the rest split as evenly as they go, the last (with the LM
    head and the loss) the lighter, neither holding more than ``q`` (Megatron-Core's equal split
    where the layers divide, and Llama 3's one layer less at each end: 126 layers on 64 chunks give
    ``(1, 1)``)."""
    out: list[tuple[int, int]] = []
    if chunks < 3 or layers < chunks:
        return out
    q0 = -(-layers // chunks)
    for q in (q0, q0 + 1):
        rest = layers - (chunks - 2) * q
        if 0 <= rest <= 2 * q:
            out.append((rest - rest // 2, rest // 2))
    return out


def chunk_starts(starts: Sequence[int], counts: Sequence[int], blocks: int) -> tuple[int, ...] | None:
    """First block of each chunk holding ``counts`` layers, layers beginning at blocks ``starts``
    of ``blocks`` (the last layer as long as the one before it); None when a chunk would hold
    no block (an end chunk of no layers and nothing around them)."""
    tail = starts[-1] + (starts[-1] - starts[-2] if len(starts) > 1 else 1) if starts else blocks
    out = [0]
    done = 0
    for n in counts[:-1]:
        done += n
        out.append(starts[done] if done < len(starts) else tail)
    if any(b <= a for a, b in zip(out, out[1:])) or out[-1] >= blocks:
        return None
    return tuple(out)


def uneven_reason(profile: Any, lay: Any) -> str:
    """Why layout ``lay``'s ``first``/``last`` cut no chunks of ``profile``'s blocks."""
    starts = layer_starts(profile.graph, profile.blocks)
    counts = layer_counts(len(starts), lay.pipeline * lay.interleave, lay.first, lay.last)
    if isinstance(counts, str):
        return counts
    return "an end chunk of no layers would hold no block"

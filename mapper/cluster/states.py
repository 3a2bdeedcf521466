"""The bytes a rank holds by part: weights, gradients and optimizer states as Megatron-Core keeps
them (:func:`state_bytes`), and activations beside the caching allocator's fragmentation of them
(:func:`activation_parts`); :mod:`mapper.cluster.model` and :mod:`mapper.cluster.mixed` price
memory with them."""

from __future__ import annotations

from typing import Any


def activation_parts(act: Any, share: float) -> dict[str, Any]:
    """The memory parts of ``act`` activation bytes: themselves and the allocator's fragmentation
    beside them (``share`` of the whole: :data:`mapper.cluster.model.FRAGMENTATION`). Works elementwise on arrays."""
    return {"activations": act, "fragmentation": act * share / (1.0 - share)}


#: Bytes per element of the gradient buffer by its format (``grad=``; "" the weights' own).
GRAD_BYTES = {"fp32": 4.0, "bf16": 2.0}


def state_bytes(params: Any, pbytes: Any, states: int, grad: str, zero: int, d: int,
                held: Any = None) -> dict[str, Any]:
    """Bytes per GPU of ``params`` parameters held in ``pbytes`` bytes: weights, gradients and
    the optimizer (``states`` f32 values per parameter), as Megatron-Core keeps them (its
    "Distributed Optimizer" guide, bytes per parameter without / with the distributed optimizer:
    f16 or bf16 weights with 16-bit gradients 20 / ``4 + 16/d``, bf16 weights with f32
    gradients 18 / ``6 + 12/d``, f32 16 / ``8 + 8/d``). The gradient buffer is ``grad``
    (``fp32``: its f32 main gradients are the buffer, Megatron-Core's default with bf16, which
    sets ``accumulate_allreduce_grads_in_fp32``; ``bf16``: ``--grad-reduce-in-bf16``; "": the
    weights' own format, as Megatron-LM ran fp16, where the optimizer keeps an f32 copy of the
    gradients beside the f32 master weights). ZeRO 1 (the distributed optimizer) shards the
    master weights, states and copies over the ``d`` replicas, ZeRO 2 the gradients too, ZeRO 3
    the weights. ``held``: the weights' bytes as the run holds them where they differ from
    ``pbytes`` (quantised GEMM weights: :mod:`mapper.cluster.lowparam`). Works elementwise on arrays."""
    half = pbytes < 4 * params  # 16-bit weights keep f32 master weights
    per = GRAD_BYTES.get(grad)
    grads = pbytes if per is None else per * params
    copy = (grads < 4 * params) * half  # 16-bit gradients: the optimizer's f32 copy of them
    return {"weights": (pbytes if held is None else held) / (d if zero >= 3 else 1),
            "gradients": grads / (d if zero >= 2 else 1),
            "optimizer": 4.0 * params * (states + half + copy) / (d if zero >= 1 else 1)}

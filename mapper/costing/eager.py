"""The kernels PyTorch eager launches for an op written as its composite reference code.

An ``rmsnorm`` or ``swiglu`` with ``fused = 0`` is not one kernel but the chain of
elementwise and reduction kernels PyTorch runs for the LLaMA reference code
(Touvron et al., facebookresearch/llama ``model.py``), each reading its inputs
from and writing its output to memory; its backward is the chain autograd runs
(PyTorch ``tools/autograd/derivatives.yaml``). Per element of the op's input
(RMSNorm) or output (SwiGLU), ``e`` bytes a 16-bit element and ``f = 4`` an f32 one:

RMSNorm, ``norm(x.float()).type_as(x) * weight`` with ``norm(x) = x * rsqrt(x.pow(2).mean(-1) + eps)``:

* forward, 8 kernels: ``float`` (e + f), ``pow`` (2f), ``mean`` (f), ``+ eps`` and ``rsqrt``
  (a value per row), ``x * r`` (2f), ``type_as`` (f + e), ``* weight`` (2e): ``4e + 7f``;
* backward, 16 kernels: ``* weight``'s input gradient (2e) and weight gradient (a product,
  3e, and its sum over rows, e); ``type_as``'s (e + f); ``x * r``'s input gradient (2f) and
  ``r``'s (a product, 3f, summed over the row, f); ``rsqrt``'s (``-0.5 g r^3``, three kernels on
  a value per row); ``mean``'s (the row's gradient expanded and divided, f); ``pow``'s
  (``g * (2 * x.pow(1))``: a copy 2f, a scaling 2f, a product 3f); the sum of ``x``'s two
  gradients (3f); ``float``'s (f + e): ``8e + 19f``.

SwiGLU, ``silu(gate) * up``:

* forward, 2 kernels: ``silu`` (2e), the product (3e): ``5e``;
* backward, 3 kernels: the product's two gradients (3e each) and ``silu_backward`` (3e): ``9e``.

Rotary embedding, ``x * cos + rotate_half(x) * sin`` with ``rotate_half(x) = cat(-x2, x1)``
(GPT-NeoX's and Hugging Face's form; Aleph-Alpha/scaling's ``apply_rotary_pos_emb``), for each of
``q`` and ``k`` (``v`` is not touched), per rotated element:

* forward, 5 kernels: ``x * cos`` (2e), ``-x2`` (e: half the elements), ``cat`` (2e),
  ``* sin`` (2e), the sum (3e): ``10e``;
* backward, 8 kernels: ``g * sin`` (2e), the negation's gradient (e), ``g * cos`` (2e), each
  half's slice gradient (zeros, then the half copied in: 2e each), and the three gradients of
  ``x`` summed (two adds, 3e each): ``15e``.

Each kernel pays the device's launch (:func:`mapper.costing.latency.estimate`). The norm's and
SwiGLU's forward counts (:func:`forward_kernels`) are also the ops the serving model's eager
runtime dispatches for them (:data:`mapper.serving.request.EAGER_OPS` takes them from here; its
rotary count is Hugging Face's, which also rebuilds ``cos`` and ``sin`` each call).
"""

from __future__ import annotations

from collections.abc import Callable

from mapper.core.graph import DTYPE_BYTES, Task

#: Bytes of an f32 element (the composite RMSNorm's working precision).
F32 = 4.0


def _rmsnorm(e: float, backward: bool) -> tuple[int, float]:
    return (16, 8 * e + 19 * F32) if backward else (8, 4 * e + 7 * F32)


def _swiglu(e: float, backward: bool) -> tuple[int, float]:
    return (3, 9 * e) if backward else (2, 5 * e)


def _rotary(e: float, backward: bool) -> tuple[int, float]:
    return (2 * 8, 15 * e) if backward else (2 * 5, 10 * e)  # q and k: each tensor's kernels


def _rotated(task: Task) -> float:
    """Of the rotary op's ``qkv`` elements, the share it rotates: ``q`` and ``k``'s heads."""
    heads = int(task.attr("heads") or 1)
    kv = int(task.attr("kv_heads") or heads)
    return (heads + kv) / (heads + 2 * kv)


#: op -> (kernels, bytes per element) from the 16-bit element size and the pass; and the share of
#: the op's first operand's elements they count per (SwiGLU's ``[gate | up]`` is twice its output).
EAGER: dict[str, tuple[Callable[[float, bool], tuple[int, float]], Callable[[Task], float]]] = {
    "rmsnorm": (_rmsnorm, lambda t: 1.0), "swiglu": (_swiglu, lambda t: 0.5), "rotary": (_rotary, _rotated)}


def forward_kernels(op: str) -> int:
    """Kernels the composite ``op`` (a key of :data:`EAGER`) launches in a forward pass; the count
    does not depend on the element size."""
    return EAGER[op][0](2.0, False)[0]


def eager_kernels(task: Task) -> tuple[int, float] | None:
    """(kernels, bytes) of ``task`` run as PyTorch eager runs its composite form (module
    docstring), forward or backward (``task.backward``); None for an op that is one kernel."""
    if task.op not in EAGER or task.attr("fused", 1) or not task.operands:
        return None
    rule, share = EAGER[task.op]
    x = task.operands[0].type
    kernels, per = rule(float(DTYPE_BYTES.get(x.dtype, 2)), task.backward)
    return kernels, per * x.numel * share(task)

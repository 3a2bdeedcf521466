"""The weights of a low-precision training run as Transformer Engine and Megatron-Core hold and gather
them (``--parallel ...,fp8_param=on|off`` with ``--precision fp8|mxfp8``, ``fp4_param=on|off`` with
``nvfp4``): what a GEMM's weight costs in memory and in the distributed optimizer's all-gather.

A linear layer whose GEMM runs in a low-precision format reads its weight quantised. Transformer
Engine keeps the quantised copies it needs for the forward GEMM and for the backward's data-gradient
GEMM (NVIDIA/TransformerEngine ``transformer_engine/pytorch/tensor/``, per GEMM weight):

- per-tensor FP8 (``Float8Tensor``, delayed or current scaling): the row-wise data, 1 byte, and on
  a GPU whose FP8 GEMMs take only the TN layout (Hopper) its transpose, 1 byte more; on Blackwell
  (compute capability 10.x, ``is_non_tn_fp8_gemm_supported``) one buffer serves both ("no separate
  transpose is materialized", ``Float8CurrentScalingQuantizer.inner_tensor_specs``);
- MXFP8 (``MXFP8Tensor``): row-wise and column-wise data, each with its E8M0 scale per 32 elements
  (the scales run along the contraction dimension, so each direction needs its own copy):
  ``2 (1 + 1/32)`` bytes;
- NVFP4 (``NVFP4Tensor``): row-wise and column-wise 4-bit data, each with an E4M3 scale per 16
  elements: ``2 (0.5 + 1/16)`` bytes.

A GPU is taken to be Blackwell-like (non-TN FP8 GEMMs) when it has an MXFP8 tensor rate: the MX
formats and the non-TN FP8 layouts both arrive with compute capability 10.0.

**Off** (``fp8_param=off``; NeMo 1's ``fp8_params: false``, the default of NeMo 24.x's launcher
configs): the model keeps its 16-bit weights and Transformer Engine caches the quantised copies
across the micro-batches of a step (``is_first_microbatch``: Transformer Engine 1.x
``module/base.py`` ``set_fp8_weights`` allocates ``weight_fp8`` and ``weight_t_fp8``, 2 bytes a
GEMM weight on Hopper; 2.x keeps them as the module's weight workspace), so a GEMM weight holds
its 16-bit bytes plus the copies above; the distributed optimizer all-gathers 16-bit weights.

**On** (Megatron-Core's ``--fp8-param-gather``/``--fp4-param-gather``, ``TransformerConfig.fp8_param``
and ``fp4_param``: "keep the compute param in fp8 ... and perform the param all-gather in fp8"):
the model's GEMM weights *are* the quantised tensors, with no 16-bit copy; the distributed
optimizer keeps their f32 main params as it does for 16-bit weights
(:func:`mapper.cluster.states.state_bytes` is unchanged), and all-gathers (Megatron-Core
``megatron/core/distributed/param_and_grad_buffer.py``):

- per-tensor FP8: the row-wise bytes, 1 a weight (its parameter buffer is ``uint8``), half the
  16-bit all-gather; the transpose is rebuilt after the gather;
- MXFP8 with ``reuse_grad_buf_for_mxfp8_param_ag`` (which every MXFP8 preset of Megatron-Bridge and
  NeMo 2 sets with it): the weights in bf16, staged in the gradient buffer ("for FP32 weight grads,
  only half of the buffer is used to store params in bf16") and quantised after the gather, so
  2 bytes a weight, as with 16-bit weights, and no parameter buffer;
- NVFP4: the packed row-wise 4-bit bytes, 0.5 a weight ("remap packed rowwise bytes").

Megatron-Core accepts ``--fp8-param-gather`` only with the distributed optimizer or FSDP
(``megatron/training/arguments.py``), so a layout without one (``zero=0``) keeps 16-bit weights.
The default is what Megatron-Bridge's presets set (``src/megatron/bridge/training/mixed_precision.py``:
``fp8_param_gather = True`` in every per-tensor FP8 and MXFP8 preset, ``fp4_param_gather = True`` in
``bf16_with_nvfp4_mixed``). Weights of GEMMs that stay in 16-bit (the embedding, the LM head, the
router) and every other parameter keep their own bytes. Per-tensor scales (one f32 a tensor) are
left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mapper.costing.precision import ELEMENT_BYTES
from mapper.errors import OptionsError

#: The ``--parallel`` key that keeps each format's GEMM weights quantised (Megatron-Core's flag).
KEY_OF = {"fp8": "fp8_param", "mxfp8": "fp8_param", "nvfp4": "fp4_param"}
#: Bytes a GEMM weight moves in the distributed optimizer's all-gather with the key on (module docstring).
GATHERED = {"fp8": 1.0, "mxfp8": 2.0, "nvfp4": 0.5}
#: The key's values.
SWITCH = ("on", "off")


@dataclass(frozen=True, slots=True)
class LowParams:
    """How a run holds its quantised GEMMs' weights: ``fmt`` the GEMMs' format ("" none: 16-bit
    weights alone), ``on`` the key (module docstring), ``non_tn`` a GPU whose FP8 GEMMs take any layout."""

    fmt: str = ""
    on: bool = False
    non_tn: bool = False

    @property
    def copies(self) -> float:
        """Bytes of Transformer Engine's quantised copies of one GEMM weight (module docstring)."""
        if not self.fmt:
            return 0.0
        return ELEMENT_BYTES[self.fmt] * (1 if self.fmt == "fp8" and self.non_tn else 2)

    def active(self, zero: int) -> bool:
        """The key holds for a layout of ZeRO stage ``zero`` (the distributed optimizer or FSDP)."""
        return bool(self.fmt) and self.on and zero >= 1

    def held(self, pbytes: Any, qparams: Any, qbytes: Any, zero: int) -> Any:
        """Bytes of weights held, of ``pbytes`` in their own format, ``qparams`` of them (``qbytes``)
        read by quantised GEMMs. Works elementwise on arrays."""
        return pbytes - (qbytes if self.active(zero) else 0.0) + self.copies * qparams

    def gathered(self, pbytes: Any, qparams: Any, qbytes: Any, zero: int) -> Any:
        """Bytes of those weights the distributed optimizer's (or ZeRO-3's) all-gather moves."""
        if not self.active(zero):
            return pbytes
        return pbytes - qbytes + GATHERED[self.fmt] * qparams

    def block(self, c: Any, lay: Any) -> tuple[float, float, float, float]:
        """Bytes of block price ``c``'s weights a rank of layout ``lay`` holds, dense and its share of the experts'
        (:meth:`mapper.cluster.model.PlanModel.held`), as the run holds them, then as it all-gathers them."""
        share, (q, qb, eq, eqb), z = lay.tensor / (lay.expert * lay.etp), c.low, lay.zero
        db, eb = c.param_bytes - c.expert_param_bytes, c.expert_param_bytes * share
        return (self.held(db, q, qb, z), self.held(eb, eq * share, eqb * share, z),
                self.gathered(db, q, qb, z), self.gathered(eb, eq * share, eqb * share, z))

    def held_bytes(self, c: Any, lay: Any) -> float:
        """Bytes of block price ``c``'s weights a rank of ``lay`` holds, dense and experts' (:meth:`block`)."""
        return sum(self.block(c, lay)[:2])

    def gathered_bytes(self, c: Any, lay: Any) -> float:
        """Bytes of them its all-gathers move (:meth:`block`)."""
        return sum(self.block(c, lay)[2:])

    def plan(self, zero: int) -> dict[str, str]:
        """The key as JSON ``parallel.plan`` reports it for a layout of ZeRO stage ``zero`` (none without a format)."""
        return {KEY_OF[self.fmt]: "on" if self.active(zero) else "off"} if self.fmt else {}


#: No quantised weights: 16-bit weights alone.
NONE = LowParams()


def resolve(given: Any, precision: str | None, non_tn: bool) -> LowParams:
    """The :class:`LowParams` of a run at ``precision`` with the keys ``given`` (a LayoutSpec):
    an OptionsError naming --parallel where a key is meaningless (no format it applies to, or
    ``on`` with ``zero=0``)."""
    fmt = precision if precision in KEY_OF else ""
    for key in ("fp8_param", "fp4_param"):
        value = getattr(given, key)
        if value is None:
            continue
        if KEY_OF.get(fmt) != key:
            want = " or ".join(f for f, k in KEY_OF.items() if k == key)
            raise OptionsError(f"{key}={value} keeps the quantised GEMMs' weights in their format; it needs "
                               f"--precision {want} (this run: {precision or 'the graph’s own 16-bit'})",
                               obj="--parallel")
        if value == "on" and given.zero == 0:
            raise OptionsError(f"{key}=on gathers quantised weights in the distributed optimizer, which zero=0 "
                               "does not run (Megatron-Core needs it or FSDP); give zero=1 or more, or "
                               f"{key}=off", obj="--parallel")
    if not fmt:
        return NONE
    value = getattr(given, KEY_OF[fmt])
    return LowParams(fmt, value != "off" if value is not None else given.zero != 0, non_tn)

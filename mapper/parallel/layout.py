"""A training layout on a cluster and the ``--parallel`` text that gives one (:mod:`mapper.cluster`).

``--parallel tensor=T,pipeline=P[,data=D][,micro_batch=B][,interleave=V]
[,recompute=none|selective|full|MOD+MOD...][,zero=0|1|2|3][,sequence=on|off][,expert=E][,expert_tensor=ET]
[,grad=fp32|bf16][,first=N][,last=N][,overlap=none|a2a|tp|p2p|a2a+tp+p2p...][,context=C]
[,cp=ring|allgather|a2a|a2a+p2p][,cp_a2a=K][,allocator=caching|expandable][,attn=NAME]
[,fsdp=deepspeed|megatron][,fp8_param=on|off][,fp4_param=on|off]``: keys left out are chosen by the planner
(:mod:`mapper.cluster.search`);
``expert`` shards a mixture of experts' experts over ``E`` ranks folded inside data x tensor
(Megatron-Core's ``expert_model_parallel_size``), each expert cut over ``expert_tensor`` ranks
(``expert_tensor_parallel_size``; 1 unless given, as NVIDIA's MoE recipes set it); ``grad`` is
the gradient buffer's format (Megatron-Core's ``--grad-reduce-in-bf16`` against its
f32 default), left out: the training precision's default
(:func:`mapper.cluster.model.state_bytes`); ``first`` and ``last`` give the first and the last
pipeline chunk that many Transformer layers and the other chunks equal shares
(:mod:`mapper.cluster.layers`); ``recompute`` is none, ``selective`` (Megatron-Core's
default module, ``core_attn``), ``full`` (every layer from its input), or the modules of
Megatron-Core's ``recompute_modules`` joined by ``+`` (:data:`MODULES`;
:mod:`mapper.cluster.recompute`); ``overlap`` the communication overlaps the run sets
(:mod:`mapper.cluster.overlap`: ``a2a`` Megatron-Core's ``--overlap-moe-expert-parallel-comm``,
``tp`` its ``--tp-comm-overlap``, ``p2p`` its ``--overlap-p2p-communication``), off unless given,
as Megatron-Core defaults them: the planner never turns one on by itself; ``context`` cuts every
sequence over ``C`` ranks
(context parallelism, Megatron-Core's ``context_parallel_size``: :mod:`mapper.cluster.context`),
1 unless given, and ``cp`` how its ranks share keys and values (``ring``, Transformer Engine's
``p2p``, ``allgather``, Llama 3's all-gather, ``a2a``, DeepSpeed-Ulysses' all-to-alls, or ``a2a+p2p``,
an all-to-all over ``cp_a2a`` ranks and a ring over the rest: Megatron-Core's ``cp_comm_type`` and
``hierarchical_context_parallel_sizes = [cp_a2a, context / cp_a2a]``, :mod:`mapper.cluster.ulysses`;
the planner chooses ``cp_a2a`` when ``cp=a2a+p2p`` comes without it); ``allocator`` is
PyTorch's CUDA caching allocator's mode, ``caching`` (its default,
which fragments) or ``expandable`` (``expandable_segments``), ``expandable`` unless given
(:data:`mapper.cluster.model.FRAGMENTATION`), like ``grad`` a key of the plan, and so is ``attn``,
the attention kernel the GPUs run (one the platform declares, :mod:`mapper.platform.kernels`;
its default unless given: the planner never switches kernels by itself); ``fsdp``, a key of the
plan given with ``zero=3`` alone, is the implementation whose sharded gathers and scatters are
priced (:mod:`mapper.cluster.zero3`: DeepSpeed's ZeRO-3, the default, or Megatron-FSDP);
``fp8_param`` (``--precision fp8|mxfp8``) and ``fp4_param`` (``nvfp4``), keys of the plan, hold the
quantised GEMMs' weights in their format and all-gather them so (Megatron-Core's ``--fp8-param-gather``
and ``--fp4-param-gather``), ``on`` unless given, as Megatron-Bridge's presets set them, or keep
16-bit weights beside Transformer Engine's cached copies (``off``): :mod:`mapper.cluster.lowparam`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from mapper.errors import OptionsError

#: The keys of a layout, in the order reports list them.
KEYS = ("tensor", "pipeline", "data", "micro_batch", "interleave", "recompute", "zero", "sequence", "expert",
        "expert_tensor", "grad", "first", "last", "overlap", "context", "cp", "cp_a2a", "allocator", "attn", "fsdp",
        "fp8_param", "fp4_param")
#: Keys whose value may be 0.
ZERO_OK = ("zero", "first", "last")
RECOMPUTE = ("none", "selective", "full")
#: Megatron-Core's ``recompute_modules`` names (``recompute=MOD+MOD``), in the order layouts write them.
MODULES = ("core_attn", "mlp", "moe", "moe_act", "layernorm", "mla_up_proj", "shared_experts")
#: Modules Megatron-Core checkpoints without their output (``CheckpointWithoutOutput``).
WITHOUT_OUTPUT = ("moe_act", "layernorm", "mla_up_proj")
#: What ``recompute=selective`` recomputes: Megatron-Core's default ``recompute_modules``.
SELECTIVE = ("core_attn",)
#: Formats of the gradient buffer (``grad=``).
GRADS = ("fp32", "bf16")
#: Modes of the caching allocator (``allocator=``).
ALLOCATORS = ("caching", "expandable")
#: Communication overlaps (``overlap=``), each a set of ``a2a``, ``tp`` and ``p2p`` in this order.
OVERLAPS = ("none", "a2a", "tp", "p2p", "a2a+tp", "a2a+p2p", "tp+p2p", "a2a+tp+p2p")
#: How context-parallel ranks share keys and values (``cp=``; :mod:`mapper.cluster.context`).
CP_KINDS = ("ring", "allgather", "a2a", "a2a+p2p")
#: Keys of the plan rather than of each layout.
PLAN_KEYS = ("grad", "allocator", "attn", "fsdp", "fp8_param", "fp4_param")
#: ZeRO-3's implementations (``fsdp=``; :mod:`mapper.cluster.zero3`), the default first.
FSDP = ("deepspeed", "megatron")
#: The largest degree a layout may give.
MAX_DEGREE = 1 << 20


@dataclass(frozen=True, slots=True)
class Layout:
    """Tensor ``tensor`` x pipeline ``pipeline`` x data ``data`` ranks; ``micro_batch`` sequences
    (samples) per micro-batch; ``interleave`` virtual stages per pipeline rank (Narayanan et al.,
    SC'21, 2.2.2); activation ``recompute``; ZeRO stage ``zero`` (Rajbhandari et al., SC'20;
    3 = FSDP); ``sequence`` parallelism (Korthikanti et al., 2023); ``expert`` ranks sharing a
    mixture of experts' experts, each expert cut over ``expert_tensor`` ranks, both folded
    inside the ``data x context x tensor`` ranks (Megatron-Core's MoE parallel folding); ``context``
    ranks sharing each sequence (:mod:`mapper.cluster.context`), between tensor and data in rank
    order, so ``gpus = tensor x pipeline x context x data``. (``grad`` is the plan model's, the same
    for every layout: :class:`mapper.cluster.model.PlanModel`.)"""

    tensor: int = 1
    pipeline: int = 1
    data: int = 1
    micro_batch: int = 1
    interleave: int = 1
    recompute: str = "none"
    zero: int = 0
    sequence: bool = False
    expert: int = 1
    expert_tensor: int = 0  # 0: the tensor degree (Megatron-Core's default)
    first: int | None = None  # Transformer layers of the first chunk (None: chunks cut by time)
    last: int | None = None  # of the last chunk (:mod:`mapper.cluster.layers`)
    overlap: str = "none"  # communication overlapped with computation (:data:`OVERLAPS`)
    context: int = 1
    cp: str = "ring"  # how the context ranks share keys and values (CP_KINDS)
    cp_a2a: int = 1  # cp=a2a+p2p: the ranks of its all-to-all groups (the rest form its rings)

    @property
    def etp(self) -> int:
        """Ranks each expert is cut over (``expert_tensor``, else the tensor degree)."""
        return self.expert_tensor or self.tensor

    @property
    def gpus(self) -> int:
        return self.tensor * self.pipeline * self.context * self.data

    @property
    def expert_data(self) -> int:
        """Replicas of each expert shard: the ``data x context x tensor`` ranks over ``expert x expert_tensor``."""
        return max(1, self.tensor * self.context * self.data // (self.expert * self.etp))

    @property
    def replicas(self) -> int:
        """Ranks that hold the same weights and reduce their gradients together: ``data x context``."""
        return self.data * self.context

    def label(self) -> str:
        extra = [f"interleave {self.interleave}"] if self.interleave > 1 else []
        extra += [f"recompute {self.recompute}"] if self.recompute != "none" else []
        extra += [f"zero {self.zero}"] if self.zero else []
        extra += ["sequence parallel"] if self.sequence else []
        extra += [f"expert {self.expert}"] if self.expert > 1 else []
        extra += [f"expert tensor {self.etp}"] if self.expert > 1 and self.etp != self.tensor else []
        extra += [f"{k} chunk {n} layer{'s' if n != 1 else ''}" for k, n in (("first", self.first), ("last", self.last))
                  if n is not None]
        extra += [f"overlap {self.overlap}"] if self.overlap != "none" else []
        ctx = f" x context {self.context}" if self.context > 1 else ""
        ctx += f" ({self.cp})" if self.context > 1 and self.cp not in ("ring", "a2a+p2p") else ""
        ctx += f" (a2a {self.cp_a2a} + p2p {self.context // self.cp_a2a})" if self.context > 1 and \
            self.cp == "a2a+p2p" else ""
        return (f"tensor {self.tensor} x pipeline {self.pipeline}{ctx} x data {self.data}, micro-batch "
                f"{self.micro_batch}" + "".join(f", {e}" for e in extra))

    def to_json(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "pipeline": self.pipeline, "data": self.data,
                "micro_batch": self.micro_batch, "interleave": self.interleave, "recompute": self.recompute,
                "zero": self.zero, "sequence": self.sequence, "expert": self.expert,
                "expert_tensor": self.etp, "overlap": self.overlap, "context": self.context, "cp": self.cp,
                "cp_a2a": self.cp_a2a,
                **{k: n for k, n in (("first", self.first), ("last", self.last)) if n is not None}}


@dataclass(frozen=True, slots=True)
class LayoutSpec:
    """The keys of a :class:`Layout` that a user fixed (``--parallel`` given as a layout, or a mode:
    :data:`MODES`); a key left None is chosen by the planner. What the planners
    (:mod:`mapper.cluster.search`, :mod:`mapper.serving.search`) take. ``grad`` is the gradient
    buffer's format, a key of the plan rather than of each layout."""

    tensor: int | None = None
    pipeline: int | None = None
    data: int | None = None
    micro_batch: int | None = None
    interleave: int | None = None
    recompute: str | None = None
    zero: int | None = None
    sequence: bool | None = None
    expert: int | None = None
    expert_tensor: int | None = None
    grad: str | None = None
    first: int | None = None
    last: int | None = None
    overlap: str | None = None
    context: int | None = None
    cp: str | None = None
    cp_a2a: int | None = None
    allocator: str | None = None
    attn: str | None = None
    fsdp: str | None = None
    fp8_param: str | None = None
    fp4_param: str | None = None

    def fixed(self) -> dict[str, Any]:
        """The keys given, in :data:`KEYS` order, with their values."""
        return {k: getattr(self, k) for k in KEYS if getattr(self, k) is not None}

    def allows(self, layout: Any) -> bool:
        """True when ``layout`` (a :class:`Layout`, or anything with its keys) has every key given
        (``grad``, ``allocator``, ``attn`` and ``fsdp``, the plan's, aside)."""
        return all(getattr(layout, k) == v for k, v in self.fixed().items() if k not in PLAN_KEYS)

    def text(self) -> str:
        """The keys given as ``--parallel`` writes them (``none`` when none is)."""
        shown = {True: "on", False: "off"}
        return ", ".join(f"{k}={shown.get(v, v) if k == 'sequence' else v}" for k, v in self.fixed().items()) \
            or "none"


#: No key fixed: the planner chooses every one.
FREE = LayoutSpec()
#: What a mode name fixes when a cluster planner runs it.
MODES = {"auto": FREE, "data": LayoutSpec(tensor=1, pipeline=1), "tensor": LayoutSpec(pipeline=1, data=1),
         "pipeline": LayoutSpec(tensor=1, data=1)}


def requested(text: str) -> LayoutSpec:
    """The keys ``--parallel`` text fixes: a layout's (:func:`parse_layout`) or a mode's (:data:`MODES`)."""
    if is_layout(text):
        return parse_layout(text)
    if text not in MODES:
        raise OptionsError(f"--parallel {text!r} is not a mode the cluster planner runs; choose one of "
                           f"{', '.join(MODES)}, or give a layout", obj="--parallel")
    return MODES[text]


def is_layout(text: str) -> bool:
    """True for ``--parallel`` text that gives layout keys rather than a mode name."""
    return "=" in text and not text.startswith("burst")


def parse_layout(text: str) -> LayoutSpec:
    """The keys ``text`` gives (module docstring); an OptionsError naming --parallel otherwise."""
    given: dict[str, Any] = {}
    for item in text.split(","):
        key, sep, value = (x.strip() for x in item.partition("="))
        if not sep or not key:
            raise OptionsError(f"expected KEY=VALUE items separated by commas, got {item.strip()!r} in "
                               f"{text!r}; keys: {', '.join(KEYS)}", obj="--parallel")
        if key not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=1)
            raise OptionsError(f"unknown layout key {key!r}; keys: {', '.join(KEYS)}", obj="--parallel",
                               hint=f"did you mean '{close[0]}'?" if close else None)
        if key in given:
            raise OptionsError(f"layout key {key!r} is given twice", obj="--parallel")
        given[key] = _value(key, value)
    return LayoutSpec(**given)


def recompute_value(value: str) -> str:
    """``none``, ``selective``, ``full``, or '+'-joined :data:`MODULES` in their order; an
    OptionsError naming --parallel for anything else."""
    if value in RECOMPUTE:
        return value
    names = [x.strip() for x in value.split("+")]
    bad = [x for x in names if x not in MODULES]
    if bad or len(set(names)) < len(names):
        raise OptionsError(f"recompute={value!r}: choose {', '.join(RECOMPUTE)}, or modules joined by '+' (each "
                           f"once) from {', '.join(MODULES)}", obj="--parallel")
    return "+".join(m for m in MODULES if m in names)


#: The keys whose value is one of a fixed list of names, and those names.
CHOICES = {"grad": GRADS, "allocator": ALLOCATORS, "fsdp": FSDP, "cp": CP_KINDS, "fp8_param": ("on", "off"),
           "fp4_param": ("on", "off")}


def _value(key: str, value: str) -> Any:
    if key == "recompute":
        return recompute_value(value)
    if key == "sequence":
        if value not in ("on", "off"):
            raise OptionsError(f"sequence={value!r}: choose on or off", obj="--parallel")
        return value == "on"
    if key in CHOICES:
        if value not in CHOICES[key]:
            raise OptionsError(f"{key}={value!r}: choose one of {', '.join(CHOICES[key])}", obj="--parallel")
        return value
    if key == "attn":
        if not (value.isascii() and value.replace("_", "").isalnum() and len(value) <= 32):
            raise OptionsError(f"attn={value!r}: expected the name of an attention kernel the platform declares "
                               "(such as cudnn or fa2)", obj="--parallel")
        return value
    if key == "overlap":  # a2a, tp and p2p in any order, each once
        parts = value.split("+")
        if len(set(parts)) == len(parts) and set(parts) <= {"a2a", "tp", "p2p"}:
            value = "+".join(k for k in ("a2a", "tp", "p2p") if k in parts)
        if value not in OVERLAPS:
            raise OptionsError(f"overlap={value!r}: choose one of {', '.join(OVERLAPS)}", obj="--parallel")
        return value
    if not (value.isascii() and value.isdigit()) or len(value) > 8:
        raise OptionsError(f"{key}={value!r}: expected a {'non-negative' if key in ZERO_OK else 'positive'} integer",
                           obj="--parallel")
    n = int(value)
    if key == "zero" and n > 3:
        raise OptionsError(f"zero={n}: ZeRO stages are 0, 1, 2 and 3", obj="--parallel")
    if key in ZERO_OK and n <= MAX_DEGREE:
        return n
    if not 1 <= n <= MAX_DEGREE:
        raise OptionsError(f"{key}={value}: expected an integer from 1 to {MAX_DEGREE:,}", obj="--parallel")
    return n

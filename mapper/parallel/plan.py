"""A split plan: how many ways the batch, the tensors and the layers are cut,
and which device runs each piece (:mod:`mapper.parallel`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mapper.errors import OptionsError

#: What ``--parallel`` accepts.
PARALLEL_MODES = ("none", "auto", "data", "tensor", "pipeline", "hybrid")


def check_parallel(mode: str) -> str:
    """``mode`` when ``--parallel`` accepts it (a mode, or a cluster layout's keys:
    :func:`mapper.parallel.layout.parse_layout`), else an :class:`OptionsError`."""
    from mapper.parallel.layout import is_layout, parse_layout

    if isinstance(mode, str) and (mode == "burst" or mode.startswith("burst,")):
        from mapper.parallel.burst import parse_burst

        parse_burst(mode)
        return mode
    if isinstance(mode, str) and is_layout(mode):
        parse_layout(mode)
        return mode
    if mode not in PARALLEL_MODES:
        raise OptionsError(f"unknown --parallel mode {mode!r}; choose one of {', '.join(PARALLEL_MODES)}, "
                           "burst[,amplification=X], or give "
                           "a layout: tensor=T,pipeline=P[,data=D][,micro_batch=B][,interleave=V]"
                           "[,recompute=none|selective|full|MODULES][,zero=0..3][,sequence=on|off]"
                           "[,first=N][,last=N]", obj="--parallel")
    return mode


@dataclass(frozen=True, slots=True)
class Plan:
    """``stages`` pipeline stages x ``data`` replicas x ``tensor`` ranks.

    ``devices`` is the mesh, flat: the device of stage ``s``, replica ``j``,
    rank ``r`` is ``devices[(s * data + j) * tensor + r]``. ``cuts`` are the
    positions in the forward graph's topological order where stages 1.. begin.
    The batch is cut into ``micro_batches * data`` chunks: chunk ``b`` is
    micro-batch ``b // data`` of replica ``b % data``.
    """

    data: int = 1
    tensor: int = 1
    stages: int = 1
    micro_batches: int = 1
    devices: tuple[str, ...] = ()
    cuts: tuple[int, ...] = ()
    bucket_mib: float = 25.0  # gradient all-reduce bucket (PyTorch DDP's bucket_cap_mb default)
    vocab: bool = False  # also cut embeddings and the output GEMM by the vocabulary (roles.tensor_regions)
    #: with ``vocab``, leave the output GEMM's logits cut by the vocabulary for a loss that takes them so
    #: (Megatron's vocabulary-parallel cross entropy: ranks exchange per-token scalars, not logits;
    #: Shoeybi et al., arXiv 1909.08053, section 3)
    parallel_loss: bool = False

    def __post_init__(self) -> None:
        if min(self.data, self.tensor, self.stages, self.micro_batches) < 1:
            raise ValueError(f"plan degrees must be >= 1: {self}")
        if len(self.devices) != self.data * self.tensor * self.stages:
            raise ValueError(f"plan needs {self.data * self.tensor * self.stages} devices, got {len(self.devices)}")
        if len(self.cuts) != self.stages - 1:
            raise ValueError(f"plan with {self.stages} stages needs {self.stages - 1} cuts, got {len(self.cuts)}")

    @property
    def chunks(self) -> int:
        """Slices of the batch: micro-batches times replicas."""
        return self.data * self.micro_batches

    @property
    def trivial(self) -> bool:
        return self.data == self.tensor == self.stages == self.micro_batches == 1

    def device(self, stage: int, replica: int, rank: int) -> str:
        return self.devices[(stage * self.data + replica) * self.tensor + rank]

    def mesh(self, stage: int, replica: int) -> tuple[str, ...]:
        """The tensor-parallel ranks of one stage's replica."""
        start = (stage * self.data + replica) * self.tensor
        return self.devices[start:start + self.tensor]

    def replicas(self, stage: int, rank: int) -> tuple[str, ...]:
        """The data-parallel replicas of one stage's rank."""
        return tuple(self.device(stage, j, rank) for j in range(self.data))

    def label(self) -> str:
        return (f"data {self.data} x tensor {self.tensor} x pipeline {self.stages}"
                + (f" ({self.micro_batches} micro-batches)" if self.micro_batches > 1 else ""))

    def to_json(self) -> dict[str, Any]:
        return {
            "data": self.data, "tensor": self.tensor, "stages": self.stages,
            "micro_batches": self.micro_batches, "devices": list(self.devices), "cuts": list(self.cuts),
        }

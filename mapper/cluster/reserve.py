"""Memory of a GPU that no tensor of the model can use: the training process's reserve.

A plan's peak is compared with the board's whole memory (a platform's ``memory_gib``, what
``nvidia-smi`` reports); before the model's first tensor, four things take their share of it:

- **the driver**: the CUDA runtime reports less memory than the board has
  (``cudaMemGetInfo``/``torch.cuda.get_device_properties``): an A100-SXM4-80GB reports
  ``total_memory=81050MB`` and an H100 80GB HBM3 ``81089MB`` (PyTorch 2.7, CUDA 12.8) of the
  81,920 MiB ``nvidia-smi`` shows, both about 1 % less (:data:`DRIVER_SHARE`);
- **the CUDA context and kernel images** of the process: PyTorch measures 666,632,192 bytes with
  every kernel of its library loaded (``CUDA_MODULE_LOADING=DEFAULT``) and 287,047,680 with lazy
  loading before most kernels have run (pytorch/pytorch#86509); a training step runs most of them,
  so the first (:data:`CONTEXT`);
- **NCCL's buffers**, per communicator a process joins (:func:`communicators`): one buffer per
  protocol (LL 512 KiB, LL128 4.69 MiB, Simple ``NCCL_BUFFSIZE`` 4 MiB: NCCL's ``init.cc``
  ``DEFAULT_*BUFFSIZE``) per channel and connected peer; a collective's communicator connects its
  rings (one peer a channel) and trees (a chain within a node: two peers) on up to
  ``MAXCHANNELS / 2 = 16`` channels (the ring graph's maximum); point-to-point sends between
  pipeline stages use the Simple buffer on ``NCCL_NCHANNELS_PER_NET_PEER = 2`` channels per peer
  (NCCL's environment variables documentation), to the previous and the next stage;
- **GEMM workspaces**: cuBLAS's per handle (PyTorch's default ``CUBLAS_WORKSPACE_CONFIG``
  ``:4096:8`` on Hopper, 8 x 4 MiB; ``:4096:2:16:8``, about 8 MiB, before) and Transformer
  Engine's cuBLASLt workspace (32 MiB on Hopper, ``get_cublas_workspace_size_bytes``); the Hopper
  sizes are taken for every GPU (under 60 MiB more on older ones).

A serving replica (:mod:`mapper.serving`) holds the same parts for the communicators it opens
(:class:`ServingGroups`): its tensor group's collective communicator and its pipeline's sends;
replicas serve apart, with no data-parallel group (TensorRT-LLM and vLLM open a tensor and a
pipeline group per replica, vLLM's ``parallel_state``).

Nothing here is fitted to a measured run; what the allocator holds beside the activations is
``fragmentation`` (:mod:`mapper.cluster.model`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MIB = float(2**20)
#: Share of the board's memory the driver does not report: 1 - 81,089 / 81,920 MiB (H100 80GB
#: HBM3; the A100 80GB's 81,050 MiB gives 1.06 %).
DRIVER_SHARE = 1.0 - 81_089 / 81_920
#: Bytes of the CUDA context with PyTorch's kernels loaded (pytorch/pytorch#86509).
CONTEXT = 666_632_192.0
#: NCCL's buffer bytes per channel and peer by protocol (LL, LL128, Simple; NCCL ``init.cc``):
#: LL 8 lines x 512 threads x 8 steps x 16 B; LL128 120 elements x 640 threads x 8 steps x 8 B.
NCCL_BUFFERS = {"LL": 8 * 512 * 8 * 16.0, "LL128": 120 * 640 * 8 * 8.0, "Simple": 4 * MIB}
#: Channels of a collective communicator (NCCL's ring graph: ``MAXCHANNELS / 2``).
CHANNELS = 16
#: Peers a collective connects on each channel: its ring's one and its tree's chain's two.
COLLECTIVE_PEERS = 3
#: Channels per peer of point-to-point sends (``NCCL_NCHANNELS_PER_NET_PEER``) and the peers of a
#: pipeline stage (the previous and the next).
P2P_CHANNELS, P2P_PEERS = 2, 2
#: GEMM workspaces: cuBLAS's (PyTorch, Hopper) and Transformer Engine's cuBLASLt one.
WORKSPACES = 32 * MIB + 32 * MIB


@dataclass(frozen=True, slots=True)
class ServingGroups:
    """The layout of one serving replica as :func:`communicators` reads it: ``tensor`` ranks and
    ``pipeline`` stages, and no data, context or expert group (module docstring)."""

    tensor: int = 1
    pipeline: int = 1
    replicas: int = 1
    context: int = 1
    expert: int = 1


def communicators(lay: Any) -> dict[str, int]:
    """The NCCL communicators a rank of layout ``lay`` joins, with their sizes: one per degree
    above one (the gradients' replicas, ``data x context``; tensor; context; expert, the expert
    shards' own tensor group and their data replicas, as Megatron-Core's ``parallel_state`` opens
    them; ``cp=a2a+p2p``'s all-to-all and ring levels besides the context group, its
    ``create_hierarchical_groups``; pipeline sends are point to point)."""
    groups = {"data": lay.replicas, "tensor": lay.tensor, "context": lay.context, "pipeline": lay.pipeline}
    if getattr(lay, "cp", "") == "a2a+p2p":
        groups |= {"cp_a2a": lay.cp_a2a, "cp_p2p": lay.context // lay.cp_a2a}
    if lay.expert > 1:
        groups |= {"expert": lay.expert, "expert_data": lay.expert_data}
        if lay.etp != lay.tensor:
            groups["expert_tensor"] = lay.etp
    return {k: n for k, n in groups.items() if n > 1}


def nccl_bytes(lay: Any) -> float:
    """Bytes of NCCL buffers a rank of ``lay`` holds (module docstring)."""
    collective = CHANNELS * COLLECTIVE_PEERS * sum(NCCL_BUFFERS.values())
    p2p = P2P_CHANNELS * P2P_PEERS * NCCL_BUFFERS["Simple"]
    return sum(p2p if k == "pipeline" else collective for k in communicators(lay))


def reserve_parts(capacity: float, lay: Any) -> dict[str, float]:
    """What a GPU of ``capacity`` bytes running a rank of ``lay`` cannot give the model, by part."""
    return {"driver": capacity * DRIVER_SHARE, "context": CONTEXT, "nccl": nccl_bytes(lay),
            "workspaces": WORKSPACES}


def reserve(capacity: float, lay: Any) -> float:
    """The bytes of :func:`reserve_parts` together."""
    return sum(reserve_parts(capacity, lay).values())

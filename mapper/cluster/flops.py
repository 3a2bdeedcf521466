"""Model FLOPs of a training step as NVIDIA's performance tables count them (:mod:`mapper.cluster`).

NVIDIA's published training throughputs (the DGX Cloud benchmarking recipes'
READMEs, ``dgxc-benchmarking``; NeMo / Megatron-Bridge ``performance-summary``)
count, per sequence of ``s`` tokens of a Llama of ``L`` layers, width ``h``,
``a`` heads of which ``g`` key-value groups, MLP width ``F`` (``k`` experts per
token, 1 for a dense model) and vocabulary ``V``::

    s [12 L h^2 (1 + g/a + s/h) + 18 L F h k + 6 V h]

that is three times (forward and backward, no recomputation) the forward's
GEMMs with weights at ``2 m n k`` each (QKV, the attention output, the three
SwiGLU matrices of every expert a token visits, the LM head) and attention's
two products over the whole ``s x s`` score matrix (``4 s^2 h`` per layer: no
causal saving; with a sliding window of ``W`` each query counts ``min(s, W)`` keys), nothing
for norms, activations, softmax or the embedding lookup (multi-head latent attention: its
products at query-key width ``dn + dr`` and value width ``dv``). :func:`model_flops` counts
exactly that from the graph, so it is the formula for a Llama graph and the same convention for any other (a GPT's GELU
MLP gives Megatron-LM's ``72 B s l h^2 (1 + s/6h + V/12lh)``, Narayanan et al.,
SC'21, appendix).
"""

from __future__ import annotations

from mapper.core.graph import Task, TaskGraph
from mapper.costing.efficiency import op_class


def forward_flops(task: Task) -> float:
    """The forward FLOPs of ``task`` NVIDIA's count includes (module docstring)."""
    if task.op == "attention" and task.output is not None:
        seq = int(task.attr("seq"))
        keys = seq + int(task.attr("cache") or 0)
        window = int(task.attr("window") or 0)
        keys = min(keys, window) if window else keys  # a sliding window's whole band
        tokens, width = task.output.shape[0], task.output.shape[1]
        return 4.0 * tokens * keys * width  # Q K^T and P V, the whole matrix
    if task.op == "mla_attention" and task.output is not None:  # query-key width dn + dr, value width dv
        tokens, qk = task.operands[0].type.shape
        return 2.0 * tokens * int(task.attr("seq")) * (qk + task.output.shape[1])
    if op_class(task.op, None) == "gemm" and any(o.kind == "weight" for o in task.operands):
        return float(task.flops)
    return 0.0


def model_flops(graph: TaskGraph) -> float:
    """FLOPs of one training step of the forward ``graph`` (module docstring): 3x the counted forward."""
    return 3.0 * sum(forward_flops(t) for t in graph.tasks)


"""How the executor makes a graph's inputs and weights: which must be
positive, which are embedding ids (and their vocabulary), and the scale of
GEMM and convolution weights. Fused tasks are looked at through their parts
(:func:`mapper.costing.fusion.leaf_tasks`)."""

from __future__ import annotations

import math
import zlib
from typing import Any

import numpy as np

from mapper.core.graph import Operand, Task, TaskGraph
from mapper.costing.fusion import leaf_tasks


def operand_key(op: Operand) -> tuple[str, Any]:
    """The key of an operand's value: its producer's index, or its kind and name."""
    return ("task", op.producer) if op.kind == "task" else (op.kind, op.name)


def source_key(op: Operand) -> tuple[str, Any]:
    """The key of the whole tensor an operand's value is made from: a shard's source's, else its own."""
    return (op.kind, op.shard.source) if op.shard is not None else operand_key(op)


#: ``elementwise`` functions that need positive operands to give finite values.
_POSITIVE_FNS = ("log", "sqrt")


def positive_operands(graph: TaskGraph) -> frozenset[tuple[str, Any]]:
    """Inputs and weights read by ``log``/``sqrt``: generated positive."""
    return frozenset(
        source_key(t.operands[0]) for t in leaf_tasks(graph)
        if t.op == "elementwise" and t.attr("fn") in _POSITIVE_FNS and t.operands and t.operands[0].kind != "task"
    )


def vocab_sizes(graph: TaskGraph) -> dict[tuple[str, Any], int]:
    """For integer tensors used as indices: the smallest size they index (an embedding table's
    rows; the axes a ``gather_nd`` picks from; a ``scatter_elements``'s axis)."""
    vocab: dict[tuple[str, Any], int] = {}
    for t in leaf_tasks(graph):
        if len(t.operands) < 2:
            continue
        if t.op in ("embedding", "embedding_bag") and t.operands[1].type.shape:
            k, table = source_key(t.operands[0]), t.operands[1]
            rows = (table.shard.full if table.shard is not None else table.type).shape[0]
        elif t.op in ("gather_nd", "scatter_elements") and t.operands[1].kind != "task":
            k, data = source_key(t.operands[1]), t.operands[0].type.shape
            if t.op == "gather_nd":
                b = int(t.attr("batch_dims") or 0)
                rows = min(data[b:b + t.operands[1].type.shape[-1]], default=1)
            else:
                rows = data[int(t.attr("axis") or 0)]
        else:
            continue
        vocab[k] = min(vocab.get(k, rows), rows)
    return vocab


def _fan_in(task: Task) -> int | None:
    """Inputs summed per output element by a matmul or conv2d weight (operand 1) or a
    grouped_matmul's experts' weights (operand 2)."""
    at = 2 if task.op == "grouped_matmul" else 1
    if len(task.operands) <= at or task.operands[at].kind == "task":
        return None
    w = task.operands[at]
    shape = (w.shard.full if w.shard is not None else w.type).shape
    if task.op in ("matmul", "grouped_matmul") and len(shape) >= 2:
        return shape[-2]
    if task.op == "conv2d" and len(shape) == 4:
        return shape[1] * shape[2] * shape[3]
    if task.op == "conv_transpose2d" and len(shape) == 4:  # w[C, K/groups, R, S]
        return shape[0] // int(task.attr("groups") or 1) * shape[2] * shape[3]
    return None


def weight_scales(graph: TaskGraph) -> dict[tuple[str, Any], float]:
    """A power-of-two scale near ``1/sqrt(fan_in)`` for matmul and conv2d weights.

    LeCun initialisation (LeCun, Bottou, Orr, Mueller, "Efficient BackProp",
    1998): activations stay of order 1 through deep graphs, as in trained
    networks, so softmax and attention stay well conditioned and the reference
    check's tolerances (for data of magnitude about 1) apply. A power of two
    is exact in every float format, bf16 and f16 included.
    """
    scales: dict[tuple[str, Any], float] = {}
    for t in leaf_tasks(graph):
        fan = _fan_in(t)
        if fan and fan > 1:
            k = source_key(t.operands[2 if t.op == "grouped_matmul" else 1])
            s = 2.0 ** -round(0.5 * math.log2(fan))
            scales[k] = min(scales.get(k, s), s)
    return scales


def make_value(op: Operand, seed: int, kernels: Any, vocab: dict[tuple[str, Any], int],
               positive: frozenset[tuple[str, Any]], scale: dict[tuple[str, Any], float]) -> Any:
    """The value of input or weight ``op``: random from its own seed (``seed``
    and a hash of its kind and name, so values do not depend on the order of
    creation), ids below the vocabulary size for embedding ids, positive
    where ``log``/``sqrt`` read it, scaled for GEMM and convolution weights;
    ``kernels`` is :mod:`mapper.kernels.registry`."""
    if op.shard is not None:  # a slice of the whole tensor, made as the unsplit graph makes it
        sh = op.shard
        whole = make_value(Operand(op.kind, sh.source, sh.full), seed, kernels, vocab, positive, scale)
        return take_shard(whole, sh.axis, sh.index, sh.parts, sh.groups)
    k = operand_key(op)
    rng = np.random.default_rng([seed, zlib.crc32(f"{op.kind}:{op.name}".encode())])
    ty = op.type
    if ty.layout == "csr":
        return kernels.make_csr(ty.shape, ty.nnz or 0, ty.dtype, rng)
    if k in vocab:
        return kernels.make_ids(ty.shape, vocab[k], rng, ty.dtype)
    value = kernels.make_tensor(ty.dtype, ty.shape, rng, positive=k in positive)
    factor = scale.get(k)
    if factor is not None and value.dtype.kind in "fc":
        value *= value.dtype.type(factor)
    return value


def take_shard(value: Any, axis: int, index: int, parts: int, groups: int = 1) -> Any:
    """Chunk ``index`` of ``parts`` along ``axis`` of each of the ``groups``
    blocks of ``value`` (:class:`mapper.core.graph.Shard`), as a new array."""
    size = value.shape[axis]
    block = size // groups
    chunk = block // parts
    pieces = [np.take(value, np.arange(g * block + index * chunk, g * block + (index + 1) * chunk), axis=axis)
              for g in range(groups)]
    return np.ascontiguousarray(pieces[0] if groups == 1 else np.concatenate(pieces, axis=axis))

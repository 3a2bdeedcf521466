"""Folding an ONNX model's constant and shape arithmetic before it is imported.

Exporters write the arithmetic of shapes as nodes: ``Shape`` of a tensor,
``Gather`` of one of its dimensions, ``Concat``, ``Equal``, ``Where``,
``ConstantOfShape``, ``Range``, ``Expand`` of constants (torch's
``dynamo=False`` exporter for every transformer). Shape inference alone
leaves what flows from them unknown (``unk__0``). :func:`fold_constants`
evaluates, with ONNX's own reference evaluator (``onnx.reference``, the
operator specification as code), every node whose inputs are all known: a
small initializer, a folded output, or the shape or size of a tensor whose
shape is known once the user's dimensions are set. Each folded output
becomes an initializer; shape inference then runs again, and so on until
nothing more folds. Values over :data:`MAX_FOLDED_ELEMENTS` elements are
not made (their shapes are enough). The ``onnx`` module is passed in: this
module does not import it (mapper.frontend.importers.onnx_model is its one importer).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from mapper.core.limits import memory_budget

#: Folded values up to this many elements (16 MiB of f32) are made and kept: shape arithmetic, and
#: the masks and embeddings an exporter expands to the batch (BERT-large's token types at batch 8
#: and 512 tokens: 4M), whose values say they repeat along it.
MAX_FOLDED_ELEMENTS = 2**22
#: Rounds of folding and shape inference at most (each round folds what the previous one made known).
MAX_ROUNDS = 8
#: Ops never folded: their outputs are random, or they hold graphs of their own (an ``If`` whose
#: condition is known is replaced by the branch it takes instead: :func:`_branch`).
NEVER = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
                   "Bernoulli", "If", "Loop", "Scan", "SequenceMap"})


def fold_constants(onnx: Any, model: Any, infer: Callable[[Any], Any], types: frozenset[int]) -> tuple[Any, int]:
    """The model with every foldable node (module docstring) whose outputs are of ONNX element
    ``types`` replaced by an initializer, shapes inferred (``infer``), and how many nodes were folded."""
    folded = 0
    model = infer(model)
    values: dict[str, Any] = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    for _ in range(MAX_ROUNDS):
        done = _fold_once(onnx, model, values, types)
        if not done:
            break
        folded += done
        model = infer(model)
    return model, folded


def _known_shapes(graph: Any) -> dict[str, tuple[int, ...]]:
    """Tensors whose shapes are wholly known, after shape inference."""
    out: dict[str, tuple[int, ...]] = {}
    for vi in (*graph.input, *graph.value_info, *graph.output):
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.HasField("shape") and \
                all(d.HasField("dim_value") and d.dim_value >= 0 for d in tt.shape.dim):
            out[vi.name] = tuple(int(d.dim_value) for d in tt.shape.dim)
    return out


def _fold_once(onnx: Any, model: Any, values: dict[str, Any], types: frozenset[int]) -> int:
    """Fold, in order, the nodes whose inputs are known (``values``, which gains the folded
    outputs); the number folded."""
    import numpy as np

    graph = model.graph
    shapes = _known_shapes(graph)
    outputs = {o.name for o in graph.output}
    opsets = list(model.opset_import)
    keep, made = [], []
    made_if = False
    for node in graph.node:
        inputs = [i for i in node.input if i]
        value = None
        standard = node.domain in ("", "ai.onnx")
        if standard and node.op_type in ("Shape", "Size") and len(inputs) == 1 and inputs[0] in shapes:
            dims = shapes[inputs[0]]
            if node.op_type == "Size":
                value = [np.array(int(np.prod(dims, dtype=np.int64)), dtype=np.int64)]
            else:
                attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
                start, end = int(attrs.get("start", 0)), attrs.get("end")
                value = [np.array(dims[start:None if end is None else int(end)], dtype=np.int64)]
        elif standard and node.op_type == "If" and inputs and inputs[0] in values and values[inputs[0]].size == 1:
            keep.extend(_branch(onnx, graph, node, bool(values[inputs[0]].reshape(()))))
            made_if = True
            continue
        elif standard and node.op_type not in NEVER and all(i in values for i in inputs) \
                and not any(o in outputs for o in node.output) and _small(node, shapes):
            value = _evaluate(onnx, node, inputs, values, opsets)
        if value is None or len(value) != len(node.output) or not all(_keepable(onnx, v, types) for v in value):
            keep.append(node)
            continue
        for name, v in zip(node.output, value):
            if name:
                values[name] = np.asarray(v)
                made.append(onnx.numpy_helper.from_array(np.asarray(v), name))
    if not made and not made_if:
        return 0
    folded = max(len(graph.node) - len(keep), 1)
    del graph.node[:]
    graph.node.extend(keep)
    graph.initializer.extend(made)
    names = {t.name for t in made}
    kept_info = [vi for vi in graph.value_info if vi.name not in names]
    del graph.value_info[:]
    graph.value_info.extend(kept_info)
    return folded


def _branch(onnx: Any, graph: Any, node: Any, cond: bool) -> list[Any]:
    """The nodes of the branch an ``If`` with a known condition takes, inlined: its nodes (their
    outer-scope inputs are the graph's), its initializers added to the graph's, and an
    ``Identity`` from each branch output to the ``If`` output it stands for."""
    attrs = {a.name: a for a in node.attribute}
    body = onnx.helper.get_attribute_value(attrs["then_branch" if cond else "else_branch"])
    graph.initializer.extend(body.initializer)
    nodes = list(body.node)
    for inner, outer in zip(body.output, node.output):
        if outer:
            nodes.append(onnx.helper.make_node("Identity", [inner.name], [outer], name=f"{node.name}_{outer}"))
    return nodes


def _small(node: Any, shapes: dict[str, tuple[int, ...]]) -> bool:
    """False when an output is known to be larger than :data:`MAX_FOLDED_ELEMENTS`."""
    for o in node.output:
        if o in shapes:
            n = 1
            for d in shapes[o]:
                n *= d
            if n > MAX_FOLDED_ELEMENTS:
                return False
    return True


def _evaluate(onnx: Any, node: Any, inputs: list[str], values: dict[str, Any], opsets: list[Any]) -> list[Any] | None:
    """The node's outputs from the reference evaluator, or None when it cannot say."""
    helper = onnx.helper
    names = list(dict.fromkeys(inputs))
    graph = helper.make_graph([node], "fold", [helper.make_tensor_value_info(i, _elem(onnx, values[i]), None)
                                               for i in names],
                              [helper.make_tensor_value_info(o, 0, None) for o in node.output if o])
    try:
        # numpy's warnings about the folded values (log of 0 in T5's position buckets, a cast of inf)
        # are the model's arithmetic, not the user's concern: they never reach the terminal
        with memory_budget(), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            model = helper.make_model(graph, opset_imports=opsets)
            out = onnx.reference.ReferenceEvaluator(model).run(None, {i: values[i] for i in names})
    except Exception:  # an op the evaluator lacks, or inputs it refuses: the node stays
        return None
    return list(out)


def _elem(onnx: Any, value: Any) -> int:
    return int(onnx.helper.np_dtype_to_tensor_dtype(value.dtype))


def _keepable(onnx: Any, value: Any, types: frozenset[int]) -> bool:
    import numpy as np

    v = np.asarray(value)
    if v.size > MAX_FOLDED_ELEMENTS:
        return False
    try:
        return _elem(onnx, v) in types
    except (KeyError, TypeError, ValueError):
        return False

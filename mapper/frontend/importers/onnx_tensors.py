"""The tensors an ONNX model holds outside its top-level initializers, made safe before anything evaluates them.

A node's attributes may hold tensors (a ``Constant``'s ``value``, a
``ConstantOfShape``'s ``value``, the tensors of any attribute), and the
subgraphs of ``If``, ``Loop`` and ``Scan`` have initializers of their own;
each may keep its bytes in an external file (ONNX IR specification,
"External Tensor Data") or in segments (``TensorProto.segment``). ONNX's
reference evaluator, which folds constants (:mod:`.onnx_fold`), would open
such a file relative to the directory the user stands in. So before it runs,
:func:`inline_held_tensors` applies the initializers' rule to every one of
them (:mod:`.external_data`: only a regular file inside the model's folder,
long enough) and copies the few bytes into the model; and
:func:`refuse_segments` refuses segmented tensors, which ONNX's own tools do
not read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from mapper.errors import InputError
from mapper.frontend.importers.external_data import check_size, parse_ref, read_bytes, resolve

#: The most elements of a node's tensor read from an external file (a constant, not a weight).
MAX_HELD_ELEMENTS = 1 << 16


def held_tensors(graph: Any, where: str = "") -> Iterator[tuple[Any, str]]:
    """Every tensor the nodes of ``graph`` hold in attributes, and every initializer of their
    subgraphs (recursively), with words that name it."""
    for k, node in enumerate(graph.node):
        name = f"{node.op_type} node {(node.name or (node.output[0] if node.output else f'#{k}'))!r}{where}"
        for a in node.attribute:
            tensors = [a.t] if a.HasField("t") else []
            tensors += list(a.tensors)
            for sparse in ([a.sparse_tensor] if a.HasField("sparse_tensor") else []) + list(a.sparse_tensors):
                tensors += [sparse.values, sparse.indices]
            for t in tensors:
                yield t, f"the {a.name!r} of {name}"
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                inner = f" (in a subgraph of {name})"
                for t in sub.initializer:
                    yield t, f"initializer {t.name!r}{inner}"
                for sparse in sub.sparse_initializer:
                    yield sparse.values, f"sparse initializer {sparse.values.name!r}{inner}"
                    yield sparse.indices, f"the indices of sparse initializer {sparse.values.name!r}{inner}"
                yield from held_tensors(sub, inner)


def all_tensors(graph: Any) -> Iterator[tuple[Any, str]]:
    """The top-level initializers (sparse ones too) and :func:`held_tensors`."""
    for t in graph.initializer:
        yield t, f"initializer {t.name!r}"
    for sparse in graph.sparse_initializer:
        yield sparse.values, f"sparse initializer {sparse.values.name!r}"
        yield sparse.indices, f"the indices of sparse initializer {sparse.values.name!r}"
    yield from held_tensors(graph)


def refuse_segments(graph: Any, file: str) -> None:
    """InputError naming the first tensor stored in segments (``TensorProto.segment``)."""
    for t, what in all_tensors(graph):
        if t.HasField("segment"):
            raise InputError(f"{what} is stored in segments (TensorProto.segment), which ONNX's own tools "
                             "do not read; save the model with whole tensors", obj=file)


def inline_held_tensors(onnx: Any, graph: Any, file: str, nbytes: Callable[[Any, str], int]) -> None:
    """Copy into the model the external data of every tensor :func:`held_tensors` finds, under
    the initializers' rule; ``nbytes(tensor, what)`` is the size its type and shape need.
    InputError for a location outside the model's folder, a file not there or too short, or
    more than :data:`MAX_HELD_ELEMENTS` elements."""
    for t, what in list(held_tensors(graph)):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        ref = parse_ref(t.name or what, ((e.key, e.value) for e in t.external_data), file)
        path = resolve(ref, file)
        if path is None:
            raise InputError(f"{what}: its external data file {ref.location!r} is not in the model's folder",
                             obj=file)
        count = 1
        for d in t.dims:
            count *= max(int(d), 0)
        if count > MAX_HELD_ELEMENTS:
            raise InputError(f"{what} keeps {count:,} elements in an external file; a node's tensor is read "
                             f"only up to {MAX_HELD_ELEMENTS:,} (store weights as initializers)", obj=file)
        size = nbytes(t, what)
        check_size(ref, path, size, file)
        data = read_bytes(ref, path, size, file)
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT
        t.raw_data = data

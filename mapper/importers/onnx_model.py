"""Reading an ONNX model: the one module that imports ``onnx`` (an optional extra).

:func:`read_onnx` loads a model file (weights stored outside it are not read:
only shapes matter here), sets dynamic dimensions named by the user, runs
ONNX shape inference in strict mode with data propagation, and returns an
:class:`OnnxGraph`: nodes in topological order, and every tensor with its
dtype and shape. Tensors computed from constants only (initializers,
``Constant``, ``ConstantOfShape``, ``Shape`` of a tensor whose shape is known,
and any node whose inputs are all such) are marked constant: they become
weights or attribute values, never tasks. Format: "Open Neural Network
Exchange", onnx.ai, IR and operator set specifications.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mapper.errors import InputError

#: The largest ONNX file read (weights included).
MAX_MODEL_BYTES = 2 * 2**30
#: Constant values up to this many elements are kept (shape arithmetic, scalars); larger ones only by shape.
MAX_VALUE_ELEMENTS = 4096
#: ONNX element types as DSL dtypes.
DTYPES = {1: "f32", 2: "i8", 3: "i8", 6: "i32", 7: "i64", 9: "bool", 10: "f16", 11: "f64", 14: "c64", 15: "c128",
          16: "bf16"}
#: Nodes whose outputs are constant whatever their inputs.
ALWAYS_CONSTANT = frozenset({"Constant", "ConstantOfShape", "Shape", "Size", "Range", "EyeLike"})
EXTRA = "onnx"


@dataclass(frozen=True, slots=True)
class OnnxTensor:
    """A tensor of the model: DSL dtype, shape, whether it is constant, and its
    value when small and known (else None)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    const: bool
    value: Any = None  # numpy array


@dataclass(frozen=True, slots=True)
class OnnxNode:
    """One node: its name (the first output's when the model gives none), op type,
    input and output tensor names (empty names are omitted inputs), attributes."""

    name: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any]
    folded: bool  # computed from constants only: never a task


@dataclass(frozen=True, slots=True)
class OnnxGraph:
    """A model after shape inference."""

    file: str
    name: str
    opset: int
    inputs: tuple[str, ...]  # graph inputs that are not initializers
    outputs: tuple[str, ...]
    nodes: tuple[OnnxNode, ...]
    tensors: Mapping[str, OnnxTensor]


def _onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise InputError(f"reading ONNX models needs the onnx package: pip install 'mapper[{EXTRA}]'",
                         obj="onnx") from None
    return onnx


def read_onnx(path: str | os.PathLike[str], dims: Mapping[str, int] | None = None) -> OnnxGraph:
    """Load, set ``dims`` (dynamic dimension name -> size), infer shapes; see the module docstring.

    Raises
    ------
    InputError
        For a file that is not a regular file or not an ONNX model, a failed
        shape inference, an unknown ``dims`` name, or a dimension left unknown
        (named, with the tensor that has it).
    """
    onnx = _onnx()
    file = os.fspath(path)
    try:
        info = os.stat(file)
    except OSError as err:
        raise InputError(f"cannot read '{file}': {err.strerror or err}", obj=file) from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"cannot read '{file}': it is not a regular file", obj=file)
    if info.st_size > MAX_MODEL_BYTES:
        raise InputError(f"cannot read '{file}': it is {info.st_size:,} bytes, more than {MAX_MODEL_BYTES:,}", obj=file)
    try:
        model = onnx.load(file, load_external_data=False)
    except Exception as err:  # protobuf's decode errors have no common base worth naming
        raise InputError(f"'{file}' is not an ONNX model ({type(err).__name__}: {err})", obj=file) from None
    graph = model.graph
    init_names = {t.name for t in graph.initializer}
    _set_dims(graph, init_names, dict(dims or {}), file)
    try:
        model = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except Exception as err:  # onnx.shape_inference.InferenceError and checker errors
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InputError(f"ONNX shape inference failed: {first}", obj=file) from None
    graph = model.graph
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    tensors: dict[str, OnnxTensor] = {}
    for t in graph.initializer:
        value = onnx.numpy_helper.to_array(t) if _count(t.dims) <= MAX_VALUE_ELEMENTS else None
        tensors[t.name] = OnnxTensor(t.name, _dtype(t.data_type, t.name, file), tuple(int(d) for d in t.dims),
                                     True, value)
    infos = {vi.name: vi for vi in (*graph.input, *graph.value_info, *graph.output)}
    shapes: dict[str, tuple[str, tuple[int, ...]]] = {}

    def shape_of(name: str, what: str) -> tuple[str, tuple[int, ...]]:
        if name not in shapes:
            if name not in infos:
                raise InputError(f"ONNX shape inference gave no shape for '{name}' ({what})", obj=file)
            shapes[name] = _value_info(infos[name], file)
        return shapes[name]

    graph_inputs: list[str] = []
    for vi in graph.input:
        if vi.name in init_names:
            continue
        dtype, shape = shape_of(vi.name, "a graph input")
        tensors[vi.name] = OnnxTensor(vi.name, dtype, shape, False)
        graph_inputs.append(vi.name)
    used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    nodes: list[OnnxNode] = []
    constant = set(init_names)
    for k, n in enumerate(graph.node):
        inputs = tuple(i for i in n.input if i)
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        folded = n.op_type in ALWAYS_CONSTANT or (bool(inputs) and all(i in constant for i in inputs))
        name = n.name or (n.output[0] if n.output else f"node{k}")
        outs = tuple(o for o in n.output if o and o in used)  # an unused output (a dropout mask) is dropped
        nodes.append(OnnxNode(name, n.op_type, inputs, outs, attrs, folded))
        for o in outs:
            dtype, shape = shape_of(o, f"output of {n.op_type} node '{name}'")
            value = None
            if n.op_type == "Constant" and _count(shape) <= MAX_VALUE_ELEMENTS:
                value = onnx.numpy_helper.to_array(attrs["value"]) if "value" in attrs else None
            tensors[o] = OnnxTensor(o, dtype, shape, folded, value)
            if folded:
                constant.add(o)
    outputs = tuple(o.name for o in graph.output)
    return OnnxGraph(file, graph.name or os.path.splitext(os.path.basename(file))[0], opset, tuple(graph_inputs),
                     outputs, tuple(nodes), tensors)


def _set_dims(graph: Any, init_names: set[str], dims: dict[str, int], file: str) -> None:
    """Give the named dynamic dimensions of the graph's inputs their sizes."""
    used: set[str] = set()
    for vi in graph.input:
        if vi.name in init_names:
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in dims:
                size = dims[d.dim_param]
                used.add(d.dim_param)
                d.ClearField("dim_param")
                d.dim_value = size
    unknown = sorted(set(dims) - used)
    if unknown:
        names = sorted({d.dim_param for vi in graph.input for d in vi.type.tensor_type.shape.dim
                        if d.HasField("dim_param")})
        raise InputError(f"--dim {unknown[0]}: the model has no dynamic dimension of that name"
                         + (f" (it has: {', '.join(names)})" if names else " (it has none)"), obj=file)


def _value_info(vi: Any, file: str) -> tuple[str, tuple[int, ...]]:
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        raise InputError(f"'{vi.name}' is not a tensor (sequences and maps are not supported)", obj=file)
    if not tt.HasField("shape"):
        raise InputError(f"the shape of '{vi.name}' is unknown after ONNX shape inference", obj=file)
    shape = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            shape.append(int(d.dim_value))
        elif d.HasField("dim_value") and d.dim_value == 0:
            raise InputError(f"'{vi.name}' has a dimension of size 0", obj=file)
        else:
            name = d.dim_param or "?"
            raise InputError(f"dimension '{name}' of '{vi.name}' is unknown; set it with --dim {name}=SIZE"
                             if d.dim_param else f"a dimension of '{vi.name}' is unknown after shape inference",
                             obj=file)
    return _dtype(tt.elem_type, vi.name, file), tuple(shape)


def _dtype(code: int, name: str, file: str) -> str:
    if code not in DTYPES:
        raise InputError(f"'{name}' has ONNX element type {code}, which mapper has no dtype for", obj=file)
    return DTYPES[code]


def _count(dims: Any) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n

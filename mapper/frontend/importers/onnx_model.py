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

import math
import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mapper.core.files import note_read
from mapper.core.graph import DTYPE_BYTES
from mapper.core.limits import memory_budget
from mapper.errors import InputError
from mapper.frontend.importers.external_data import check_size, parse_ref, read_bytes, resolve
from mapper.frontend.importers.onnx_fold import fold_constants
from mapper.frontend.importers.onnx_tensors import inline_held_tensors, refuse_segments
from mapper.frontend.importers.onnx_window import candidates, set_constants

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
#: What an op type is (ONNX IR specification: "a valid C90 identifier").
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


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
    slots: tuple[int, ...] = ()  # each output's position among the node's outputs
    arity: int = 1  # how many outputs the node has, used or not
    # (input position, what computes it) for each input that is no initializer (nor Constant
    # node's output) in the file as written, folded by mapper or not
    computed: tuple[tuple[int, str], ...] = ()
    positions: tuple[int, ...] = ()  # each of ``inputs``' position among the node's ONNX inputs


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
    notes: tuple[str, ...] = ()  # what the reader left out (weights not beside the model)
    evaluated: int = 0  # nodes folded into initializers by evaluation (not among ``nodes``)
    loaders: Mapping[str, Callable[[], Any]] = field(default_factory=dict)  # constants read on demand

    def value(self, name: str, limit: int) -> Any:
        """The value of constant ``name`` when known or there to read, and of at most ``limit``
        elements; else None."""
        t = self.tensors[name]
        if t.value is not None or name not in self.loaders or _count(t.shape) > limit:
            return t.value
        with memory_budget():
            return self.loaders[name]()


def _onnx() -> Any:
    try:
        import onnx
        import onnx.reference  # the evaluator that folds constants (mapper.frontend.importers.onnx_fold)
    except ImportError:
        raise InputError(f"reading ONNX models needs the onnx package: pip install 'mapper[{EXTRA}]'",
                         obj="onnx") from None
    return onnx


def read_onnx(path: str | os.PathLike[str], dims: Mapping[str, int] | None = None,
              input_shapes: Mapping[str, tuple[int, ...]] | None = None,
              input_values: Mapping[str, tuple[float, ...]] | None = None,
              constants: Mapping[str, float] | None = None) -> OnnxGraph:
    """Load, set ``dims`` (dynamic dimension name -> size) and ``input_shapes`` (input
    name -> its whole shape), make the inputs of ``input_values`` constants (a mode flag such
    as a sample rate: branches on it are then taken, :mod:`.onnx_fold`), give the scalar
    constants named in ``constants`` those values instead (:mod:`.onnx_window`), infer shapes;
    see the module docstring.

    Raises
    ------
    InputError
        For a file that is not a regular file or not an ONNX model, a model
        with nothing to map (no nodes, no outputs, an output listed twice), a
        tensor whose data does not match its shape or whose external data lies
        outside the model's folder (:mod:`.external_data`), a failed shape
        inference, an unknown ``dims`` name, or a dimension left unknown
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
    if info.st_size == 0:
        raise InputError(f"'{file}' is empty, not an ONNX model", obj=file)
    if info.st_size > MAX_MODEL_BYTES:
        raise InputError(f"cannot read '{file}': it is {info.st_size:,} bytes, more than {MAX_MODEL_BYTES:,}", obj=file)
    note_read(file)
    try:
        model = onnx.load(file, load_external_data=False)
    except Exception as err:  # protobuf's decode errors have no common base worth naming
        raise InputError(f"'{file}' is not an ONNX model (it does not decode: {_first_line(err)})",
                         obj=file) from None
    graph = model.graph
    _check_structure(graph, file)
    refuse_segments(graph, file)
    inline_held_tensors(onnx, graph, file, lambda t, what: _held_bytes(t, what, file))  # before onnx_fold
    init_names = {t.name for t in graph.initializer}
    origin = _origins(graph, init_names)
    _set_dims(graph, init_names, dict(dims or {}), dict(input_shapes or {}), file)
    if input_values:
        _set_values(onnx, graph, init_names, dict(input_values), file)
        init_names = {t.name for t in graph.initializer}
    if constants:
        set_constants(onnx, graph, constants)
    loaders: dict[str, Callable[[], Any]] = {}
    shaping = _shaping(graph)
    initializers = {t.name: _initializer(onnx, t, file, loaders, shaping) for t in graph.initializer}
    _strip_weights(onnx, graph, initializers)

    def infer(m: Any) -> Any:
        try:
            with memory_budget():
                return onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True, data_prop=True)
        except MemoryError:
            raise InputError("ONNX shape inference ran out of memory: a shape the model computes is too large",
                             obj=file) from None
        except Exception as err:  # onnx.shape_inference.InferenceError and checker errors
            first = _first_line(err)
            if "bad_alloc" in first:
                raise InputError("ONNX shape inference ran out of memory: a shape the model computes is too "
                                 "large", obj=file) from None
            raise InputError(f"ONNX shape inference failed: {first}", obj=file) from None

    model, evaluated = fold_constants(onnx, model, infer, frozenset(DTYPES))
    graph = model.graph
    for t in graph.initializer:  # the folded values
        if t.name not in initializers:
            init_names.add(t.name)
            initializers[t.name] = (OnnxTensor(t.name, _dtype(t.data_type, t.name, file), tuple(int(d) for d in t.dims),
                                               True, onnx.numpy_helper.to_array(t)), None)
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    tensors: dict[str, OnnxTensor] = {name: t for name, (t, _) in initializers.items()}
    infos = {vi.name: vi for vi in (*graph.input, *graph.value_info, *graph.output)}
    shapes: dict[str, tuple[str, tuple[int, ...]]] = {}

    branching = {o for n in graph.node if n.op_type == "If" for o in n.output}

    def shape_of(name: str, what: str) -> tuple[str, tuple[int, ...]]:
        if name not in shapes:
            if name not in infos:
                raise InputError(f"ONNX shape inference gave no shape for '{name}' ({what})", obj=file)
            try:
                shapes[name] = _value_info(infos[name], file)
            except InputError as err:
                if name not in branching:
                    raise
                raise InputError(f"the shape of '{name}' is unknown: it comes out of an If whose condition "
                                 "the inputs decide; fix the input that selects the branch with --input-value "
                                 f"NAME=VALUE ({err.message})", obj=file) from None
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
        # an unused output (a dropout mask) is dropped; ``slots`` keeps each kept output's position
        kept = [(j, o) for j, o in enumerate(n.output) if o and o in used]
        computed = tuple((j, origin.get(i, "node")) for j, i in enumerate(n.input) if i and origin.get(i) != "")
        nodes.append(OnnxNode(name, n.op_type, inputs, tuple(o for _, o in kept), attrs, folded,
                              tuple(j for j, _ in kept), len(n.output), computed,
                              tuple(j for j, i in enumerate(n.input) if i)))
        for o in nodes[-1].outputs:
            dtype, shape = shape_of(o, f"output of {n.op_type} node '{name}'")
            value = None
            if n.op_type == "Constant" and isinstance(attrs.get("value"), onnx.TensorProto):
                value = _constant_value(onnx, attrs["value"], f"the value of Constant node '{name}'", file)
            tensors[o] = OnnxTensor(o, dtype, shape, folded, value)
            if folded:
                constant.add(o)
    outputs = tuple(o.name for o in graph.output)
    notes = tuple(sorted({note for _, note in initializers.values() if note}))
    return OnnxGraph(file, graph.name or os.path.splitext(os.path.basename(file))[0], opset, tuple(graph_inputs),
                     outputs, tuple(nodes), tensors, notes, evaluated, loaders)


def graph_inputs(path: str | os.PathLike[str]) -> tuple[tuple[str, str, tuple[int | str, ...]], ...]:
    """The model's inputs that are not initializers: (name, DSL dtype, dimensions: sizes, or the
    names of open ones, "" where unnamed); () for a file that is not a readable ONNX model
    (:func:`read_onnx` says what is wrong with it)."""
    model = _proto(path)
    if model is None:
        return ()
    init = {t.name for t in model.graph.initializer}
    return tuple((vi.name, DTYPES.get(vi.type.tensor_type.elem_type, "?"),
                  tuple(d.dim_value if d.HasField("dim_value") else d.dim_param for d in vi.type.tensor_type.shape.dim))
                 for vi in model.graph.input if vi.name not in init)


def mask_constants(path: str | os.PathLike[str]) -> tuple[tuple[str, float], ...]:
    """The scalar constants a decoder's sliding-window mask may be built with
    (:func:`.onnx_window.candidates`); () for a file that is not a readable ONNX model."""
    model = _proto(path)
    return () if model is None else candidates(_onnx(), model.graph)


def _proto(path: str | os.PathLike[str]) -> Any:
    """The model as written (its weights left in their files), or None when it does not read."""
    file = os.fspath(path)
    try:
        if not stat.S_ISREG(os.stat(file).st_mode) or os.path.getsize(file) > MAX_MODEL_BYTES:
            return None
        return _onnx().load(file, load_external_data=False)
    except Exception:  # protobuf's decode errors have no common base worth naming
        return None


def _first_line(err: BaseException) -> str:
    """The first line of an exception's message (never its class name, unless it has no message)."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else "no reason given"


def _check_structure(graph: Any, file: str) -> None:
    """InputError for a model with nothing to map (no nodes, no outputs, an output listed
    twice) or with names that are not text (protobuf hands undecodable strings over as bytes)."""
    names: list[Any] = [graph.name, *(t.name for t in graph.initializer)]
    for vi in (*graph.input, *graph.output, *graph.value_info):
        names += [vi.name, *(d.dim_param for d in vi.type.tensor_type.shape.dim)]
    for n in graph.node:
        names += [n.name, n.op_type, n.domain, *n.input, *n.output, *(a.name for a in n.attribute)]
    for t in graph.initializer:
        names += [x for e in t.external_data for x in (e.key, e.value)]
    if not all(isinstance(x, str) for x in names):
        raise InputError("the model holds a name that is not UTF-8 text (a damaged file?)", obj=file)
    if not graph.node:
        raise InputError("the model has no nodes: there is nothing to map", obj=file)
    if not graph.output:
        raise InputError("the model declares no graph outputs: there is nothing to map", obj=file)
    seen: set[str] = set()
    for o in graph.output:
        if not o.name:
            raise InputError("a graph output has no name", obj=file)
        if o.name in seen:
            raise InputError(f"graph output '{o.name}' is listed twice", obj=file)
        seen.add(o.name)
    for k, n in enumerate(graph.node):
        if not _IDENT.match(n.op_type):
            raise InputError(f"node {(n.name or f'#{k}')!r} has op type {n.op_type!r}, which is not an identifier",
                             obj=file)


#: The inputs of ops that decide an output's shape (by position), and the ops of shape arithmetic.
SHAPE_INPUTS = {"Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "ConstantOfShape": (0,),
                "Range": (0, 1, 2), "Pad": (1,), "Resize": (1, 2, 3), "Upsample": (1,), "Split": (1,),
                "Squeeze": (1,), "Unsqueeze": (1,), "ReduceMean": (1,), "ReduceSum": (1,), "ReduceMax": (1,),
                "ReduceMin": (1,), "ReduceProd": (1,), "TopK": (1,), "OneHot": (1,), "CenterCropPad": (1,)}
SHAPE_ARITHMETIC = frozenset({"Concat", "Gather", "Add", "Sub", "Mul", "Div", "Cast", "Squeeze", "Unsqueeze",
                              "Slice", "Reshape", "Equal", "Where", "Max", "Min", "Neg", "Abs", "Identity"})


def _shaping(graph: Any) -> frozenset[str]:
    """Tensors whose values decide a shape: the shape inputs of :data:`SHAPE_INPUTS`, and
    what they are computed from through shape arithmetic."""
    producer = {o: n for n in graph.node for o in n.output}
    todo = [n.input[i] for n in graph.node for i in SHAPE_INPUTS.get(n.op_type, ()) if i < len(n.input)]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if not name or name in seen:
            continue
        seen.add(name)
        node = producer.get(name)
        if node is not None and node.op_type in SHAPE_ARITHMETIC:
            todo.extend(node.input)
    return frozenset(seen)


#: ONNX element types whose values the importer may use (shape arithmetic) when stored externally.
INTEGER_TYPES = frozenset({2, 3, 4, 5, 6, 7, 9, 12, 13})
#: Externally stored floating-point tensors up to this many elements are read (scalars in patterns).
SCALAR_ELEMENTS = 64


def _initializer(onnx: Any, t: Any, file: str, loaders: dict[str, Callable[[], Any]],
                 shaping: frozenset[str]) -> tuple[OnnxTensor, str | None]:
    """An initializer as a constant tensor (its value when small and needed: an integer
    tensor in ``shaping``, a scalar), and a note when its external data is not there
    (shapes and dtypes are enough to map). A value not read now but there to read goes
    into ``loaders``."""
    dtype = _dtype(t.data_type, t.name, file)
    shape = tuple(int(d) for d in t.dims)
    if any(d < 0 for d in shape):
        raise InputError(f"initializer '{t.name}' has a negative dimension", obj=file)
    count = _count(shape)
    nbytes = count * DTYPE_BYTES[dtype]
    if t.data_location == onnx.TensorProto.EXTERNAL:
        ref = parse_ref(t.name, ((e.key, e.value) for e in t.external_data), file)
        where = resolve(ref, file)
        wanted = count <= MAX_VALUE_ELEMENTS and (t.name in shaping if t.data_type in INTEGER_TYPES
                                                  else count <= SCALAR_ELEMENTS)
        if where is None:
            if wanted:
                raise InputError(f"tensor '{t.name}': its external data file {ref.location!r} is not in the "
                                 "model's folder, and its values are needed", obj=file)
            return OnnxTensor(t.name, dtype, shape, True), (f"external data file {ref.location!r} is not beside "
                                                            "the model: its weights were not needed")
        check_size(ref, where, nbytes, file)

        def load() -> Any:
            inline = onnx.TensorProto()
            inline.CopyFrom(t)
            del inline.external_data[:]
            inline.data_location = onnx.TensorProto.DEFAULT
            inline.raw_data = read_bytes(ref, where, nbytes, file)
            return onnx.numpy_helper.to_array(inline)

        if not wanted:
            loaders[t.name] = load
            return OnnxTensor(t.name, dtype, shape, True), None
        return OnnxTensor(t.name, dtype, shape, True, load()), None
    value = _constant_value(onnx, t, f"initializer '{t.name}'", file)
    if value is None:
        loaders[t.name] = lambda: onnx.numpy_helper.to_array(t)
    return OnnxTensor(t.name, dtype, shape, True, value), None


#: TensorProto's typed fields, by element type: (field, elements per entry).
TYPED_FIELDS = {1: ("float_data", 1), 14: ("float_data", 0.5), 11: ("double_data", 1), 15: ("double_data", 0.5),
                7: ("int64_data", 1), 12: ("uint64_data", 1), 13: ("uint64_data", 1)}


def _constant_value(onnx: Any, t: Any, what: str, file: str) -> Any:
    """The value of an inline tensor (None when larger than :data:`MAX_VALUE_ELEMENTS`),
    after checking that the data it holds matches its shape."""
    if t.data_location == onnx.TensorProto.EXTERNAL:
        raise InputError(f"{what} keeps its data outside the model, which only initializers may", obj=file)
    dtype = _dtype(t.data_type, t.name or what, file)
    count = _count(t.dims)
    shape = [int(d) for d in t.dims]
    if t.HasField("raw_data"):
        if len(t.raw_data) != count * DTYPE_BYTES[dtype]:
            raise InputError(f"{what} holds {len(t.raw_data):,} bytes of data, but its shape {shape} of {dtype} "
                             f"needs {count * DTYPE_BYTES[dtype]:,}", obj=file)
    else:
        field, per = TYPED_FIELDS.get(t.data_type, ("int32_data", 1))
        held = len(getattr(t, field)) * per
        if held != count:
            raise InputError(f"{what} holds data for {held:g} elements, but its shape {shape} has {count:,}",
                             obj=file)
    if count > MAX_VALUE_ELEMENTS:
        return None
    return onnx.numpy_helper.to_array(t)


def _origins(graph: Any, init_names: set[str]) -> dict[str, str]:
    """Where each tensor of the file as written comes from: "" for an initializer or a Constant
    node's output (ONNX Runtime makes Constant nodes initializers when it loads a graph, so an
    execution provider sees both as initializers; a DequantizeLinear of one too, as QNN's QDQ node
    units take the quantised initializer), else "graph input" or the op type of the node computing
    it ("ConstantOfShape node")."""
    origin = {vi.name: "graph input" for vi in graph.input}
    origin.update((t, "") for t in init_names)
    for n in graph.node:
        held = n.op_type == "Constant" or (n.op_type == "DequantizeLinear" and origin.get(n.input[0]) == "")
        origin.update((o, "" if held else f"{n.op_type} node") for o in n.output if o)
    return origin


def _strip_weights(onnx: Any, graph: Any, initializers: Mapping[str, tuple[OnnxTensor, str | None]]) -> None:
    """Declare the initializers whose values are not kept as graph inputs of their type and shape:
    shape inference needs no more of them, and copies no weights."""
    inputs = {vi.name for vi in graph.input}
    kept = [onnx.numpy_helper.from_array(initializers[t.name][0].value, t.name) for t in graph.initializer
            if initializers[t.name][0].value is not None]  # inline: external data read once, here
    for t in graph.initializer:
        if initializers[t.name][0].value is None and t.name not in inputs:
            graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    del graph.initializer[:]
    graph.initializer.extend(kept)


def _set_dims(graph: Any, init_names: set[str], dims: dict[str, int], shapes: dict[str, tuple[int, ...]],
              file: str) -> None:
    """Give the graph's inputs their sizes: whole shapes from ``shapes`` (input name ->
    shape), named dynamic dimensions from ``dims``; drop the shapes the exporter recorded
    inside the graph and on its outputs, which keep the old symbolic names (shape
    inference computes them again from the inputs)."""
    inputs = {vi.name: vi for vi in graph.input if vi.name not in init_names}
    for name in shapes:
        if name not in inputs:
            raise InputError(f"--input-shape {name}: the model has no input of that name (it has: "
                             f"{', '.join(sorted(inputs)) or 'none'})", obj=file)
    used: set[str] = set()
    for vi in inputs.values():
        shape = vi.type.tensor_type.shape
        if vi.name in shapes:
            given = shapes[vi.name]
            if vi.type.tensor_type.HasField("shape") and len(shape.dim) != len(given):
                raise InputError(f"--input-shape {vi.name}: the input has {len(shape.dim)} dimensions, "
                                 f"not {len(given)}", obj=file)
            vi.type.tensor_type.ClearField("shape")
            for size in given:
                vi.type.tensor_type.shape.dim.add().dim_value = size
            continue
        for d in shape.dim:
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
    if dims or shapes:
        del graph.value_info[:]
        for vi in graph.output:
            if vi.type.HasField("tensor_type"):
                vi.type.tensor_type.ClearField("shape")


def _set_values(onnx: Any, graph: Any, init_names: set[str], values: dict[str, tuple[float, ...]],
                file: str) -> None:
    """Each input named in ``values`` becomes an initializer holding them (in its dtype and
    declared shape; a single value fills a scalar) and stops being an input."""
    import numpy as np

    inputs = {vi.name: vi for vi in graph.input if vi.name not in init_names}
    for name, given in values.items():
        vi = inputs.get(name)
        if vi is None:
            raise InputError(f"--input-value {name}: the model has no input of that name (it has: "
                             f"{', '.join(sorted(inputs)) or 'none'})", obj=file)
        tt = vi.type.tensor_type
        dtype = DTYPES.get(tt.elem_type)
        if dtype is None or dtype in ("bf16", "c64", "c128"):
            raise InputError(f"--input-value {name}: the input's element type {tt.elem_type} takes no value "
                             "from the command line", obj=file)
        shape = [int(d.dim_value) if d.HasField("dim_value") else -1 for d in tt.shape.dim]
        if any(d < 0 for d in shape):
            raise InputError(f"--input-value {name}: give the input's shape first (--dim or --input-shape)",
                             obj=file)
        if math.prod(shape) != len(given):
            raise InputError(f"--input-value {name}: the input holds {math.prod(shape)} values "
                             f"(shape {shape}), {len(given)} given", obj=file)
        np_dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
        _check_range(name, given, np_dtype, dtype, file)
        array = np.array(given, dtype=np_dtype).reshape(shape)
        graph.initializer.append(onnx.numpy_helper.from_array(array, name))
        graph.input.remove(vi)


def _check_range(name: str, given: tuple[float, ...], np_dtype: Any, dtype: str, file: str) -> None:
    """InputError unless every value of ``--input-value name`` is one the input's type holds
    (an integer in its range, a float within its largest magnitude)."""
    import numpy as np

    low: float
    most: float
    if np_dtype.kind in "biu":
        info = np.iinfo(np.uint8 if np_dtype.kind == "b" else np_dtype)
        low, most = int(info.min), 1 if np_dtype.kind == "b" else int(info.max)
        inside = [low <= v < most + 1 for v in given]  # most + 1 is exact as a float (2**63), most may not be
    else:
        most = float(np.finfo(np_dtype).max)
        low, inside = -most, [abs(v) <= most for v in given]
    for v, ok in zip(given, inside):
        if not ok:
            raise InputError(f"--input-value {name}: {v:g} is out of the range of the input's type {dtype} "
                             f"({low:g} to {most:g})", obj=file)
        if np_dtype.kind in "biu" and v != int(v):
            raise InputError(f"--input-value {name}: the input holds integers, not {v:g}", obj=file)


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
            name = d.dim_param
            if re.fullmatch(r"[\w.:/-]+", name):  # a name --dim can give
                raise InputError(f"dimension '{name}' of '{vi.name}' is unknown; set it with --dim {name}=SIZE",
                                 obj=file)
            raise InputError(f"a dimension of '{vi.name}' is unknown after shape inference; give the model's "
                             "inputs their shapes with --input-shape NAME=D1,D2,...", obj=file)
    return _dtype(tt.elem_type, vi.name, file), tuple(shape)


def _dtype(code: int, name: str, file: str) -> str:
    if code not in DTYPES:
        raise InputError(f"'{name}' has ONNX element type {code}, which mapper has no dtype for", obj=file)
    return DTYPES[code]


def _held_bytes(t: Any, what: str, file: str) -> int:
    """The bytes a tensor's type and shape need (a node's tensor, :mod:`.onnx_tensors`)."""
    if any(int(d) < 0 for d in t.dims):
        raise InputError(f"{what} has a negative dimension", obj=file)
    return _count(t.dims) * DTYPE_BYTES[_dtype(t.data_type, t.name or what, file)]


def _count(dims: Any) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n

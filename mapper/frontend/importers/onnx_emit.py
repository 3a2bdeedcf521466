"""The emitting half of the ONNX importer (:mod:`.onnx_dsl`): DSL names, operands and
statements, ``opaque`` tasks, and the ops priced by a rule of their own (transposed
convolutions, resizing, gathers and scatters, hard-swish, instance norm, running sums,
powers, recurrent layers)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from mapper.core.graph import SourceNode
from mapper.frontend.importers.dsl_writer import dsl_name, dsl_number, dsl_string
from mapper.frontend.importers.onnx_model import OnnxGraph, OnnxNode

#: Ops imported as ``opaque`` tasks of the dtype ONNX infers, priced by rule (FLOPs per output
#: element): conversions and data movement are free, masks and comparisons one per element.
TYPED = {"Cast": 0.0, "CastLike": 0.0, "Expand": 0.0, "Slice": 0.0, "Tile": 0.0, "Pad": 0.0, "Gather": 0.0,
         "GatherElements": 0.0, "GatherND": 0.0, "ScatterND": 0.0, "ScatterElements": 0.0, "CumSum": 1.0,
         "Trilu": 0.0, "ConstantOfShape": 0.0, "Range": 0.0,
         "Where": 1.0, "Equal": 1.0, "Less": 1.0, "LessOrEqual": 1.0, "Greater": 1.0, "GreaterOrEqual": 1.0,
         "And": 1.0, "Or": 1.0, "Not": 1.0, "Xor": 1.0, "IsNaN": 1.0, "IsInf": 1.0, "Max": 1.0, "Min": 1.0,
         "Reciprocal": 1.0, "Erf": 1.0, "HardSigmoid": 3.0, "Pow": 1.0, "LSTM": 0.0, "GRU": 0.0, "RNN": 0.0,
         "ConvTranspose": 0.0, "Resize": 0.0, "Upsample": 0.0}


def ints(values: Sequence[int]) -> str:
    """A DSL list of integers."""
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


def _attr_value(v: Any) -> Any:
    """An ONNX attribute value as an int, float, string or tuple of them; None for a tensor or graph."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, float, str)):
        return v
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, (list, tuple)):
        items = [_attr_value(x) for x in v]
        return None if any(x is None or isinstance(x, tuple) for x in items) else tuple(items)
    if hasattr(v, "item") and getattr(v, "ndim", 1) == 0:  # a NumPy scalar
        return _attr_value(v.item())
    return None


#: Constant inputs up to this many elements keep their values for op-support lists (scales, steps, axes).
SUPPORT_VALUES = 16


def source_node(g: OnnxGraph, n: OnnxNode) -> SourceNode:
    """What a task keeps of ONNX node ``n``: name, op type, plain attributes, dtypes, which
    inputs the file computes rather than holds, input shapes and small constant inputs' values."""
    attrs = tuple(sorted((k, v) for k, v in ((k, _attr_value(raw)) for k, raw in n.attrs.items()) if v is not None))
    dtypes = tuple(g.tensors[i].dtype for i in n.inputs if i in g.tensors)
    out = g.tensors[n.outputs[0]].dtype if n.outputs and n.outputs[0] in g.tensors else "f32"
    shapes = tuple(g.tensors[i].shape for i in n.inputs if i in g.tensors)
    values = []
    for j, i in zip(n.positions, n.inputs, strict=False):
        t = g.tensors.get(i)
        if t is not None and t.const and math.prod(t.shape) <= SUPPORT_VALUES:
            v = g.value(i, SUPPORT_VALUES)
            if v is not None:
                values.append((j, tuple(float(x) for x in v.reshape(-1).tolist())))
    return SourceNode(n.name, n.op, attrs, dtypes, out, n.computed, shapes, tuple(values))


class Emitter:
    """DSL text being written for one ONNX graph, and the handlers of the rule-priced ops."""

    def __init__(self, g: OnnxGraph) -> None:
        self.g = g
        self.taken: set[str] = set()
        self.ref: dict[str, str] = {}  # ONNX tensor -> DSL tensor name
        self.weights: list[tuple[str, str | None]] = []  # (line, the node it comes from)
        self.body: list[tuple[str, str | None]] = []
        self.origin: str | None = None  # the node being written
        self.tasks = 0
        self.unsupported: Counter[str] = Counter()
        self.current: tuple[OnnxNode, ...] = ()  # the ONNX nodes being written
        self.sources: dict[str, tuple[SourceNode, ...]] = {}  # task -> the nodes it comes from

    # -- names ------------------------------------------------------------------------------
    def fresh(self, raw: str) -> str:
        base = dsl_name(raw)
        name, k = base, 2
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        return name

    def operand(self, tensor: str, dtype: str | None = None) -> str:
        """The DSL name of ``tensor``: a task's output, an input, or a weight declared on first use."""
        if tensor in self.ref:
            return self.ref[tensor]
        t = self.g.tensors[tensor]
        if not t.const:
            raise KeyError(tensor)
        name = self.fresh(tensor)
        shape = t.shape or (1,)
        self.weights.append((f"  weight {name} : {dtype or t.dtype}{ints(shape)}", self.origin))
        self.ref[tensor] = name
        return name

    def emit(self, raw: str, call: str, output: str | None = None) -> str:
        name = self.fresh(raw)
        self.sources[name] = tuple(source_node(self.g, n) for n in self.current)
        self.body.append((f"  {name} = {call}", self.origin))
        self.tasks += 1
        if output is not None:
            self.ref[output] = name
        return name

    def opaque(self, n: OnnxNode, per_element: float = 1.0, flops: Sequence[float] | None = None) -> None:
        """Each output as an ``opaque`` task of the dtype and shape ONNX infers: ``per_element``
        FLOPs per output element (one for ops mapper knows nothing of), or ``flops`` per output.
        Op types of :data:`TYPED` are priced by their rule; others are listed in the warning."""
        if n.op not in TYPED:
            self.unsupported[n.op] += 1
        # an empty constant (a Resize's unused roi) holds no data: it is no operand
        args = [self.operand(i) for i in n.inputs
                if i in self.ref or (self.g.tensors[i].const and math.prod(self.g.tensors[i].shape or (1,)) > 0)]
        if not args:
            return
        for k, o in enumerate(n.outputs):
            t = self.g.tensors[o]
            raw = n.name if k == 0 else f"{n.name}_{k}"
            work = per_element * math.prod(t.shape) if flops is None else flops[k]
            self.emit(raw, f"opaque({', '.join(args)}, shape = {ints(t.shape or (1,))}, flops = {dsl_number(work)}, "
                           f"kind = {dsl_string(n.op)}, dtype = \"{t.dtype}\")", o)

    def op_ConvTranspose(self, n: OnnxNode, out: str) -> bool:
        """A 2-D transposed convolution as ``conv_transpose2d`` (and a bias ``add``) where its
        padding is symmetric and it has no dilation; other forms as a typed opaque task: each
        input element times each of its ``C_out/groups x kernel`` weights, ``2 N C_in H_in W_in
        (C_out/groups) prod(kernel)`` FLOPs (Dumoulin and Visin, "A guide to convolution
        arithmetic", arXiv:1603.07285), and a bias per output element."""
        g = self.g
        x, w, o = (g.tensors[i] for i in (n.inputs[0], n.inputs[1], out))
        if len(w.shape) < 3 or not o.shape or math.prod(o.shape) == 0:
            return False
        if self.conv_transpose(n, out):
            return True
        total = 2.0 * math.prod(x.shape) * math.prod(w.shape[1:]) + (math.prod(o.shape) if len(n.inputs) > 2 else 0)
        self.opaque(n, total / math.prod(o.shape))
        return True

    def conv_transpose(self, n: OnnxNode, out: str) -> bool:
        """``conv_transpose2d`` where its attributes give the output ONNX infers; a 1-D one
        (``[N, C, L]``, audio decoders) as one of height 1 between two views, its weight
        declared ``[C, K/g, 1, R]`` (as :meth:`op_Conv` does a 1-D convolution)."""
        g, a = self.g, n.attrs
        x, w, o = (g.tensors[i] for i in (n.inputs[0], n.inputs[1], out))
        rank = len(x.shape)
        if rank not in (3, 4) or not w.const or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            return False
        flat = rank == 3
        pads = list(a.get("pads", [0] * 2 * (rank - 2)))
        strides, extra = list(a.get("strides", [1] * (rank - 2))), list(a.get("output_padding", [0] * (rank - 2)))
        dilations = list(a.get("dilations", [1] * (rank - 2)))
        if flat:
            pads, strides, extra, dilations = [0, pads[0], 0, pads[1]], [1, *strides], [0, *extra], [1, *dilations]
        xs, ws = ((*x.shape[:2], 1, x.shape[2]), (*w.shape[:2], 1, w.shape[2])) if flat else (x.shape, w.shape)
        if any(d != 1 for d in dilations) or pads[0] != pads[2] or pads[1] != pads[3]:
            return False
        groups = int(a.get("group", 1))
        want = (xs[0], ws[1] * groups,
                *((xs[2 + i] - 1) * strides[i] - 2 * pads[i] + ws[2 + i] + extra[i] for i in (0, 1)))
        if tuple(o.shape) != ((*want[:2], want[3]) if flat else want) or any(e >= s for e, s in zip(extra, strides)):
            return False  # an output_shape that asks for another padding
        src = self.operand(n.inputs[0])
        if flat:
            src = self.emit(f"{n.name}_rows", f"reshape({src}, shape = {ints(xs)})")
            weight = self.fresh(n.inputs[1])
            self.weights.append((f"  weight {weight} : {w.dtype}{ints(ws)}", self.origin))
        else:
            weight = self.operand(n.inputs[1])
        call = (f"conv_transpose2d({src}, {weight}, stride = {ints(strides)}, padding = {ints(pads[:2])}, "
                f"output_padding = {ints(extra)}, groups = {groups})")
        last = self.emit(f"{n.name}_conv" if len(n.inputs) > 2 or flat else n.name, call,
                         None if len(n.inputs) > 2 or flat else out)
        if len(n.inputs) > 2:
            bias = self.fresh(n.inputs[2])
            self.weights.append((f"  weight {bias} : {o.dtype}{ints((1, want[1], 1, 1))}", self.origin))
            last = self.emit(f"{n.name}_bias" if flat else n.name, f"add({last}, {bias})", None if flat else out)
        if flat:
            self.emit(n.name, f"reshape({last}, shape = {ints(o.shape)})", out)
        return True

    def op_Resize(self, n: OnnxNode, out: str) -> bool:
        """Resizing as a typed opaque task: nearest copies (0 FLOPs), linear interpolation a
        multiply-add per corner of the resized axes (``2^(k+1)`` per output element for ``k``
        resized axes), cubic 4 taps per axis (``2 * 4^k``)."""
        x, o = self.g.tensors[n.inputs[0]], self.g.tensors[out]
        k = sum(1 for a, b in zip(x.shape, o.shape) if a != b)
        mode = n.attrs.get("mode", "nearest")
        mode = mode.decode() if isinstance(mode, bytes) else str(mode)
        self.opaque(n, 0.0 if mode == "nearest" else (2.0 ** (k + 1) if mode == "linear" else 2.0 * 4.0 ** k))
        return True

    op_Upsample = op_Resize

    def op_Gather(self, n: OnnxNode, out: str) -> bool:
        """Rows of a constant 2-D table by integer ids (an embedding); other gathers move data."""
        g = self.g
        table, ids = g.tensors[n.inputs[0]], g.tensors[n.inputs[1]]
        if table.const and not ids.const and len(table.shape) == 2 and int(n.attrs.get("axis", 0)) % 2 == 0 \
                and ids.dtype in ("i32", "i64") and table.dtype not in ("bool", "i8", "i32", "i64"):
            self.emit(n.name, f"embedding({self.operand(n.inputs[1])}, {self.operand(n.inputs[0])})", out)
            return True
        return False

    def op_GatherND(self, n: OnnxNode, out: str) -> bool:
        """``gather_nd``: no FLOPs; it reads the indices and the slices they pick."""
        if self.g.tensors[n.inputs[1]].dtype not in ("i32", "i64"):
            return False
        b = int(n.attrs.get("batch_dims", 0))
        self.emit(n.name, f"gather_nd({self.operand(n.inputs[0])}, {self.operand(n.inputs[1])}, "
                          f"batch_dims = {b})", out)
        return True

    def op_ScatterElements(self, n: OnnxNode, out: str) -> bool:
        """``scatter_elements``: a copy of the data with the updates written at the indices; no
        FLOPs, or with a ``reduction`` (add, mul, max, min) one per update element."""
        reduction = n.attrs.get("reduction", "none")
        reduction = reduction.decode() if isinstance(reduction, bytes) else str(reduction)
        data, idx = self.g.tensors[n.inputs[0]], self.g.tensors[n.inputs[1]]
        axis = int(n.attrs.get("axis", 0))
        if len(n.inputs) != 3 or idx.dtype not in ("i32", "i64") or not -len(data.shape) <= axis < len(data.shape) \
                or (reduction != "none" and data.dtype == "bool"):
            return False
        axis %= len(data.shape)
        args = ", ".join(self.operand(i) for i in n.inputs)
        self.emit(n.name, f"scatter_elements({args}, axis = {axis}, reduction = {dsl_string(reduction)})", out)
        return True

    def op_HardSwish(self, n: OnnxNode, out: str) -> bool:
        self.emit(n.name, f'elementwise({self.operand(n.inputs[0])}, fn = "hardswish")', out)
        return True

    def op_InstanceNormalization(self, n: OnnxNode, out: str) -> bool:
        """``instancenorm``; its per-channel scale and bias belong to the op, as layernorm's do."""
        if len(self.g.tensors[n.inputs[0]].shape) < 3:
            return False
        eps = float(n.attrs.get("epsilon", 1e-5))
        self.emit(n.name, f"instancenorm({self.operand(n.inputs[0])}, eps = {dsl_number(eps)})", out)
        return True

    def op_CumSum(self, n: OnnxNode, out: str) -> bool:
        """``cumsum`` along the axis a constant gives (else a typed opaque task, an add per element)."""
        x, axis = self.g.tensors[n.inputs[0]], self.g.tensors[n.inputs[1]]
        if axis.value is None or axis.value.size != 1 or not x.shape:
            return False
        k = int(axis.value.reshape(-1)[0])
        if not -len(x.shape) <= k < len(x.shape):
            return False
        flags = {f: int(n.attrs.get(f, 0)) for f in ("exclusive", "reverse")}
        if any(v not in (0, 1) for v in flags.values()):
            return False
        self.emit(n.name, f"cumsum({self.operand(n.inputs[0])}, axis = {k % len(x.shape)}, "
                          f"exclusive = {flags['exclusive']}, reverse = {flags['reverse']})", out)
        return True

    def op_Pow(self, n: OnnxNode, out: str) -> bool:
        """x ** 2 as a square, x ** 0.5 as a square root; other exponents priced as one multiply per
        extra power (an integer exponent) or as exp and log (any other)."""
        e = self.g.tensors[n.inputs[1]]
        if e.value is None or e.value.size != 1 or self.g.tensors[out].dtype in ("i8", "i32", "i64"):
            return False
        k = float(e.value.reshape(-1)[0])
        fn = {2.0: "square", 0.5: "sqrt"}.get(k)
        if fn is not None and self.g.tensors[n.inputs[0]].shape == self.g.tensors[out].shape:
            self.emit(n.name, f'elementwise({self.operand(n.inputs[0])}, fn = "{fn}")', out)
            return True
        self.opaque(n, abs(k) - 1 if k.is_integer() and k != 0 else 3.0)
        return True

    def recurrent(self, n: OnnxNode, out: str, gates: int) -> bool:
        """LSTM (4 gates), GRU (3), RNN (1): 2 * S * B * dirs * gates * H * (I + H) FLOPs, the
        products of the input and recurrent weights at every step, on the output Y."""
        x = self.g.tensors[n.inputs[0]].shape
        if len(x) != 3:
            return False
        layout = int(n.attrs.get("layout", 0))
        seq, batch, width = (x[1], x[0], x[2]) if layout else x
        hidden = int(n.attrs["hidden_size"])
        dirs = 2 if n.attrs.get("direction", b"forward") in (b"bidirectional", "bidirectional") else 1
        work = 2.0 * seq * batch * dirs * gates * hidden * (width + hidden)
        self.opaque(n, flops=[work if k == 0 else 0.0 for k in range(len(n.outputs))])
        return True

    def op_LSTM(self, n: OnnxNode, out: str) -> bool:
        return self.recurrent(n, out, 4)

    def op_GRU(self, n: OnnxNode, out: str) -> bool:
        return self.recurrent(n, out, 3)

    def op_RNN(self, n: OnnxNode, out: str) -> bool:
        return self.recurrent(n, out, 1)

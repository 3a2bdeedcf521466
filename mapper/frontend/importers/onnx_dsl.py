"""An ONNX model as a DSL program (``mapper import onnx``; docs/importers.md).

:func:`onnx_to_dsl` writes one statement per task, named after its ONNX node
(sanitised, unique), with the model's inputs as ``input`` declarations and
its constants (initializers and everything folded from them) as ``weight``
declarations. Ops map to DSL ops where the DSL has one with the same work
(the table in docs/importers.md); GELU, layer-norm and attention subgraphs
(:mod:`.onnx_patterns`) become one op each; reshapes, squeezes, flattens
and identities are free views or aliases. Any other node becomes an
``opaque`` op with the shape ONNX infers and one FLOP per output element,
and :class:`Imported` lists those op types.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from mapper.errors import DslError, InputError
from mapper.frontend.importers.dsl_writer import comment_text, dsl_name, dsl_number, dsl_string
from mapper.frontend.importers.onnx_fold import MAX_FOLDED_ELEMENTS
from mapper.frontend.importers.onnx_model import OnnxGraph, OnnxNode, read_onnx
from mapper.frontend.importers.onnx_patterns import Match, find_patterns

#: ONNX elementwise ops and the DSL ``elementwise`` function each is.
UNARY = {"Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Abs": "abs",
         "Neg": "neg"}
BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}
VIEWS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")
ALIASES = ("Identity", "Dropout")
REDUCE = {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "max"}
#: Ops imported as ``opaque`` tasks of the dtype ONNX infers, priced by rule (FLOPs per output
#: element): conversions and data movement are free, masks and comparisons one per element.
TYPED = {"Cast": 0.0, "CastLike": 0.0, "Expand": 0.0, "Slice": 0.0, "Tile": 0.0, "Pad": 0.0, "Gather": 0.0,
         "GatherElements": 0.0, "ScatterND": 0.0, "Trilu": 0.0, "ConstantOfShape": 0.0, "Range": 0.0,
         "Where": 1.0, "Equal": 1.0, "Less": 1.0, "LessOrEqual": 1.0, "Greater": 1.0, "GreaterOrEqual": 1.0,
         "And": 1.0, "Or": 1.0, "Not": 1.0, "Xor": 1.0, "IsNaN": 1.0, "IsInf": 1.0, "Max": 1.0, "Min": 1.0,
         "Reciprocal": 1.0, "Erf": 1.0, "HardSigmoid": 3.0, "Pow": 1.0, "LSTM": 0.0, "GRU": 0.0, "RNN": 0.0,
         "ConvTranspose": 0.0, "Resize": 0.0, "Upsample": 0.0}


@dataclass(frozen=True, slots=True)
class Imported:
    """The DSL text of a model, and what the import did."""

    text: str
    nodes: int  # ONNX nodes
    tasks: int
    folded: int  # nodes folded into constants
    fused: Mapping[str, int]  # pattern -> count
    unsupported: Mapping[str, int]  # ONNX op type -> nodes that became opaque tasks
    file: str = "<onnx>"  # the model
    origins: Mapping[int, str] = field(default_factory=dict)  # DSL line -> the ONNX node it comes from
    notes: tuple[str, ...] = ()  # what the reader left out

    def warning(self) -> str | None:
        """One line listing the op types imported as ``opaque`` tasks (and what the
        reader left out), or None."""
        parts = list(self.notes)
        if self.unsupported:
            listed = ", ".join(f"{op} x{n}" for op, n in sorted(self.unsupported.items()))
            parts.append(f"imported as opaque tasks (no DSL op, or a form the DSL op does not take): {listed}; "
                         "their work comes from their shapes, and `mapper run` cannot run them")
            if "If" in self.unsupported:
                parts.append("an If whose condition an input decides is taken once that input is fixed "
                             "with --input-value NAME=VALUE")
        return "; ".join(parts) or None

    @contextlib.contextmanager
    def blame(self) -> Iterator[None]:
        """Errors in the generated program, raised inside the block, as errors of the model:
        the ONNX node a DSL line comes from, not the line (which the user never saw)."""
        try:
            yield
        except DslError as err:
            if err.span is None or err.span.file != self.file:
                raise
            where = self.origins.get(err.span.line)
            message = f"{where}: {err.message}" if where else f"the imported program: {err.message}"
            raise InputError(message, obj=self.file, hint=err.hint) from None


def import_onnx(path: str, dims: Mapping[str, int] | None = None,
                input_shapes: Mapping[str, tuple[int, ...]] | None = None,
                input_values: Mapping[str, tuple[float, ...]] | None = None) -> Imported:
    """Read the ONNX model at ``path`` (see :func:`~mapper.frontend.importers.onnx_model.read_onnx`) as DSL text."""
    return onnx_to_dsl(read_onnx(path, dims, input_shapes, input_values))


def onnx_to_dsl(g: OnnxGraph) -> Imported:
    try:
        return _Writer(g).run()
    except KeyError as err:  # a tensor whose producer wrote nothing (an input-less node mapper cannot express)
        raise InputError(f"the model uses tensor {err.args[0]!r}, which no node it can import produces",
                         obj=g.file) from None


def _describe(n: OnnxNode) -> str:
    """How an error names an ONNX node."""
    return f"node {n.name!r} ({n.op})"


def _ints(values: Sequence[int]) -> str:
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


class _Writer:
    def __init__(self, g: OnnxGraph) -> None:
        self.g = g
        self.taken: set[str] = set()
        self.ref: dict[str, str] = {}  # ONNX tensor -> DSL tensor name
        self.weights: list[tuple[str, str | None]] = []  # (line, the node it comes from)
        self.body: list[tuple[str, str | None]] = []
        self.origin: str | None = None  # the node being written
        self.tasks = 0
        self.unsupported: Counter[str] = Counter()

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
        self.weights.append((f"  weight {name} : {dtype or t.dtype}{_ints(shape)}", self.origin))
        self.ref[tensor] = name
        return name

    def emit(self, raw: str, call: str, output: str | None = None) -> str:
        name = self.fresh(raw)
        self.body.append((f"  {name} = {call}", self.origin))
        self.tasks += 1
        if output is not None:
            self.ref[output] = name
        return name

    # -- the program --------------------------------------------------------------------------
    def run(self) -> Imported:
        g = self.g
        inputs = []
        for i in g.inputs:
            t = g.tensors[i]
            name = self.fresh(i)
            self.ref[i] = name
            inputs.append(f"  input {name} : {t.dtype}{_ints(t.shape)}")
        matches = find_patterns(g)
        replaced = {id(n): m for m in matches for n in m.nodes}
        done: set[int] = set()
        for n in g.nodes:
            if n.folded:
                continue
            m = replaced.get(id(n))
            self.origin = _describe(n if m is None else m.nodes[-1])
            try:
                if m is None:
                    self.node(n)
                elif id(m) not in done and all(i in self.ref or g.tensors[i].const for i in m.inputs):
                    done.add(id(m))
                    self.pattern(m, n)
            except (TypeError, ValueError, IndexError, ArithmeticError):  # attributes of the wrong type or form
                raise InputError(f"{self.origin}: its attributes or shapes are not of a form ONNX defines",
                                 obj=g.file) from None
        if not self.tasks:
            raise InputError("the model computes nothing to map: every output is an input, a constant, or an "
                             "alias of one", obj=g.file)
        outputs = [self.ref[o] for o in g.outputs if o in self.ref and not g.tensors[o].const]
        header = [f"# imported from {comment_text(os.path.basename(g.file))} by `mapper import onnx` "
                  f"(opset {g.opset}): {len(g.nodes) + g.evaluated} ONNX nodes, {self.tasks} tasks",
                  f"graph {dsl_name(g.name)} {{"]
        placed = [*((line, None) for line in header), *((line, None) for line in inputs), *self.weights, *self.body]
        placed += [(f"  output {', '.join(dict.fromkeys(outputs))}", None)] if outputs else []
        placed.append(("}", None))
        origins = {k: origin for k, (_, origin) in enumerate(placed, 1) if origin is not None}
        fused = Counter(m.kind for m in matches)
        return Imported("\n".join(line for line, _ in placed) + "\n", len(g.nodes) + g.evaluated, self.tasks,
                        sum(n.folded for n in g.nodes) + g.evaluated, dict(fused), dict(self.unsupported), g.file,
                        origins, g.notes)

    def pattern(self, m: Match, first: OnnxNode) -> None:
        last = m.nodes[-1]
        if m.kind == "gelu":
            self.emit(last.name, f"gelu({self.operand(m.inputs[0])})", m.output)
        elif m.kind in ("layernorm", "rmsnorm"):
            eps = dsl_number(m.attrs["eps"])
            self.emit(last.name, f"{m.kind}({self.operand(m.inputs[0])}, eps = {eps})", m.output)
        else:  # attention on [B*S, D] views of the projections
            b, s, d = m.attrs["batch"], m.attrs["seq"], m.attrs["width"]
            flat = [self.emit(f"{first.name}_{part}", f"reshape({self.operand(x)}, shape = {_ints((b * s, d))})")
                    for part, x in zip("qkv", m.inputs)]
            causal = ", causal = 1" if m.attrs.get("causal") else ""
            att = self.emit(f"{last.name}_attention",
                            f"attention({', '.join(flat)}, heads = {m.attrs['heads']}, seq = {s}{causal})")
            self.emit(last.name, f"reshape({att}, shape = {_ints(self.g.tensors[m.output].shape)})", m.output)

    # -- one node ---------------------------------------------------------------------------------
    def node(self, n: OnnxNode) -> None:
        g, op = self.g, n.op
        out = n.outputs[0] if n.outputs else None
        if out is None:
            return
        x = n.inputs[0] if n.inputs else None
        if op in ALIASES and x is not None:
            self.ref[out] = self.operand(x)
            return
        if op in VIEWS and x is not None:
            self.emit(n.name, f"reshape({self.operand(x)}, shape = {_ints(g.tensors[out].shape)})", out)
            return
        handler = getattr(self, f"op_{op}", None)
        if handler is not None and handler(n, out):
            return
        if op in ("Conv", "MaxPool", "AveragePool") and x is not None:  # a form the DSL op does not take
            self.opaque(n, self.window_flops(n, out))
            return
        if op in UNARY and x is not None:
            self.emit(n.name, f'elementwise({self.operand(x)}, fn = "{UNARY[op]}")', out)
        elif op in BINARY and len(n.inputs) == 2 and self.g.tensors[out].dtype not in ("bool",):
            self.binary(n.name, BINARY[op], n.inputs[0], n.inputs[1], out)
        elif op in REDUCE and not self.reduce(n, out):
            self.opaque(n)
        elif op not in REDUCE:
            self.opaque(n, TYPED.get(op, 1.0))

    def window_flops(self, n: OnnxNode, out: str) -> float:
        """FLOPs per output element of a convolution or pooling window (as the DSL counts them)."""
        if n.op == "Conv":
            _, cg, *window = self.g.tensors[n.inputs[1]].shape
            return 2.0 * cg * math.prod(window) + (1.0 if len(n.inputs) > 2 else 0.0)
        return float(math.prod(n.attrs.get("kernel_shape", [1])))

    def binary(self, raw: str, op: str, a: str, b: str, out: str) -> str:
        dtype = self.g.tensors[out].dtype
        return self.emit(raw, f"{op}({self.broadcast(a, dtype)}, {self.broadcast(b, dtype)})", out)

    def broadcast(self, tensor: str, dtype: str) -> str:
        """An operand of a broadcasting op: a constant whose value repeats along its leading axis
        (a mask or an embedding folded at the batch size) is declared with that axis 1, as it was
        before the exporter expanded it: the op computes the same, and the batch stays splittable."""
        t = self.g.tensors[tensor]
        if tensor in self.ref or not t.const or len(t.shape) < 2 or t.shape[0] < 2:
            return self.operand(tensor, dtype)
        value = self.g.value(tensor, MAX_FOLDED_ELEMENTS)
        if value is None or not bool((value == value[:1]).all()):
            return self.operand(tensor, dtype)
        key = f"{tensor}\0broadcast"  # not an ONNX name: the full-size declaration keeps its own
        if key not in self.ref:
            name = self.fresh(tensor)
            self.weights.append((f"  weight {name} : {dtype}{_ints((1, *t.shape[1:]))}", self.origin))
            self.ref[key] = name
        return self.ref[key]

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
            self.emit(raw, f"opaque({', '.join(args)}, shape = {_ints(t.shape or (1,))}, flops = {dsl_number(work)}, "
                           f"kind = {dsl_string(n.op)}, dtype = \"{t.dtype}\")", o)

    def op_ConvTranspose(self, n: OnnxNode, out: str) -> bool:
        """A transposed convolution as a typed opaque task: each input element times each of its
        ``C_out/groups x kernel`` weights, ``2 N C_in H_in W_in (C_out/groups) prod(kernel)``
        FLOPs (Dumoulin and Visin, "A guide to convolution arithmetic", arXiv:1603.07285), and a
        bias per output element."""
        x, w, o = (self.g.tensors[i] for i in (n.inputs[0], n.inputs[1], out))
        if len(w.shape) < 3 or not o.shape or math.prod(o.shape) == 0:
            return False
        total = 2.0 * math.prod(x.shape) * math.prod(w.shape[1:]) + (math.prod(o.shape) if len(n.inputs) > 2 else 0)
        self.opaque(n, total / math.prod(o.shape))
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

    # -- ops with attributes ------------------------------------------------------------------------
    def op_Conv(self, n: OnnxNode, out: str) -> bool:
        """A 2-D convolution as ``conv2d``; a 1-D one ([N, C, L], audio and byte models) as a
        ``conv2d`` of height 1 between two views, its weight declared [K, C/g, 1, R]."""
        g, a = self.g, n.attrs
        x, w = n.inputs[0], n.inputs[1]
        rank = len(g.tensors[x].shape)
        if rank not in (3, 4) or not g.tensors[w].const:
            return False
        flat = rank == 3
        pads = list(a.get("pads", [0] * 2 * (rank - 2)))
        strides, dilations = list(a.get("strides", [1] * (rank - 2))), list(a.get("dilations", [1] * (rank - 2)))
        if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID", "NOTSET", "VALID"):
            return False
        if flat:
            pads, strides, dilations = [0, pads[0], 0, pads[1]], [1, *strides], [1, *dilations]
        if any(d != 1 for d in dilations) or pads[0] != pads[2] or pads[1] != pads[3]:
            return False
        k = g.tensors[w].shape[0]
        src, weight = self.operand(x), self.operand(w)
        if flat:
            n_, c, length = g.tensors[x].shape
            src = self.emit(f"{n.name}_rows", f"reshape({src}, shape = {_ints((n_, c, 1, length))})")
            weight = self.fresh(w)
            self.weights.append((f"  weight {weight} : {g.tensors[w].dtype}"
                                 f"{_ints((k, g.tensors[w].shape[1], 1, g.tensors[w].shape[2]))}", self.origin))
        call = (f"conv2d({src}, {weight}, stride = {_ints(strides)}, padding = {_ints(pads[:2])}, "
                f"groups = {int(a.get('group', 1))})")
        last = self.emit(f"{n.name}_conv", call) if len(n.inputs) > 2 or flat else None
        if len(n.inputs) > 2:
            bias = self.fresh(f"{n.inputs[2]}")
            self.weights.append((f"  weight {bias} : {g.tensors[out].dtype}{_ints((1, k, 1, 1))}", self.origin))
            last = self.emit(f"{n.name}_bias" if flat else n.name, f"add({last}, {bias})", None if flat else out)
        if flat:
            self.emit(n.name, f"reshape({last}, shape = {_ints(g.tensors[out].shape)})", out)
        elif last is None:
            self.emit(n.name, call, out)
        return True

    def op_Gemm(self, n: OnnxNode, out: str) -> bool:
        g, a = self.g, n.attrs
        A, B = n.inputs[0], n.inputs[1]
        ta, tb = int(a.get("transA", 0)), int(a.get("transB", 0))
        lhs = self.operand(A)
        if ta:
            lhs = self.emit(f"{n.name}_transpose_a", f"transpose({lhs}, perm = [1, 0])")
        if g.tensors[B].const:  # a weight: declare it as the product needs it
            kk, nn = g.tensors[B].shape[::-1] if tb else g.tensors[B].shape
            rhs = self.fresh(B)
            self.weights.append((f"  weight {rhs} : {g.tensors[out].dtype}{_ints((kk, nn))}", self.origin))
        else:
            rhs = self.operand(B)
            if tb:
                rhs = self.emit(f"{n.name}_transpose_b", f"transpose({rhs}, perm = [1, 0])")
        if len(n.inputs) > 2 and float(a.get("beta", 1.0)) != 0.0:
            mm = self.emit(f"{n.name}_matmul", f"matmul({lhs}, {rhs})")
            self.emit(n.name, f"add({mm}, {self.operand(n.inputs[2], g.tensors[out].dtype)})", out)
        else:
            self.emit(n.name, f"matmul({lhs}, {rhs})", out)
        return True

    def op_MatMul(self, n: OnnxNode, out: str) -> bool:
        a, b = self.g.tensors[n.inputs[0]], self.g.tensors[n.inputs[1]]
        if len(a.shape) < 2 or len(b.shape) < 2:
            return False
        self.emit(n.name, f"matmul({self.operand(n.inputs[0])}, {self.operand(n.inputs[1])})", out)
        return True

    def op_BatchNormalization(self, n: OnnxNode, out: str) -> bool:
        eps = float(n.attrs.get("epsilon", 1e-5))
        self.emit(n.name, f"batchnorm({self.operand(n.inputs[0])}, eps = {dsl_number(eps)})", out)
        return True

    def op_Relu(self, n: OnnxNode, out: str) -> bool:
        self.emit(n.name, f"relu({self.operand(n.inputs[0])})", out)
        return True

    op_Clip = op_Relu  # the same work; the upper bound is not modelled (docs/importers.md)

    def op_Gelu(self, n: OnnxNode, out: str) -> bool:
        self.emit(n.name, f"gelu({self.operand(n.inputs[0])})", out)
        return True

    def op_Sum(self, n: OnnxNode, out: str) -> bool:
        dtype = self.g.tensors[out].dtype
        args = [self.operand(i, dtype) for i in n.inputs]
        if len(args) == 1:
            self.ref[out] = args[0]
            return True
        acc = args[0]
        for k, other in enumerate(args[1:], 1):
            last = k == len(args) - 1
            acc = self.emit(n.name if last else f"{n.name}_{k}", f"add({acc}, {other})", out if last else None)
        return True

    def op_Concat(self, n: OnnxNode, out: str) -> bool:
        rank = len(self.g.tensors[out].shape)
        axis = int(n.attrs.get("axis", 0)) % rank
        args = ", ".join(self.operand(i, self.g.tensors[out].dtype) for i in n.inputs)
        self.emit(n.name, f"concat({args}, axis = {axis})", out)
        return True

    def op_Split(self, n: OnnxNode, out: str) -> bool:
        """Equal parts as DSL ``split`` calls, one per used output, at its own position
        among all of the node's outputs (an unused part still counts)."""
        src = self.g.tensors[n.inputs[0]].shape
        axis = int(n.attrs.get("axis", 0)) % len(src)
        parts = n.arity
        if src[axis] % parts or any(self.g.tensors[o].shape[axis] != src[axis] // parts for o in n.outputs):
            return False  # unequal parts: the DSL splits evenly
        x = self.operand(n.inputs[0])
        for k, o in zip(n.slots, n.outputs):
            self.emit(f"{n.name}_{k}", f"split({x}, parts = {parts}, index = {k}, axis = {axis})", o)
        return True

    def op_Transpose(self, n: OnnxNode, out: str) -> bool:
        rank = len(self.g.tensors[out].shape)
        perm = n.attrs.get("perm", list(range(rank))[::-1])
        self.emit(n.name, f"transpose({self.operand(n.inputs[0])}, perm = {_ints(perm)})", out)
        return True

    def op_Softmax(self, n: OnnxNode, out: str) -> bool:
        rank = len(self.g.tensors[out].shape)
        axis = int(n.attrs.get("axis", -1 if self.g.opset >= 13 else 1)) % rank
        self.emit(n.name, f"softmax({self.operand(n.inputs[0])}, axis = {axis})", out)
        return True

    def op_LayerNormalization(self, n: OnnxNode, out: str) -> bool:
        rank = len(self.g.tensors[out].shape)
        if int(n.attrs.get("axis", -1)) % rank != rank - 1:
            return False
        eps = float(n.attrs.get("epsilon", 1e-5))
        self.emit(n.name, f"layernorm({self.operand(n.inputs[0])}, eps = {dsl_number(eps)})", out)
        return True

    def pool(self, n: OnnxNode, out: str, kind: str) -> bool:
        a = n.attrs
        if len(self.g.tensors[n.inputs[0]].shape) != 4 or a.get("ceil_mode", 0) or a.get("storage_order", 0):
            return False
        kern = list(a["kernel_shape"])
        pads = list(a.get("pads", [0, 0, 0, 0]))
        if any(d != 1 for d in a.get("dilations", [1, 1])) or pads[0] != pads[2] or pads[1] != pads[3]:
            return False
        if pads[0] > kern[0] // 2 or pads[1] > kern[1] // 2:
            return False
        if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID", "NOTSET", "VALID"):
            return False
        self.emit(n.name, f"{kind}({self.operand(n.inputs[0])}, kernel = {_ints(kern)}, "
                          f"stride = {_ints(a.get('strides', [1, 1]))}, padding = {_ints(pads[:2])})", out)
        return True

    def op_MaxPool(self, n: OnnxNode, out: str) -> bool:
        return self.pool(n, out, "maxpool")

    def op_AveragePool(self, n: OnnxNode, out: str) -> bool:
        return self.pool(n, out, "avgpool")

    def global_pool(self, n: OnnxNode, out: str, kind: str) -> bool:
        """Over H x W of [N, C, H, W] as a pool; over L of [N, C, L] as a reduction, kept as [N, C, 1]."""
        shape = self.g.tensors[n.inputs[0]].shape
        if len(shape) == 3:
            red = self.emit(f"{n.name}_reduce", f'reduce({self.operand(n.inputs[0])}, '
                                                f'kind = "{"mean" if kind == "avgpool" else "max"}", axis = 2)')
            self.emit(n.name, f"reshape({red}, shape = {_ints(self.g.tensors[out].shape)})", out)
            return True
        if len(shape) != 4:
            return False
        self.emit(n.name, f"{kind}({self.operand(n.inputs[0])}, kernel = {_ints(shape[2:])})", out)
        return True

    def op_GlobalAveragePool(self, n: OnnxNode, out: str) -> bool:
        return self.global_pool(n, out, "avgpool")

    def op_GlobalMaxPool(self, n: OnnxNode, out: str) -> bool:
        return self.global_pool(n, out, "maxpool")

    def reduce(self, n: OnnxNode, out: str) -> bool:
        """A reduction over one axis (DSL ``reduce``), reshaped back when ONNX keeps the axis."""
        src = self.g.tensors[n.inputs[0]]
        axes = n.attrs.get("axes")
        if axes is None and len(n.inputs) > 1:
            t = self.g.tensors[n.inputs[1]]
            axes = None if t.value is None else [int(v) for v in t.value.reshape(-1)]
        if axes is None:
            return False
        spatial = sorted(int(a) % len(src.shape) for a in axes) == [2, 3] and len(src.shape) == 4
        if spatial and n.op in ("ReduceMean", "ReduceMax"):  # global pooling over H and W
            pool = "avgpool" if n.op == "ReduceMean" else "maxpool"
            call = f"{pool}({self.operand(n.inputs[0])}, kernel = {_ints(src.shape[2:])})"
            if int(n.attrs.get("keepdims", 1)):
                self.emit(n.name, call, out)
            else:
                pooled = self.emit(f"{n.name}_pool", call)
                self.emit(n.name, f"reshape({pooled}, shape = {_ints(self.g.tensors[out].shape)})", out)
            return True
        if len(axes) != 1:
            return False
        axis = int(axes[0]) % len(src.shape)
        kind = REDUCE[n.op]
        if int(n.attrs.get("keepdims", 1)):
            red = self.emit(f"{n.name}_reduce", f'reduce({self.operand(n.inputs[0])}, kind = "{kind}", axis = {axis})')
            self.emit(n.name, f"reshape({red}, shape = {_ints(self.g.tensors[out].shape)})", out)
        else:
            self.emit(n.name, f'reduce({self.operand(n.inputs[0])}, kind = "{kind}", axis = {axis})', out)
        return True

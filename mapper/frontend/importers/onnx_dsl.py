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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from mapper.core.graph import SourceNode
from mapper.errors import DslError, InputError
from mapper.frontend.importers.dsl_writer import comment_text, dsl_name, dsl_number
from mapper.frontend.importers.onnx_decoder import DECODER
from mapper.frontend.importers.onnx_emit import TYPED, Emitter, ints
from mapper.frontend.importers.onnx_fold import MAX_FOLDED_ELEMENTS
from mapper.frontend.importers.onnx_model import OnnxGraph, OnnxNode, read_onnx
from mapper.frontend.importers.onnx_patterns import Match, find_patterns
from mapper.frontend.importers.onnx_qdq import node_units

#: ONNX elementwise ops and the DSL ``elementwise`` function each is.
UNARY = {"Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Abs": "abs",
         "Neg": "neg"}
BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}
VIEWS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")
ALIASES = ("Identity", "Dropout")
REDUCE = {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "max"}


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
    sources: Mapping[str, tuple[SourceNode, ...]] = field(default_factory=dict)  # task -> its ONNX nodes
    masks: tuple[tuple[int, int], ...] = ()  # (causal, window) of each decoder attention, as its mask reads

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
                input_values: Mapping[str, tuple[float, ...]] | None = None, cache: int = 0,
                mask: tuple[int, int] = (0, 0), constants: Mapping[str, float] | None = None) -> Imported:
    """Read the ONNX model at ``path`` (see :func:`~mapper.frontend.importers.onnx_model.read_onnx`) as DSL text,
    its QDQ node units run quantised (:mod:`.onnx_qdq`);
    ``cache``: positions a KV cache holds beyond the model's own (its decoder attention's ``cache``);
    ``mask``: (causal, window) of the model's decoder attention where its mask at these sizes
    does not show them (a window no longer than the sequence, a mask too large to fold);
    ``constants``: scalar constants given other values (:mod:`.onnx_window`)."""
    return onnx_to_dsl(node_units(read_onnx(path, dims, input_shapes, input_values, constants)), cache, mask)


def onnx_to_dsl(g: OnnxGraph, cache: int = 0, mask: tuple[int, int] = (0, 0)) -> Imported:
    try:
        return _Writer(g, cache, mask).run()
    except KeyError as err:  # a tensor whose producer wrote nothing (an input-less node mapper cannot express)
        raise InputError(f"the model uses tensor {err.args[0]!r}, which no node it can import produces",
                         obj=g.file) from None


def _describe(n: OnnxNode) -> str:
    """How an error names an ONNX node."""
    return f"node {n.name!r} ({n.op})"


class _Writer(Emitter):
    def __init__(self, g: OnnxGraph, cache: int = 0, mask: tuple[int, int] = (0, 0)) -> None:
        super().__init__(g)
        self.cache = cache
        self.mask = mask
        self.tokens: tuple[int, int] | None = None

    # -- the program --------------------------------------------------------------------------
    def run(self) -> Imported:
        g = self.g
        matches = find_patterns(g, DECODER)
        layer = next((m.attrs for m in matches if m.kind == "rotary_attention"), None)
        #: a decoder's token ids [B, S], declared as the [B*S] rows its layers work on (token-major)
        self.tokens = (layer["batch"], layer["seq"]) if layer is not None else None
        inputs = []
        for i in g.inputs:
            t = g.tensors[i]
            name = self.fresh(i)
            self.ref[i] = name
            flat = t.dtype in ("i32", "i64") and t.shape == self.tokens
            inputs.append(f"  input {name} : {t.dtype}{ints((math.prod(t.shape),) if flat else t.shape)}")
        replaced = {id(n): m for m in matches for n in m.nodes}
        done: set[int] = set()
        for n in g.nodes:
            if n.folded:
                continue
            m = replaced.get(id(n))
            self.origin = _describe(n if m is None else m.nodes[-1])
            self.current = (n,) if m is None else tuple(m.nodes)
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
        masks = tuple((m.attrs["causal"], m.attrs["window"]) for m in matches if m.kind == "rotary_attention")
        return Imported("\n".join(line for line, _ in placed) + "\n", len(g.nodes) + g.evaluated, self.tasks,
                        sum(n.folded for n in g.nodes) + g.evaluated, dict(fused), dict(self.unsupported), g.file,
                        origins, g.notes, dict(self.sources), masks)

    def pattern(self, m: Match, first: OnnxNode) -> None:
        last = m.nodes[-1]
        if m.kind == "gelu":
            self.emit(last.name, f"gelu({self.operand(m.inputs[0])})", m.output)
        elif m.kind in ("layernorm", "rmsnorm"):
            eps = dsl_number(m.attrs["eps"])
            self.emit(last.name, f"{m.kind}({self.operand(m.inputs[0])}, eps = {eps})", m.output)
        elif m.kind == "rotary_attention":
            self.decoder_attention(m)
        elif m.kind == "swiglu":
            self.decoder_mlp(m)
        else:  # attention on [B*S, D] views of the projections
            b, s, d = m.attrs["batch"], m.attrs["seq"], m.attrs["width"]
            flat = [self.emit(f"{first.name}_{part}", f"reshape({self.operand(x)}, shape = {ints((b * s, d))})")
                    for part, x in zip("qkv", m.inputs)]
            causal = ", causal = 1" if m.attrs.get("causal") else ""
            att = self.emit(f"{last.name}_attention",
                            f"attention({', '.join(flat)}, heads = {m.attrs['heads']}, seq = {s}{causal})")
            self.emit(last.name, f"reshape({att}, shape = {ints(self.g.tensors[m.output].shape)})", m.output)

    # -- decoder layers (:mod:`.onnx_decoder`) ------------------------------------------------------
    def rows(self, raw: str, x: str) -> tuple[str, int]:
        """``x`` [..., D] as [T, D] (a view; ``x`` itself when 2-D) and T."""
        shape = self.g.tensors[x].shape
        if len(shape) == 2 or (self.tokens is not None and shape[:2] == self.tokens and len(shape) == 3):
            return self.operand(x), math.prod(shape[:-1])  # already rows
        t = math.prod(shape[:-1])
        return self.emit(raw, f"reshape({self.operand(x)}, shape = {ints((t, shape[-1]))})"), t

    def fused_weight(self, raw: str, parts: tuple[str, ...], axis: int) -> str:
        """One weight declared for the constant ``parts`` joined along ``axis`` (Q|K|V, gate|up)."""
        shapes = [self.g.tensors[p].shape for p in parts]
        shape = list(shapes[0])
        shape[axis] = sum(sh[axis] for sh in shapes)
        name = self.fresh(raw)
        self.weights.append((f"  weight {name} : {self.g.tensors[parts[0]].dtype}{ints(shape)}", self.origin))
        return name

    def decoder_attention(self, m: Match) -> None:
        """Q, K, V projections as one GEMM laid out by query groups (as ``attention`` takes a
        grouped-query ``qkv``), ``rotary``, ``attention`` and the output projection, on [T, D] rows
        (docs/importers.md, "Decoder layers")."""
        a = m.attrs
        q_mm, soft, out_mm = m.nodes[0], next(n for n in m.nodes if n.op == "Softmax"), m.nodes[-1]
        h, kv, s = a["heads"], a["kv_heads"], a["seq"]
        x, _ = self.rows(f"{q_mm.name}_rows", m.inputs[0])
        w = self.fused_weight(f"{a['weights'][0]}_qkv", a["weights"][:3], 1)
        qkv = self.emit(f"{q_mm.name}_qkv", f"matmul({x}, {w})")
        if a["biases"] is not None:
            bias = self.fused_weight(f"{a['biases'][0]}_qkv", a["biases"], 0)
            qkv = self.emit(f"{q_mm.name}_qkv_bias", f"add({qkv}, {bias})")
        sizes = f"heads = {h}, kv_heads = {kv}, seq = {s}"
        rot = self.emit(f"{soft.name}_rotary", f"rotary({qkv}, {sizes})")
        causal = a["causal"] or self.mask[0]
        window = (a["window"] or self.mask[1]) if causal else 0
        flags = "".join(f", {k} = {v}" for k, v in (("causal", causal), ("cache", a["cache"] + self.cache),
                                                    ("window", window)) if v)
        att = self.emit(f"{soft.name}_attention", f"attention({rot}, {sizes}{flags})")
        wo = self.operand(a["weights"][3])
        out = self.emit(out_mm.name if a["out_bias"] is None else f"{out_mm.name}_matmul", f"matmul({att}, {wo})")
        if a["out_bias"] is not None:
            out = self.emit(out_mm.name, f"add({out}, {self.operand(a['out_bias'])})")
        self.rows_out(f"{out_mm.name}_view", out, m.output)

    def decoder_mlp(self, m: Match) -> None:
        """Gate and up projections as one GEMM, ``swiglu``, the down projection, on [T, D] rows."""
        gate, down = m.nodes[0], m.nodes[-1]
        gate_w, up_w, down_w = m.attrs["weights"]
        x, _ = self.rows(f"{gate.name}_rows", m.inputs[0])
        w = self.fused_weight(f"{gate_w}_gate_up", (gate_w, up_w), 1)
        both = self.emit(f"{gate.name}_gate_up", f"matmul({x}, {w})")
        act = self.emit(f"{gate.name}_swiglu", f"swiglu({both})")
        out = self.emit(down.name, f"matmul({act}, {self.operand(down_w)})")
        self.rows_out(f"{down.name}_view", out, m.output)

    def rows_out(self, raw: str, rows: str, output: str) -> None:
        """``rows`` [T, D] as ONNX tensor ``output``: itself in a token-major decoder (the ids were
        declared [B*S]), else viewed as the shape ONNX gives it."""
        shape = self.g.tensors[output].shape
        if self.tokens is not None and shape[:2] == self.tokens:
            self.ref[output] = rows
        else:
            self.emit(raw, f"reshape({rows}, shape = {ints(shape)})", output)

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
            self.emit(n.name, f"reshape({self.operand(x)}, shape = {ints(g.tensors[out].shape)})", out)
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
            self.weights.append((f"  weight {name} : {dtype}{ints((1, *t.shape[1:]))}", self.origin))
            self.ref[key] = name
        return self.ref[key]

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
            src = self.emit(f"{n.name}_rows", f"reshape({src}, shape = {ints((n_, c, 1, length))})")
            weight = self.fresh(w)
            self.weights.append((f"  weight {weight} : {g.tensors[w].dtype}"
                                 f"{ints((k, g.tensors[w].shape[1], 1, g.tensors[w].shape[2]))}", self.origin))
        call = (f"conv2d({src}, {weight}, stride = {ints(strides)}, padding = {ints(pads[:2])}, "
                f"groups = {int(a.get('group', 1))})")
        last = self.emit(f"{n.name}_conv", call) if len(n.inputs) > 2 or flat else None
        if len(n.inputs) > 2:
            bias = self.fresh(f"{n.inputs[2]}")
            self.weights.append((f"  weight {bias} : {g.tensors[out].dtype}{ints((1, k, 1, 1))}", self.origin))
            last = self.emit(f"{n.name}_bias" if flat else n.name, f"add({last}, {bias})", None if flat else out)
        if flat:
            self.emit(n.name, f"reshape({last}, shape = {ints(g.tensors[out].shape)})", out)
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
            self.weights.append((f"  weight {rhs} : {g.tensors[out].dtype}{ints((kk, nn))}", self.origin))
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
        self.emit(n.name, f"transpose({self.operand(n.inputs[0])}, perm = {ints(perm)})", out)
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
        self.emit(n.name, f"{kind}({self.operand(n.inputs[0])}, kernel = {ints(kern)}, "
                          f"stride = {ints(a.get('strides', [1, 1]))}, padding = {ints(pads[:2])})", out)
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
            self.emit(n.name, f"reshape({red}, shape = {ints(self.g.tensors[out].shape)})", out)
            return True
        if len(shape) != 4:
            return False
        self.emit(n.name, f"{kind}({self.operand(n.inputs[0])}, kernel = {ints(shape[2:])})", out)
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
            call = f"{pool}({self.operand(n.inputs[0])}, kernel = {ints(src.shape[2:])})"
            if int(n.attrs.get("keepdims", 1)):
                self.emit(n.name, call, out)
            else:
                pooled = self.emit(f"{n.name}_pool", call)
                self.emit(n.name, f"reshape({pooled}, shape = {ints(self.g.tensors[out].shape)})", out)
            return True
        if len(axes) != 1:
            return False
        axis = int(axes[0]) % len(src.shape)
        kind = REDUCE[n.op]
        if int(n.attrs.get("keepdims", 1)):
            red = self.emit(f"{n.name}_reduce", f'reduce({self.operand(n.inputs[0])}, kind = "{kind}", axis = {axis})')
            self.emit(n.name, f"reshape({red}, shape = {ints(self.g.tensors[out].shape)})", out)
        else:
            self.emit(n.name, f'reduce({self.operand(n.inputs[0])}, kind = "{kind}", axis = {axis})', out)
        return True

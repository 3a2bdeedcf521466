"""A training step from a forward graph: backward tasks, optimizer updates, colocation.

:func:`training_step` appends to the forward tasks (unchanged, same indices)

* for an op with weights in the GEMM or convolution classes, two gradient
  tasks: ``NAME.dgrad`` (the input gradient, ``dX = dY W^T``) and
  ``NAME.wgrad`` (the weight gradient, ``dW = X^T dY``), each with the
  forward FLOPs, so the backward pass costs twice the forward (the usual
  ``6N`` FLOPs per token of training against ``2N`` of inference: Kaplan et
  al., "Scaling Laws for Neural Language Models", arXiv:2001.08361, 2.1);
  when fusion gave the op an epilogue (bias, norm, activation, residual add),
  its gradient comes first as ``NAME.grad``, one kernel over the epilogue's
  parts with the rule below;
* for an embedding bag, one sparse ``NAME.grad``: it reads the output
  gradient and the ids and writes a gradient row per gathered row (a bag's
  gradient copied to its rows and summed over repeated ids: ``bags P D``
  adds beyond the forward's), and its ``NAME.update`` steps those rows only;
* for attention, one ``NAME.grad`` with 2.5x the forward FLOPs (five
  matrix products against two: Dao, "FlashAttention-2", arXiv:2307.08691, 3.1);
* for any other op (elementwise, norms, pooling, reductions, data movement),
  one ``NAME.grad`` with twice the forward FLOPs (``moe_dispatch``, a copy, has
  the sum of each token's routed rows' gradients instead); it reads the output
  gradient and the op's inputs and writes a gradient for each input tensor
  and weight;
* for an op with weights, ``NAME.update``: the optimizer step on its weights
  (:data:`OPTIMIZERS`: FLOPs and the state it keeps per parameter).

Each gradient task reads ``dY`` (the output gradient, from the gradient tasks
of the op's consumers) and what its formula needs: ``dgrad`` the weights,
``wgrad`` and ``grad`` the forward inputs (the activations stashed since the
forward pass: edges from their producers), ``grad`` also the op's output.
Backward tasks keep their forward op (so a device prices a GEMM gradient at
its tensor rate and with its tile quantisation, from the forward shapes),
carry ``backward = True``, and share a colocation class with their forward
task (the weights, their gradients and the optimizer state stay on one
device). The optimizer state is a weight operand of the update task, so the
peak memory (:mod:`mapper.engine.memory`) holds weights, gradients, optimizer state
and the stashed activations until their last backward use.
"""

from __future__ import annotations

from dataclasses import dataclass

from mapper.core.graph import DTYPE_BYTES, Edge, Operand, Task, TaskGraph, TensorType, retask
from mapper.core.ops import ATTENTION_OPS
from mapper.costing.efficiency import op_class
from mapper.errors import OptionsError


@dataclass(frozen=True, slots=True)
class Optimizer:
    """Per parameter: FLOPs of one step and the f32 state values it keeps."""

    flops: float
    states: int


#: SGD with momentum (``v = mu v + g; w -= lr v``: 3 FLOPs, one f32 state) and
#: Adam (Kingma & Ba, ICLR 2015, Algorithm 1: about 12 FLOPs, two f32 states
#: ``m`` and ``v``). With f16/bf16 weights an f32 master copy is a further
#: state, as in mixed-precision training (Rajbhandari et al., "ZeRO", SC'20,
#: 3.1: 2 + 2 + 12 bytes per parameter with Adam).
OPTIMIZERS = {
    "sgd": Optimizer(flops=3.0, states=1),
    "adam": Optimizer(flops=12.0, states=2),
}
#: Backward FLOPs relative to the forward pass, per op class (module docstring).
ATTENTION_BACKWARD = 2.5
OTHER_BACKWARD = 2.0


def flat_type(dtype: str, nbytes: float) -> TensorType:
    """A 1-D tensor of ``dtype`` holding ``nbytes`` (rounded up to whole elements)."""
    item = DTYPE_BYTES[dtype]
    return TensorType(dtype, (max(1, int(-(-nbytes // item))),))


def training_step(graph: TaskGraph, optimizer: str = "sgd") -> TaskGraph:
    """The training step of the forward ``graph`` (module docstring)."""
    if optimizer not in OPTIMIZERS:
        raise OptionsError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}",
                           obj="--optimizer")
    if any(t.backward for t in graph.tasks):
        raise OptionsError(f"graph {graph.name} already has backward tasks; --train takes a forward graph",
                           obj="--train")
    priced = [t.name for t in graph.tasks if t.op == "task" and t.explicit_cost]  # no op, no formula
    if priced:
        raise OptionsError(f"graph {graph.name} is not trainable: task {priced[0]!r}"
                           + (f" and {len(priced) - 1} more give" if len(priced) > 1 else " gives")
                           + " a measured cost per device, from which no backward cost follows",
                           obj="--train", hint="give such tasks their work (work { flops ... }) instead of a cost")
    opt = OPTIMIZERS[optimizer]
    tasks: list[Task] = list(graph.tasks)
    edges: dict[tuple[int, int], tuple[float, float | None, str]] = {
        (e.src, e.dst): (e.bytes, e.comm, e.tensor) for e in graph.edges}
    grad_in: dict[int, int] = {}  # forward task -> the backward task that writes its inputs' gradients
    readers: dict[int, list[int]] = {}  # forward task -> backward tasks that read its output gradient
    names = {t.name for t in graph.tasks}

    def add(task: Task) -> int:
        if task.name in names:
            raise OptionsError(f"--train: task name {task.name!r} is taken; rename the forward task",
                               obj=task.name)
        names.add(task.name)
        tasks.append(retask(task, index=len(tasks)))
        return len(tasks) - 1

    def edge(src: int, dst: int, nbytes: float, tensor: str) -> None:
        old = edges.get((src, dst))
        edges[(src, dst)] = (max(nbytes, old[0]) if old else nbytes, None, tensor or (old[2] if old else ""))

    for t in reversed(graph.topo_order):
        fwd = graph.tasks[t]
        if fwd.op == "allreduce":
            continue  # its gradient is its output's, passed to its own part (_gradient_sources)
        cls = op_class(fwd.op, fwd.span)
        out = fwd.output.nbytes if fwd.output is not None else fwd.bytes_written
        weights = [o for o in fwd.operands if o.kind == "weight"]
        acts = [o for o in fwd.operands if o.kind != "weight"]
        wbytes = float(sum(o.type.nbytes for o in weights))
        abytes = float(sum(o.type.nbytes for o in acts))
        dtype = fwd.dtype if fwd.dtype in DTYPE_BYTES else "f32"
        group = fwd.colocate or fwd.name
        base = retask(fwd, backward=True, colocate=group, memory=None, explicit_cost=())
        mine: list[int] = []
        main = fwd.parts[0] if fwd.parts else fwd
        if weights and op_class(main.op, main.span) in ("gemm", "conv"):
            epilogue = fwd.parts[1:]
            if epilogue:  # a fused epilogue (bias, norm, activation): its gradient first, one kernel
                head = epilogue[0]
                ebytes = sum(p.bytes for p in epilogue)
                eflops = sum(p.flops for p in epilogue)
                first = add(retask(base, name=f"{fwd.name}.grad", op=head.op, operands=head.operands,
                                    attrs=head.attrs, flops=OTHER_BACKWARD * eflops, bytes_read=ebytes,
                                    bytes_written=0.5 * ebytes, output=main.output,
                                    parts=tuple(_scaled(p, OTHER_BACKWARD, 1.5) for p in epilogue)))
                edge(t, first, out, fwd.name)
            mout = main.output.nbytes if main.output is not None else out
            mw = float(sum(o.type.nbytes for o in main.operands if o.kind == "weight"))
            ma = float(sum(o.type.nbytes for o in main.operands if o.kind != "weight"))
            core = retask(base, op=main.op, operands=main.operands, attrs=main.attrs, flops=main.flops, parts=())
            dgrad = add(retask(core, name=f"{fwd.name}.dgrad", bytes_read=mout + mw, bytes_written=ma,
                                output=flat_type(dtype, ma)))
            wgrad = add(retask(core, name=f"{fwd.name}.wgrad", bytes_read=mout + ma, bytes_written=mw,
                                output=flat_type(dtype, mw)))
            if epilogue:
                edge(first, dgrad, mout, tasks[first].name)
                edge(first, wgrad, mout, tasks[first].name)
                mine = [first]
            else:
                mine = [dgrad, wgrad]
            grad_in[t] = dgrad
            stash = [wgrad]
            writers = [first, wgrad] if epilogue else [wgrad]
        elif fwd.op == "embedding_bag":  # sparse: only the gathered rows get a gradient
            rows = float(sum(o.type.nbytes for o in acts))  # the ids
            grad = add(retask(base, name=f"{fwd.name}.grad", flops=(fwd.bytes_read - rows) / DTYPE_BYTES[dtype],
                               bytes_read=out + rows, bytes_written=fwd.bytes_read - rows,
                               output=flat_type(dtype, fwd.bytes_read - rows)))
            grad_in[t], mine, stash, writers = grad, [grad], [grad], [grad]
            edge(t, grad, 0.0, fwd.name)
        else:
            factor = ATTENTION_BACKWARD if cls == "attention" else OTHER_BACKWARD
            extra = _score_traffic(fwd)
            grad = add(retask(base, name=f"{fwd.name}.grad", flops=_backward_flops(fwd, factor),
                               bytes_read=out + abytes + wbytes + out + 2 * extra[0],
                               bytes_written=abytes + wbytes + 2 * extra[1],
                               output=flat_type(dtype, abytes + wbytes),
                               parts=tuple(_scaled(p, factor, 1.5) for p in fwd.parts)))
            grad_in[t], mine, stash, writers = grad, [grad], [grad], [grad]
            edge(t, grad, out, fwd.name)  # its own output (relu, softmax, norms use it)
        readers[t] = mine
        for o in acts:
            if o.kind == "task" and o.producer is not None:
                for b in stash:
                    edge(o.producer, b, o.type.nbytes, o.name)  # the stashed activation
        if weights:
            n = float(sum(o.type.numel for o in weights))  # parameters
            half = any(DTYPE_BYTES.get(o.type.dtype, 4) < 4 for o in weights)
            state = opt.states + (1 if half else 0)  # f32 master copy of f16/bf16 weights
            states = tuple(Operand("weight", f"{o.name}.{optimizer}", TensorType("f32", (o.type.numel * state,)))
                           for o in weights if state)
            touched = _touched(fwd, n)  # a sparse update steps the gathered rows only
            moved = wbytes * touched / n if n else 0.0
            # reads weights, gradients and states; writes weights and states
            upd = add(Task(0, f"{fwd.name}.update", "add", operands=(*weights, *states), output=None,
                           flops=opt.flops * touched, bytes_read=2 * moved + 4 * touched * state,
                           bytes_written=moved + 4 * touched * state, placement=fwd.placement, span=fwd.span,
                           colocate=group, backward=True))
            for source in writers:  # the tasks that write its weights' gradients
                edge(source, upd, wbytes, tasks[source].name)
    for t in range(len(graph.tasks)):
        if t not in readers:
            continue
        for v, nbytes in _gradient_sources(graph, t):
            if v in grad_in:
                for b in readers[t]:
                    edge(grad_in[v], b, nbytes, tasks[grad_in[v]].name)  # dY of t from v
    order = sorted(edges, key=lambda p: (p[1], p[0]))
    new_edges = tuple(Edge(i, s, d, *edges[(s, d)]) for i, (s, d) in enumerate(order))
    return TaskGraph(f"{graph.name}", tuple(tasks), new_edges, graph.inputs, graph.outputs)


def _backward_flops(fwd: Task, factor: float) -> float:
    """FLOPs of ``fwd``'s gradient task: ``factor`` times its forward FLOPs, except for
    ``moe_dispatch``, which copies (0 FLOPs) but whose gradient sums each token's ``K`` routed
    rows: ``T K H`` adds (the un-permute of Megatron-Core's token dispatcher, run backward)."""
    if fwd.op == "moe_dispatch" and fwd.output is not None:
        return float(fwd.output.numel)
    return factor * fwd.flops


def _touched(fwd: Task, params: float) -> float:
    """Parameters one optimizer step of ``fwd``'s weights reads and writes: all of them, except
    for an embedding bag, whose step touches the rows it gathered (at most one per id), as
    the sparse optimizers fused into TorchRec's embedding backward do (FBGEMM
    ``SplitTableBatchedEmbeddingBagsCodegen``, exact row-wise SGD and Adagrad)."""
    if fwd.op != "embedding_bag" or fwd.output is None:
        return params
    ids = next((o.type.numel for o in fwd.operands if o.kind != "weight"), 0)
    return min(params, float(ids * fwd.output.shape[-1]))


def _score_traffic(fwd: Task) -> tuple[float, float]:
    """Bytes an unfused attention's forward moves through its score matrix (read, written) beyond
    its operands and output; its backward moves each twice (the gradients of dropout, softmax
    and the two products each read and write a score-sized tensor). 0 for other ops."""
    if fwd.op not in ATTENTION_OPS or fwd.attr("fused", 1):
        return 0.0, 0.0
    out = fwd.output.nbytes if fwd.output is not None else 0.0
    return (fwd.bytes_read - sum(float(o.type.nbytes) for o in fwd.operands),
            fwd.bytes_written - float(out))


def _gradient_sources(graph: TaskGraph, t: int) -> list[tuple[int, float]]:
    """The consumers of ``t`` whose backward tasks write ``t``'s output
    gradient, with the bytes: its direct consumers, except that an
    ``allreduce`` (one rank's sum of the ranks' partial results,
    :mod:`mapper.parallel`) passes its output's gradient to its own rank's
    part alone and to no other: the backward of an all-reduce is the
    identity (Megatron-LM's ``g`` operator, Shoeybi et al., arXiv:1909.08053, 3)."""
    out: list[tuple[int, float]] = []
    for e in graph.succs[t]:
        v = graph.edges[e].dst
        task = graph.tasks[v]
        if task.op != "allreduce":
            out.append((v, graph.edges[e].bytes))
            continue
        own = task.operands[task.attr("rank", 0)]
        if own.producer == t:
            out.extend(_gradient_sources(graph, v))
    return out


def _scaled(part: Task, flops: float, nbytes: float) -> Task:
    """A fused task's part in the backward pass: its work scaled (module docstring)."""
    return retask(part, flops=part.flops * flops, bytes_read=part.bytes_read * nbytes,
                   bytes_written=part.bytes_written * nbytes, backward=True)

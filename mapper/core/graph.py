"""The task-graph IR: tensors, tasks, edges and the graph that holds them.

Everything here is frozen; collections are tuples in a stable order and tasks
and edges are referred to by their integer index. The lowerer builds a
:class:`TaskGraph`; every later stage only reads it.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from math import prod
from typing import Any

from mapper.errors import InputError, SourceSpan

#: Bytes per element of every DSL dtype.
DTYPE_BYTES: dict[str, int] = {
    "bool": 1,
    "i8": 1,
    "i32": 4,
    "i64": 8,
    "f16": 2,
    "bf16": 2,
    "f32": 4,
    "f64": 8,
    "c64": 8,
    "c128": 16,
}

#: Bytes of one CSR index (column index and row pointer), int32.
CSR_INDEX_BYTES = 4



def topological_order(succ: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    """Kahn's algorithm (A. B. Kahn, "Topological sorting of large networks", CACM 5(11), 1962),
    smallest index first (deterministic), over nodes ``0 .. n-1`` whose successors ``succ[i]``
    lists: the order of the nodes it reaches, and each node's in-degree left (above 0: on a
    cycle or after one; the order then misses it)."""
    indeg = [0] * len(succ)
    for out in succ:
        for d in out:
            indeg[d] += 1
    heap = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        i = heapq.heappop(heap)
        order.append(i)
        for d in succ[i]:
            indeg[d] -= 1
            if indeg[d] == 0:
                heapq.heappush(heap, d)
    return order, indeg

def weak_components(n: int, edges: Sequence[tuple[int, int]]) -> list[int]:
    """Each of nodes ``0 .. n-1``'s weakly connected component under ``edges`` (pairs), numbered
    by their smallest node in increasing order (union-find)."""
    parent = list(range(n))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    number: dict[int, int] = {}
    return [number.setdefault(root(x), len(number)) for x in range(n)]


@dataclass(frozen=True, slots=True)
class TensorType:
    """A typed tensor: dtype, shape, and layout (``dense`` or ``csr`` with ``nnz``)."""

    dtype: str
    shape: tuple[int, ...]
    layout: str = "dense"
    nnz: int | None = None

    @property
    def numel(self) -> int:
        return prod(self.shape) if self.shape else 1

    @property
    def nbytes(self) -> int:
        """Storage size. CSR: values + column indices + row pointers (int32)."""
        item = DTYPE_BYTES[self.dtype]
        if self.layout == "csr":
            nnz = self.nnz or 0
            rows = self.shape[0] if self.shape else 1
            return nnz * (item + CSR_INDEX_BYTES) + (rows + 1) * CSR_INDEX_BYTES
        return self.numel * item

    def __str__(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        text = f"{self.dtype}[{dims}]"
        if self.layout == "csr":
            text += f" csr(nnz={self.nnz})"
        return text


@dataclass(frozen=True, slots=True)
class Shard:
    """Where a split plan's operand comes from: a slice of graph input or
    weight ``source`` (of type ``full``).

    Axis ``axis`` is read as ``groups`` equal blocks (3 for a fused Q|K|V
    projection), each cut into ``parts`` equal chunks; the shard is chunk
    ``index`` of every block, in block order (:mod:`mapper.parallel`).
    """

    source: str
    full: TensorType
    axis: int
    index: int
    parts: int
    groups: int = 1


@dataclass(frozen=True, slots=True)
class Operand:
    """One input of a task: another task's output, a graph input, or a weight."""

    kind: str  # "task" | "input" | "weight"
    name: str  # producing task name, input name, or weight name
    type: TensorType
    producer: int | None = None  # task index when kind == "task"
    shard: Shard | None = None  # a slice of another input or weight (split plans)


@dataclass(frozen=True, slots=True)
class Placement:
    """Placement constraints: ``allow`` (any of, empty = anywhere) and ``deny``.

    Each entry is a device name (``gpu0``) or a device kind (``gpu``).
    """

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()

    def permits(self, device_name: str, device_kind: str) -> bool:
        if device_name in self.deny or device_kind in self.deny:
            return False
        if not self.allow:
            return True
        return device_name in self.allow or device_kind in self.allow

    def __str__(self) -> str:
        return " ".join([f"@{a}" for a in self.allow] + [f"@!{d}" for d in self.deny])


def attr_of(attrs: tuple[tuple[str, Any], ...], key: str, default: Any = None) -> Any:
    """The value of ``key`` among ``(key, value)`` pairs, else ``default``."""
    for k, v in attrs:
        if k == key:
            return v
    return default


@dataclass(frozen=True, slots=True)
class SourceNode:
    """The model node a task was imported from (ONNX): its name, op type, attributes
    (sorted; values as ints, floats, strings or tuples of them), the dtypes of its
    inputs and first output, and which of its inputs the model file computes at run
    time rather than holds as initializers (even where mapper folds them into
    constants), its inputs' shapes and the values of its small constant inputs, so a
    device's op-support list can decide per node (mapper.platform.support)."""

    name: str
    op: str
    attrs: tuple[tuple[str, Any], ...] = ()
    inputs: tuple[str, ...] = ()  # dtypes of the node's inputs, in order
    dtype: str = "f32"  # dtype of the node's first output
    # (ONNX input position, what computes it: "ConstantOfShape node", "graph input", ...) for each
    # input that is no initializer (nor Constant node) in the model file
    computed: tuple[tuple[int, str], ...] = ()
    shapes: tuple[tuple[int, ...], ...] = ()  # shapes of the node's inputs, as ``inputs``; (): not known
    values: tuple[tuple[int, tuple[float, ...]], ...] = ()  # (ONNX input position, elements) of small constants

    def attr(self, key: str, default: Any = None) -> Any:
        return attr_of(self.attrs, key, default)


@dataclass(frozen=True, slots=True)
class Task:
    """One kernel call (or one explicit-cost task, ``op == "task"``)."""

    index: int
    name: str
    op: str
    operands: tuple[Operand, ...] = ()
    attrs: tuple[tuple[str, Any], ...] = ()  # sorted by key
    output: TensorType | None = None
    flops: float = 0.0
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    parallel: float = 1.0  # parallelizable fraction (Amdahl)
    streamable: int = 0  # >0: may stream on an FPGA, its data moving in this many chunks
    placement: Placement = Placement()
    explicit_cost: tuple[tuple[str, float], ...] = ()  # (device name, seconds)
    span: SourceSpan | None = None
    parts: tuple[Task, ...] = ()  # a fused task's original tasks, in execution order (mapper.costing.fusion)
    memory: float | None = None  # bytes resident on its device (``memory`` annotation); None: its data
    colocate: str = ""  # colocation class: every task of the class runs on one device
    backward: bool = False  # part of a training step's backward pass
    precision: str = ""  # a GEMM's input format when it runs below its dtype (--precision: fp8 ...); "" its dtype
    source: tuple[SourceNode, ...] = ()  # the model nodes it was imported from (ONNX), in order
    deadline: float | None = None  # seconds from the graph's start by which it must end (``deadline``)

    @property
    def sources(self) -> tuple[SourceNode, ...]:
        """Its model nodes, a fused task's those of its parts."""
        return self.source or tuple(s for p in self.parts for s in p.sources)

    @property
    def dtype(self) -> str:
        return self.output.dtype if self.output is not None else "f32"

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written

    def attr(self, key: str, default: Any = None) -> Any:
        return attr_of(self.attrs, key, default)


_TASK_FIELDS = tuple(f.name for f in fields(Task))
_TASK_FIELD_SET = frozenset(_TASK_FIELDS)


def retask(task: Task, **changes: Any) -> Task:
    """``dataclasses.replace(task, **changes)``, the same Task, without ``replace``'s walk over each
    field's metadata per call: split plans, fusion and training steps copy thousands of tasks."""
    unknown = changes.keys() - _TASK_FIELD_SET
    if unknown:
        raise TypeError(f"Task has no field {sorted(unknown)[0]!r}")
    new = object.__new__(Task)
    for name in _TASK_FIELDS:
        object.__setattr__(new, name, changes[name] if name in changes else getattr(task, name))
    return new


@dataclass(frozen=True, slots=True)
class Edge:
    """Data passed from task ``src`` to task ``dst``.

    ``comm`` (seconds), when given, is the transfer time between different
    devices and wins over ``bytes``-based timing.
    """

    index: int
    src: int
    dst: int
    bytes: float
    comm: float | None = None
    tensor: str = ""


@dataclass(frozen=True, slots=True, repr=False)
class TaskGraph:
    """A DAG of tasks. Construction checks names, edge ends and acyclicity."""

    name: str
    tasks: tuple[Task, ...]
    edges: tuple[Edge, ...] = ()
    inputs: tuple[tuple[str, TensorType], ...] = ()
    outputs: tuple[str, ...] = ()
    preds: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)
    succs: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)
    topo_order: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = len(self.tasks)
        names: dict[str, int] = {}
        for i, t in enumerate(self.tasks):
            if t.index != i:
                raise InputError(f"task {t.name!r} has index {t.index}, expected {i}", obj=self.name)
            if t.name in names:
                raise InputError(f"duplicate task name {t.name!r}", span=t.span, obj=self.name)
            names[t.name] = i
        preds: list[list[int]] = [[] for _ in range(n)]
        succs: list[list[int]] = [[] for _ in range(n)]
        for j, e in enumerate(self.edges):
            if e.index != j:
                raise InputError(f"edge {j} has index {e.index}", obj=self.name)
            if not (0 <= e.src < n and 0 <= e.dst < n):
                raise InputError(f"edge {j} refers to a missing task", obj=self.name)
            if e.src == e.dst:
                raise InputError(f"task {self.tasks[e.src].name!r} depends on itself", obj=self.name)
            preds[e.dst].append(j)
            succs[e.src].append(j)
        object.__setattr__(self, "preds", tuple(tuple(p) for p in preds))
        object.__setattr__(self, "succs", tuple(tuple(s) for s in succs))
        object.__setattr__(self, "topo_order", self._toposort())

    def _toposort(self) -> tuple[int, ...]:
        """:func:`topological_order` of the tasks."""
        order, indeg = topological_order([[self.edges[e].dst for e in s] for s in self.succs])
        if len(order) != len(self.tasks):
            stuck = [self.tasks[i].name for i, d in enumerate(indeg) if d > 0]
            raise InputError(
                "the graph has a cycle through " + ", ".join(stuck[:8]) + (" ..." if len(stuck) > 8 else ""),
                obj=self.name,
            )
        return tuple(order)

    # -- queries -----------------------------------------------------------
    def task_index(self, name: str) -> int:
        for t in self.tasks:
            if t.name == name:
                return t.index
        raise KeyError(name)

    def pred_tasks(self, i: int) -> tuple[int, ...]:
        return tuple(self.edges[e].src for e in self.preds[i])

    def succ_tasks(self, i: int) -> tuple[int, ...]:
        return tuple(self.edges[e].dst for e in self.succs[i])

    @property
    def total_flops(self) -> float:
        return float(sum(t.flops for t in self.tasks))

    @property
    def total_bytes(self) -> float:
        return float(sum(t.bytes for t in self.tasks))

    def to_networkx(self):
        """A ``networkx.DiGraph`` view: nodes are task indices with attributes."""
        import networkx as nx

        g = nx.DiGraph(name=self.name)
        for t in self.tasks:
            g.add_node(t.index, name=t.name, op=t.op, flops=t.flops, bytes=t.bytes)
        for e in self.edges:
            g.add_edge(e.src, e.dst, index=e.index, bytes=e.bytes, comm=e.comm)
        return g

    def __repr__(self) -> str:
        return f"TaskGraph({self.name!r}, {len(self.tasks)} tasks, {len(self.edges)} edges)"

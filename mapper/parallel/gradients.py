"""The collectives of a split training step (:mod:`mapper.parallel`).

:func:`synchronise` takes the training step (:func:`mapper.costing.training.training_step`)
of a split forward graph and adds what the split makes necessary:

* **gradient accumulation**: the micro-batches of a pipeline stage update
  their weights once; the optimizer steps of one weight on one device merge
  into one, which waits for every micro-batch's gradient;
* **data-parallel gradient all-reduce**: where replicas on several devices
  hold a weight, its gradients are summed by an all-reduce before the update,
  in buckets of ``plan.bucket_mib`` MiB filled in the order the backward pass
  finishes them (Li et al., "PyTorch Distributed: Experiences on
  Accelerating Data Parallel Training", VLDB 2020, 3.2.3: 25 MB by default),
  so the all-reduce of late layers overlaps the backward pass of early ones;
* **tensor-parallel input gradients**: a column-split GEMM's input gradient
  is partial on every rank; an all-reduce sums it (Megatron-LM's ``f``
  operator, Shoeybi et al., arXiv:1909.08053, section 3; the ``g``
  operator's backward is the identity, :func:`mapper.costing.training._gradient_sources`).

Each collective is one ``allreduce`` task per participant, pinned to it,
with the collective's time (:mod:`mapper.parallel.collectives`) as its cost.
"""

from __future__ import annotations

from mapper.core.graph import DTYPE_BYTES, Edge, Operand, Placement, Task, TaskGraph, retask
from mapper.core.ops import infer
from mapper.costing.training import flat_type
from mapper.parallel.rewrite import Split, _Builder
from mapper.platform.devices import Platform

MIB = float(2**20)


def _device(task: Task) -> str:
    return task.placement.allow[0]


def _merge_updates(graph: TaskGraph) -> tuple[TaskGraph, list[list[int]]]:
    """One optimizer step per weight and device; the groups of updates of one weight."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for t in graph.tasks:
        if t.backward and t.name.endswith(".update") and t.placement.allow:
            groups.setdefault(tuple(o.name for o in t.operands), []).append(t.index)
    keep: dict[int, int] = {}  # removed update -> the update it merges into
    for members in groups.values():
        first: dict[str, int] = {}
        for u in members:
            dev = _device(graph.tasks[u])
            if dev in first:
                keep[u] = first[dev]
            else:
                first[dev] = u
    new_index: dict[int, int] = {}
    tasks: list[Task] = []
    for t in graph.tasks:
        if t.index in keep:
            continue
        new_index[t.index] = len(tasks)
        tasks.append(t)
    edges: dict[tuple[int, int], tuple[float, float | None, str]] = {}
    for e in graph.edges:
        dst = keep.get(e.dst, e.dst)
        key = (new_index[e.src], new_index[dst])
        old = edges.get(key)
        edges[key] = (max(e.bytes, old[0]) if old else e.bytes, e.comm, e.tensor)
    # updates follow every forward task, so only backward tasks move; their
    # operands name forward producers (mapper.costing.training), which keep their indices
    tasks = [t if t.index == i else retask(t, index=i) for i, t in enumerate(tasks)]
    order = sorted(edges, key=lambda p: (p[1], p[0]))
    out = TaskGraph(graph.name, tuple(tasks), tuple(Edge(i, s, d, *edges[(s, d)]) for i, (s, d) in enumerate(order)),
                    graph.inputs, graph.outputs)
    merged = [sorted({new_index[keep.get(u, u)] for u in members}) for members in groups.values()]
    return out, [m for m in merged if len(m) > 1]


def synchronise(graph: TaskGraph, split: Split, platform: Platform, optimizer: str) -> TaskGraph:
    """The training step ``graph`` of ``split`` with its collectives (module docstring)."""
    if split.plan.trivial:
        return graph
    graph, groups = _merge_updates(graph)
    b = _Builder(graph, split.plan, platform)
    b.tasks = list(graph.tasks)
    for e in graph.edges:
        b.edges[(e.src, e.dst)] = (e.bytes, e.comm, e.tensor)
    by_name = {t.name: t.index for t in graph.tasks}
    _tensor_gradients(b, split, by_name)
    _data_gradients(b, graph, groups, split.plan.bucket_mib * MIB, optimizer)
    return b.graph(graph)


def _allreduce_tasks(b: _Builder, name: str, sources: list[int], nbytes: float, devices: tuple[str, ...],
                     dtype: str) -> list[int]:
    """One ``allreduce`` per device of ``devices`` over the gradients written by ``sources``."""
    seconds = b.collective("allreduce", nbytes, devices)
    ty = flat_type(dtype if dtype in DTYPE_BYTES else "f32", nbytes)
    last: dict[str, int] = {}
    for s in sources:
        last[_device(b.tasks[s])] = s
    parts = [Operand("task", b.tasks[last[d]].name, ty, last[d]) for d in devices]
    out = []
    for r, dev in enumerate(devices):
        info = infer("allreduce", [p.type for p in parts], {"rank": r})
        idx = b.add(Task(0, f"{name}.allreduce.{dev}", "allreduce", tuple(parts), info.attrs, info.output,
                         info.flops, info.bytes_read, info.bytes_written, placement=Placement(allow=(dev,)),
                         explicit_cost=((dev, seconds),), backward=True))
        for s in sources:
            b.edge(s, idx, nbytes / len(devices), 0.0)
        out.append(idx)
    return out


def _tensor_gradients(b: _Builder, split: Split, by_name: dict[str, int]) -> None:
    if not split.columns:  # no tensor-parallel column (a data or pipeline plan): nothing to reduce
        return
    out_edges: dict[int, list[int]] = {}
    for src, dst in b.edges:
        out_edges.setdefault(src, []).append(dst)
    forward = {t.name: t for t in b.tasks if not t.backward}
    forward.update({t.parts[0].name: t for t in b.tasks if t.parts and not t.backward})  # fused: by its first op
    for col in split.columns:
        fwd = [forward.get(p) for p in col.pieces]
        if any(f is None for f in fwd):
            continue
        dgrads = [by_name.get(f"{f.name}.dgrad") for f in fwd if f is not None]
        if any(d is None for d in dgrads):
            continue
        ds = [d for d in dgrads if d is not None]
        outs = {d: [(dst, b.edges[(d, dst)]) for dst in out_edges.get(d, [])] for d in ds}
        ars = _allreduce_tasks(b, b.tasks[ds[0]].name, ds, col.nbytes, col.devices, b.tasks[ds[0]].dtype)
        for d, ar in zip(ds, ars):
            for dst, (nbytes, comm, _tensor) in outs[d]:
                del b.edges[(d, dst)]
                b.edge(ar, dst, nbytes, comm)


def _data_gradients(b: _Builder, graph: TaskGraph, groups: list[list[int]], cap: float, optimizer: str) -> None:
    writers = {u: sorted(e.src for e in (graph.edges[i] for i in graph.preds[u])) for g in groups for u in g}
    by_devices: dict[tuple[str, ...], list[list[int]]] = {}
    for g in groups:
        devs = tuple(_device(graph.tasks[u]) for u in g)
        by_devices.setdefault(devs, []).append(g)
    for devs, gs in by_devices.items():
        gs.sort(key=lambda g: min(min(writers[u], default=u) for u in g))
        bucket: list[list[int]] = []
        size = 0.0
        for i, g in enumerate(gs):
            bucket.append(g)
            size += _gradient_bytes(graph.tasks[g[0]], optimizer)
            if size >= cap or i == len(gs) - 1:
                _bucket(b, graph, bucket, size, devs, writers)
                bucket, size = [], 0.0


def _gradient_bytes(update: Task, optimizer: str) -> float:
    return float(sum(o.type.nbytes for o in update.operands if not o.name.endswith(f".{optimizer}")))


def _bucket(b: _Builder, graph: TaskGraph, bucket: list[list[int]], nbytes: float, devs: tuple[str, ...],
            writers: dict[int, list[int]]) -> None:
    sources = sorted({w for g in bucket for u in g for w in writers[u]})
    first = graph.tasks[bucket[0][0]]
    name = first.name.rsplit(".update", 1)[0] + (f"+{len(bucket) - 1}" if len(bucket) > 1 else "")
    dtype = next((o.type.dtype for o in first.operands), "f32")
    ars = _allreduce_tasks(b, f"{name}.grads", sources, nbytes, devs, dtype)
    for ar, dev in zip(ars, devs):
        for g in bucket:
            for u in g:
                if _device(graph.tasks[u]) == dev:
                    b.edge(ar, u, 0.0)

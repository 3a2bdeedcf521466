"""``--parallel hybrid``: model-parallel embedding tables, data-parallel dense layers (DLRM).

The dense part (every task but the ``embedding_bag`` lookups) runs data-parallel: each of
the ``G`` GPUs runs the model lowered at ``BATCH / G`` samples, and an all-reduce of the
dense gradients precedes the optimizer steps (Naumov et al., arXiv:1906.00091, 3: "DLRM
uses model parallelism for the embeddings and data parallelism for the MLPs"). Each table
is placed by :mod:`mapper.parallel.embedding_solve` (the exact plan, never worse than
TorchRec's greedy one); its shards' forward, gradient and update tasks run on their GPUs, a
forward all-to-all brings each GPU its samples' pooled rows and a backward one returns their
gradients (:func:`~mapper.parallel.collectives.alltoallv`); a data-parallel table keeps
its replica's lookups and all-reduces its gradient. The plan is a task graph, mapped and
validated like any other; its makespan is the step time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from mapper.core.graph import DTYPE_BYTES, Task, TaskGraph
from mapper.costing.cost import route_tables
from mapper.costing.efficiency import op_class
from mapper.costing.latency import estimate
from mapper.costing.training import training_step
from mapper.errors import InfeasibleError, OptionsError
from mapper.parallel.collectives import alltoallv, collective, group
from mapper.parallel.embedding_plan import Fabric, Option, Table, host_hit, options, shard_tasks
from mapper.parallel.embedding_solve import Solved, exact_plan, greedy_plan
from mapper.parallel.pinned import graph_of, pinned
from mapper.platform.devices import Platform

GIB = float(2**30)


@dataclass(frozen=True, slots=True)
class HybridChoice:
    """The plan kept: tables' shardings, the greedy plan's rating beside the chosen one's."""

    graph: TaskGraph
    tables: tuple[Table, ...]
    plan: Solved
    greedy: Solved
    gpus: tuple[str, ...]
    batch: int
    alltoall: float
    dense_allreduce: float

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": "hybrid", "gpus": list(self.gpus), "batch": self.batch,
            "per_gpu_batch": self.batch // len(self.gpus),
            "embedding": [{"table": t.name, "sharding": o.sharding, "devices": [self.gpus[d] for d in o.devices],
                           "tier": o.tier} for t, o in zip(self.tables, self.plan.plan or ())],
            "embedding_load": self.plan.rating, "embedding_bound": self.plan.bound, "status": self.plan.status,
            "greedy_load": self.greedy.rating if self.greedy.plan is not None else None,
            "alltoall": self.alltoall, "dense_allreduce": self.dense_allreduce,
        }

    def notes(self) -> tuple[str, ...]:
        kinds: dict[str, int] = {}
        for o in self.plan.plan or ():
            kinds[f"{o.sharding}/{o.tier}"] = kinds.get(f"{o.sharding}/{o.tier}", 0) + 1
        greedy = f"{self.greedy.rating * 1e3:.4g} ms" if self.greedy.plan is not None else "no plan"
        return (f"parallel hybrid: {len(self.tables)} tables ("
                + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
                + f") over {len(self.gpus)} GPUs, largest embedding load {self.plan.rating * 1e3:.4g} ms "
                f"({self.plan.status}), TorchRec greedy {greedy}; dense part data-parallel at "
                f"{self.batch // len(self.gpus)} samples per GPU",)

    def plan_facts(self) -> tuple[tuple[str, str], ...]:
        return (("layout", "hybrid"), ("gpus", str(len(self.gpus))), ("batch", str(self.batch)))


def tables_of(graph: TaskGraph) -> tuple[Table, ...]:
    """The graph's embedding bags as planner tables."""
    out = []
    for t in graph.tasks:
        if t.op == "embedding_bag" and not t.backward and t.output is not None:
            w = t.operands[1].type
            out.append(Table(t.name, w.shape[0], w.shape[1], int(t.attr("pooling", 1)), t.output.shape[0],
                             w.dtype, float(t.attr("cache_hit", 1.0))))
    return tuple(out)


def plan_hybrid(graph: TaskGraph, platform: Platform, optimizer: str,
                relower: Callable[[int], TaskGraph], prepare: Callable[[TaskGraph], TaskGraph]) -> HybridChoice:
    """Plan ``graph`` (forward, global batch) on ``platform``'s GPUs (module docstring)."""
    tables = tables_of(graph)
    if not tables:
        raise OptionsError("--parallel hybrid shards embedding tables; the graph has no embedding_bag",
                           obj="--parallel")
    gpus = [i for i, d in enumerate(platform.devices) if d.kind == "gpu"]
    if not gpus:
        raise OptionsError(f"--parallel hybrid needs GPUs; platform {platform.name} has none", obj="--parallel")
    g = len(gpus)
    batch = tables[0].bags
    if batch % g:
        raise OptionsError(f"--parallel hybrid: the batch {batch} must divide among the {g} GPUs", obj="BATCH")
    rep = training_step(prepare(relower(batch // g)), optimizer)
    hosts = [i for i, d in enumerate(platform.devices) if d.kind == "cpu"]
    fabric = fabric_of(platform)
    names = {t.name for t in tables}
    family = names | {f"{n}.grad" for n in names} | {f"{n}.update" for n in names}
    reserve = _dense_bytes(rep, family)
    caps = [_memory(platform, i) - reserve for i in gpus]
    host_cap = _memory(platform, hosts[0]) if hosts else 0.0
    devs = [platform.devices[i] for i in gpus]
    choices = [options(t, devs, fabric, optimizer) for t in tables]
    for t, opts in zip(tables, choices):
        if not any(all(m <= c for m, c in zip(o.memory, caps)) and o.host <= host_cap for o in opts):
            raise InfeasibleError(
                f"embedding table {t.name} ({t.rows} x {t.dim} {t.dtype}, {t.nbytes / GIB:.4g} GiB with no "
                f"optimizer state) fits no GPU ({min(caps) / GIB:.4g} GiB free beside the dense part) in any "
                f"sharding, nor the host memory ({host_cap / GIB:.4g} GiB)", obj=t.name)
    greedy = greedy_plan(choices, caps, host_cap, g)
    solved = exact_plan(choices, caps, host_cap, g, greedy)
    if solved.plan is None:
        raise InfeasibleError(f"the {len(tables)} embedding tables do not fit the {g} GPUs' memory together",
                              obj="--parallel hybrid")
    names_g = tuple(platform.devices[i].name for i in gpus)
    built = _build(rep, family, tables, solved.plan, platform, gpus, fabric, optimizer)
    return HybridChoice(built[0], tables, solved, greedy, names_g, batch, built[1], built[2])


def worst_route(platform: Platform) -> tuple[float, float]:
    """The worst latency and seconds per byte between two GPUs of ``platform``."""
    lat, spb, _ = route_tables(platform)
    gpus = [i for i, d in enumerate(platform.devices) if d.kind == "gpu"]
    pairs = [(a, b) for a in gpus for b in gpus if a != b]
    return max((lat[a][b] for a, b in pairs), default=0.0), max((spb[a][b] for a, b in pairs), default=0.0)


def fabric_of(platform: Platform) -> Fabric:
    """The planner's exchange: the worst seconds per byte between two GPUs of ``platform`` (a
    rank's port, as TorchRec's estimator charges it), and from a GPU to its nearest host
    (``inf`` without one: no host tier)."""
    _, spb, _ = route_tables(platform)
    gpus = [i for i, d in enumerate(platform.devices) if d.kind == "gpu"]
    hosts = [i for i, d in enumerate(platform.devices) if d.kind == "cpu"]
    return Fabric(worst_route(platform)[1],
                  max((min((max(spb[a][h], spb[h][a]) for h in hosts), default=float("inf")) for a in gpus),
                      default=float("inf")))


def _memory(platform: Platform, index: int) -> float:
    """A device's memory in bytes (unlimited when its platform gives none)."""
    gib = platform.devices[index].memory_gib
    return gib * GIB if gib is not None else float("inf")


def _dense_bytes(rep: TaskGraph, family: set[str]) -> float:
    """One replica's memory beside the tables: dense weights with gradients and optimizer
    state (the update tasks' operands), and every forward output (stashed activations)."""
    weights: dict[str, float] = {}
    acts = 0.0
    for t in rep.tasks:
        if t.name in family:
            continue
        for o in t.operands:
            if o.kind == "weight":
                weights[o.name] = float(o.type.nbytes)
        if not t.backward and t.output is not None:
            acts += t.output.nbytes
    return 2 * sum(weights.values()) + acts


def _build(rep: TaskGraph, family: set[str], tables: tuple[Table, ...], plan: tuple[Option, ...],
           platform: Platform, gpus: list[int], fabric: Fabric, optimizer: str) -> tuple[TaskGraph, float, float]:
    """The step's task graph: replicas, shards, all-to-alls and all-reduces (module docstring)."""
    g = len(gpus)
    names = [platform.devices[i].name for i in gpus]
    tasks: list[Task] = []
    edges: dict[tuple[int, int], tuple[float, float | None, str]] = {}
    by_name = {t.name: t for t in rep.tasks}
    local: list[dict[int, int]] = []  # per GPU: replica task index -> new index

    def add(task: Task, dev: str, cost: float | None = None) -> int:
        tasks.append(pinned(task, len(tasks), dev, cost))
        return len(tasks) - 1

    def edge(src: int, dst: int, nbytes: float = 0.0, comm: float | None = 0.0, tensor: str = "") -> None:
        edges[(src, dst)] = (nbytes, comm, tensor)

    dp = {t.name for t, o in zip(tables, plan) if o.sharding == "data_parallel"}
    keep = lambda name: name not in family or name.split(".")[0] in dp  # noqa: E731
    for dev in names:
        m = {t.index: add(t, dev) for t in rep.tasks if keep(t.name)}
        for e in rep.edges:
            if e.src in m and e.dst in m:
                edge(m[e.src], m[e.dst], e.bytes, e.comm, e.tensor)
        local.append(m)
    item = {t.name: DTYPE_BYTES[t.dtype] for t in tables}
    blocks = [[0.0] * g for _ in range(g)]  # bytes of pooled rows from GPU i to GPU j
    fwd_src: list[int] = []
    bwd_dst: list[int] = []
    for t, o in zip(tables, plan):
        if o.sharding == "data_parallel":
            continue
        for k, s in enumerate(o.shards):
            dev = names[s.device]
            fwd, grad, upd = shard_tasks(t, s, optimizer)
            extra = 0.0
            if o.tier == "host":
                extra = (1.0 - host_hit(t)) * float(s.ids) * s.cols * item[t.name] * fabric.host_beta
            dv = platform.devices[gpus[s.device]]
            costs = [estimate(x, op_class(x.op, x.span), dv).time + extra * w if o.tier == "host" else None
                     for x, w in ((fwd, 1.0), (grad, 0.0), (upd, 2.0))]
            label = f"{o.sharding}{k}" if len(o.shards) > 1 else o.sharding
            ids = [add(replace(x, name=x.name.replace(t.name, f"{t.name}.{label}", 1)), dev, c)
                   for x, c in zip((fwd, grad, upd), costs)]
            edge(ids[0], ids[1])
            edge(ids[1], ids[2])
            fwd_src.append(ids[0])
            bwd_dst.append(ids[1])
            out = float(s.bags) * s.cols * item[t.name]
            for r in range(g):
                if r != s.device:
                    blocks[s.device][r] += out / g
    net, per_node = group(platform, names)
    a2a = alltoallv(net, blocks, per_node)[0]
    for r, dev in enumerate(names):
        m = local[r]
        consumers = {e.dst for e in rep.edges if rep.tasks[e.src].name in family and e.dst in m
                     and not rep.tasks[e.src].backward}
        producers = {e.src for e in rep.edges if rep.tasks[e.dst].name in family and e.src in m
                     and rep.tasks[e.dst].backward}
        fa = add(Task(0, "alltoall.forward", "task"), dev, a2a)
        ba = add(Task(0, "alltoall.backward", "task", backward=True), dev, a2a)
        for src in fwd_src:
            edge(src, fa)
        for c in consumers:
            edge(fa, m[c])
        for p in producers:
            edge(m[p], ba)
        for d in bwd_dst:
            edge(ba, d)
    dense = 0.0
    for u in rep.tasks:
        if u.name.endswith(".update") and u.name not in family:
            dense += sum(float(o.type.nbytes) for o in u.operands if o.kind == "weight"
                         and not o.name.endswith(f".{optimizer}"))
    ring = collective(net, "allreduce", dense, len(names), per_node)[0]
    _allreduce(rep, local, names, "allreduce.dense",
               [u.index for u in rep.tasks if u.name.endswith(".update") and u.name not in family], ring,
               add, edge)
    for t in tables:
        if t.name in dp:
            seconds = collective(net, "allreduce", t.nbytes, len(names), per_node)[0]
            _allreduce(rep, local, names, f"allreduce.{t.name}", [by_name[f"{t.name}.update"].index], seconds,
                       add, edge)
    return graph_of(f"{rep.name}.hybrid", tasks, edges), a2a, ring


def _allreduce(rep: TaskGraph, local: list[dict[int, int]], names: list[str], label: str, updates: list[int],
               seconds: float, add: Callable[..., int], edge: Callable[..., None]) -> None:
    """An all-reduce task per GPU between every replica's writers of ``updates``' gradients and
    its own replica's ``updates``."""
    writers = sorted({e.src for u in updates for e in (rep.edges[i] for i in rep.preds[u])})
    for r, dev in enumerate(names):
        ar = add(Task(0, label, "task", backward=True), dev, seconds)
        for m in local:
            for w in writers:
                if w in m:
                    edge(m[w], ar)
        for u in updates:
            if u in local[r]:
                edge(ar, local[r][u])

"""Embedding-table sharding: options per table, their cost, TorchRec's greedy plan and an exact one.

A table (an ``embedding_bag`` task: rows ``V``, width ``D``, ``bags`` samples of
``P`` ids) is placed by one of the sharding types of TorchRec's planner
(``torchrec/distributed/planner``; Ivchenko et al., "TorchRec", RecSys 2022):

* ``table_wise`` on one GPU, in HBM or in host memory behind an HBM cache
  (tier ``host``: UVM caching; the cache holds :data:`CACHE_LOAD_FACTOR` of
  the rows, which with uniform ids serve that share of the lookups, or the
  task's ``cache_hit``; misses cross the GPU's host route);
* ``row_wise`` over every GPU (``V/G`` rows each; each shard pools its rows'
  share of every bag, a partial sum of ``bags x D`` summed by a reduce-scatter);
* ``column_wise`` over every GPU (``D/G`` columns each, all lookups);
* ``data_parallel``: a replica per GPU, its own samples' lookups, and an
  all-reduce of the whole table's gradient.

Each option's load on each GPU is its shards' forward, backward and
optimizer time (:func:`mapper.costing.latency.estimate` on the tasks that
:func:`mapper.costing.training.training_step` makes of the shard: one source
of truth with the task graph) plus the seconds its exchange keeps the GPU's
port busy (its bytes at the worst route's seconds per byte, as TorchRec's
estimator charges a shard's comms; the all-reduce's ring volume ``2 (G-1)/G``
for a replicated table). Its memory is the shard's rows with their optimizer state.
The plan minimises the largest GPU load under
every GPU's and the host's memory: :func:`exact_plan` solves it as a MILP
(:mod:`mapper.mapping.exact.solver`), started from and never worse than
:func:`greedy_plan`, TorchRec's ``GreedyProposer`` with its
``GreedyPerfPartitioner`` (heaviest tables first, each on the least loaded
GPU that holds it), both rated as TorchRec's ``NoopPerfModel`` rates a plan:
its largest GPU load.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from mapper.core.graph import DTYPE_BYTES, Operand, Task, TaskGraph, TensorType
from mapper.core.ops import infer
from mapper.costing.efficiency import op_class
from mapper.costing.latency import estimate
from mapper.costing.training import OPTIMIZERS, training_step
from mapper.platform.devices import Device

#: Share of a host-tier table's rows its HBM cache holds (the default ``cache_load_factor`` of
#: FBGEMM's ``SplitTableBatchedEmbeddingBagsCodegen``, the kernel behind TorchRec's UVM caching).
CACHE_LOAD_FACTOR = 0.2
SHARDINGS = ("table_wise", "row_wise", "column_wise", "data_parallel")


@dataclass(frozen=True, slots=True)
class Table:
    """One embedding table as the planner sees it."""

    name: str  # the embedding_bag task's name
    rows: int
    dim: int
    pooling: int
    bags: int
    dtype: str = "f32"
    cache_hit: float = 1.0  # < 1: the task asks for this hit rate in the host tier

    @property
    def nbytes(self) -> float:
        return float(self.rows) * self.dim * DTYPE_BYTES[self.dtype]


@dataclass(frozen=True, slots=True)
class Shard:
    """A piece of a table on one GPU: its rows and columns, and the lookups (ids) it serves."""

    device: int  # index among the GPUs
    rows: int
    cols: int
    ids: int
    bags: int


@dataclass(frozen=True, slots=True)
class Option:
    """A sharding of one table: its shards, its load and memory per GPU, its host bytes."""

    sharding: str
    tier: str
    shards: tuple[Shard, ...]
    load: tuple[float, ...]  # seconds per GPU
    memory: tuple[float, ...]  # bytes per GPU
    host: float  # bytes in host memory

    @property
    def devices(self) -> tuple[int, ...]:
        return tuple(s.device for s in self.shards)

    @property
    def perf(self) -> float:
        """TorchRec's ``ShardingOption`` perf: the sum of its shards' costs."""
        return sum(self.load)


@dataclass(frozen=True, slots=True)
class Fabric:
    """The GPUs' exchange: the worst seconds per byte between two GPUs, and to the host."""

    beta: float
    host_beta: float


def _shard_task(table: Table, shard: Shard) -> Task:
    """The shard's lookups as one embedding bag: its ids in bags of their mean count (a row-wise
    shard's ``P / G`` per bag, rounded down, at least 1; its ids rounded up to whole bags)."""
    pooling = max(1, shard.ids // max(1, shard.bags))
    ids = TensorType("i64", (-(-shard.ids // pooling) * pooling,))
    weight = TensorType(table.dtype, (shard.rows, shard.cols))
    info = infer("embedding_bag", [ids, weight], {"pooling": pooling})
    return Task(0, table.name, "embedding_bag", (Operand("input", f"{table.name}.ids", ids),
                                                   Operand("weight", f"{table.name}.w", weight)),
                info.attrs, info.output, info.flops, info.bytes_read, info.bytes_written)


def shard_tasks(table: Table, shard: Shard, optimizer: str) -> tuple[Task, ...]:
    """The shard's forward, gradient and optimizer tasks (unplaced)."""
    fwd = _shard_task(table, shard)
    return training_step(TaskGraph(table.name, (fwd,), (), (), ()), optimizer).tasks


def shard_time(table: Table, shard: Shard, tier: str, device: Device, fabric: Fabric, optimizer: str) -> float:
    """Seconds of the shard's forward, gradient and update on ``device``; in the host tier the
    missed rows' bytes (reads, and the update's read and write) also cross the host route."""
    tasks = shard_tasks(table, shard, optimizer)
    seconds = sum(estimate(t, op_class(t.op, t.span), device).time for t in tasks)
    if tier == "host":
        rows = float(shard.ids) * shard.cols * DTYPE_BYTES[table.dtype]
        seconds += (1.0 - host_hit(table)) * 3 * rows * fabric.host_beta
    return seconds


def host_hit(table: Table) -> float:
    """Hit rate of a host-tier table's HBM cache (module docstring)."""
    return table.cache_hit if table.cache_hit < 1.0 else CACHE_LOAD_FACTOR


def state_bytes(table: Table, optimizer: str) -> float:
    """Bytes per parameter of the table with its optimizer state (f32 values)."""
    return DTYPE_BYTES[table.dtype] + 4.0 * OPTIMIZERS[optimizer].states


def options(table: Table, gpus: Sequence[Device], fabric: Fabric, optimizer: str) -> list[Option]:
    """Every sharding of ``table`` over the GPUs (module docstring), unchecked for memory."""
    g = len(gpus)
    per = state_bytes(table, optimizer)
    item = DTYPE_BYTES[table.dtype]
    ids = table.bags * table.pooling
    cross = (g - 1) / g if g > 1 else 0.0
    out: list[Option] = []

    def make(sharding: str, tier: str, shards: list[Shard], exchange: list[float]) -> Option:
        load = [0.0] * g
        memory = [0.0] * g
        host = 0.0
        for s, x in zip(shards, exchange):
            load[s.device] += shard_time(table, s, tier, gpus[s.device], fabric, optimizer) + x * fabric.beta
            params = float(s.rows) * s.cols
            if tier == "host":
                memory[s.device] += CACHE_LOAD_FACTOR * params * item
                host += params * per
            else:
                memory[s.device] += params * per
        return Option(sharding, tier, tuple(shards), tuple(load), tuple(memory), host)

    pooled = 2 * cross * table.bags * table.dim * item  # forward pooled rows out, their gradients back
    tiers = ("hbm", "host") if math.isfinite(fabric.host_beta) else ("hbm",)
    for tier in tiers:
        for d in range(g):
            out.append(make("table_wise", tier, [Shard(d, table.rows, table.dim, ids, table.bags)], [pooled]))
    if g > 1 and table.rows >= g:
        rows = _split(table.rows, g)
        out.append(make("row_wise", "hbm", [Shard(d, rows[d], table.dim, _split(ids, g)[d], table.bags)
                                            for d in range(g)], [pooled] * g))
    if g > 1 and table.dim % g == 0:
        out.append(make("column_wise", "hbm", [Shard(d, table.rows, table.dim // g, ids, table.bags)
                                               for d in range(g)], [pooled / g] * g))
    if g > 1 and table.bags >= g:
        bags = _split(table.bags, g)
        ring = 2 * cross * table.nbytes
        out.append(make("data_parallel", "hbm", [Shard(d, table.rows, table.dim, bags[d] * table.pooling, bags[d])
                                                 for d in range(g)], [ring] * g))
    return out


def _split(n: int, parts: int) -> list[int]:
    """``n`` in ``parts`` near-equal pieces, larger first."""
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def fits(option: Option, used: Sequence[float], host_used: float, caps: Sequence[float], host_cap: float) -> bool:
    """Whether ``option`` fits beside memory already ``used`` per GPU and on the host."""
    return host_used + option.host <= host_cap and all(u + m <= c for u, m, c in zip(used, option.memory, caps))


def rating(plan: Sequence[Option], gpus: int) -> float:
    """A plan's rating: its largest GPU load (TorchRec ``NoopPerfModel.rate``)."""
    loads = [0.0] * gpus
    for o in plan:
        for d, x in enumerate(o.load):
            loads[d] += x
    return max(loads, default=0.0)

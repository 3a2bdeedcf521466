"""``--parallel burst``: a burst plan (:mod:`mapper.parallel.burst`) of a model file's training
step, priced by mapper's cost model and built as a task graph.

Each forward task of the step is a layer; its time at ``b`` samples is the cost model's time
(:func:`mapper.costing.latency.estimate` on the platform's first GPU) of the task and of its
backward and update tasks in the training step lowered at ``b`` samples, for every per-GPU
batch a width gives. The plan's graph has, per layer, one task on each of its ``w`` GPUs
costing the layer's step there (compute and gradient all-reduce), and where the width changes
a scatter/gather task on each GPU of the wider side costing the transfer; it is mapped and
validated like any other graph, and its makespan is the step time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mapper.core.graph import Task, TaskGraph
from mapper.costing.efficiency import op_class
from mapper.costing.latency import estimate
from mapper.costing.training import training_step
from mapper.errors import OptionsError
from mapper.parallel.burst import (
    BurstPlan,
    Fabric,
    Layer,
    background_seconds,
    data_parallel,
    plan_burst,
    widths_for,
)
from mapper.parallel.hybrid import worst_route
from mapper.parallel.pinned import EdgeData, graph_of, pinned
from mapper.platform.devices import Platform

_BACKWARD = ("grad", "dgrad", "wgrad", "update")


@dataclass(frozen=True, slots=True)
class BurstChoice:
    """The plan kept, plain data parallelism's beside it."""

    graph: TaskGraph
    layers: tuple[Layer, ...]
    plan: BurstPlan
    data: BurstPlan
    gpus: tuple[str, ...]
    amplification: float

    def to_json(self) -> dict[str, Any]:
        return {"mode": "burst", "gpus": list(self.gpus), "batch": self.plan.batch,
                "amplification": self.amplification,
                "layers": [{"layer": x.name, "gpus": w} for x, w in zip(self.layers, self.plan.widths)],
                "step": self.plan.time, "transfer": self.plan.transfer, "lent_gpu_seconds": self.plan.lent,
                "background_gpu_seconds": background_seconds(self.layers, self.plan),
                "data_parallel_step": self.data.time}

    def notes(self) -> tuple[str, ...]:
        share = self.plan.lent / (self.plan.gpus * self.plan.time) if self.plan.time > 0 else 0.0
        return (f"parallel burst: {len(self.layers)} layers on 1-{max(self.plan.widths)} of {len(self.gpus)} GPUs "
                f"(amplification {self.amplification:g}), step {self.plan.time * 1e3:.4g} ms against data "
                f"parallelism's {self.data.time * 1e3:.4g} ms; {share:.1%} of the GPU time lent to a background job",)

    def plan_facts(self) -> tuple[tuple[str, str], ...]:
        return (("layout", "burst"), ("gpus", str(len(self.gpus))), ("batch", str(self.plan.batch)),
                ("amplification", f"{self.amplification:g}"))


def _owner(task: Task) -> str:
    head, _, last = task.name.rpartition(".")
    return head if task.backward and last in _BACKWARD else task.name


def model_layers(relower: Callable[[int], TaskGraph], prepare: Callable[[TaskGraph], TaskGraph], optimizer: str,
                 platform: Platform, gpu: int, batch: int, widths: tuple[int, ...]) -> tuple[Layer, ...]:
    """The step's layers priced at each width's per-GPU batch (module docstring)."""
    dev = platform.devices[gpu]
    per: dict[int, dict[str, float]] = {}
    forward: list[Task] = []
    for w in widths:
        step = training_step(prepare(relower(batch // w)), optimizer)
        times: dict[str, float] = {}
        for t in step.tasks:
            times[_owner(t)] = times.get(_owner(t), 0.0) + estimate(t, op_class(t.op, t.span), dev).time
        per[batch // w] = times
        if w == 1:
            forward = [t for t in step.tasks if not t.backward]
    out = []
    for t in forward:
        acts = sum(float(o.type.nbytes) for o in t.operands if o.kind != "weight") / batch
        weights = sum(float(o.type.nbytes) for o in t.operands if o.kind == "weight")
        out.append(Layer(t.name, tuple((b, per[b].get(t.name, 0.0)) for b in sorted(per)), acts, weights))
    return tuple(out)


def build(layers: tuple[Layer, ...], plan: BurstPlan, names: tuple[str, ...], name: str) -> TaskGraph:
    """The plan's task graph (module docstring)."""
    tasks: list[Task] = []
    edges: dict[tuple[int, int], EdgeData] = {}
    prev: list[int] = []
    for i, (layer, w) in enumerate(zip(layers, plan.widths)):
        if i and plan.widths[i - 1] != w:
            wide = max(w, plan.widths[i - 1])
            moved = []
            for dev in names[:wide]:
                tasks.append(pinned(Task(0, f"{layer.name}.scatter_gather", "task"), len(tasks), dev,
                                     plan.transfers[i]))
                moved.append(len(tasks) - 1)
            for s in prev:
                for d in moved:
                    edges[(s, d)] = (0.0, 0.0, "")
            prev = moved
        here = []
        for dev in names[:w]:
            tasks.append(pinned(Task(0, layer.name, "task"), len(tasks), dev, plan.layer_times[i]))
            here.append(len(tasks) - 1)
        same = len(prev) == len(here) and not (i and plan.widths[i - 1] != w)
        for k, d in enumerate(here):
            for s in ([prev[k]] if same else prev):
                edges[(s, d)] = (0.0, 0.0, "")
        prev = here
    return graph_of(f"{name}.burst", tasks, edges)


def fabric_of(platform: Platform) -> Fabric:
    """DeepPool's one switch: the worst latency and seconds per byte between two GPUs of
    ``platform``, the alpha-beta :class:`~mapper.parallel.burst.Fabric` its collectives are priced on."""
    return Fabric(*worst_route(platform))


def plan_model(graph: TaskGraph, platform: Platform, optimizer: str, limit: float,
               relower: Callable[[int], TaskGraph], prepare: Callable[[TaskGraph], TaskGraph]) -> BurstChoice:
    """Plan ``graph`` (forward, global batch from its first input) on ``platform``'s GPUs."""
    gpus = [i for i, d in enumerate(platform.devices) if d.kind == "gpu"]
    if not gpus:
        raise OptionsError(f"--parallel burst needs GPUs; platform {platform.name} has none", obj="--parallel")
    if not graph.inputs or not graph.inputs[0][1].shape:
        raise OptionsError("--parallel burst needs a graph whose first input has a batch dimension", obj="--parallel")
    batch = int(graph.inputs[0][1].shape[0])
    g = len(gpus)
    fabric = fabric_of(platform)
    layers = model_layers(relower, prepare, optimizer, platform, gpus[0], batch, widths_for(batch, g))
    plan = plan_burst(layers, batch, g, fabric, limit)
    data = data_parallel(layers, batch, g, fabric)
    names = tuple(platform.devices[i].name for i in gpus)
    return BurstChoice(build(layers, plan, names, graph.name), layers, plan, data, names, limit)

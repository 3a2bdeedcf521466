"""``--parallel`` through the cluster planner: choose a layout, build its pipeline graph."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mapper.cluster.plan_graph import plan_graph, replica_platform
from mapper.cluster.search import MIXED, ClusterChoice, memory_parts, plan_cluster
from mapper.core.graph import TaskGraph
from mapper.errors import OptionsError
from mapper.mapping.base import Progress
from mapper.parallel.layout import is_layout, requested
from mapper.platform.devices import Platform


@dataclass(frozen=True, slots=True)
class PlannedStep:
    """The split stage's product on a cluster: the layout kept, its pipeline graph, and the
    platform of one pipeline replica that graph runs on."""

    choice: ClusterChoice
    graph: TaskGraph
    platform: Platform


def plan_step(graph: TaskGraph, platform: Platform, parallel: str, train: str | None,
              prepare: Callable[[TaskGraph], TaskGraph],
              progress: Callable[[Progress], None] | None = None, precision: str | None = None) -> PlannedStep:
    """The layout of ``graph``'s training step that ``parallel`` asks for on ``platform``, its
    pipeline graph and the platform of one pipeline replica. A given layout that does not fit
    exits 3 (:func:`given_fits`). ``precision``: the format ``graph``'s
    GEMMs were marked with (:func:`mapper.cluster.search.plan_cluster`)."""
    if train is None:
        raise OptionsError("the cluster planner lays out a training step: add --train (and --optimizer)",
                           obj="--parallel")
    choice = plan_cluster(graph, platform, requested(parallel), train, prepare, progress, precision)
    lay = choice.best.layout
    fleet = platform.fleet
    if fleet is not None and choice.kind == MIXED:
        kind = choice.best.kinds[choice.best.fullest]
        gpu = next(d.name for d in fleet.kind(kind).platform.devices if d.kind == "gpu")
        if is_layout(parallel) or not choice.best.fits:
            given_fits(choice, f"{gpu} ({platform.name}, {kind})")
        replica = replica_platform([fleet.kind(k).platform for k in choice.best.kinds], None, lay.pipeline,
                                   platform.name, choice.best.kinds)
        return PlannedStep(choice, plan_graph(choice.best, graph.name), replica)
    where = fleet.kind(choice.kind).platform if fleet is not None and choice.kind else platform
    gpu = next(d.name for d in where.devices if d.kind == "gpu")
    if is_layout(parallel) or not choice.best.fits:
        given_fits(choice, f"{gpu} ({platform.name}{', ' + choice.kind if choice.kind else ''})")
    return PlannedStep(choice, plan_graph(choice.best, graph.name),
                       replica_platform(where, gpu, lay.pipeline, platform.name))


def given_fits(choice: ClusterChoice, gpu: str) -> None:
    """Exit 3 when a layout the user gave cannot fit, naming the GPU and the bytes over."""
    from mapper.errors import InfeasibleError

    b = choice.best
    if not b.fits and b.peak <= b.capacity:  # memory fits, but a kernel cannot run at this size
        raise InfeasibleError(
            f"layout {b.layout.label()} cannot run: {gpu} cannot run kernel "
            f"{b.blocked or 'of a pipeline stage'} at micro-batch {b.layout.micro_batch} (a smaller micro_batch "
            "or a wider tensor group cuts it)", obj="--parallel")
    if not b.fits:
        over = b.peak - b.capacity
        raise InfeasibleError(
            f"layout {b.layout.label()} does not fit: {gpu} of pipeline rank {b.fullest} would hold "
            f"{b.peak:,.0f} bytes ({memory_parts(b.memory, b.capacity)}), {over:,.0f} bytes over", obj="--parallel")

"""The chosen serving layout as a task graph of one replica's request (:mod:`mapper.serving`).

One device per pipeline stage (its tensor ranks run the same kernels at once).
A task per stage, micro-batch and step: ``prefill.s0.mb1`` and ``decode7.s2.mb0``,
priced with the stage times of :class:`~mapper.serving.model.ServingEstimate`
(a decode step's interpolated between the first and the last, as its context
grows). A micro-batch passes the stages in order, its next decode step starts
after its last one left the last stage, and each stage runs its tasks in
arrival order. Scheduled and validated by the ordinary engine, its makespan is
the request's latency and the end of the last prefill task its time to first
token: the closed forms only rank layouts. A stage's first task carries the bytes the
serving model puts on that stage's GPUs (``memory``), so every report's peak memory is the layout's.
"""

from __future__ import annotations

from mapper.cluster.plan_graph import stage_device
from mapper.core.graph import Edge, Placement, Task, TaskGraph
from mapper.serving.model import ServingEstimate, ServingLayout

#: The most tasks a request graph may have (steps x stages x micro-batches).
MAX_TASKS = 200_000
#: The most task-device pairs its cost table may have (tasks times pipeline stages, some 5 us each):
#: a request graph of 200,000 tasks on a node's 8 stages fits, one on 128 stages does not.
MAX_CELLS = 2**21


def request_tasks(layout: ServingLayout, decode: int) -> int:
    """Tasks of the request graph of ``decode`` steps under ``layout`` (the search skips layouts
    past :data:`MAX_TASKS`)."""
    return (1 + decode) * layout.pipeline * layout.micro_batches


def buildable(layout: ServingLayout, decode: int) -> bool:
    """The request graph under ``layout`` stays within :data:`MAX_TASKS` tasks and
    :data:`MAX_CELLS` task-device pairs."""
    tasks = request_tasks(layout, decode)
    return tasks <= MAX_TASKS and tasks * layout.pipeline <= MAX_CELLS


def request_graph(est: ServingEstimate, decode: int, name: str) -> TaskGraph:
    """The task graph of one request under ``est`` (module docstring; at most :data:`MAX_TASKS`
    tasks, as :func:`mapper.serving.search.choose` keeps its layouts)."""
    p, m = est.layout.pipeline, est.layout.micro_batches
    steps = 1 + decode
    assert buildable(est.layout, decode), "choose() keeps layouts whose graph can be built"
    tasks: list[Task] = []
    edges: set[tuple[int, int]] = set()
    index: dict[tuple[int, int, int], int] = {}
    last_on: dict[int, int] = {}
    for i in range(steps):
        for j in range(m):
            for s in range(p):
                if i == 0:
                    seconds, label = est.prefill[s], "prefill"
                else:
                    w = (i - 1) / (decode - 1) if decode > 1 else 0.0
                    seconds, label = (1 - w) * est.decode_first[s] + w * est.decode_last[s], f"decode{i}"
                dev = stage_device(s)
                k = len(tasks)
                first = i == 0 and j == 0 and s < len(est.stage_memory)
                tasks.append(Task(k, f"{label}.s{s}.mb{j}", "task", placement=Placement(allow=(dev,)),
                                  explicit_cost=((dev, seconds),), memory=est.stage_memory[s] if first else None))
                index[(i, j, s)] = k
                if s > 0:
                    edges.add((index[(i, j, s - 1)], k))
                elif i > 0:
                    edges.add((index[(i - 1, j, p - 1)], k))
    for i in range(steps):  # each stage in arrival order: step by step, micro-batch by micro-batch
        for j in range(m):
            for s in range(p):
                k = index[(i, j, s)]
                if s in last_on:
                    edges.add((last_on[s], k))
                last_on[s] = k
    ordered = sorted(edges, key=lambda e: (e[1], e[0]))
    outputs = tuple(f"{'prefill' if decode == 0 else f'decode{decode}'}.s{p - 1}.mb{j}" for j in range(m))
    return TaskGraph(f"{name}.request", tuple(tasks),
                     tuple(Edge(n, a, b, 0.0, 0.0, "") for n, (a, b) in enumerate(ordered)), (), outputs)

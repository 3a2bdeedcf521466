"""The ``delegation`` entry of the reports: the subgraphs an NPU or a DLA runs and the
tasks that fall back, with the reason (docs/platforms.md, Delegation)."""

from __future__ import annotations

from mapper.engine.schedule import Schedule, delegated_runs
from mapper.platform.devices import ACCELERATOR_KINDS


def node_names(schedule: Schedule, tasks: tuple[int, ...]) -> list[str]:
    """The model nodes of ``tasks`` (an imported model's ONNX node names; a DSL task's own name),
    each once, in order."""
    out: dict[str, None] = {}
    for t in tasks:
        task = schedule.cost.graph.tasks[t]
        for name in [s.name for s in task.sources] or [task.name]:
            out.setdefault(name, None)
    return list(out)


def delegation(schedule: Schedule) -> dict | None:
    """``{"subgraphs": [{device, tasks}], "fallbacks": [{task, op, device, reason}]}`` on a platform
    with an ``npu`` or ``dla`` device, else None. A fallback is a model node an accelerator cannot
    run (its op-support list, its dtypes), once per node and accelerator."""
    cost = schedule.cost
    accel = [d.index for d in cost.platform.devices if d.kind in ACCELERATOR_KINDS]
    if not accel:
        return None
    runs = delegated_runs(cost, schedule.order, accel)
    subgraphs = [{"device": cost.platform.devices[d].name, "tasks": node_names(schedule, run)} for d, run in runs]
    fallbacks: list[dict] = []
    seen: set[tuple[str, int]] = set()
    for t in cost.graph.topo_order:
        task = cost.graph.tasks[t]
        for d in accel:
            why = cost.reason(t, d)
            if why is None or schedule.slots[t].device == d:
                continue
            nodes = task.sources or ()
            name, op = (nodes[0].name, nodes[0].op) if nodes else (task.name, task.op)
            if (name, d) in seen:
                continue
            seen.add((name, d))
            fallbacks.append({"task": name, "op": op, "device": cost.platform.devices[d].name, "reason": why})
    return {"subgraphs": subgraphs, "fallbacks": fallbacks}

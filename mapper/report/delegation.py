"""The ``delegation`` entry of the reports: the subgraphs an NPU or a DLA runs and the
tasks that fall back, with the reason (docs/platforms.md, Delegation)."""

from __future__ import annotations

from mapper.core.units import fmt_time
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


def boundaries(schedule: Schedule) -> list[tuple[str, str, int, float]]:
    """``(from, to, hand-overs, seconds)`` per device pair of the transfers into or out of an
    ``npu`` or ``dla`` device (each a subgraph boundary: ``sync_us`` on a shared-memory link,
    latency plus bytes / bandwidth otherwise), in device order."""
    devs = schedule.cost.platform.devices
    pairs: dict[tuple[int, int], list[float]] = {}
    for tr in schedule.transfers:
        if tr.src_device != tr.dst_device and any(
                devs[d].kind in ACCELERATOR_KINDS for d in (tr.src_device, tr.dst_device)):
            pairs.setdefault((tr.src_device, tr.dst_device), []).append(tr.end - tr.start)
    return [(devs[a].name, devs[b].name, len(t), sum(t)) for (a, b), t in sorted(pairs.items())]


def delegation_lines(schedule: Schedule) -> list[tuple[str, str]]:
    """The text report's delegation section as ``(key, value)`` lines: the subgraph count
    per accelerator, the boundary hand-overs, then each fallback with its reason."""
    found = delegation(schedule)
    if found is None:
        return []
    out = []
    for dev in schedule.cost.platform.devices:
        if dev.kind in ACCELERATOR_KINDS:
            n = sum(1 for s in found["subgraphs"] if s["device"] == dev.name)
            invoke = f", {fmt_time(dev.invoke_us * 1e-6)} per invocation" if dev.invoke_us > 0 else ""
            out.append(("subgraphs", f"{dev.name}: {n}{invoke}"))
    for a, b, n, secs in boundaries(schedule):
        out.append(("boundaries", f"{a} -> {b}: {n} hand-overs, {fmt_time(secs)}"))
    for fb in found["fallbacks"]:
        out.append(("fallback", f"{fb['task']} ({fb['op']}) not on {fb['device']}: {fb['reason']}"))
    return out

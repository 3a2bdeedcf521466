"""Terminal reports: a summary table per device and a task schedule table."""

from __future__ import annotations

import os
from collections.abc import Sequence

from mapper.core.files import atomic_write
from mapper.core.units import fmt_bytes, fmt_objective, fmt_pct, fmt_time
from mapper.engine.memory import peak_memory
from mapper.mapping.base import MapResult
from mapper.report.common import device_stats
from mapper.report.deadlines import bound_line, deadline_notes
from mapper.report.delegation import delegation_lines


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]], right: tuple[bool, ...]) -> list[str]:
    """Columns padded to their widest cell; ``right[i]`` right-aligns column i."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        parts = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)]
        return "  ".join(parts).rstrip()

    return [line(header), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]


def summary_table(result: MapResult, plan: Sequence[tuple[str, str]] = ()) -> str:
    """Per-device load, then the quality of the mapping, as plain text.

    Columns: device, kind, tasks, busy time, utilisation (busy / makespan),
    peak memory (:func:`mapper.engine.memory.peak_memory`).
    Then makespan, lower bound, gap, status, mapper, objective, solve time,
    the schedule options that were on, the plan kept (``plan``: its layout, stages,
    groups and batch, when a ``--parallel`` or ``--inference`` search chose one),
    the mapper's notes, and on a platform with an NPU or a DLA the delegation
    (:func:`mapper.report.delegation.delegation_lines`).
    """
    sched = result.schedule
    rows = [
        (d.name, d.kind, str(d.tasks), fmt_time(d.busy), fmt_pct(d.utilisation), fmt_bytes(p.bytes))
        for d, p in zip(device_stats(sched), peak_memory(sched))
    ]
    lines = _table(("device", "kind", "tasks", "busy", "util", "peak mem"), rows,
                   (False, False, True, True, True, True))
    objective = result.objective
    if result.objective != "makespan" or result.objective_value != sched.makespan:
        objective = f"{result.objective} = {fmt_objective(result.objective_value, result.objective)}"
    options = ", ".join(sched.options.enabled) or "none (delay model)"
    facts = [
        ("makespan", fmt_time(sched.makespan)),
        ("wcrt bound", bound_line(result)),
        ("lower bound", fmt_objective(result.lower_bound, result.objective)),
        ("gap", fmt_pct(result.gap)),
        ("status", result.status),
        ("mapper", result.mapper),
        ("objective", objective),
        ("solve time", fmt_time(result.solve_time)),
        ("options", options),
        ("graph", f"{sched.cost.graph.name} ({len(sched.slots)} tasks, {len(sched.transfers)} transfers)"),
        ("platform", sched.cost.platform.name),
    ]
    delegated = delegation_lines(sched)
    width = max(len(k) for k, _ in [*facts, *((f"  {k}", v) for k, v in [*plan, *delegated])])
    lines.append("")
    lines += [f"{k.ljust(width)}  {v}" for k, v in facts]
    if plan:
        lines.append("plan")
        lines += [f"{('  ' + k).ljust(width)}  {v}" for k, v in plan]
    for note in result.notes:
        lines.append(f"{'note'.ljust(width)}  {note}")
    for miss in deadline_notes(result):
        kind, _, text = miss.partition(": ")
        lines.append(f"{('violation' if kind == 'deadline violation' else 'note').ljust(width)}  {text}")
    if delegated:
        lines.append("delegation")
        lines += [f"{('  ' + k).ljust(width)}  {v}" for k, v in delegated]
    return "\n".join(lines) + "\n"


def schedule_table(result: MapResult) -> str:
    """Every task with its device, start, end and duration, in start order
    (ties by task index)."""
    sched = result.schedule
    tasks = sched.cost.graph.tasks
    devices = sched.cost.platform.devices
    order = sorted(sched.slots, key=lambda s: (s.start, s.task))
    rows = [
        (tasks[s.task].name, devices[s.device].name, fmt_time(s.start), fmt_time(s.end), fmt_time(s.end - s.start))
        for s in order
    ]
    lines = _table(("task", "device", "start", "end", "duration"), rows, (False, False, True, True, True))
    return "\n".join(lines) + "\n"


def compare_table(results) -> str:
    """One row per mapping of the same graph: mapper, status, makespan, ratio to
    the best makespan, objective value, lower bound, gap, solve time. The pipeline gives
    every row the best bound known across the rows (:mod:`mapper.mapping.shared_bound`)."""
    best = min(r.schedule.makespan for r in results)
    rows = []
    for r in results:
        ms = r.schedule.makespan
        rows.append(
            (
                r.mapper, r.status, fmt_time(ms), f"{ms / best:.3f}x" if best > 0 else "-",
                f"{r.objective} {fmt_objective(r.objective_value, r.objective)}",
                fmt_objective(r.lower_bound, r.objective), fmt_pct(r.gap), fmt_time(r.solve_time),
            )
        )  # fmt: skip
    header = ("mapper", "status", "makespan", "vs best", "objective", "lower bound", "gap", "solve time")
    lines = _table(header, rows, (False, False, True, True, False, True, True, True))
    return "\n".join(lines) + "\n"


def write_text(result: MapResult, path: str | os.PathLike) -> None:
    """Write the summary and the schedule table to ``path`` atomically."""
    atomic_write(path, summary_table(result) + "\n" + schedule_table(result))

"""The JSON report: the machine-readable contract of docs/architecture.md.

Top-level keys, in this order: ``makespan``, ``mapper``, ``status``,
``objective``, ``objective_value``, ``lower_bound``, ``gap``, ``solve_time``
(only with ``timings=True``: it is a wall-clock measurement), ``graph``,
``platform``, ``options``, ``tasks``, ``transfers``, ``devices``, ``notes``;
where a task has a deadline ``deadlines_met``, ``max_lateness`` (and, under
``--objective deadline``, ``violations``); ``response_bound``; then the
optional sections.
Times are seconds; floats are rounded to 12 significant digits, so the same
input gives byte-identical output. See docs/reports.md.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable

from mapper.core.files import atomic_write
from mapper.core.heap import collection_paused
from mapper.engine.memory import peak_memory
from mapper.engine.schedule import Schedule
from mapper.mapping.base import MapResult
from mapper.report import json_rows, json_text
from mapper.report.common import device_stats, round_sig
from mapper.report.deadlines import deadline_notes, deadline_section
from mapper.report.delegation import delegation


def to_json_dict(result: MapResult, *, timings: bool = False, parallel: dict | None = None,
                 inference: dict | None = None, apps: dict | None = None) -> dict:
    """The report as plain JSON-ready Python objects (dicts keep key order).

    ``timings`` adds ``solve_time``, the mapper's wall time, which differs
    from run to run; without it the output depends only on the input.
    ``parallel`` (:meth:`mapper.parallel.search.Choice.to_json`) adds the split
    plan kept and the plans scored, under ``parallel``; ``inference``
    (:meth:`mapper.serving.search.ServingChoice.to_json`) the request's figures.
    """
    return _report(result, timings, parallel, inference, apps, text_rows=False)


def _report(result: MapResult, timings: bool, parallel: dict | None, inference: dict | None, apps: dict | None,
            *, text_rows: bool) -> dict:
    """:func:`to_json_dict`'s report; with ``text_rows`` its tasks and transfers are
    :class:`~mapper.report.json_text.Rows` of text (:mod:`mapper.report.json_rows`), the same JSON."""
    sched = result.schedule
    graph = sched.cost.graph
    plat = sched.cost.platform
    dev = plat.devices
    link_names = [f"{lk.src}->{lk.dst}" for lk in plat.links]
    r = _Rounded().__getitem__  # a task's end is often a transfer's start, and most sizes are 0
    if text_rows:
        make_tasks, make_transfers = json_rows.rows(sched, link_names)
        tasks: list | json_text.Rows = json_text.Rows(1, make_tasks)
        transfers: list | json_text.Rows = json_text.Rows(1, make_transfers)
    else:
        tasks, transfers = _task_dicts(sched, r), _transfer_dicts(sched, r, link_names)
    head = {
        "makespan": r(sched.makespan),
        "mapper": result.mapper,
        "status": result.status,
        "objective": result.objective,
        "objective_value": r(result.objective_value),
        "lower_bound": r(result.lower_bound) if result.lower_bound is not None else None,
        "gap": r(result.gap) if result.gap is not None else None,
    }
    if timings:
        head["solve_time"] = r(result.solve_time)
    timing = _rounded(deadline_section(result))
    notes = list(result.notes) + list(deadline_notes(result) if result.objective != "deadline" else ())
    return head | {
        "graph": {
            "name": graph.name,
            "tasks": len(graph.tasks),
            "edges": len(graph.edges),
            "flops": r(graph.total_flops),
            "bytes": r(graph.total_bytes),
        },
        "platform": {
            "name": plat.name,
            "devices": [d.name for d in dev],
            "links": link_names,
        },
        "options": {name: getattr(sched.options, name) for name in ("contention", "streaming", "memory", "area")},
        "tasks": tasks,
        "transfers": transfers,
        "devices": [
            {"name": d.name, "kind": d.kind, "tasks": d.tasks, "busy": r(d.busy), "utilisation": r(d.utilisation),
             "peak_memory": r(p.bytes)}
            for d, p in zip(device_stats(sched), peak_memory(sched))
        ],
        "notes": notes,
        **timing,
        **({"delegation": delegated} if (delegated := delegation(sched)) is not None else {}),
        **({"parallel": parallel} if parallel is not None else {}),
        **({"inference": _rounded(inference)} if inference is not None else {}),
        **({"apps": _rounded(apps)} if apps is not None else {}),
    }


def _task_dicts(sched: Schedule, r: Callable[[float], float | None]) -> list[dict]:
    graph = sched.cost.graph
    dev = sched.cost.platform.devices
    return [
        {
            "name": graph.tasks[s.task].name,
            "device": dev[s.device].name,
            "start": r(s.start),
            "end": r(s.end),
            "op": graph.tasks[s.task].op,
            "flops": r(graph.tasks[s.task].flops),
            "bytes": r(graph.tasks[s.task].bytes),
            **({"deadline": r(dl), "lateness": r(s.end - dl)} if (dl := graph.tasks[s.task].deadline) is not None
               else {}),
        }
        for s in sorted(sched.slots, key=lambda s: s.task)
    ]


def _transfer_dicts(sched: Schedule, r: Callable[[float], float | None], link_names: list[str]) -> list[dict]:
    graph = sched.cost.graph
    dev = sched.cost.platform.devices
    transfers = []
    for tr in sorted(sched.transfers, key=lambda t: t.edge):
        edge = graph.edges[tr.edge]
        transfers.append(
            {
                "edge": tr.edge,
                "src": graph.tasks[edge.src].name,
                "dst": graph.tasks[edge.dst].name,
                "from": dev[tr.src_device].name,
                "to": dev[tr.dst_device].name,
                "start": r(tr.start),
                "end": r(tr.end),
                "bytes": r(edge.bytes),
                "links": [link_names[k] for k in tr.links],
            }
        )
    return transfers


class _Rounded(dict):
    """:func:`round_sig` of each number, each distinct number rounded once."""

    def __missing__(self, x: float) -> float | None:
        self[x] = out = round_sig(x)
        return out


def _rounded(value):
    """``value`` with every float rounded as the schedule's times are (the request's latency is
    the makespan, to the digit)."""
    if isinstance(value, float):
        return round_sig(value)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def to_json(result: MapResult, *, timings: bool = False, parallel: dict | None = None,
            inference: dict | None = None, apps: dict | None = None) -> str:
    """The report as JSON text: ``indent=2``, fixed key order, trailing newline."""
    return json_text.dumps(_report(result, timings, parallel, inference, apps, text_rows=True)) + "\n"


def write_json(result: MapResult, path: str | os.PathLike, *, timings: bool = False,
               parallel: dict | None = None, inference: dict | None = None, apps: dict | None = None) -> None:
    """Write :func:`to_json`'s text to ``path`` atomically, in chunks as it is encoded
    (:func:`~mapper.report.json_text.chunks`)."""
    with collection_paused():  # its rows are acyclic: reference counting frees them (mapper.core.heap)
        report = _report(result, timings, parallel, inference, apps, text_rows=True)
        atomic_write(path, itertools.chain(json_text.chunks(report), ("\n",)))

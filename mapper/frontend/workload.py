"""Several models at once: a workload file (``apps.json``) and the one task graph that holds
them all (docs/platforms.md, Several models).

The format follows Band's workload files (Jeong et al., "Band: Coordinated Multi-DNN Inference
on Heterogeneous Mobile Processors", MobiSys 2022): ``{"models": [{"file", "period_ms",
"slo_ms"}, ...]}``, each model requested every ``period_ms`` and due ``slo_ms`` after its
request. ``file`` is a model or DSL program, relative to the workload file.

A jobs file (``jobs.json``, several models placed on MIG slices or MPS shares,
docs/platforms.md) is the same format: its list may be called ``"jobs"``, a job may give
``rate`` (requests per second) instead of ``period_ms``, and ``slo_ms`` may be left out (no
deadline).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

from mapper.core.graph import Edge, Operand, Task, TaskGraph, TensorType
from mapper.frontend.importers.json_input import JsonReader, read_json_file

#: The keys of one model entry.
MODEL_KEYS = ("file", "period_ms", "slo_ms", "rate")
#: The most models a workload may list.
MAX_MODELS = 64


@dataclass(frozen=True, slots=True)
class App:
    """One model of a workload: its file, request period and deadline (seconds), and its label."""

    file: str  # as the workload gives it
    period: float
    slo: float  # inf: none given
    label: str
    path: str = ""  # the file, relative to the working directory


def is_workload(path: str) -> bool:
    """True for a workload file (``.json``)."""
    return os.fspath(path).lower().endswith(".json")


def read_workload(path: str) -> tuple[App, ...]:
    """The models of workload file ``path``; :class:`InputError` naming the file and JSON path."""
    doc = read_json_file(path, "the workload file")
    js = JsonReader(path)
    js.check(doc, "$", "object")
    lists = [key for key in ("models", "jobs") if key in doc]
    for key in doc:
        if key not in ("models", "jobs"):
            raise js.fail(f"$.{key}", f"unknown key {key!r}; a workload file has \"models\" (or \"jobs\")")
    if len(lists) != 1:
        raise js.fail("$", "expected one list of models: \"models\" or \"jobs\"")
    top = lists[0]
    models = js.get(doc, top, "$", "array")
    if not models or len(models) > MAX_MODELS:
        raise js.fail(f"$.{top}", f"expected 1 to {MAX_MODELS} models, got {len(models)}")
    apps: list[App] = []
    base = os.path.dirname(path)
    for i, raw in enumerate(models):
        where = f"$.{top}[{i}]"
        js.check(raw, where, "object")
        for key in raw:
            if key not in MODEL_KEYS:
                raise js.fail(f"{where}.{key}", f"unknown key {key!r}; expected {', '.join(MODEL_KEYS)}")
        file = js.get(raw, "file", where, "string")
        if not file or not os.path.isfile(os.path.join(base, file)):
            raise js.fail(f"{where}.file", f"no such model file {file!r} (paths are relative to the workload)")
        if ("rate" in raw) == ("period_ms" in raw):
            raise js.fail(where, "give a job's period_ms or its rate (requests per second), one of them")
        times = []
        for key in ("period_ms", "slo_ms", "rate"):
            if key not in raw:
                times.append(math.inf)
                continue
            ms = js.get(raw, key, where, "number")
            if not ms > 0 or not math.isfinite(ms):
                what = "requests per second" if key == "rate" else "milliseconds"
                raise js.fail(f"{where}.{key}", f"expected a positive number of {what}, got {ms!r}")
            times.append(1.0 / ms if key == "rate" else ms * 1e-3)
        if top == "models" and times[1] == math.inf:
            raise js.fail(f"{where}.slo_ms", "missing key 'slo_ms' (a \"jobs\" list may leave it out)")
        times[0] = min(times[0], times[2])
        stem = os.path.splitext(os.path.basename(file))[0]
        label = stem if all(a.label != stem for a in apps) else f"{stem}_{i}"
        apps.append(App(file, times[0], times[1], label, os.path.join(base, file)))
    return tuple(apps)


def app_tasks(graph: TaskGraph, apps: Sequence[App]) -> list[list[int]]:
    """The tasks of each of ``apps`` in the graph :func:`merge` made (named ``label.task``; a task
    goes to the longest label it starts with, so model ``a`` does not take model ``a.b``'s tasks)."""
    out: list[list[int]] = [[] for _ in apps]
    by_length = sorted(range(len(apps)), key=lambda j: -len(apps[j].label))
    for t in graph.tasks:
        j = next((j for j in by_length if t.name.startswith(apps[j].label + ".")), None)
        if j is not None:
            out[j].append(t.index)
    return out


def merge(graphs: list[tuple[str, TaskGraph]], name: str, slos: list[float] | None = None) -> TaskGraph:
    """One graph holding every ``(label, graph)``: tasks renamed ``label.task`` (their model nodes
    ``label.node``), edges renumbered; the graphs stay unconnected. With ``slos`` (seconds, one a
    graph), each graph's last tasks (those nothing follows) are due at its SLO, or at their own
    deadline when it is earlier, so that the mappers that weigh deadlines see the SLOs."""
    tasks: list[Task] = []
    edges: list[Edge] = []
    inputs: list[tuple[str, TensorType]] = []
    outputs: list[str] = []
    for k, (label, g) in enumerate(graphs):
        base, ebase = len(tasks), len(edges)
        sinks = {t.index for t in g.tasks} - {e.src for e in g.edges}
        slo = None if slos is None else slos[k]

        def ren(op: Operand, label: str = label, base: int = base) -> Operand:
            if op.kind != "task":
                return dataclasses.replace(op, name=f"{label}.{op.name}")
            return dataclasses.replace(op, name=f"{label}.{op.name}",
                                       producer=None if op.producer is None else op.producer + base)

        for t in g.tasks:
            due = t.deadline
            if slo is not None and t.index in sinks:
                due = slo if due is None else min(due, slo)
            tasks.append(dataclasses.replace(
                t, index=base + t.index, name=f"{label}.{t.name}", operands=tuple(ren(o) for o in t.operands),
                deadline=due,
                source=tuple(dataclasses.replace(s, name=f"{label}.{s.name}") for s in t.source),
                colocate=f"{label}.{t.colocate}" if t.colocate else ""))
        edges.extend(Edge(ebase + e.index, e.src + base, e.dst + base, e.bytes, e.comm, e.tensor) for e in g.edges)
        inputs.extend((f"{label}.{n}", ty) for n, ty in g.inputs)
        outputs.extend(f"{label}.{o}" for o in g.outputs)
    return TaskGraph(name, tuple(tasks), tuple(edges), tuple(inputs), tuple(outputs))

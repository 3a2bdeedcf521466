"""Read WfCommons workflow instances (WfFormat) into task graphs.

WfFormat (Coleman et al., "WfCommons: A framework for enabling scientific
workflow research and development", FGCS 128, 2022; schema at
github.com/wfcommons/wfformat) records each task's id, parents, children,
input and output files, runtime and core count. Schema 1.5 and 1.6 keep the
structure in ``workflow.specification`` (``tasks``, ``files``) and the
measurements in ``workflow.execution.tasks``; the older 1.4 layout has one
``workflow.tasks`` list with ``files`` entries marked ``link: input|output``.

The graph (docs/importers.md): one kernel-less task per WfCommons task, an
edge per parent/child pair whose bytes are the total size of the files the
parent writes and the child reads; each task's work is chosen so that the
cost model reproduces its recorded runtime on the :class:`ReferenceMachine`.
Every error names the file and the JSON path at fault.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace

from mapper.core.files import Unreadable, read_text
from mapper.core.graph import Edge, Task, TaskGraph, topological_order
from mapper.errors import InputError
from mapper.frontend.importers.dsl_writer import dsl_name, dsl_names
from mapper.frontend.importers.json_input import JsonReader, load_json
from mapper.platform.loader import Device, Platform


@dataclass(frozen=True, slots=True)
class ReferenceMachine:
    """The machine a WfCommons runtime is read against.

    A core runs ``gflops_per_core`` GFLOP/s; a task recorded on ``c`` cores
    with parallel fraction ``p`` gets ``flops = runtime * R * 1e9 / ((1 - p)
    + p / c)``, so that on :meth:`platform` ``(c)`` the cost model's Amdahl
    time ``p F / (c R) + (1 - p) F / R`` is the runtime again (while the
    task's file traffic at ``mem_bandwidth_gbs`` takes no longer).

    ``default_parallel`` is ``p`` where the record does not determine it
    (one core, or no ``avgCPU``).
    """

    #: one scalar FMA per cycle at 3.5 GHz (2 FLOP x 3.5 GHz), the one-core
    #: rate of the shipped cpu-gpu-fpga platform's CPU (AMD EPYC 7763 boost clock)
    gflops_per_core: float = 7.0
    #: 8 channels x DDR4-3200 x 8 B (AMD EPYC 7763 datasheet), as on cpu-gpu-fpga
    mem_bandwidth_gbs: float = 204.8
    default_parallel: float = 0.0

    def __post_init__(self) -> None:
        for key in ("gflops_per_core", "mem_bandwidth_gbs"):
            v = getattr(self, key)
            if not (v > 0 and math.isfinite(v)):
                raise InputError(f"{key} must be a finite number > 0, got {v!r}", obj=key)
        if not 0.0 <= self.default_parallel <= 1.0:
            raise InputError(f"default_parallel must be in [0, 1], got {self.default_parallel!r}",
                             obj="default_parallel")

    def parallel(self, cores: float, avg_cpu: float | None) -> float:
        """Amdahl's parallel fraction from a record: with ``s = avgCPU / 100``
        busy cores out of ``c``, ``1 / ((1 - p) + p / c) = s`` gives ``p = (1 -
        1/s) / (1 - 1/c)``, clamped to [0, 1]; ``default_parallel`` when
        ``c == 1`` or ``avgCPU`` is absent."""
        if avg_cpu is None or cores <= 1:
            return self.default_parallel
        s = avg_cpu / 100.0
        if s <= 1.0:
            return 0.0
        return min(1.0, (1.0 - 1.0 / s) / (1.0 - 1.0 / cores))

    def flops(self, runtime: float, cores: float, parallel: float) -> float:
        """FLOPs that take ``runtime`` seconds on ``cores`` reference cores."""
        return runtime * self.gflops_per_core * 1e9 / ((1.0 - parallel) + parallel / cores)

    def platform(self, cores: int = 1) -> Platform:
        """A one-device platform: the reference CPU with ``cores`` cores."""
        dev = Device(index=0, name="ref", kind="cpu",
                     peak_gflops=(("f32", cores * self.gflops_per_core),),
                     serial_gflops=self.gflops_per_core, mem_bandwidth_gbs=self.mem_bandwidth_gbs)
        return Platform(name=f"wfcommons_ref_{cores}core", devices=(dev,), host="ref",
                        description="the WfCommons importer's reference machine")


@dataclass(frozen=True, slots=True)
class WfTask:
    """One task as recorded: id, program name, runtime (s), cores, avgCPU (%), files."""

    id: str
    program: str
    runtime: float
    cores: float
    avg_cpu: float | None
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    path: str  # JSON path of the task's specification entry
    deadline: float | None = None  # seconds (an optional ``"deadline": "5 ms"``, mapper's extension)


#: A task with its input and output file names, as read.
_Row = tuple[WfTask, tuple[str, ...], tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class Workflow:
    """A WfFormat instance: tasks, file sizes and parent -> child edges (indices, bytes)."""

    name: str
    schema: str
    file: str
    tasks: tuple[WfTask, ...]
    file_sizes: tuple[tuple[str, float], ...]  # sorted by file id
    edges: tuple[tuple[int, int, float], ...]  # (parent, child, bytes), by (child, parent)
    deadline: float | None = None  # seconds: ``workflow.deadline`` ("5 ms"), mapper's extension


def read_wfformat(path: str | os.PathLike[str]) -> Workflow:
    """Read the WfFormat JSON file at ``path`` (see :func:`parse_wfformat`)."""
    file = os.fspath(path)
    try:
        text = read_text(file)
    except Unreadable as err:
        raise InputError(f"cannot read the WfCommons file: {err.why}", obj=file) from None
    return parse_wfformat(text, file)


def parse_wfformat(text: str, file: str = "<string>") -> Workflow:
    """Parse WfFormat ``text`` (schema 1.4, 1.5 or 1.6) into a :class:`Workflow`.

    Raises
    ------
    InputError
        On invalid JSON (with line and column), a missing or mistyped key,
        a duplicate id, an unknown parent, child or file, a missing runtime,
        or a cycle; the message names ``file`` and the JSON path.
    """
    doc = load_json(text, file)
    js = JsonReader(file)
    js.check(doc, "$", "object")
    wf = js.get(doc, "workflow", "$", "object")
    schema = str(doc.get("schemaVersion", ""))
    name = js.get(doc, "name", "$", "string", "workflow")
    if "specification" in wf:
        tasks, sizes = _read_spec(js, wf)
    elif "tasks" in wf:
        tasks, sizes = _read_14(js, wf)
    else:
        raise js.fail("$.workflow", "expected workflow.specification (schema 1.5+) or workflow.tasks (1.4)")
    return replace(_assemble(js, name, schema, tasks, sizes), deadline=js.deadline(wf, "$.workflow"))


def _read_spec(js: JsonReader, wf: dict) -> tuple[list[_Row], dict[str, float]]:
    """Schema 1.5/1.6: specification tasks and files, execution records."""
    spec = js.get(wf, "specification", "$.workflow", "object")
    sp = "$.workflow.specification"
    sizes: dict[str, float] = {}
    for i, f in enumerate(js.get(spec, "files", sp, "array", [])):
        fp = f"{sp}.files[{i}]"
        js.check(f, fp, "object")
        fid = js.get(f, "id", fp, "string")
        size = float(js.get(f, "sizeInBytes", fp, "number"))
        if sizes.get(fid, size) != size:
            raise js.fail(f"{fp}.sizeInBytes", f"file {fid!r} is listed twice with different sizes")
        sizes[fid] = size
    records: dict[str, tuple[float, float, float | None]] = {}
    ex = js.get(wf, "execution", "$.workflow", "object")
    for i, r in enumerate(js.get(ex, "tasks", "$.workflow.execution", "array")):
        rp = f"$.workflow.execution.tasks[{i}]"
        js.check(r, rp, "object")
        rid = js.get(r, "id", rp, "string")
        if rid in records:
            raise js.fail(f"{rp}.id", f"a second execution record for task {rid!r}")
        records[rid] = (float(js.get(r, "runtimeInSeconds", rp, "number")),
                        _cores(js, r, "coreCount", rp), _opt_number(js, r, "avgCPU", rp))
    out = []
    first: dict[str, str] = {}
    for i, t in enumerate(js.get(spec, "tasks", sp, "array")):
        tp = f"{sp}.tasks[{i}]"
        js.check(t, tp, "object")
        tid = js.get(t, "id", tp, "string")
        if tid in first:
            raise js.fail(f"{tp}.id", f"duplicate task id {tid!r} (also {first[tid]})")
        first[tid] = tp
        if tid not in records:
            raise js.fail(f"{tp}.id", f"task {tid!r} has no record in workflow.execution.tasks")
        runtime, cores, avg = records.pop(tid)
        task = WfTask(tid, js.get(t, "name", tp, "string", tid), runtime, cores, avg,
                      js.strings(t, "inputFiles", tp), js.strings(t, "outputFiles", tp), tp, js.deadline(t, tp))
        for key in ("inputFiles", "outputFiles"):
            for k, fid in enumerate(getattr(task, "inputs" if key == "inputFiles" else "outputs")):
                if fid not in sizes:
                    raise js.fail(f"{tp}.{key}[{k}]", f"unknown file {fid!r} (not in specification.files)")
        out.append((task, js.strings(t, "parents", tp), js.strings(t, "children", tp)))
    if records:
        extra = sorted(records)[0]
        raise js.fail("$.workflow.execution.tasks", f"execution record for unknown task {extra!r}")
    return out, sizes


def _read_14(js: JsonReader, wf: dict) -> tuple[list[_Row], dict[str, float]]:
    """Schema 1.4: ``workflow.tasks`` with runtime, cores and ``files`` (link, name, size)."""
    sizes: dict[str, float] = {}
    out = []
    for i, t in enumerate(js.get(wf, "tasks", "$.workflow", "array")):
        tp = f"$.workflow.tasks[{i}]"
        js.check(t, tp, "object")
        tid = js.get(t, "name", tp, "string")
        files: dict[str, list[str]] = {"input": [], "output": []}
        for k, f in enumerate(js.get(t, "files", tp, "array", [])):
            fp = f"{tp}.files[{k}]"
            js.check(f, fp, "object")
            fid = js.get(f, "name", fp, "string") if "name" in f else js.get(f, "id", fp, "string")
            link = js.get(f, "link", fp, "string")
            if link not in files:
                raise js.fail(f"{fp}.link", f"expected 'input' or 'output', got {link!r}")
            key = "sizeInBytes" if "sizeInBytes" in f else "size"
            size = float(js.get(f, key, fp, "number"))
            if sizes.get(fid, size) != size:
                raise js.fail(f"{fp}.{key}", f"file {fid!r} has two different sizes")
            sizes[fid] = size
            files[link].append(fid)
        rkey = "runtimeInSeconds" if "runtimeInSeconds" in t else "runtime"
        task = WfTask(tid, js.get(t, "category", tp, "string", tid), float(js.get(t, rkey, tp, "number")),
                      _cores(js, t, "cores", tp), _opt_number(js, t, "avgCPU", tp),
                      tuple(files["input"]), tuple(files["output"]), tp, js.deadline(t, tp))
        out.append((task, js.strings(t, "parents", tp), js.strings(t, "children", tp)))
    return out, sizes


def _cores(js: JsonReader, obj: dict, key: str, path: str) -> float:
    c = float(js.get(obj, key, path, "number", 1))
    if c < 1:
        raise js.fail(f"{path}.{key}", f"expected a core count >= 1, got {c:g}")
    return c


def _opt_number(js: JsonReader, obj: dict, key: str, path: str) -> float | None:
    v = js.get(obj, key, path, "number", None)
    return None if v is None else float(v)


def _assemble(js: JsonReader, name: str, schema: str,
              rows: list[_Row], sizes: dict[str, float]) -> Workflow:
    """Index the tasks, resolve parents and children, size the edges, reject cycles."""
    index: dict[str, int] = {}
    for i, (t, _, _) in enumerate(rows):
        if t.id in index:
            raise js.fail(f"{t.path}.id", f"duplicate task id {t.id!r} (also {rows[index[t.id]][0].path})")
        index[t.id] = i
    pairs: set[tuple[int, int]] = set()
    for i, (t, parents, children) in enumerate(rows):
        for key, ids in (("parents", parents), ("children", children)):
            for k, other in enumerate(ids):
                j = index.get(other)
                if j is None:
                    raise js.fail(f"{t.path}.{key}[{k}]", f"unknown task {other!r}")
                if j == i:
                    raise js.fail(f"{t.path}.{key}[{k}]", f"task {t.id!r} depends on itself")
                pairs.add((j, i) if key == "parents" else (i, j))
    tasks = tuple(t for t, _, _ in rows)
    edges = []
    for p, c in sorted(pairs, key=lambda e: (e[1], e[0])):
        shared = set(tasks[p].outputs) & set(tasks[c].inputs)
        edges.append((p, c, float(sum(sizes[f] for f in sorted(shared)))))
    _check_acyclic(js, tasks, edges)
    return Workflow(name, schema, js.file, tasks, tuple(sorted(sizes.items())), tuple(edges))


def _check_acyclic(js: JsonReader, tasks: tuple[WfTask, ...], edges: list[tuple[int, int, float]]) -> None:
    n = len(tasks)
    succ: list[list[int]] = [[] for _ in range(n)]
    for p, c, _ in edges:
        succ[p].append(c)
    _, indeg = topological_order(succ)
    left = [i for i in range(n) if indeg[i] > 0]
    if not left:
        return
    # walk predecessors inside the stuck set until a task repeats: that is a cycle
    pred = {c: p for p, c, _ in edges if indeg[p] > 0 and indeg[c] > 0}
    seen: list[int] = []
    i = left[0]
    while i not in seen:
        seen.append(i)
        i = pred[i]
    cycle = seen[seen.index(i):][::-1]
    names = " -> ".join(tasks[k].id for k in cycle + [cycle[0]])
    raise js.fail(f"{tasks[cycle[0]].path}.parents", f"the workflow has a cycle: {names}")


def workflow_graph(wf: Workflow, ref: ReferenceMachine = ReferenceMachine()) -> TaskGraph:
    """The task graph of ``wf``: task names are the ids made DSL identifiers
    (:func:`~mapper.frontend.importers.dsl_writer.dsl_names`), work from the
    :class:`ReferenceMachine`, bytes read/written = input/output file sizes."""
    sizes = dict(wf.file_sizes)
    names = dsl_names([t.id for t in wf.tasks])
    tasks = []
    for i, (t, nm) in enumerate(zip(wf.tasks, names)):
        p = ref.parallel(t.cores, t.avg_cpu)
        tasks.append(Task(i, nm, "task", flops=ref.flops(t.runtime, t.cores, p),
                          bytes_read=float(sum(sizes[f] for f in t.inputs)),
                          bytes_written=float(sum(sizes[f] for f in t.outputs)), parallel=p,
                          deadline=t.deadline))
    edges = tuple(Edge(k, p, c, b) for k, (p, c, b) in enumerate(wf.edges))
    if wf.deadline is not None:  # the workflow's deadline is every sink's (the earlier one wins)
        has_succ = {p for p, _, _ in wf.edges}
        tasks = [t if i in has_succ or (t.deadline is not None and t.deadline <= wf.deadline)
                 else replace(t, deadline=wf.deadline) for i, t in enumerate(tasks)]
    return TaskGraph(dsl_name(wf.name), tuple(tasks), edges)


def import_wfcommons(path: str | os.PathLike[str], ref: ReferenceMachine = ReferenceMachine()) -> TaskGraph:
    """Read a WfFormat file and build its task graph (:func:`workflow_graph`)."""
    return workflow_graph(read_wfformat(path), ref)

"""Read the inputs of msr-fiddle/dnn-partitioning into a task graph and a platform.

Tarnawski, Phanishayee, Devanur, Mahajan and Nagarajan, "Efficient
Algorithms for Device Placement of DNN Graph Operators", NeurIPS 2020, give
their instances as JSON (repository msr-fiddle/dnn-partitioning, MIT):
``maxSizePerFPGA`` (bytes), ``maxFPGAs``, ``maxCPUs``, ``nodes`` with ``id``,
``supportedOnFpga``, ``cpuLatency`` and ``fpgaLatency`` (milliseconds),
``isBackwardNode``, ``colorClass`` and ``size`` (bytes), and ``edges`` with
``sourceId``, ``destId`` and ``cost`` (milliseconds to move the source's
output). Here each node is a kernel-less task with an explicit cost per
device kind (``fpga``, ``cpu``), ``memory`` = its size, ``colocate`` = its
color class and ``backward`` when it is a backward node; each edge has
``comm`` = its cost. The platform has ``maxFPGAs`` accelerators of
``maxSizePerFPGA`` bytes and ``maxCPUs`` CPU cores, and prices a period with
their max-load model (``throughput_model = "max-load"``). Their result files
(human-expert splits, ``{"cpus": [{"nodes": [...]}], "fpgas": [...]}``)
read as a device per task with :func:`read_split`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from mapper.core.files import Unreadable, read_text
from mapper.core.graph import Edge, Task, TaskGraph
from mapper.errors import InputError
from mapper.frontend.importers.dsl_writer import comment_text, dsl_names, dsl_number, graph_to_dsl
from mapper.frontend.importers.json_input import JsonReader, load_json, read_json_file
from mapper.frontend.lowering.values import MAX_SECONDS, MIN_SECONDS
from mapper.platform.schema import MAX_NUMBER

#: Seconds per millisecond: their latencies and costs are milliseconds.
MS = 1e-3
#: Accelerator memory and node sizes, bytes: at least a byte, at most what a platform file takes
#: (mapper.platform.schema.MAX_NUMBER GiB).
MIN_BYTES = 1.0
MAX_BYTES = MAX_NUMBER * 2**30
#: At most this many devices of each kind (the platform has one [[device]] each, and at most
#: mapper.platform.schema.MAX_DEVICES in all).
MAX_DEVICES = 512


@dataclass(frozen=True, slots=True)
class Instance:
    """One input of Tarnawski et al. (module docstring), as read."""

    file: str
    max_size: float  # bytes per accelerator
    accelerators: int
    cpus: int
    ids: tuple[int, ...]  # node ids in file order
    graph: TaskGraph


def read_instance(path: str | os.PathLike[str], name: str | None = None) -> Instance:
    """Read the instance at ``path``; :class:`InputError` naming the JSON path at fault."""
    file = os.fspath(path)
    try:
        text = read_text(file)
    except Unreadable as err:
        raise InputError(f"cannot read the dnn-partitioning file: {err.why}", obj=file) from None
    return parse_instance(text, file, name)


def _flag(js: JsonReader, node: dict, key: str, path: str) -> bool:
    value = node.get(key)
    if value in (0, 1) and not isinstance(value, float):  # True/False and 0/1 both occur in the inputs
        return bool(value)
    raise js.fail(f"{path}.{key}", f"expected true/false or 0/1, got {str(value)[:40]!r}")


def _count(js: JsonReader, doc: dict, key: str, low: int) -> int:
    value = js.get(doc, key, "$", "number")
    if isinstance(value, float) or not low <= value <= MAX_DEVICES:
        raise js.fail(f"$.{key}", f"expected an integer from {low} to {MAX_DEVICES}, got {value!r}")
    return int(value)


def _milliseconds(js: JsonReader, obj: dict, key: str, path: str) -> float:
    """A time in milliseconds (their unit) as seconds, within what the DSL takes."""
    ms = js.get(obj, key, path, "number")
    if ms * MS > MAX_SECONDS:
        raise js.fail(f"{path}.{key}", f"expected at most {MAX_SECONDS / MS:g} ms, got {ms!r}")
    if 0 < ms * MS < MIN_SECONDS:
        raise js.fail(f"{path}.{key}", f"expected 0 or at least {MIN_SECONDS / MS:g} ms, got {ms!r}")
    return float(ms) * MS


def parse_instance(text: str, file: str = "<string>", name: str | None = None) -> Instance:
    """Parse an instance (module docstring) into an :class:`Instance` whose graph is named ``name``
    (default: the file's stem)."""
    doc = load_json(text, file)
    js = JsonReader(file)
    js.check(doc, "$", "object")
    max_size = js.get(doc, "maxSizePerFPGA", "$", "number")
    accelerators = _count(js, doc, "maxFPGAs", 0)
    cpus = _count(js, doc, "maxCPUs", 0)
    if accelerators + cpus == 0:
        raise js.fail("$", "maxFPGAs and maxCPUs are both 0: there is no device")
    if accelerators and not MIN_BYTES <= max_size <= MAX_BYTES:
        raise js.fail("$.maxSizePerFPGA", f"expected a memory size from {MIN_BYTES:g} to {MAX_BYTES:g} bytes, "
                                          f"got {max_size!r}")
    nodes = js.get(doc, "nodes", "$", "array")
    edges = js.get(doc, "edges", "$", "array")
    if not nodes:
        raise js.fail("$.nodes", "the instance has no nodes")
    index: dict[int, int] = {}
    rows = []
    for k, node in enumerate(nodes):
        path = f"$.nodes[{k}]"
        js.check(node, path, "object")
        nid = js.get(node, "id", path, "number")
        if isinstance(nid, float):
            raise js.fail(f"{path}.id", f"expected an integer id, got {nid!r}")
        if nid in index:
            raise js.fail(f"{path}.id", f"duplicate node id {nid} (also $.nodes[{index[nid]}])")
        index[nid] = k
        on_acc = _flag(js, node, "supportedOnFpga", path)
        if not on_acc and not cpus:
            raise js.fail(f"{path}.supportedOnFpga", "this node runs only on a CPU, and maxCPUs is 0")
        cpu = _milliseconds(js, node, "cpuLatency", path)
        acc = _milliseconds(js, node, "fpgaLatency", path)
        backward = _flag(js, node, "isBackwardNode", path)
        color = node.get("colorClass")
        if color is not None and (not isinstance(color, int) or isinstance(color, bool)):
            raise js.fail(f"{path}.colorClass", f"expected an integer, got {str(color)[:40]!r}")
        size = js.get(node, "size", path, "number", 0.0)
        if size > MAX_BYTES:
            raise js.fail(f"{path}.size", f"expected at most {MAX_BYTES:g} bytes, got {size!r}")
        if not cpus and size > max_size:
            raise js.fail(f"{path}.size", f"this node of {size:g} bytes fits on no accelerator (maxSizePerFPGA "
                                          f"{max_size:g}), and maxCPUs is 0")
        label = node.get("name")
        rows.append((nid, on_acc, cpu, acc, backward, color, float(size), label if isinstance(label, str) else ""))
    names = dsl_names([label or f"n{nid}" for nid, *_, label in rows])
    tasks = []
    for k, (_nid, on_acc, cpu, acc, backward, color, size, _) in enumerate(rows):
        # no CPU cost where the platform has no CPU (every kind a task names must be there)
        cost = ((("cpu", cpu),) if cpus else ()) + ((("fpga", acc),) if on_acc else ())
        tasks.append(Task(k, names[k], "task", explicit_cost=cost, memory=size,
                          colocate="" if color is None else f"c{color}" if color >= 0 else f"c_{-color}",
                          backward=backward))
    comm: dict[tuple[int, int], float] = {}
    for k, e in enumerate(edges):
        path = f"$.edges[{k}]"
        js.check(e, path, "object")
        ends = []
        for key in ("sourceId", "destId"):
            nid = js.get(e, key, path, "number")
            if nid not in index:
                raise js.fail(f"{path}.{key}", f"no node has id {nid}")
            ends.append(index[nid])
        if ends[0] == ends[1]:
            raise js.fail(path, f"an edge from node {rows[ends[0]][0]} to itself")
        seconds = _milliseconds(js, e, "cost", path)
        pair = (ends[0], ends[1])
        comm[pair] = max(comm.get(pair, 0.0), seconds)  # a repeated edge moves one output once
    order = sorted(comm, key=lambda p: (p[1], p[0]))
    graph_edges = tuple(Edge(i, u, v, 0.0, comm[u, v]) for i, (u, v) in enumerate(order))
    stem = name or os.path.splitext(os.path.basename(file))[0] or "instance"
    try:
        graph = TaskGraph(dsl_names([stem])[0], tuple(tasks), graph_edges)
    except InputError as err:  # a cycle
        raise js.fail("$.edges", err.message) from None
    return Instance(file, float(max_size), accelerators, cpus, tuple(r[0] for r in rows), graph)


def instance_dsl(inst: Instance) -> str:
    """The graph as DSL text, with a header that says where it came from."""
    g = inst.graph
    backward = sum(t.backward for t in g.tasks)
    classes = len({t.colocate for t in g.tasks if t.colocate})
    header = [
        f"{os.path.basename(inst.file)}: a dnn-partitioning instance (Tarnawski et al., NeurIPS 2020), "
        f"{len(g.tasks)} nodes ({backward} backward), {len(g.edges)} edges, {classes} colocation classes",
        "imported by `mapper import dnn-partitioning`: times in seconds (their milliseconds x 1e-3), memory in "
        "bytes; map with --objective throughput on the platform written with it (max-load, memory checked)",
    ]
    return graph_to_dsl(g, header)


def instance_platform(inst: Instance) -> str:
    """The platform as TOML: ``maxFPGAs`` accelerators and ``maxCPUs`` CPU cores, max-load periods."""
    gib = inst.max_size / 2**30
    lines = [
        f"# {comment_text(os.path.basename(inst.file))}: the devices of a dnn-partitioning instance (Tarnawski et al., "
        "NeurIPS 2020)",
        "# explicit-cost graphs only: the tasks give their times per kind and the edges their transfer times",
        f'name = "{inst.graph.name}"',
        f'description = "{inst.accelerators} accelerators of {dsl_number(inst.max_size)} bytes and '
        f'{inst.cpus} CPU cores; max-load periods"',
        'throughput_model = "max-load"',
    ]
    for k in range(1, inst.cpus + 1):
        lines += ["", "[[device]]", f'name = "cpu{k}"', 'kind = "cpu"']
    for k in range(1, inst.accelerators + 1):
        lines += ["", "[[device]]", f'name = "fpga{k}"', 'kind = "fpga"', f"memory_gib = {dsl_number(gib)}"]
    return "\n".join(lines) + "\n"


def read_split(path: str | os.PathLike[str], inst: Instance) -> tuple[int, ...]:
    """A result file of theirs (``cpus``/``fpgas`` lists of ``nodes``) as a device per task of
    :func:`instance_platform` (CPU cores first, then accelerators). As their ``-expert`` mode
    does, a node the split leaves out goes where its color class went."""
    file = os.fspath(path)
    doc = read_json_file(file, "the split")
    js = JsonReader(file)
    js.check(doc, "$", "object")
    pos = {nid: k for k, nid in enumerate(inst.ids)}
    device = [-1] * len(inst.ids)
    base = {"cpus": 0, "fpgas": inst.cpus}
    for key, first in base.items():
        groups = js.get(doc, key, "$", "array", [])
        limit = inst.cpus if key == "cpus" else inst.accelerators
        for j, part in enumerate(groups):
            members = js.get(part, "nodes", f"$.{key}[{j}]", "array")
            if members and j >= limit:
                raise js.fail(f"$.{key}[{j}]", f"the instance has only {limit} {key}")
            for nid in members:
                if nid not in pos:
                    raise js.fail(f"$.{key}[{j}].nodes", f"no node has id {nid}")
                # their evaluation puts every CPU node on CPU 0
                device[pos[nid]] = 0 if key == "cpus" else first + j
    where: dict[str, set[int]] = {}
    for t, d in zip(inst.graph.tasks, device):
        if d >= 0 and t.colocate:
            where.setdefault(t.colocate, set()).add(d)
    for k, t in enumerate(inst.graph.tasks):
        if device[k] < 0:
            options = where.get(t.colocate, set())
            if len(options) != 1:
                raise js.fail("$", f"node {inst.ids[k]} is in no part, and its color class does not say where")
            device[k] = next(iter(options))
    return tuple(device)

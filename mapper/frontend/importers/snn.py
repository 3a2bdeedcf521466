"""Spiking neural networks as task graphs: populations and projections from a small JSON file.

The use case of Ronzani and Silvano (mapping SNNs onto neuromorphic cores by
hypergraph partitioning): each neuron is a task, each synapse an edge, and a
neuron's axon (the neuron and its targets) one net. The file::

    {"name": "mnist-mlp", "seed": 0,
     "populations": [{"name": "input", "size": 784}, {"name": "hidden", "size": 4096}, ...],
     "projections": [{"from": "input", "to": "hidden", "fan_out": 64}, ...]}

A projection connects each neuron of ``from`` to ``fan_out`` distinct neurons of
``to`` drawn uniformly (a seeded generator, so the same file gives the same
graph), or to all of them (``"all": true``); with ``"radius": R`` the targets are
drawn from the ``2R + 1`` neurons around the source's relative position (a
topographic, convolution-like projection). Projections must be feed-forward
(the task graph is one time step, a DAG). A neuron's time per step is one
neuron update plus one synaptic operation per incoming synapse, and a spike
between cores takes one hop, with Loihi's figures (Davies et al., "Loihi: a
neuromorphic manycore processor with on-chip learning", IEEE Micro 38(1),
2018, Table 2: neuron update 8.4 ns, synaptic operation 3.5 ns, spike within
a tile 2.1 ns); every task's cost is for kind ``cpu`` (the cores of
``platforms/loihi.toml``).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from mapper.core.files import Unreadable, read_text
from mapper.core.graph import Edge, Task, TaskGraph
from mapper.errors import InputError
from mapper.frontend.importers.dsl_writer import is_name
from mapper.frontend.lowering.program import MAX_TASKS

NEURON_UPDATE_S = 8.4e-9
SYNAPTIC_OP_S = 3.5e-9
SPIKE_HOP_S = 2.1e-9
#: The most synapses a network may have.
MAX_SYNAPSES = 20_000_000


@dataclass(frozen=True, slots=True)
class Network:
    name: str
    seed: int
    populations: tuple[tuple[str, int], ...]
    projections: tuple[tuple[str, str, int | None, int | None], ...]  # (from, to, fan_out or None = all, radius)


def read_network(path: str) -> Network:
    """The network in ``path``; every mistake exits 2 naming the key."""
    try:
        raw = json.loads(read_text(path))
    except Unreadable as err:
        raise InputError(str(err), obj=path) from None
    except json.JSONDecodeError as err:
        raise InputError(f"not JSON: {err.msg} at line {err.lineno} column {err.colno}", obj=path) from None
    if not isinstance(raw, dict):
        raise InputError("expected a JSON object with populations and projections", obj=path)
    unknown = sorted(set(raw) - {"name", "seed", "populations", "projections"})
    if unknown:
        raise InputError(f"unknown key {unknown[0]!r}; expected name, seed, populations, projections", obj=path)
    name = raw.get("name", "snn")
    seed = raw.get("seed", 0)
    if not isinstance(name, str) or not is_name(name):
        raise InputError(f"name must be a DSL name (letters, digits, _), got {name!r}", obj=path)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"seed must be an integer >= 0, got {seed!r}", obj=path)
    pops: dict[str, int] = {}
    for i, p in enumerate(_list(raw, "populations", path)):
        pname, size = (p.get("name"), p.get("size")) if isinstance(p, dict) else (None, None)
        if not isinstance(pname, str) or not is_name(pname) or pname in pops:
            raise InputError(f"populations[{i}].name must be a new DSL name, got {pname!r}", obj=path)
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_TASKS:
            raise InputError(f"populations[{i}].size must be an integer from 1 to {MAX_TASKS}, got {size!r}",
                             obj=path)
        pops[pname] = size
    if sum(pops.values()) > MAX_TASKS:
        raise InputError(f"the network has {sum(pops.values())} neurons, more than {MAX_TASKS}", obj=path)
    projs = []
    for i, p in enumerate(_list(raw, "projections", path)):
        if not isinstance(p, dict) or p.get("from") not in pops or p.get("to") not in pops:
            raise InputError(f"projections[{i}] needs from and to naming populations ({', '.join(pops)})",
                             obj=path)
        fan = None if p.get("all") is True else p.get("fan_out")
        if fan is not None and (isinstance(fan, bool) or not isinstance(fan, int)
                                or not 1 <= fan <= pops[p["to"]]):
            raise InputError(f"projections[{i}].fan_out must be an integer from 1 to the size of "
                             f"{p['to']} ({pops[p['to']]}), or all: true", obj=path)
        radius = p.get("radius")
        if radius is not None and (isinstance(radius, bool) or not isinstance(radius, int) or radius < 0
                                   or fan is None or fan > 2 * radius + 1):
            raise InputError(f"projections[{i}].radius must be an integer >= (fan_out - 1) / 2 with a fan_out, "
                             f"got {radius!r}", obj=path)
        projs.append((p["from"], p["to"], fan, radius))
    _feed_forward(list(pops), projs, path)
    synapses = sum(pops[a] * (pops[b] if f is None else f) for a, b, f, _ in projs)
    if synapses > MAX_SYNAPSES:
        raise InputError(f"the network has {synapses} synapses, more than {MAX_SYNAPSES}", obj=path)
    return Network(name, seed, tuple(pops.items()), tuple(projs))


def _list(raw: dict, key: str, path: str) -> list:
    value = raw.get(key)
    if not isinstance(value, list) or not value and key == "populations":
        raise InputError(f"{key} must be a list", obj=path)
    return value


def _feed_forward(names: list[str], projs: list, path: str) -> None:
    succ: dict[str, set[str]] = {n: set() for n in names}
    for a, b, _, _ in projs:
        succ[a].add(b)
    state: dict[str, int] = {}

    def visit(n: str, trail: list[str]) -> None:
        state[n] = 1
        for m in sorted(succ[n]):
            if state.get(m) == 1:
                loop = " -> ".join([*trail[trail.index(m):], m]) if m in trail else f"{n} -> {m}"
                raise InputError(f"recurrent projections {loop}: a time step's task graph must be acyclic; "
                                 "give the network feed-forward", obj=path)
            if m not in state:
                visit(m, [*trail, m])
        state[n] = 2

    for n in names:
        if n not in state:
            visit(n, [n])


def network_graph(net: Network) -> TaskGraph:
    """One task per neuron (``POP_i``), one edge per synapse carrying the source's spike."""
    first: dict[str, int] = {}
    n = 0
    for pname, size in net.populations:
        first[pname] = n
        n += size
    sizes = dict(net.populations)
    rng = random.Random(net.seed)
    pairs: list[tuple[int, int]] = []
    fan_in = [0] * n
    for a, b, fan, radius in net.projections:
        lo, size = first[b], sizes[b]
        for k, u in enumerate(range(first[a], first[a] + sizes[a])):
            window = range(size)
            if radius is not None:
                centre = min(size - 1, k * size // sizes[a])
                left = max(0, min(centre - radius, size - (2 * radius + 1)))
                window = range(left, min(size, left + 2 * radius + 1))
            targets = window if fan is None else sorted(rng.sample(window, min(fan, len(window))))
            pairs.extend((u, lo + j) for j in targets)
    pairs = sorted(set(pairs))  # two projections between the same populations may draw one synapse twice
    for _, v in pairs:
        fan_in[v] += 1
    tasks = []
    for pname, size in net.populations:
        base = first[pname]
        for i in range(size):
            t = base + i
            seconds = NEURON_UPDATE_S + SYNAPTIC_OP_S * fan_in[t]
            tasks.append(Task(index=t, name=f"{pname}_{i}", op="task", explicit_cost=(("cpu", seconds),)))
    edges = tuple(Edge(index=i, src=u, dst=v, bytes=0.0, comm=SPIKE_HOP_S, tensor="spike")
                  for i, (u, v) in enumerate(pairs))
    return TaskGraph(name=net.name, tasks=tuple(tasks), edges=edges)

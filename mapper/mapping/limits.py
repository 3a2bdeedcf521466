"""Per-device task capacity and distinct-inbound-net (fan-in) limits, and the repair that meets them.

Ronzani and Silvano map spiking neural networks onto neuromorphic cores by
partitioning a hypergraph (one net per neuron's axon: the neuron and its
targets) under two limits per core: how many neurons it holds and how many
distinct nets enter it (its input axons). Here a device's ``max_tasks`` and
``max_inbound`` (platform keys) are those limits; a net enters device ``d``
when one of its consumers runs on ``d`` and its producer does not. A
partition from Mt-KaHyPar meets the size limits up to its imbalance and
ignores fan-in; :func:`repair` then moves tasks greedily, in rounds: for each
device over a limit it scores every move of its tasks (to a device that can
run the task, keeps room and stays within its own fan-in) by how much it lowers
the overfull count, then by the change of the total inbound count, and applies
the best moves while they still help (each re-scored before it is applied, in
O(degree)). When a round frees nothing the limits are reported as not met
(:class:`InfeasibleError`, exit 3) with the device and its count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from mapper.costing.cost import CostTable
from mapper.errors import InfeasibleError
from mapper.mapping.hypergraph import Nets

#: CP-SAT decides when the greedy repair stalls on at most this many (pins + tasks) x devices.
EXACT_PINS = 200_000
#: Rounds of repair at most (each visits every device over a limit once).
MAX_ROUNDS = 50


@dataclass(frozen=True, slots=True)
class Limits:
    """``tasks[d]`` and ``inbound[d]`` of every device (``inf``: none)."""

    tasks: tuple[float, ...]
    inbound: tuple[float, ...]

    @property
    def any(self) -> bool:
        return any(math.isfinite(x) for x in (*self.tasks, *self.inbound))


def limits_of(cost: CostTable) -> Limits:
    """The platform's ``max_tasks`` and ``max_inbound`` per device."""
    devs = cost.platform.devices
    return Limits(tuple(math.inf if d.max_tasks is None else float(d.max_tasks) for d in devs),
                  tuple(math.inf if d.max_inbound is None else float(d.max_inbound) for d in devs))


def inbound_counts(nets: Nets, device: Sequence[int], n_devices: int) -> list[int]:
    """Distinct nets entering each device: a consumer there, the producer elsewhere."""
    out = [0] * n_devices
    for pins in nets.pins:
        src = device[pins[0]]
        for d in {device[v] for v in pins[1:]}:
            if d != src:
                out[d] += 1
    return out


class _State:
    """Consumer counts per net and device, kept up to date under moves."""

    def __init__(self, cost: CostTable, nets: Nets, device: Sequence[int]) -> None:
        n, nd = cost.n_tasks, cost.n_devices
        self.cost, self.nets, self.dev = cost, nets, list(device)
        self.ins: list[list[int]] = [[] for _ in range(n)]
        self.outs: list[list[int]] = [[] for _ in range(n)]
        self.cnt: list[dict[int, int]] = []
        for i, pins in enumerate(nets.pins):
            self.outs[pins[0]].append(i)
            c: dict[int, int] = {}
            for v in pins[1:]:
                self.ins[v].append(i)
                c[self.dev[v]] = c.get(self.dev[v], 0) + 1
            self.cnt.append(c)
        self.inb = inbound_counts(nets, self.dev, nd)
        self.size = [0] * nd
        for d in self.dev:
            self.size[d] += 1

    def delta(self, v: int, b: int) -> tuple[int, int]:
        """Change of the inbound counts of ``v``'s device and of ``b`` if ``v`` moved to ``b``."""
        a = self.dev[v]
        da = db = 0
        for i in self.ins[v]:
            p, c = self.dev[self.nets.pins[i][0]], self.cnt[i]
            if c[a] == 1 and p != a:
                da -= 1
            if c.get(b, 0) == 0 and p != b:
                db += 1
        for i in self.outs[v]:
            c = self.cnt[i]
            if c.get(a, 0) > 0:
                da += 1
            if c.get(b, 0) > 0:
                db -= 1
        return da, db

    def move(self, v: int, b: int) -> None:
        a = self.dev[v]
        da, db = self.delta(v, b)
        for i in self.ins[v]:
            c = self.cnt[i]
            c[a] -= 1
            if not c[a]:
                del c[a]
            c[b] = c.get(b, 0) + 1
        self.dev[v] = b
        self.inb[a] += da
        self.inb[b] += db
        self.size[a] -= 1
        self.size[b] += 1

    def targets(self, v: int) -> set[int]:
        """Devices worth trying for ``v``: its neighbours' and the emptiest feasible one."""
        nets, dev = self.nets, self.dev
        out = {dev[nets.pins[i][0]] for i in self.ins[v]}
        for i in self.outs[v]:
            out.update(self.cnt[i])
        feasible = self.cost.feasible_devices(v)
        out.intersection_update(feasible)
        if feasible:
            out.add(min(feasible, key=lambda d: (self.size[d], self.inb[d], d)))
        out.discard(dev[v])
        return out


def _over(state: _State, limits: Limits, d: int) -> bool:
    return state.size[d] > limits.tasks[d] or state.inb[d] > limits.inbound[d]


def _allowed(state: _State, limits: Limits, b: int, db: int) -> bool:
    return state.size[b] + 1 <= limits.tasks[b] and state.inb[b] + db <= limits.inbound[b]


def _round(state: _State, limits: Limits, d: int) -> bool:
    """One repair round on device ``d``; whether it moved anything."""
    by_size = state.size[d] > limits.tasks[d]
    scored = []
    for v in (t for t, x in enumerate(state.dev) if x == d):
        for b in sorted(state.targets(v)):
            da, db = state.delta(v, b)
            if (by_size or da < 0) and _allowed(state, limits, b, db):
                scored.append((0 if by_size else da, da + db, v, b))
    scored.sort()
    moved: set[int] = set()
    for _, _, v, b in scored:
        if not _over(state, limits, d):
            break
        if v in moved:
            continue
        da, db = state.delta(v, b)
        size_needed = state.size[d] > limits.tasks[d]
        if (size_needed or da < 0) and (size_needed or state.inb[d] + da >= 0) and _allowed(state, limits, b, db):
            if not size_needed and state.inb[d] <= limits.inbound[d]:
                break
            state.move(v, b)
            moved.add(v)
    return bool(moved)


def repair(cost: CostTable, nets: Nets, device: Sequence[int], limits: Limits, seconds: float = 10.0,
           seed: int = 0) -> tuple[int, ...]:
    """``device`` moved until every device meets ``limits``, or :class:`InfeasibleError` naming the
    device and its count. When the greedy rounds stall on a model of at most :data:`EXACT_PINS`
    pins times devices, CP-SAT decides (:func:`~mapper.mapping.exact.cpsat_model.solve_limits`,
    within ``seconds``): its assignment, or a proof that none exists."""
    state = _State(cost, nets, device)
    nd = cost.n_devices
    for v, d in enumerate(state.dev):  # a task on a device that cannot run it goes first
        if d not in cost.feasible_devices(v):
            options = [b for b in cost.feasible_devices(v) if state.size[b] < limits.tasks[b]]
            if options:
                state.move(v, min(options, key=lambda b: (state.size[b], b)))
    for _ in range(MAX_ROUNDS):
        over = [d for d in range(nd) if _over(state, limits, d)]
        if not over:
            return tuple(state.dev)
        if not any([_round(state, limits, d) for d in over]):
            break
    proof = ""
    if sum(len(p) for p in nets.pins) * cost.n_devices + cost.n_tasks * cost.n_devices <= EXACT_PINS:
        from mapper.mapping.exact.cpsat_model import solve_limits

        status, exact = solve_limits([cost.feasible_devices(t) for t in range(cost.n_tasks)], nets.pins,
                                     limits.tasks, limits.inbound, state.dev, seconds, seed)
        if status == "feasible":
            return tuple(exact)
        proof = " (CP-SAT proves that no mapping meets them)" if status == "infeasible" else ""
    return _fail(cost, state, limits, proof)


def _fail(cost: CostTable, state: _State, limits: Limits, proof: str) -> tuple[int, ...]:
    names = cost.platform.devices
    for d in range(cost.n_devices):
        if state.size[d] > limits.tasks[d]:
            raise InfeasibleError(f"device {names[d].name} would hold {state.size[d]} tasks, over its max_tasks "
                                  f"{limits.tasks[d]:g}: no partition found within the limits{proof}",
                                  obj=names[d].name)
        if state.inb[d] > limits.inbound[d]:
            raise InfeasibleError(f"device {names[d].name} would receive {state.inb[d]} distinct inbound nets, "
                                  f"over its max_inbound {limits.inbound[d]:g}: no partition found within the "
                                  f"limits{proof}", obj=names[d].name)
    return tuple(state.dev)


def check(cost: CostTable, nets: Nets, device: Sequence[int], limits: Limits) -> list[str]:
    """What ``device`` breaks of ``limits`` (empty when nothing)."""
    nd = cost.n_devices
    size = [0] * nd
    for d in device:
        size[d] += 1
    inb = inbound_counts(nets, device, nd)
    names = cost.platform.devices
    out = [f"{names[d].name} holds {size[d]} tasks, max_tasks {limits.tasks[d]:g}"
           for d in range(nd) if size[d] > limits.tasks[d]]
    out += [f"{names[d].name} receives {inb[d]} distinct inbound nets, max_inbound {limits.inbound[d]:g}"
            for d in range(nd) if inb[d] > limits.inbound[d]]
    return out

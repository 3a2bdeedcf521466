"""An independent check of a :class:`~mapper.engine.schedule.Schedule`.

Recomputes every rule of the delay model (docs/architecture.md) from the
schedule's CostTable and slots alone: it never calls ``mapper.engine.schedule``'s
builders nor any mapper, so a bug there shows up here. Times are compared
with a tolerance of 1e-9 relative to the schedule's time scale (its largest
finite time).

A task that starts a delegated subgraph (a run on a device with
``invoke_us``, docs/architecture.md) lasts its cost plus ``invoke_us``.

Violation kinds: ``structure`` (slots missing or misnumbered), ``time``
(non-finite or negative times), ``placement``, ``duration``, ``overlap``,
``precedence``, ``transfer``, ``link`` (two transfers on one link at once,
under contention), ``order`` (``schedule.order``, when given, disagrees
with the slots), ``stream`` (a pipelined FPGA chain off its pipeline
times), ``colocation`` (a ``colocate`` class split over devices),
``memory`` (the tasks' static footprints, and the peak over time of
:mod:`mapper.engine.memory`), ``area``, ``limits`` (a device's ``max_tasks`` and
``max_inbound``), ``makespan``; and, with
``deadlines=True`` (``--objective deadline``), ``deadline`` (a task ending
after its deadline; :func:`deadline_misses` lists them otherwise, for notes).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mapper.costing.cost import CostTable, stream_chain_times
from mapper.engine.memory import peak_memory
from mapper.errors import MapperError

if TYPE_CHECKING:  # types only: the validator shares no code with the schedule builder
    from mapper.engine.schedule import Schedule, Transfer
    from mapper.mapping.base import MapResult

INF = math.inf


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: its kind, a message, and the tasks and edges involved."""

    kind: str
    message: str
    tasks: tuple[int, ...] = ()
    edges: tuple[int, ...] = ()


#: The last schedule checked (held weakly: the cache never keeps a graph alive) and its violations:
#: a compile checks the kept heuristic's schedule when it chooses it and again as the result (a
#: frozen schedule's verdict cannot change).
_last: list[tuple[weakref.ref[Schedule], tuple[Violation, ...]]] = []


def validate(schedule: Schedule, deadlines: bool = False) -> list[Violation]:
    """Every violation of the timing semantics in ``schedule`` ([] if valid); with
    ``deadlines``, every missed deadline too."""
    if _last and _last[0][0]() is schedule:
        out = list(_last[0][1])
    else:
        out = _Checker(schedule).run()
        _last[:] = [(weakref.ref(schedule), tuple(out))]
    return out + deadline_misses(schedule) if deadlines else out


def deadline_misses(schedule: Schedule) -> list[Violation]:
    """A ``deadline`` violation for each task that ends after its deadline (1e-9 relative
    tolerance, as the other checks), read from the slots alone."""
    tasks = schedule.cost.graph.tasks
    out = []
    for sl in sorted(schedule.slots, key=lambda s: s.task):
        t = tasks[sl.task]
        if t.deadline is not None and sl.end > t.deadline * (1 + 1e-9):
            out.append(Violation("deadline", f"task {t.name!r} ends at {sl.end:.6g} s, after its deadline "
                                             f"{t.deadline:.6g} s", (sl.task,)))
    return out


class _Checker:
    def __init__(self, schedule: Schedule) -> None:
        self.s = schedule
        self.cost: CostTable = schedule.cost
        self.g = self.cost.graph
        self.out: list[Violation] = []
        finite = [abs(x) for sl in schedule.slots for x in (sl.start, sl.end) if math.isfinite(x)]
        self.tol = 1e-9 * max(finite + [abs(schedule.makespan) if math.isfinite(schedule.makespan) else 0.0, 1e-300])
        self.chain_edges: set[int] = set()
        self.run_of: dict[int, int] = {}
        self.seqs: dict[int, list[int]] = {}  # each device's tasks in execution order (check_streams)
        self.synced: dict[tuple[int, int], float | None] = {}  # (a, b) -> its shared-memory delay, if that

    def add(self, kind: str, message: str, tasks=(), edges=()) -> None:
        self.out.append(Violation(kind, message, tuple(tasks), tuple(edges)))

    def name(self, t: int) -> str:
        return self.g.tasks[t].name

    def dev(self, d: int) -> str:
        return self.cost.platform.devices[d].name

    def run(self) -> list[Violation]:
        if not self.check_structure():
            return self.out
        sane = self.check_times()
        self.check_placement()
        self.check_colocation()
        if not sane:
            return self.out
        self.check_streams()
        self.check_durations()
        self.check_overlap()
        self.check_transfers()
        self.check_precedence()
        self.check_capacity()
        self.check_limits()
        self.check_makespan()
        return self.out

    # -- individual rules ------------------------------------------------------
    def check_structure(self) -> bool:
        n, nd = len(self.g.tasks), len(self.cost.platform.devices)
        slots = self.s.slots
        if len(slots) != n:
            self.add("structure", f"{len(slots)} slots for {n} tasks: every task must be placed exactly once")
            return False
        ok = True
        for t, sl in enumerate(slots):
            if sl.task != t:
                self.add("structure", f"slot {t} holds task {sl.task}: every task must be placed exactly once",
                         tasks=(t,))
                ok = False
            elif not (isinstance(sl.device, int) and 0 <= sl.device < nd):
                self.add("placement", f"task {self.name(t)} is on device {sl.device!r}, which does not exist",
                         tasks=(t,))
                ok = False
        return ok

    def check_times(self) -> bool:
        ok = True
        for sl in self.s.slots:
            if not (math.isfinite(sl.start) and math.isfinite(sl.end)) or sl.start < 0 or sl.end < sl.start:
                self.add("time", f"task {self.name(sl.task)} runs [{sl.start}, {sl.end}]: times must be finite, "
                                 f">= 0 and end >= start", tasks=(sl.task,))
                ok = False
        for tr in self.s.transfers:
            if not (math.isfinite(tr.start) and math.isfinite(tr.end)) or tr.start < 0 or tr.end < tr.start:
                self.add("time", f"transfer of edge {tr.edge} runs [{tr.start}, {tr.end}]", edges=(tr.edge,))
                ok = False
        if not math.isfinite(self.s.makespan) or self.s.makespan < 0:
            self.add("time", f"makespan {self.s.makespan} is not a finite time >= 0")
            ok = False
        return ok

    def check_placement(self) -> None:
        for sl in self.s.slots:
            t, d = sl.task, sl.device
            task, dev = self.g.tasks[t], self.cost.platform.devices[d]
            if not self.cost.time[t][d] < INF:
                self.add("placement", f"task {task.name} is on {dev.name}, where it cannot run", tasks=(t,))
            elif not task.placement.permits(dev.name, dev.kind):
                self.add("placement", f"task {task.name} is on {dev.name}, which its placement {task.placement} "
                                      f"forbids", tasks=(t,))

    def _linked(self, u: int, v: int) -> bool:
        g = self.g
        return (g.tasks[u].streamable > 0 and g.tasks[v].streamable > 0
                and {g.edges[e].dst for e in g.succs[u]} == {v} and {g.edges[e].src for e in g.preds[v]} == {u})

    def sequences(self) -> dict[int, list[int]]:
        """Each device's tasks in execution order: ``schedule.order`` when it
        is given (checked against the slots), else by (start, end, topological
        position)."""
        topo = {t: k for k, t in enumerate(self.g.topo_order)}
        slots = self.s.slots
        by_dev: dict[int, list[int]] = {}
        for sl in sorted(slots, key=lambda sl: (sl.start, sl.end, topo[sl.task])):
            by_dev.setdefault(sl.device, []).append(sl.task)
        order = self.s.order
        if not order:
            return by_dev
        for d, given in enumerate(order):
            seq = list(given)
            if sorted(seq) != sorted(by_dev.get(d, [])):
                self.add("order", f"the order of {self.dev(d)} lists tasks {seq}, the tasks placed there are "
                                  f"{sorted(by_dev.get(d, []))}", tasks=seq)
                continue
            if any(slots[b].start < slots[a].start - self.tol for a, b in zip(seq, seq[1:])):
                self.add("order", f"tasks on {self.dev(d)} start out of their order {seq}", tasks=seq)
                continue
            by_dev[d] = seq
        return by_dev

    def check_streams(self) -> None:
        """Under streaming, runs of linked streamable tasks consecutive on a
        streaming FPGA must follow ``cost.stream_chain_times`` from the run's start."""
        self.seqs = seqs = self.sequences()
        if not self.s.options.streaming:
            return
        runs: list[list[int]] = []
        for d, dev in enumerate(self.cost.platform.devices):
            if dev.kind != "fpga" or not dev.streaming:
                continue
            run: list[int] = []
            for t in seqs.get(d, []):
                if run and self._linked(run[-1], t):
                    run.append(t)
                    continue
                if len(run) > 1:
                    runs.append(run)
                run = [t]
            if len(run) > 1:
                runs.append(run)
        if not runs:
            return
        slots = self.s.slots
        for k, run in enumerate(runs):
            d = slots[run[0]].device
            base = slots[run[0]].start
            chunks = min(self.g.tasks[t].streamable for t in run)
            launch = self.cost.platform.devices[d].launch_us * 1e-6
            offsets = stream_chain_times([self.cost.time[t][d] for t in run], chunks, [launch] * len(run))
            for t, (a, b) in zip(run, offsets):
                self.run_of[t] = k
                if abs(slots[t].start - base - a) > self.tol or abs(slots[t].end - base - b) > self.tol:
                    self.add("stream", f"task {self.name(t)} streams on {self.dev(d)} at [{slots[t].start}, "
                                       f"{slots[t].end}], the pipeline gives [{base + a}, {base + b}]",
                             tasks=tuple(run))
            for u, v in zip(run, run[1:]):
                self.chain_edges.update(e for e in self.g.succs[u] if self.g.edges[e].dst == v)

    def invocation_heads(self) -> set[int]:
        """Tasks that start a delegated subgraph on a device with ``invoke_us``: the first of the
        device's order, each one of another weakly connected part (model) than the task before it,
        and each one with an input from another device that depends on the run of the task before
        it (the partition's border, as ONNX Runtime's partitioner draws it)."""
        heads: set[int] = set()
        if all(dev.invoke_us <= 0 for dev in self.cost.platform.devices):
            return heads
        device = {sl.task: sl.device for sl in self.s.slots}
        part: dict[int, int] = {}  # task -> the first task of its weakly connected part (one model)
        for t0 in range(len(self.g.tasks)):
            if t0 in part:
                continue
            part[t0], todo = t0, [t0]
            while todo:
                u = todo.pop()
                for e in (*self.g.preds[u], *self.g.succs[u]):
                    for v in (self.g.edges[e].src, self.g.edges[e].dst):
                        if v not in part:
                            part[v] = t0
                            todo.append(v)
        for d, seq in self.seqs.items():
            if self.cost.platform.devices[d].invoke_us <= 0:
                continue
            after: set[int] = set()  # every task downstream of the current run's tasks
            for k, t in enumerate(seq):
                if k == 0 or part[t] != part[seq[k - 1]] or any(
                        device.get(self.g.edges[e].src) != d and self.g.edges[e].src in after for e in self.g.preds[t]):
                    heads.add(t)
                    after = set()
                todo = [t]
                while todo:
                    for e in self.g.succs[todo.pop()]:
                        if self.g.edges[e].dst not in after:
                            after.add(self.g.edges[e].dst)
                            todo.append(self.g.edges[e].dst)
        return heads

    def check_durations(self) -> None:
        heads = self.invocation_heads()
        for sl in self.s.slots:
            if sl.task in self.run_of:
                continue
            want = self.cost.time[sl.task][sl.device]
            if sl.task in heads:
                want += self.cost.platform.devices[sl.device].invoke_us * 1e-6
            if want < INF and abs((sl.end - sl.start) - want) > max(self.tol, 1e-9 * want):
                self.add("duration", f"task {self.name(sl.task)} lasts {sl.end - sl.start} on {self.dev(sl.device)}, "
                                     f"its cost is {want}", tasks=(sl.task,))

    def check_overlap(self) -> None:
        by_dev: dict[int, list] = {}
        for sl in self.s.slots:
            by_dev.setdefault(sl.device, []).append(sl)
        for d, slots in sorted(by_dev.items()):
            slots.sort(key=lambda sl: (sl.start, sl.end, sl.task))
            last = None  # slot with the latest end so far
            for sl in slots:
                if last is not None and sl.start < last.end - self.tol:
                    same_run = self.run_of.get(sl.task, -1) == self.run_of.get(last.task, -2)
                    if not same_run:
                        self.add("overlap", f"tasks {self.name(last.task)} and {self.name(sl.task)} overlap on "
                                            f"{self.dev(d)}", tasks=(last.task, sl.task))
                if last is None or sl.end > last.end:
                    last = sl

    def handover(self, e: int, a: int, b: int) -> float:
        """The delay of edge ``e`` from device ``a`` to ``b``: over a route of ``shared_memory`` links
        the sum of their ``sync_us`` (no bytes move), recomputed from the platform; else ``cost.comm``."""
        if (a, b) not in self.synced:
            links = [self.cost.platform.links[i] for i in self.cost.routes[a][b]]
            shared = bool(links) and all(link.shared_memory for link in links)
            self.synced[a, b] = sum(link.sync_us for link in links) * 1e-6 if shared else None
        sync = self.synced[a, b]
        if sync is not None and self.g.edges[e].comm is None:
            return sync
        return self.cost.comm(e, a, b)

    def transfer_map(self) -> dict[int, Transfer]:
        out: dict[int, Transfer] = {}
        for tr in self.s.transfers:
            if tr.edge in out or not (0 <= tr.edge < len(self.g.edges)):
                self.add("transfer", f"transfer of edge {tr.edge} is duplicated or names no edge", edges=(tr.edge,))
                continue
            out[tr.edge] = tr
        return out

    def check_transfers(self) -> None:
        self.transfers = trs = self.transfer_map()
        slots, contention = self.s.slots, self.s.options.contention
        hops_by_link: dict[int, list[tuple[float, float, int]]] = {}
        routes = [[tuple(r) for r in row] for row in self.cost.routes]
        for e in self.g.edges:
            a, b = slots[e.src].device, slots[e.dst].device
            tr = trs.get(e.index)
            both = (e.src, e.dst)
            if a == b:
                if tr is not None:
                    self.add("transfer", f"edge {self.name(e.src)} -> {self.name(e.dst)} stays on {self.dev(a)} "
                                         f"but has a transfer", tasks=both, edges=(e.index,))
                continue
            comm = self.handover(e.index, a, b)
            if not comm < INF:
                self.add("transfer", f"{self._what(e, a, b)} has no route", tasks=both, edges=(e.index,))
                continue
            if tr is None:
                self.add("transfer", f"{self._what(e, a, b)} is missing", tasks=both, edges=(e.index,))
                continue
            if (tr.src_device, tr.dst_device) != (a, b) or tuple(tr.links) != routes[a][b]:
                self.add("transfer", f"{self._what(e, a, b)} is recorded as {tr.src_device} -> {tr.dst_device} "
                                     f"over links {tr.links}, the route is {self.cost.routes[a][b]}", tasks=both,
                         edges=(e.index,))
            if abs(tr.start - slots[e.src].end) > self.tol:
                self.add("transfer", f"{self._what(e, a, b)} starts at {tr.start}, not when its producer ends "
                                     f"({slots[e.src].end})", tasks=both, edges=(e.index,))
            dur = tr.end - tr.start
            if (abs(dur - comm) if not contention else comm - dur) > self.tol:
                self.add("transfer", f"{self._what(e, a, b)} takes {dur}, its transfer time is {comm}", tasks=both,
                         edges=(e.index,))
            if contention and tr.links:
                self._check_hops(e.index, tr, comm, self._what(e, a, b), hops_by_link)
        held: dict[int, list[tuple[float, float, int, int]]] = {}  # per link or switch port
        for link, hops in hops_by_link.items():
            for r in self.cost.platform.resources(link):
                held.setdefault(r, []).extend((s, end, e, link) for s, end, e in hops)
        for r, uses in sorted(held.items()):
            uses.sort()
            for (_, e0, x, lx), (s1, _, y, ly) in zip(uses, uses[1:]):
                if s1 < e0 - self.tol:
                    what = f"link {lx}" if lx == ly and r == lx else f"a switch port (links {lx} and {ly})"
                    self.add("link", f"transfers of edges {x} and {y} share {what} at the same time",
                             edges=(x, y))

    def _what(self, e, a: int, b: int) -> str:
        """``transfer x -> y (gpu0 -> gpu1)``: the transfer of edge ``e`` in a message (made only for one)."""
        return f"transfer {self.name(e.src)} -> {self.name(e.dst)} ({self.dev(a)} -> {self.dev(b)})"

    def _check_hops(self, e: int, tr, comm: float, what: str, hops_by_link: dict) -> None:
        hops = tuple(tr.hops)
        if tuple(h[0] for h in hops) != tuple(tr.links):
            self.add("transfer", f"{what} has hops on links {tuple(h[0] for h in hops)}, its route is {tr.links}",
                     edges=(e,))
            return
        prev = tr.start
        for link, s, end in hops:
            if s < prev - self.tol or end < s:
                self.add("transfer", f"{what} has a hop on link {link} at [{s}, {end}] before its previous hop "
                                     f"ends ({prev})", edges=(e,))
            prev = end
            hops_by_link.setdefault(link, []).append((s, end, e))
        if abs(sum(end - s for _, s, end in hops) - comm) > self.tol or abs(prev - tr.end) > self.tol:
            self.add("transfer", f"{what}: its hops take {sum(end - s for _, s, end in hops)} and end at {prev}; "
                                 f"the transfer time is {comm}, the arrival {tr.end}", edges=(e,))

    def check_precedence(self) -> None:
        slots = self.s.slots
        for e in self.g.edges:
            u, v = slots[e.src], slots[e.dst]
            if e.index in self.chain_edges:
                continue
            if u.device == v.device:
                need = u.end
            else:
                comm = self.cost.comm(e.index, u.device, v.device)
                tr = self.transfers.get(e.index)
                need = max(u.end + comm, tr.end if tr is not None else -INF)
            if v.start < need - self.tol:
                self.add("precedence", f"task {self.name(e.dst)} starts at {v.start}, before its input from "
                                       f"{self.name(e.src)} is there ({need})", tasks=(e.src, e.dst),
                         edges=(e.index,))

    def check_colocation(self) -> None:
        where: dict[str, tuple[int, int]] = {}  # class -> (first task, its device)
        for sl in self.s.slots:
            cls = self.g.tasks[sl.task].colocate
            if not cls:
                continue
            first = where.setdefault(cls, (sl.task, sl.device))
            if first[1] != sl.device:
                self.add("colocation", f"task {self.name(sl.task)} runs on {self.dev(sl.device)}, but "
                                       f"{self.name(first[0])} of its colocation class {cls!r} runs on "
                                       f"{self.dev(first[1])}", tasks=(first[0], sl.task))

    def check_capacity(self) -> None:
        opts, cost = self.s.options, self.cost
        nd = len(cost.platform.devices)
        for flag, kind, per, cap, unit in (
            (opts.memory, "memory", lambda t, d: cost.footprint[t], cost.memory_capacity, "bytes"),
            (opts.area, "area", lambda t, d: cost.area[t][d], cost.area_capacity, "area units"),
        ):
            if not flag:
                continue
            used = [0.0] * nd
            on: list[list[int]] = [[] for _ in range(nd)]
            for sl in self.s.slots:
                used[sl.device] += per(sl.task, sl.device)
                on[sl.device].append(sl.task)
            for d in range(nd):
                if kind == "area" and cost.platform.devices[d].kind != "fpga":
                    continue
                if used[d] > cap[d] * (1 + 1e-9):
                    self.add(kind, f"tasks on {self.dev(d)} need {used[d]:.6g} {unit}, it has {cap[d]:.6g}",
                             tasks=on[d])
        if opts.memory:
            for d, peak in enumerate(peak_memory(self.s)):
                if peak.bytes > cost.memory_capacity[d] * (1 + 1e-9):
                    self.add("memory", f"{self.dev(d)} holds {peak.bytes:.6g} bytes at {peak.at:.6g} s, it has "
                                       f"{cost.memory_capacity[d]:.6g}")

    def check_limits(self) -> None:
        """A device's ``max_tasks`` and ``max_inbound``: the distinct (producer, tensor) pairs whose
        producer runs elsewhere and a consumer there (always on: they are the platform's)."""
        devices = self.cost.platform.devices
        if all(d.max_tasks is None and d.max_inbound is None for d in devices):
            return
        dev = [sl.device for sl in self.s.slots]
        held = [0] * len(devices)
        for d in dev:
            held[d] += 1
        inbound: set[tuple[int, int, str]] = set()
        for e in self.g.edges:
            if dev[e.src] != dev[e.dst]:
                inbound.add((dev[e.dst], e.src, e.tensor))
        fan_in = [0] * len(devices)
        for d, _, _ in inbound:
            fan_in[d] += 1
        for d, device in enumerate(devices):
            if device.max_tasks is not None and held[d] > device.max_tasks:
                self.add("limits", f"{self.dev(d)} holds {held[d]} tasks, its max_tasks is {device.max_tasks}")
            if device.max_inbound is not None and fan_in[d] > device.max_inbound:
                self.add("limits", f"{self.dev(d)} receives {fan_in[d]} distinct inbound nets, its max_inbound "
                                   f"is {device.max_inbound}")

    def check_makespan(self) -> None:
        latest = max((sl.end for sl in self.s.slots), default=0.0)
        if abs(self.s.makespan - latest) > self.tol:
            self.add("makespan", f"makespan is {self.s.makespan}, the latest task ends at {latest}")


def require_valid(result: MapResult) -> MapResult:
    """Check ``result``'s schedule with the independent validator; raise if broken.

    An invalid schedule is a bug in a mapper, so this is an internal error (exit 1).
    """
    violations = validate(result.schedule)
    if violations:
        listed = "; ".join(v.message for v in violations[:5])
        raise MapperError(
            f"mapper {result.mapper!r} produced an invalid schedule "
            f"({len(violations)} violations): {listed}",
            obj=result.mapper,
        )
    return result

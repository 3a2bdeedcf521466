"""Run a mapped schedule on Dask distributed: the one module that imports Dask.

Each device of the platform is served by one Dask worker: in the embedded
cluster (a :class:`distributed.SpecCluster` on 127.0.0.1, like
``LocalCluster`` but with one worker per device, named after it) or, with a
scheduler address, by the worker of an existing cluster whose name is the
device's or that offers the resource ``DEVICE=1``. Every task is submitted
to its device's worker only, and after the task before it in the device's
mapped order (a dependency on that task's result, which lives on the same
worker), so each worker runs its device's tasks in the schedule's order. A
task's inputs and weights are made on its worker; tensors between devices
move through Dask.

As the local executor does, the run is a checked warm-up pass (Numba
compiles on each worker, every kernel's output against NumPy) and then
``repeats`` timed passes; a task's measured time is the median of its
compute intervals in Dask's task stream, and the last pass's compute and
transfer intervals are reported per worker. Accelerator tasks run on their
device's worker for their values and keep their modelled times.

Every wait is bounded: a worker that leaves while its device has work ends
the run with an error naming the worker and the task it held, unless
``retries`` allows waiting (at most ``rejoin_timeout`` seconds) for a worker
of the same name to come back; Dask then reruns what was lost. Ctrl-C
cancels the run; the embedded cluster is always closed.

References: M. Rocklin, "Dask: Parallel Computation with Blocked algorithms
and Task Scheduling", SciPy 2015; the Dask distributed documentation
(worker restrictions, resources, priorities and the task stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import socket
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from typing import Any

from mapper.core.limits import memory_budget
from mapper.errors import InputError, MapperError, OptionsError
from mapper.mapping.base import MapResult
from mapper.run.execute import ExecutionError, make_plan
from mapper.run.trace import Trace, TransferRecord

#: Seconds between checks of the cluster while waiting for a pass.
POLL = 0.25
#: Seconds a device's workers must be missing from the scheduler's list to count as lost.
LOSS_GRACE = 0.5
#: Default bound on one pass, seconds.
PASS_TIMEOUT = 600.0
#: Default bound on waiting for a lost worker to come back, seconds.
REJOIN_TIMEOUT = 60.0
#: Seconds the embedded cluster and the connection to a scheduler may take to start.
START_TIMEOUT = 60.0
#: Seconds to wait for every used device to have a worker on the cluster.
WORKER_WAIT = 10.0


def _dask() -> Any:
    """The ``distributed`` module, or an :class:`InputError` saying how to install it."""
    try:
        import distributed
    except ImportError:
        raise InputError("--engine dask needs Dask distributed, which is not installed",
                         hint="pip install 'mapper[dask]'") from None
    return distributed


# -- on the workers ---------------------------------------------------------------------

def make_source(op: Any, seed: int, vocab: dict, positive: frozenset, scale: dict) -> Any:
    """Run on a worker: the value of one input or weight (:func:`mapper.run.synthetic.make_value`)."""
    from mapper.kernels import registry
    from mapper.run.synthetic import make_value

    return make_value(op, seed, registry, vocab, positive, scale)


def run_task(task: Any, check: bool | None, after: Any, *args: Any) -> Any:
    """Run on a worker: one task's kernel (a fused task's kernels in order),
    checked as :func:`mapper.run.execute.run_kernels` says for ``check``.
    ``after`` is the result of the task before it on its device, passed only
    to order them."""
    from mapper.kernels import registry
    from mapper.run.execute import run_kernels

    return run_kernels(task, list(args), registry, registry.run_kernel, check)


# -- the cluster ------------------------------------------------------------------------

@contextlib.contextmanager
def connect(devices: Sequence[str], scheduler: str | None = None, processes: bool = True,
            allowed_failures: int = 0) -> Iterator[Any]:
    """A client of the embedded cluster (one worker per device, on
    127.0.0.1) or of the cluster at ``scheduler``; the embedded cluster is
    closed on the way out, whatever happens."""
    distributed = _dask()
    import dask

    cluster = None
    client = None
    log = logging.getLogger("distributed")
    level = log.level
    log.setLevel(logging.ERROR)  # Dask's INFO lines are not the user's business; errors still show
    with dask.config.set({"distributed.scheduler.allowed-failures": allowed_failures}):
        try:
            if scheduler is None:
                kind = distributed.Nanny if processes else distributed.Worker
                local = {"host": "127.0.0.1", "dashboard": False, "dashboard_address": "127.0.0.1:0"}  # loopback only
                options: dict[str, Any] = {"nthreads": 1, **local}
                workers = {d: {"cls": kind, "options": {**options, "name": d}} for d in devices}
                sched = {"cls": distributed.Scheduler,
                         "options": dict(local)}
                with _quiet_workers():
                    cluster = distributed.SpecCluster(workers=workers, scheduler=sched, silence_logs=40,
                                                      name="mapper")
                client = distributed.Client(cluster, timeout=START_TIMEOUT, set_as_default=False)
            else:
                probe_scheduler(scheduler)
                try:
                    client = distributed.Client(scheduler, timeout=START_TIMEOUT, set_as_default=False)
                except (OSError, TimeoutError) as exc:
                    raise ExecutionError(f"cannot reach the Dask scheduler at {scheduler}: {exc}",
                                         obj=scheduler) from None
            yield client
        finally:
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close(timeout=10)
            if cluster is not None:
                with contextlib.suppress(Exception):
                    cluster.close(timeout=30)
            log.setLevel(level)


def check_address(address: str) -> tuple[str, int]:
    """The host and port of ``address``, which must be ``tcp://HOST:PORT`` (the
    scheme Dask's schedulers listen on by default; TLS needs credentials mapper
    does not take). An :class:`OptionsError` otherwise, before anything connects:
    a client that fails to start lingers for minutes."""
    _dask()  # installed, or an InputError saying how (before anything is compiled)
    hint = "give the scheduler's address, such as tcp://127.0.0.1:8786"
    scheme, sep, rest = address.partition("://")
    if not sep or scheme != "tcp":
        raise OptionsError(f"--scheduler {address!r} is not a tcp://HOST:PORT address"
                           + (f" (mapper connects over tcp only, not {scheme}://)" if sep and scheme else ""),
                           obj="--scheduler", hint=hint)
    try:
        parts = urllib.parse.urlsplit(address)
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise OptionsError(f"--scheduler {address!r} is not a tcp://HOST:PORT address: {exc}", obj="--scheduler",
                           hint=hint) from None
    if not host or port is None or port == 0 or parts.path not in ("", "/") or parts.query or parts.fragment \
            or any(c.isspace() or not c.isprintable() for c in rest):
        raise OptionsError(f"--scheduler {address!r} has no host and port", obj="--scheduler", hint=hint)
    return host, port


#: Seconds a scheduler has to accept the connection and to answer it (each).
PROBE_TIMEOUT = 10.0


def probe_scheduler(address: str, timeout: float = PROBE_TIMEOUT) -> None:
    """Ask ``address`` who it is (the scheduler's ``identity`` call) within
    ``timeout`` seconds per step; an :class:`OptionsError` when nothing listens
    there, the peer stays silent, or it answers but is not a Dask scheduler.
    Dask's own client would wait minutes on such a peer."""
    host, port = check_address(address)
    distributed = _dask()
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise OptionsError(f"cannot reach the Dask scheduler at {address}: {exc.strerror or exc}",
                           obj="--scheduler") from None

    async def ask() -> Any:
        comm = await asyncio.wait_for(distributed.comm.connect(address, timeout=timeout), timeout)
        try:
            await asyncio.wait_for(comm.write({"op": "identity", "reply": True}), timeout)
            return await asyncio.wait_for(comm.read(), timeout)
        finally:
            comm.abort()

    try:
        with memory_budget(2**28):  # a garbage length prefix must not allocate gigabytes
            reply = asyncio.run(ask())
    except TimeoutError:
        raise OptionsError(f"the peer at {address} accepts connections but does not answer within {timeout:g} s; "
                           "it is not a Dask scheduler, or not a working one", obj="--scheduler") from None
    except Exception:  # closed, garbage, a frame too large: whatever the peer sent, it is not Dask
        raise OptionsError(f"the peer at {address} does not answer as a Dask scheduler", obj="--scheduler") from None
    if not isinstance(reply, dict) or reply.get("type") != "Scheduler":
        raise OptionsError(f"the peer at {address} answers, but not as a Dask scheduler", obj="--scheduler")


@contextlib.contextmanager
def _quiet_workers() -> Iterator[None]:
    """Worker processes started inside log nothing below critical (they read
    Dask's logging config from the environment they inherit): a failed task
    or a lost worker reaches the user as this module's error, and a worker's
    heartbeat to a scheduler that is shutting down is no error at all."""
    key = "DASK_LOGGING__DISTRIBUTED"
    old = os.environ.get(key)
    os.environ[key] = "critical"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old


def device_workers(client: Any, devices: Sequence[str], wait: float | None = None) -> dict[str, dict]:
    """Device name -> the submit restriction that puts a task on its worker:
    ``{"workers": [name]}`` for a worker named after the device, else
    ``{"resources": {device: 1}}`` for a worker offering that resource. Waits
    up to ``wait`` seconds (:data:`WORKER_WAIT`) for the workers to arrive;
    a device without one is an error naming it."""
    deadline = time.monotonic() + (WORKER_WAIT if wait is None else wait)
    while True:
        infos = _workers(client)
        servers = _servers(infos, devices)
        missing = [d for d in devices if not any(servers[d])]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(POLL)
    if missing:
        known = ", ".join(sorted(str(w.get("name")) for w in infos.values())) or "none"
        raise ExecutionError(
            f"no Dask worker serves device{'s' if len(missing) > 1 else ''} {', '.join(missing)}: a worker serves "
            f"device D when its name is D or it offers the resource D=1 (workers: {known})", obj=missing[0],
            hint="start one with `dask worker SCHEDULER --name " + missing[0] + "`")
    return {d: ({"workers": [d]} if servers[d][0] else {"resources": {d: 1}}) for d in devices}


def _servers(infos: dict[str, dict], devices: Sequence[str]) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """Device -> the addresses of the workers (``infos``: address -> information)
    named after it, and of those offering it as a resource."""
    return {d: (frozenset(a for a, w in infos.items() if str(w.get("name")) == d),
                frozenset(a for a, w in infos.items() if (w.get("resources") or {}).get(d, 0) >= 1))
            for d in devices}


def _workers(client: Any) -> dict[str, dict]:
    """Worker address -> its information, fetched from the scheduler now
    (``Client.scheduler_info`` may hand back a cache that a background
    refresh left without per-worker entries)."""
    return dict(client.sync(client.scheduler.identity, n_workers=-1).get("workers", {}))


def _served(client: Any, restrictions: dict[str, dict]) -> set[str]:
    """The devices that have a worker now."""
    return {d for d, addrs in device_addresses(client, restrictions).items() if addrs}


def device_addresses(client: Any, restrictions: dict[str, dict]) -> dict[str, frozenset[str]]:
    """Device -> the addresses of the workers that serve it now, as its restriction says (by name or resource)."""
    servers = _servers(_workers(client), list(restrictions))
    return {d: servers[d][0 if "workers" in r else 1] for d, r in restrictions.items()}


# -- one run ----------------------------------------------------------------------------

class _Rerun(Exception):
    """A lost worker came back: run the pass again (the scheduler pinned its tasks to the old address)."""


@dataclasses.dataclass
class _Pass:
    futures: dict[int, Any]  # task -> future
    keys: dict[str, int]  # Dask key -> task
    stream: list[dict]  # the task stream of the pass
    workers: dict[str, frozenset[str]]  # device -> the addresses of its workers when the pass was submitted


def _key(name: str, p: int, token: str) -> str:
    return f"{re.sub(r'[^A-Za-z0-9_.+-]', '_', name)}-p{p}-{token}"


class DaskRun:
    """One mapped schedule on a Dask cluster (see the module docstring)."""

    def __init__(self, result: MapResult, client: Any, *, seed: int = 0, check: bool = True, retries: int = 0,
                 pass_timeout: float = PASS_TIMEOUT, rejoin_timeout: float = REJOIN_TIMEOUT) -> None:
        from mapper.run.execute import refuse_kernel_less
        from mapper.run.synthetic import positive_operands, vocab_sizes, weight_scales

        self.result, self.client = result, client
        self.schedule = result.schedule
        self.graph = self.schedule.cost.graph
        refuse_kernel_less(self.graph)
        self.devices = self.schedule.cost.platform.devices
        self.seed, self.check, self.retries = seed, check, retries
        self.pass_timeout, self.rejoin_timeout = pass_timeout, rejoin_timeout
        used = sorted({s.device for s in self.schedule.slots})
        self.restrictions = device_workers(client, [self.devices[d].name for d in used])
        plan = make_plan(self.schedule)
        self.run_order, self.order = plan.order, plan.device_order  # topological; per device the mapped order
        self.maps = (vocab_sizes(self.graph), positive_operands(self.graph), weight_scales(self.graph))
        self.sources: dict[tuple[str, str, str], Any] = {}  # (kind, name, device) -> future, kept over passes
        self.samples: list[list[float]] = [[] for _ in self.graph.tasks]
        self.losses = 0
        self.wall = 0.0
        self.token = f"{time.time_ns():x}"

    def _source(self, op: Any, device: str) -> Any:
        k = (op.kind, op.name, device)
        if k not in self.sources:
            self.sources[k] = self.client.submit(
                make_source, op, self.seed, *self.maps, key=_key(f"{op.kind}-{op.name}-{device}", 0, self.token),
                pure=False, allow_other_workers=False, **self.restrictions[device])
        return self.sources[k]

    def _submit(self, p: int, check: bool | None) -> _Pass:
        workers = device_addresses(self.client, self.restrictions)
        futures: dict[int, Any] = {}
        keys: dict[str, int] = {}
        prev: dict[int, Any] = {}
        rank = {t: i for order in self.order for i, t in enumerate(order)}
        for t in self.run_order:  # producers first, and each device's tasks in its mapped order
            task, d = self.graph.tasks[t], self.schedule.slots[t].device
            dev = self.devices[d].name
            args = [futures[o.producer] if o.kind == "task" and o.producer is not None else self._source(o, dev)
                    for o in task.operands]
            key = _key(task.name, p + 1, self.token)
            futures[t] = self.client.submit(run_task, task, check, prev.get(d), *args, key=key, pure=False,
                                            priority=-rank[t], allow_other_workers=False, **self.restrictions[dev])
            keys[key] = t
            prev[d] = futures[t]
        return _Pass(futures, keys, [], workers)

    def _wait(self, run: _Pass) -> None:
        """Wait for every future of ``run``, bounded; raise on a failed task or a lost worker."""
        distributed = _dask()
        pending = set(run.futures.values())
        deadline = time.monotonic() + self.pass_timeout
        since: dict[str, float] = {}
        while pending:
            try:
                done, pending = distributed.wait(list(pending), timeout=POLL, return_when="FIRST_COMPLETED")
                pending = set(pending)
            except TimeoutError:
                done = set()
            if any(f.status == "error" for f in done):  # the first failed task in topological order:
                rank = {t: i for i, t in enumerate(self.graph.topo_order)}  # its dependents fail with it
                erred = [t for t, f in run.futures.items() if f.status == "error"]
                self._raise_failed(run, run.futures[min(erred, key=rank.__getitem__)])
            for f in done:
                if f.status == "cancelled":
                    raise ExecutionError(f"task {self._task_of(run, f).name!r} was cancelled by the cluster",
                                         obj=self._task_of(run, f).name)
            now = time.monotonic()  # a device whose workers of the pass's start are all gone is lost (the
            current = device_addresses(self.client, self.restrictions)  # scheduler pinned its tasks to them)
            missing = {d for d, addrs in run.workers.items() if not addrs & current[d]}
            since = {d: since.get(d, now) for d in missing}
            lost = {d for d, t in since.items() if now - t >= LOSS_GRACE}
            if lost:
                self._lost(run, lost)
            if time.monotonic() > deadline:
                late = sorted(self._task_of(run, f).name for f in pending)[:3]
                raise ExecutionError(f"the run did not finish within {self.pass_timeout:g} s "
                                     f"(still waiting for {', '.join(late)})", obj=late[0] if late else None)

    def _task_of(self, run: _Pass, future: Any) -> Any:
        return self.graph.tasks[run.keys[future.key]]

    def _raise_failed(self, run: _Pass, future: Any) -> None:
        task = self._task_of(run, future)
        dev = self.devices[self.schedule.slots[task.index].device].name
        err = future.exception()
        distributed = _dask()
        if isinstance(err, distributed.KilledWorker):
            raise ExecutionError(f"task {task.name!r} was lost with the worker of device {dev} (it died while "
                                 "running it)", obj=task.name,
                                 hint="restart the worker; --retries N waits for it to come back")
        if isinstance(err, MapperError):
            raise err
        raise ExecutionError(f"task {task.name!r} failed on the worker of device {dev}: "
                             f"{type(err).__name__}: {err}", obj=task.name, span=task.span)

    def _lost(self, run: _Pass, lost: set[str]) -> None:
        """A device's worker left: wait for it (``retries``) or end the run naming it and its task."""
        dev = sorted(lost)[0]
        d = next(i for i, x in enumerate(self.devices) if x.name == dev)
        held = next((t for t in self.order[d] if not run.futures[t].done()), None)
        what = f"task {self.graph.tasks[held].name!r}" if held is not None else "no unfinished task"
        if self.losses >= self.retries:
            raise ExecutionError(f"the Dask worker of device {dev} left the cluster during the run ({what} was on "
                                 "it)", obj=self.graph.tasks[held].name if held is not None else dev,
                                 hint="restart the worker and run again, or give --retries N to wait for it")
        self.losses += 1
        deadline = time.monotonic() + self.rejoin_timeout
        while set(self.restrictions) - _served(self.client, self.restrictions):
            if time.monotonic() > deadline:
                raise ExecutionError(f"the Dask worker of device {dev} left the cluster ({what} was on it) and did "
                                     f"not come back within {self.rejoin_timeout:g} s", obj=dev)
            time.sleep(POLL)
        self.client.cancel(list(run.futures.values()), force=True)
        for k in [k for k in self.sources if k[2] in lost]:  # its inputs and weights went with it
            self.client.cancel([self.sources.pop(k)], force=True)
        raise _Rerun(dev)

    def one_pass(self, p: int, check: bool | None) -> _Pass:
        """Run the schedule once; after a lost worker came back (``retries``), run it again from the start."""
        distributed = _dask()
        while True:
            self.token = f"{time.time_ns():x}"  # fresh keys for every attempt
            t0 = time.perf_counter()
            try:  # the task stream opens before the submission: a fast task may end at once
                with self.client.as_current(), distributed.get_task_stream(client=self.client) as ts:
                    run = self._submit(p, check)
                    self._wait(run)
            except _Rerun:
                continue
            finally:
                self.wall += time.perf_counter() - t0
            run.stream = list(ts.data)
            return run

    def execute(self, repeats: int) -> Trace:
        """The warm-up pass (checked), ``repeats`` timed passes, and the trace."""
        run = self.one_pass(0, self.check)  # shapes always, values against NumPy when asked
        for p in range(1, repeats + 1):
            run = self.one_pass(p, False)  # timed: shapes only
            for t, seconds in _compute_seconds(run).items():
                self.samples[t].append(seconds)
        outputs = self._outputs(run)
        return self._trace(run, outputs, repeats)

    def _outputs(self, run: _Pass) -> tuple[tuple[str, Any], ...]:
        index = {t.name: t.index for t in self.graph.tasks}
        names = sorted((o for o in self.graph.outputs if o in index), key=lambda o: index[o])  # as the local run
        values = self.client.gather([run.futures[index[o]] for o in names])
        return tuple(zip(names, values))

    def _trace(self, run: _Pass, outputs: tuple[tuple[str, Any], ...], repeats: int) -> Trace:
        from mapper.run.execute import build_trace

        trace = build_trace(self.result, self.samples, self.order, self.wall, self.seed, repeats, self.check,
                            "numba", tensors=(len(self.sources) + len(self.graph.tasks), None),
                            workers=len(self.restrictions), outputs=outputs)
        names = _worker_names(self.client)
        device_at = {a: d for d, addrs in device_addresses(self.client, self.restrictions).items() for a in addrs}
        starts = [s["start"] for e in run.stream for s in e.get("startstops", ()) if s.get("action") == "compute"]
        origin = min(starts) if starts else 0.0
        intervals: dict[int, tuple[str, float, float]] = {}
        transfers: list[TransferRecord] = []
        for e in run.stream:
            t = run.keys.get(str(e.get("key")))
            if t is None:
                continue
            worker = names.get(str(e.get("worker")), str(e.get("worker")))
            for s in e.get("startstops", ()):
                if s.get("action") == "compute":
                    intervals[t] = (worker, s["start"] - origin, s["stop"] - origin)
                elif s.get("action") == "transfer":
                    source = names.get(s.get("source"), str(s.get("source")))
                    pred = self._predicted_transfer(t, device_at.get(str(s.get("source")), source))
                    transfers.append(TransferRecord(self.graph.tasks[t].name, source, worker, s["start"] - origin,
                                                    s["stop"] - origin, *pred))
        records = tuple(
            dataclasses.replace(r, worker=intervals[r.task][0], engine_start=intervals[r.task][1],
                                engine_end=intervals[r.task][2]) if r.task in intervals else r
            for r in trace.records)
        return dataclasses.replace(trace, records=records, engine="dask",
                                   transfers=tuple(sorted(transfers, key=lambda x: (x.start, x.task))))

    def _predicted_transfer(self, t: int, source: str) -> tuple[float | None, float | None]:
        """The schedule's interval of the transfers into ``t`` from device ``source``."""
        spans = [(x.start, x.end) for x in self.schedule.transfers
                 if self.graph.edges[x.edge].dst == t and self.devices[x.src_device].name == source]
        if not spans:
            return (None, None)
        return (min(s for s, _ in spans), max(e for _, e in spans))


def _compute_seconds(run: _Pass) -> dict[int, float]:
    out: dict[int, float] = {}
    for e in run.stream:
        t = run.keys.get(str(e.get("key")))
        if t is not None:
            total = sum(s["stop"] - s["start"] for s in e.get("startstops", ()) if s.get("action") == "compute")
            if total > 0:
                out[t] = total
    return out


def _worker_names(client: Any) -> dict[str, str]:
    """Worker address -> its name."""
    return {addr: str(w.get("name", addr)) for addr, w in _workers(client).items()}


def execute_dask(result: MapResult, *, seed: int = 0, repeats: int = 5, check: bool = True,
                 scheduler: str | None = None, retries: int = 0, processes: bool = True,
                 pass_timeout: float = PASS_TIMEOUT, rejoin_timeout: float = REJOIN_TIMEOUT) -> Trace:
    """Run ``result``'s schedule on Dask and return the trace (the module
    docstring says how). ``scheduler`` is an existing cluster's address
    (``tcp://host:port``); without it an embedded cluster on 127.0.0.1 runs
    one worker per used device, in its own process when ``processes``.

    Raises
    ------
    InputError
        Dask is not installed, or the graph has kernel-less tasks.
    OptionsError
        Bad ``repeats``, ``retries`` or timeouts.
    ExecutionError
        A device without a worker, a failed task, a lost worker, a pass that
        did not end in time; the message names the task or the worker.
    """
    if repeats < 1 or retries < 0 or pass_timeout <= 0 or rejoin_timeout <= 0:
        raise OptionsError(f"repeats must be >= 1, retries >= 0 and timeouts > 0 (got repeats {repeats}, "
                           f"retries {retries})")
    _dask()
    used = sorted({s.device for s in result.schedule.slots})
    names = [result.schedule.cost.platform.devices[d].name for d in used]
    with connect(names, scheduler, processes, allowed_failures=retries) as client:
        run = DaskRun(result, client, seed=seed, check=check, retries=retries, pass_timeout=pass_timeout,
                      rejoin_timeout=rejoin_timeout)
        try:
            return run.execute(repeats)
        except BaseException:
            with contextlib.suppress(Exception):
                client.cancel([f for f in run.sources.values()], force=True)
            raise

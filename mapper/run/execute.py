"""Run a mapped schedule with the kernels and compare it with the prediction.

:func:`execute` builds seeded input and weight tensors of the declared
shapes, runs every task with :mod:`mapper.kernels` (Numba, or the NumPy
reference) in dependency order, one worker per device executing that
device's tasks in schedule order, and returns a :class:`mapper.run.trace.Trace`.
The first worker (the first device's, the CPU's on the shipped platforms) is
the calling thread; the others are threads started for each pass. A
thread's buffers come from its own malloc arena, and glibc gave a finished
thread's arena memory back: with the CPU's lane on a new thread every pass,
Jacobi's 8 MB outputs took 516 page faults each in every pass (its second
sweep 12.3 ms against 9.6 ms on the calling thread, whose main heap keeps
its memory under :func:`mapper.run.heap.steady_heap`).
The schedule runs once untimed (the warm-up pass: Numba compiles, outputs
are checked), then ``repeats`` timed passes, each a complete run of the
schedule with one timed call per task; a CPU task's time is the median of
its calls over the passes (:class:`Execution`), so its samples are spread
over the whole run rather than taken back to back;
tasks on accelerators get the cost model's time and are run on the CPU for
their values. The measured-or-modelled durations are re-timed with
:func:`mapper.engine.schedule.build_schedule` on the same assignment and order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from mapper.core.graph import Operand, Task, TaskGraph
from mapper.costing.cost import CostTable
from mapper.costing.fusion import leaf_tasks, run_parts
from mapper.engine.schedule import Assignment, Schedule, build_schedule
from mapper.errors import InputError, MapperError, OptionsError
from mapper.mapping.base import MapResult
from mapper.run.heap import steady_heap
from mapper.run.synthetic import make_value, operand_key, positive_operands, vocab_sizes, weight_scales
from mapper.run.trace import ErrorSummary, TaskRecord, Trace

BACKENDS = ("numba", "numpy")

#: Device kinds whose tasks are timed on this machine; others are modelled.
MEASURED_KINDS = ("cpu",)

#: Threads of the BLAS library's pool (NumPy's GEMM, which ``matmul`` and
#: ``conv2d`` call) while tasks run and while ``mapper calibrate`` measures:
#: one, so that Numba's pool is the only compute pool (docs/execution.md).
BLAS_THREADS = 1


@contextlib.contextmanager
def one_compute_pool() -> Iterator[int | None]:
    """Limit the BLAS pool to :data:`BLAS_THREADS` threads for the ``with`` block.

    Two pools of spinning workers (Numba's OpenMP pool and OpenBLAS's
    pthreads pool) on the same cores slow each other down several times.
    Through :func:`mapper.kernels.blas.blas_pool`: yields the BLAS thread
    count, or None when threadpoolctl is not installed (the pools are then
    left as they are).
    """
    from mapper.kernels.blas import blas_pool

    with blas_pool(BLAS_THREADS) as threads:
        yield threads


class ExecutionError(MapperError):
    """A task failed while running, or its output disagreed with the reference."""

    exit_code = 1


class OutOfMemory(ExecutionError):
    """A task's tensors do not fit this machine's memory: the input is too large to run here (exit 2)."""

    exit_code = 2


# -- the plan: who runs what, in which order ------------------------------------------
@dataclass(frozen=True, slots=True)
class Plan:
    """The global run order and each worker's share of it.

    ``order`` is a topological order that follows the schedule (by predicted
    start, then end, then topological rank); ``lanes[w]`` is the sub-sequence
    run by worker ``w`` (the tasks of the devices dealt to it). Every lane is a
    sub-sequence of one topological order, so waiting on producers can never
    deadlock.
    """

    order: tuple[int, ...]
    lanes: tuple[tuple[int, ...], ...]
    device_order: tuple[tuple[int, ...], ...]  # [device] tasks in run order


def make_plan(schedule: Schedule, max_workers: int | None = None) -> Plan:
    """Order the tasks as the schedule does and deal devices to workers round-robin."""
    graph = schedule.cost.graph
    slots = schedule.slots
    rank = {t: i for i, t in enumerate(graph.topo_order)}
    key = [(slots[t].start, slots[t].end, rank[t]) for t in range(len(slots))]
    indeg = [len(p) for p in graph.preds]
    heap = [(key[t], t) for t in range(len(slots)) if indeg[t] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:  # Kahn's algorithm keyed by the schedule: valid even if times tie
        _, t = heapq.heappop(heap)
        order.append(t)
        for s in graph.succ_tasks(t):
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, (key[s], s))
    n_dev = len(schedule.cost.platform.devices)
    device_order = tuple(tuple(t for t in order if slots[t].device == d) for d in range(n_dev))
    used = [d for d in range(n_dev) if device_order[d]]
    check_options(max_workers=max_workers)
    k = max(1, min(len(used), max_workers or len(used)))
    worker_of = {d: i % k for i, d in enumerate(used)}
    lanes = tuple(tuple(t for t in order if worker_of[slots[t].device] == w) for w in range(k))
    return Plan(tuple(order), lanes, device_order)


# -- tensors ----------------------------------------------------------------------------


class TensorStore:
    """Live tensors with reference counts; inputs and weights are made on first use.

    Each input or weight is generated from its own seed (``seed`` and a hash
    of its name), so the values do not depend on the order of creation. A
    tensor is dropped when its last consumer has run; graph outputs are kept.
    ``sources``, when given, keeps every input and weight made (by key) for
    the stores of later passes, which then reuse them instead of making them
    again.
    """

    def __init__(self, graph: TaskGraph, seed: int, kernels: Any,
                 sources: dict[tuple[str, Any], Any] | None = None) -> None:
        self._graph = graph
        self._sources = sources  # inputs and weights kept for later passes (None: not kept)
        self._seed = seed
        self._k = kernels
        self._vocab = vocab_sizes(graph)
        self._positive = positive_operands(graph)
        self._scale = weight_scales(graph)
        self._lock = threading.Lock()
        self._values: dict[tuple[str, Any], Any] = {}
        self._refs: dict[tuple[str, Any], int] = {}
        for t in graph.tasks:
            for op in t.operands:
                k = operand_key(op)
                self._refs[k] = self._refs.get(k, 0) + 1
        names = {t.name: t.index for t in graph.tasks}
        self.keep = frozenset(("task", names[o]) for o in graph.outputs if o in names)
        for t in graph.tasks:
            self._refs.setdefault(("task", t.index), 0)
        self.total = len(self._refs)
        self.peak = 0

    def _make(self, op: Operand) -> Any:
        return make_value(op, self._seed, self._k, self._vocab, self._positive, self._scale)

    def operands(self, task: Task) -> list[Any]:
        """The task's operand values, making inputs and weights on first use."""
        out = []
        with self._lock:
            for op in task.operands:
                k = operand_key(op)
                if k not in self._values:
                    if op.kind == "task":
                        raise ExecutionError(f"operand {op.name!r} of task {task.name!r} is not available",
                                             obj=task.name)
                    if self._sources is None:
                        self._values[k] = self._make(op)
                    else:
                        if k not in self._sources:
                            self._sources[k] = self._make(op)
                        self._values[k] = self._sources[k]
                    self.peak = max(self.peak, len(self._values))
                out.append(self._values[k])
        return out

    def finish(self, task: Task, value: Any) -> None:
        """Store ``task``'s output and release its operands."""
        with self._lock:
            k = ("task", task.index)
            if self._refs[k] > 0 or k in self.keep:
                self._values[k] = value
                self.peak = max(self.peak, len(self._values))
            for op in task.operands:
                ok = operand_key(op)
                self._refs[ok] -= 1
                if self._refs[ok] == 0 and ok not in self.keep:
                    self._values.pop(ok, None)

    def kept(self) -> tuple[tuple[str, Any], ...]:
        return tuple(
            (self._graph.tasks[k[1]].name, self._values[k]) for k in sorted(self.keep) if k in self._values
        )


# -- running one task -------------------------------------------------------------------
def time_call(fn: Callable[[], Any]) -> tuple[Any, float]:
    """Call ``fn`` once, timed with :func:`time.perf_counter`: (result, seconds)."""
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _check_output(task: Task, out: Any, ref: Any, kernels: Any) -> None:
    """Raise :class:`ExecutionError` if ``out`` has the wrong shape, or (when
    ``ref`` is given) the wrong dtype or values beyond the dtype's tolerance."""
    want = task.output
    arr = np.asarray(out)
    if want is not None and tuple(arr.shape) != tuple(want.shape):
        raise ExecutionError(
            f"task {task.name!r} ({task.op}) returned shape {tuple(arr.shape)}, declared {tuple(want.shape)}",
            obj=task.name, span=task.span,
        )
    if ref is None:
        return
    if want is not None and arr.dtype != kernels.numpy_dtype(want.dtype):
        raise ExecutionError(
            f"task {task.name!r} ({task.op}) returned dtype {arr.dtype}, declared {want.dtype} "
            f"(stored as {kernels.numpy_dtype(want.dtype)})",
            obj=task.name, span=task.span,
        )
    ref = np.asarray(ref)
    rtol, atol = kernels.tolerance(want.dtype if want is not None else str(arr.dtype))
    wide = arr.astype(np.result_type(arr, ref))
    if wide.dtype.kind == "b":  # no subtraction for bool: compare as integers
        wide, ref = wide.astype(np.int8), ref.astype(np.int8)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(wide - ref)
        same = (wide == ref) | (np.isnan(wide) & np.isnan(ref))  # equal infinities, NaN where NaN
        bad = ~(same | (diff <= atol + rtol * np.abs(ref)))
    if bad.any():
        off = diff[bad]
        worst = float("nan") if np.isnan(off).any() else float(off.max())
        raise ExecutionError(
            f"task {task.name!r} ({task.op}) differs from the NumPy reference: max abs error {worst:.3g} "
            f"(rtol {rtol:g}, atol {atol:g}, {int(bad.sum())} of {bad.size} elements out of tolerance)",
            obj=task.name, span=task.span,
        )


def run_kernels(task: Task, args: list[Any], kernels: Any, kernel: Callable[..., Any], check: bool | None) -> Any:
    """``task``'s output: its kernel, or a fused task's parts' kernels in order
    (:func:`mapper.costing.fusion.run_parts`), each called as ``kernel(op, operands,
    attrs)``. Unless ``check`` is None every output's shape is checked, and
    with ``check`` its dtype and values against ``kernels.reference`` too."""
    def call(part: Task, vals: list[Any]) -> Any:
        attrs = dict(part.attrs)
        out = kernel(part.op, vals, attrs)
        if check is not None:
            _check_output(part, out, kernels.reference(part.op, vals, attrs) if check else None, kernels)
        return out

    return run_parts(task, args, call)[-1] if task.parts else call(task, args)


@dataclass(frozen=True, slots=True)
class _Options:
    check: bool
    backend: str


class _Pass:
    """Shared state of one pass over the schedule: events, the first failure.

    The warm-up pass (``timed`` False) calls every task once untimed and
    checks its output; a timed pass calls every task once and appends the
    call's duration to ``samples[t]``.
    """

    def __init__(self, graph: TaskGraph, store: TensorStore, kernels: Any, opts: _Options,
                 samples: list[list[float]], timed: bool) -> None:
        self.graph = graph
        self.store = store
        self.k = kernels
        self.opts = opts
        self.samples = samples
        self.timed = timed
        self.done = [threading.Event() for _ in graph.tasks]
        self.stop = threading.Event()
        self.failures: list[tuple[int, BaseException]] = []
        self._lock = threading.Lock()

    def fail(self, rank: int, err: BaseException) -> None:
        with self._lock:
            self.failures.append((rank, err))
        self.stop.set()
        for ev in self.done:  # wake every waiter; they see ``stop`` and leave
            ev.set()

    def run_task(self, t: int) -> None:
        task = self.graph.tasks[t]
        args = self.store.operands(task)
        kernel = self.k.run_kernel if self.opts.backend == "numba" else self.k.reference
        check = None if self.timed else self.opts.check and self.opts.backend == "numba"
        out, seconds = time_call(lambda: run_kernels(task, args, self.k, kernel, check))
        if self.timed:
            self.samples[t].append(seconds)
        self.store.finish(task, out)

    def lane(self, tasks: tuple[int, ...], rank: dict[int, int]) -> None:
        for t in tasks:
            for p in self.graph.pred_tasks(t):
                self.done[p].wait()
            if self.stop.is_set():
                return
            try:
                self.run_task(t)
            except BaseException as err:
                self.fail(rank[t], _as_task_error(self.graph.tasks[t], err))
                return
            self.done[t].set()


def _as_task_error(task: Task, err: BaseException) -> MapperError:
    if isinstance(err, ExecutionError):
        return err
    if isinstance(err, MemoryError):
        oom = OutOfMemory(f"task {task.name!r} ({task.op}) ran out of memory on this machine ({err})",
                          obj=task.name, span=task.span,
                          hint="run a smaller instance of the graph (its sizes are params), or on a larger machine")
        oom.__cause__ = err
        return oom
    detail = err.message if isinstance(err, MapperError) else f"{type(err).__name__}: {err}"
    ops = "+".join(p.op for p in task.parts) if task.parts else task.op  # a fused task: all its ops
    out = ExecutionError(f"task {task.name!r} ({ops}) failed: {detail}", obj=task.name, span=task.span)
    out.__cause__ = err
    return out


# -- re-timing ---------------------------------------------------------------------------
def retime(schedule: Schedule, durations: list[float], device_order: tuple[tuple[int, ...], ...]) -> Schedule:
    """The same assignment and per-device order, timed with ``durations[t]``
    on each task's device (the delay model of :mod:`mapper.engine.schedule`)."""
    cost = schedule.cost
    dev = schedule.device_of
    time_rows = tuple(
        tuple(durations[t] if d == dev[t] else x for d, x in enumerate(row)) for t, row in enumerate(cost.time)
    )
    cost2: CostTable = dataclasses.replace(cost, time=time_rows)
    return build_schedule(cost2, Assignment(dev, device_order), schedule.options)


# -- the entry point -------------------------------------------------------------------
def refuse_kernel_less(graph: TaskGraph) -> None:
    """Raise :class:`InputError` if ``graph`` has tasks without a kernel (explicit-cost
    tasks, ``opaque`` ops)."""
    opaque = [f"{t.name} ({dict(t.attrs).get('kind') or 'opaque'})" for t in leaf_tasks(graph) if t.op == "opaque"]
    if opaque:
        listed = ", ".join(opaque[:5]) + (f" and {len(opaque) - 5} more" if len(opaque) > 5 else "")
        raise InputError(
            f"graph {graph.name!r} has ops without a kernel ({listed}) and can't be run; "
            "map it with `mapper compile` instead", obj=graph.name)
    cached = [t.name for t in leaf_tasks(graph) if t.op == "attention" and t.attr("cache", 0)]
    if cached:
        raise InputError(
            f"graph {graph.name!r} has attention that reads a KV cache ({', '.join(cached[:3])}"
            f"{' ...' if len(cached) > 3 else ''}: cache > 0), which a run does not hold; run the prefill "
            "graph (cache 0), or price generation with `mapper compile --inference`", obj=graph.name)
    windowed = [t.name for t in leaf_tasks(graph) if t.op == "attention" and t.attr("window", 0)]
    if windowed:
        raise InputError(
            f"graph {graph.name!r} has sliding-window attention ({', '.join(windowed[:3])}"
            f"{' ...' if len(windowed) > 3 else ''}: window > 0), which the kernels do not run; price it "
            "with `mapper compile` or `mapper serve`", obj=graph.name)
    bad = [t.name for t in graph.tasks if t.op == "task"]
    if bad:
        listed = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise InputError(
            f"graph {graph.name!r} has explicit-cost tasks without a kernel ({listed}) and can't be run; "
            "map it with `mapper compile` instead",
            obj=graph.name,
        )


def check_options(*, backend: str = "numba", repeats: int = 5, max_workers: int | None = None) -> None:
    """Raise :class:`OptionsError` for a bad backend, ``repeats`` or ``max_workers``."""
    if backend not in BACKENDS:
        raise OptionsError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}", obj="backend")
    if repeats < 1:
        raise OptionsError(f"repeats must be at least 1, got {repeats}", obj="repeats")
    if max_workers is not None and max_workers < 1:
        raise OptionsError(f"max_workers must be at least 1, got {max_workers}", obj="max_workers")


class Execution:
    """One schedule being run: its plan, tensors and timed samples.

    :meth:`warm_up` runs the schedule once untimed (Numba compiles every
    kernel, each output is checked against the NumPy reference when
    ``check``); every :meth:`timed_pass` then runs the whole schedule again,
    timing one call per task; :meth:`trace` summarises. Each pass is a
    complete run in the plan's order (tensors freed after their last
    consumer, as in the warm-up), so a task's calls are spread over the
    passes, with the cache state of a real run of the graph, rather than
    taken back to back; inputs and weights are made once and kept. Several
    executions can interleave their passes (and other measurements) so
    that all of them see the same machine.
    """

    def __init__(self, result: MapResult, *, seed: int = 0, check: bool = True, backend: str = "numba",
                 max_workers: int | None = None) -> None:
        check_options(backend=backend, max_workers=max_workers)
        self.result = result
        self.graph = result.schedule.cost.graph
        refuse_kernel_less(self.graph)
        from mapper.kernels import registry as kernels  # Numba loads here, not at import

        self._k = kernels
        self.seed = seed
        self.backend = backend
        self.checked = check and backend == "numba"
        self.plan = make_plan(result.schedule, max_workers)
        self._opts = _Options(check, backend)
        self._rank = {t: i for i, t in enumerate(self.plan.order)}
        self._sources: dict[tuple[str, Any], Any] = {}
        self.samples: list[list[float]] = [[] for _ in self.graph.tasks]
        self.passes = 0
        self.wall = 0.0
        self._first: TensorStore | None = None
        self.blas_threads: int | None = None

    def _run(self, timed: bool) -> TensorStore:
        store = TensorStore(self.graph, self.seed, self._k, self._sources)
        run = _Pass(self.graph, store, self._k, self._opts, self.samples, timed)
        with one_compute_pool() as blas_threads, steady_heap():
            t0 = time.perf_counter()
            threads = [
                threading.Thread(target=run.lane, args=(lane, self._rank), name=f"mapper-worker-{w}", daemon=True)
                for w, lane in enumerate(self.plan.lanes) if w > 0
            ]
            for th in threads:
                th.start()
            run.lane(self.plan.lanes[0], self._rank)  # the first lane on this thread: see the module docstring
            for th in threads:
                th.join()
            self.wall += time.perf_counter() - t0
        self.blas_threads = blas_threads
        if run.failures:
            raise min(run.failures, key=lambda f: f[0])[1]
        return store

    def warm_up(self) -> None:
        """The untimed first pass: compile, and check outputs when asked."""
        self._first = self._run(timed=False)

    def timed_pass(self) -> None:
        """One timed pass over the whole schedule (after :meth:`warm_up`)."""
        if self._first is None:
            self.warm_up()
        self._run(timed=True)
        self.passes += 1

    def trace(self, result: MapResult | None = None) -> Trace:
        """The trace of the passes so far (see :func:`execute`).

        ``result``, when given, is this schedule re-priced (the same tasks,
        assignment and per-device order on other numbers, e.g.
        :func:`mapper.run.recost.reprice`): the predicted times come from it.
        """
        if result is not None and result.schedule.device_of != self.result.schedule.device_of:
            raise OptionsError("the re-priced result has another assignment than the schedule that ran",
                               obj=result.mapper)
        if self._first is None:
            self.warm_up()
        assert self._first is not None
        from mapper.kernels._jit import num_threads

        store = self._first
        trace = build_trace(result or self.result, self.samples, self.plan.device_order, self.wall, self.seed,
                            self.passes, self.checked, self.backend, tensors=(store.total, store.peak),
                            workers=len(self.plan.lanes), outputs=store.kept())
        return dataclasses.replace(trace, blas_threads=self.blas_threads, numba_threads=num_threads())


def execute(
    result: MapResult,
    *,
    seed: int = 0,
    repeats: int = 5,
    check: bool = True,
    backend: str = "numba",
    max_workers: int | None = None,
) -> Trace:
    """Run ``result``'s schedule with the kernels and return the trace.

    Parameters
    ----------
    result : a mapped (and validated) schedule.
    seed : seeds every input and weight tensor (by name).
    repeats : timed passes over the schedule after the warm-up pass; per
        task, the median of its calls counts (:class:`Execution`).
    check : compare every output with the NumPy reference (numba backend).
    backend : ``numba`` (the kernels) or ``numpy`` (the reference implementations).
    max_workers : at most this many threads (default: one per used device).

    Raises
    ------
    InputError
        The graph has kernel-less (explicit-cost) tasks.
    OptionsError
        A bad backend, ``repeats`` or ``max_workers``.
    ExecutionError
        A task failed or disagreed with the reference; the message names it.
    """
    check_options(backend=backend, repeats=repeats, max_workers=max_workers)
    run = Execution(result, seed=seed, check=check, backend=backend, max_workers=max_workers)
    with steady_heap():  # one policy over all passes (mapper.run.heap)
        run.warm_up()
        for _ in range(repeats):
            run.timed_pass()
    return run.trace()


def build_trace(
    result: MapResult, samples_of: list[list[float]], device_order: tuple[tuple[int, ...], ...], wall: float,
    seed: int, repeats: int, checked: bool, backend: str, *, tensors: tuple[int, int | None], workers: int,
    outputs: tuple[tuple[str, Any], ...],
) -> Trace:
    """The trace of a run: per task the median of its timed samples (CPU
    devices) or its modelled time (accelerators), re-timed in the schedule's
    assignment and per-device order; ``tensors`` is (total, peak live)."""
    schedule = result.schedule
    cost = schedule.cost
    graph, devices = cost.graph, cost.platform.devices
    records = []
    for t, slot in enumerate(schedule.slots):
        dev = devices[slot.device]
        samples = samples_of[t]
        measured = statistics.median(samples) if samples else None
        predicted = slot.end - slot.start
        cpu = dev.kind in MEASURED_KINDS
        records.append(TaskRecord(
            task=t, name=graph.tasks[t].name, op=graph.tasks[t].op,
            device=slot.device, device_name=dev.name, device_kind=dev.kind,
            predicted_start=slot.start, predicted_end=slot.end, predicted=predicted,
            measured=measured, modelled=None if cpu else cost.time[t][slot.device],
            error=(predicted - measured) / measured if cpu and measured else None,
            bound=cost.bound[t][slot.device], best=min(samples) if samples else None,
        ))
    actual = retime(schedule, [r.actual for r in records], device_order)
    records = [dataclasses.replace(r, start=s.start, end=s.end) for r, s in zip(records, actual.slots)]
    return Trace(
        graph=graph.name, platform=cost.platform.name, mapper=result.mapper, backend=backend,
        seed=seed, repeats=repeats, checked=checked, records=tuple(records),
        predicted_makespan=schedule.makespan, makespan=actual.makespan,
        errors=ErrorSummary.of(tuple(records)), tensors_total=tensors[0], peak_live=tensors[1],
        wall=wall, workers=workers, outputs=outputs,
    )

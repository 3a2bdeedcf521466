"""The result of executing a mapped schedule: per-task records and totals.

A :class:`Trace` holds one :class:`TaskRecord` per task (in task-index order)
with the predicted slot from the schedule, the measured CPU time (median of
repeated runs), the modelled time on accelerators, and the relative
prediction error on CPU devices. :meth:`Trace.to_json_dict` and
:func:`format_trace` render it; nothing here runs kernels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

#: CPU tasks shorter than this (seconds) are left out of the error summary:
#: timer noise and call overhead dominate them.
ERROR_MIN_SECONDS = 1e-3


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """One executed task.

    ``task`` and ``device`` are indices (as in :class:`mapper.engine.schedule.TaskSlot`);
    ``name``/``device_name`` are their names. ``predicted_*`` come from the
    mapped schedule. ``measured`` is the median CPU time of the repeated runs
    (None if the task was not run), ``modelled`` the cost model's time on an
    accelerator (None on CPU devices), and ``error`` the relative prediction
    error ``(predicted - measured) / measured`` on CPU devices (None elsewhere);
    ``best`` is the fastest timed call.
    ``start``/``end`` place the task in the re-timed schedule, where every
    duration is the measured (CPU) or modelled (accelerator) time.
    """

    task: int
    name: str
    op: str
    device: int
    device_name: str
    device_kind: str
    predicted_start: float
    predicted_end: float
    predicted: float
    measured: float | None
    modelled: float | None
    error: float | None
    start: float = 0.0
    end: float = 0.0
    bound: str = ""  # what limits the prediction: compute|memory|launch|serial|...
    best: float | None = None  # fastest of the timed calls, seconds
    worker: str | None = None  # the engine's worker that ran it (None: the local executor)
    engine_start: float | None = None  # the engine's compute interval on the worker in the last pass,
    engine_end: float | None = None  # seconds from that pass's first compute start

    @property
    def actual(self) -> float:
        """The duration used in the re-timed schedule: modelled, else measured."""
        if self.modelled is not None:
            return self.modelled
        return self.measured if self.measured is not None else self.predicted


@dataclass(frozen=True, slots=True)
class TransferRecord:
    """One transfer the engine made in the last pass: the tensors task ``task``
    gathered from worker ``source`` onto worker ``worker``, with the
    schedule's predicted interval for the edges it served (seconds; the
    measured one from the same origin as :attr:`TaskRecord.engine_start`)."""

    task: str
    source: str
    worker: str
    start: float
    end: float
    predicted_start: float | None
    predicted_end: float | None


@dataclass(frozen=True, slots=True)
class ErrorSummary:
    """Distribution of ``|error|`` over CPU tasks measured longer than ``min_seconds``."""

    count: int
    median: float | None
    p90: float | None
    max: float | None
    min_seconds: float = ERROR_MIN_SECONDS

    @staticmethod
    def of(records: tuple[TaskRecord, ...], min_seconds: float = ERROR_MIN_SECONDS) -> ErrorSummary:
        errs = sorted(
            abs(r.error)
            for r in records
            if r.error is not None and r.measured is not None and r.measured > min_seconds
        )
        if not errs:
            return ErrorSummary(0, None, None, None, min_seconds)
        n = len(errs)
        mid = errs[n // 2] if n % 2 else (errs[n // 2 - 1] + errs[n // 2]) / 2
        p90 = errs[max(math.ceil(0.9 * n) - 1, 0)]  # nearest rank
        return ErrorSummary(n, mid, p90, errs[-1], min_seconds)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "median": self.median,
            "p90": self.p90,
            "max": self.max,
            "min_seconds": self.min_seconds,
        }


@dataclass(frozen=True, slots=True)
class Trace:
    """Predicted vs measured-or-modelled execution of one mapped graph.

    ``makespan`` is the re-timed makespan: the same assignment and per-device
    order, timed by :func:`mapper.engine.schedule.build_schedule` with each task's
    measured (CPU) or modelled (accelerator) duration. ``outputs`` holds the
    graph outputs' values (name, array), for comparing runs; it is not part
    of the JSON.
    """

    graph: str
    platform: str
    mapper: str
    backend: str
    seed: int
    repeats: int
    checked: bool
    records: tuple[TaskRecord, ...]
    predicted_makespan: float
    makespan: float
    errors: ErrorSummary
    tensors_total: int
    peak_live: int | None  # None: not known (the engine's workers hold the tensors)
    wall: float
    workers: int
    outputs: tuple[tuple[str, Any], ...] = field(default=(), repr=False, compare=False)
    blas_threads: int | None = None  # the BLAS pool's limit during the run; None: not controlled
    numba_threads: int | None = None  # threads of Numba's pool
    engine: str = "local"  # local (thread lanes) or dask
    transfers: tuple[TransferRecord, ...] = ()  # the engine's transfers (dask)

    def output(self, name: str) -> Any:
        for k, v in self.outputs:
            if k == name:
                return v
        raise KeyError(name)

    def report_records(self) -> tuple[TaskRecord, ...]:
        """The records as the HTML and Chrome-trace reports read them
        (:class:`mapper.report.common.RunRecord`): a task on an accelerator
        carries only its modelled time, since its CPU run says nothing about
        the device it was mapped to."""
        return tuple(r if r.modelled is None else replace(r, measured=None) for r in self.records)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "graph": self.graph,
            "platform": self.platform,
            "mapper": self.mapper,
            "backend": self.backend,
            "seed": self.seed,
            "repeats": self.repeats,
            "checked": self.checked,
            "predicted_makespan": self.predicted_makespan,
            "makespan": self.makespan,
            "errors": self.errors.to_json_dict(),
            "tensors": {"total": self.tensors_total, "peak_live": self.peak_live},
            "wall": self.wall,
            "workers": self.workers,
            "threads": {"numba": self.numba_threads, "blas": self.blas_threads},
            "engine": self.engine,
            "tasks": [
                {
                    "name": r.name,
                    "op": r.op,
                    "device": r.device_name,
                    "kind": r.device_kind,
                    "predicted_start": r.predicted_start,
                    "predicted_end": r.predicted_end,
                    "predicted": r.predicted,
                    "measured": r.measured,
                    "modelled": r.modelled,
                    "error": r.error,
                    "start": r.start,
                    "end": r.end,
                    "bound": r.bound,
                    "best": r.best,
                    "worker": r.worker,
                    "engine_start": r.engine_start,
                    "engine_end": r.engine_end,
                }
                for r in self.records
            ],
            "transfers": [
                {"task": x.task, "source": x.source, "worker": x.worker, "start": x.start, "end": x.end,
                 "predicted_start": x.predicted_start, "predicted_end": x.predicted_end}
                for x in self.transfers
            ],
        }


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.3f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def format_trace(trace: Trace, top: int = 25) -> str:
    """A text table of the ``top`` longest tasks (all when fewer), then totals."""
    recs = sorted(trace.records, key=lambda r: (-r.actual, r.task))
    shown = recs[:top] if top > 0 else recs
    head: tuple[str, ...] = ("task", "op", "device", "pred ms", "meas ms", "model ms", "error", "bound")
    rows: list[tuple[str, ...]] = [
        (r.name, r.op, r.device_name, _ms(r.predicted), _ms(r.measured), _ms(r.modelled), _pct(r.error), r.bound)
        for r in shown
    ]
    if trace.engine != "local":  # which worker ran each task
        head = (*head, "worker")
        rows = [(*row, r.worker or "-") for row, r in zip(rows, shown)]
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(head)]
    left = {0, 1, 2, 7, 8}

    def line(cells: tuple[str, ...]) -> str:
        padded = (c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
        return "  ".join(padded).rstrip()

    out = [line(head), line(tuple("-" * w for w in widths))]
    out += [line(row) for row in rows]
    if len(recs) > len(shown):
        out.append(f"... {len(recs) - len(shown)} more tasks (shown: the {len(shown)} longest)")
    e = trace.errors
    out.append("")
    out.append(f"graph {trace.graph} on {trace.platform} ({trace.mapper}, backend {trace.backend}, "
               f"{trace.repeats} repeats, seed {trace.seed}{', checked' if trace.checked else ''})")
    out.append(f"predicted makespan:            {_ms(trace.predicted_makespan)} ms")
    out.append(f"measured-or-modelled makespan: {_ms(trace.makespan)} ms")
    if e.count:
        out.append(
            f"prediction error, {e.count} CPU tasks > {e.min_seconds * 1e3:g} ms: "
            f"median {(e.median or 0.0) * 100:.1f}%, p90 {(e.p90 or 0.0) * 100:.1f}%, max {(e.max or 0.0) * 100:.1f}%"
        )
    else:
        out.append(f"prediction error: no CPU task ran longer than {e.min_seconds * 1e3:g} ms")
    if trace.engine != "local":
        modelled = sum(1 for r in trace.records if r.modelled is not None)
        out.append(f"engine {trace.engine}: {trace.workers} workers, {len(trace.transfers)} transfers between "
                   f"workers in the last pass; {modelled} accelerator tasks keep their modelled times")
    lanes = "worker threads" if trace.engine == "local" else "workers"
    live = "" if trace.peak_live is None else f", peak {trace.peak_live} live"
    out.append(f"tensors: {trace.tensors_total} total{live}; wall {trace.wall:.2f} s on {trace.workers} {lanes}")
    if trace.engine == "local":
        pools = "BLAS pool not controlled (threadpoolctl missing)" if trace.blas_threads is None \
            else f"BLAS pool limited to {trace.blas_threads}"
        out.append(f"kernel threads: Numba {trace.numba_threads if trace.numba_threads is not None else '?'}, {pools}")
    return "\n".join(out)

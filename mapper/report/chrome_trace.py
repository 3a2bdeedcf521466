"""The schedule as a Chrome trace (Trace Event Format), for Perfetto and
chrome://tracing.

One process per device (pid = device index + 1) with a ``tasks`` thread
(tid 1) and, when a run is given, a ``run`` thread (tid 2) holding the
measured or modelled durations; one more process, ``links``, with one thread
per link that carries transfers. Tasks and transfer pieces are complete
events (``"ph": "X"``), each transfer also a flow (``"s"`` inside the
producing task's slice, ``"f"`` with ``"bp": "e"`` inside the consuming
task's slice) so viewers draw an arrow.
Past :data:`mapper.report.blocks.DETAIL_LIMIT` tasks each thread holds busy
blocks instead (``"cat": "block"``), without flows, and ``otherData.aggregated``
says so.
Timestamps are microseconds. Format: "Trace Event Format", Google, 2016
(docs.google.com document 1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU).
"""

from __future__ import annotations

import json
import os

from mapper.core.files import atomic_write
from mapper.mapping.base import MapResult
from mapper.report import blocks
from mapper.report.common import PathStep, TransferPiece, critical_path, link_tracks, resolve_run, round_sig

TASK_TID = 1
RUN_TID = 2
_PHASE_ORDER = {"M": 0, "X": 1, "s": 2, "f": 3}
TRACE_GAP = 1e-4  # aggregated traces merge busy time across gaps under this share of the makespan
GAP_TEXT = "a ten-thousandth of the makespan"


def _us(seconds: float) -> float:
    """Seconds to microseconds, rounded to the nanosecond (stable output)."""
    return round(seconds * 1e6, 3) + 0.0


def _dur(start: float, end: float) -> float:
    return max(round(_us(end) - _us(start), 3), 0.0)


def _mid(start: float, end: float) -> float:
    return round((_us(start) + _us(end)) / 2, 3) + 0.0


def _rows(pieces: tuple[TransferPiece, ...], tol: float) -> list[int]:
    """A row per piece so that pieces of one track in one row never overlap: each
    piece, in start order, takes the lowest row of its track that is free by its start
    (interval partitioning; Kleinberg and Tardos, "Algorithm Design", 2005, section 4.1).
    Complete events on one thread must nest, so concurrent transfers need threads of their own."""
    rows = [0] * len(pieces)
    ends: dict[int, list[float]] = {}
    for i in sorted(range(len(pieces)), key=lambda i: (pieces[i].start, pieces[i].end, i)):
        pc = pieces[i]
        lane_ends = ends.setdefault(pc.track, [])
        free = next((r for r, end in enumerate(lane_ends) if end <= pc.start + tol), None)
        if free is None:
            free = len(lane_ends)
            lane_ends.append(pc.end)
        else:
            lane_ends[free] = pc.end
        rows[i] = free
    return rows


def trace_events(result: MapResult, run=None) -> list[dict]:
    """The trace events, metadata first, then by (pid, tid, ts, phase)."""
    sched = result.schedule
    graph = sched.cost.graph
    devs = sched.cost.platform.devices
    crit = set(critical_path(sched))
    rows = resolve_run(sched, run)
    link_pid = len(devs) + 1
    meta: list[dict] = []
    events: list[dict] = []

    def name_meta(pid: int, tid: int | None, name: str, sort: int) -> None:
        if tid is None:
            meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}})
            meta.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": sort}})
        else:
            meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
            meta.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": sort}})

    for d in devs:
        name_meta(d.index + 1, None, f"{d.name} ({d.kind})", d.index)
        name_meta(d.index + 1, TASK_TID, "tasks", 0)
        if rows:
            name_meta(d.index + 1, RUN_TID, "run (measured or modelled)", 1)
    huge = blocks.aggregated(sched)
    gap = TRACE_GAP * sched.makespan
    for b in blocks.device_blocks(sched, gap) if huge else ():
        events.append({"name": f"{b.items:,} tasks", "cat": "block", "ph": "X", "ts": _us(b.start),
                       "dur": _dur(b.start, b.end), "pid": b.lane + 1, "tid": TASK_TID,
                       "args": {"tasks": b.items, "busy_s": round_sig(b.busy)}})
    for s in () if huge else sched.slots:
        t = graph.tasks[s.task]
        events.append(
            {
                "name": t.name,
                "cat": "task",
                "ph": "X",
                "ts": _us(s.start),
                "dur": _dur(s.start, s.end),
                "pid": s.device + 1,
                "tid": TASK_TID,
                "args": {
                    "task": s.task,
                    "op": t.op,
                    "flops": round_sig(t.flops),
                    "bytes": round_sig(t.bytes),
                    "critical": PathStep("task", s.task) in crit,
                },
            }
        )
    tracks, pieces = link_tracks(sched)
    piece_rows = [0] * len(pieces) if huge else _rows(pieces, 1e-12 * max(sched.makespan, 1e-300))
    lanes = sorted({(pc.track, row) for pc, row in zip(pieces, piece_rows)})
    tid = {lane: k + 1 for k, lane in enumerate(lanes)}
    if tracks:
        name_meta(link_pid, None, "links", len(devs))
        for (track_index, row), k in tid.items():
            track = tracks[track_index]
            label = track.key + ("" if track.link >= 0 else " (no link)") + (f" #{row + 1}" if row else "")
            name_meta(link_pid, k, label, k - 1)
    xfer = {tr.edge: tr for tr in sched.transfers}
    for b in blocks.merge([(pc.track, pc.start, pc.end) for pc in pieces], gap) if huge else ():
        events.append({"name": f"{b.items:,} transfers", "cat": "block", "ph": "X", "ts": _us(b.start),
                       "dur": _dur(b.start, b.end), "pid": link_pid, "tid": tid[(b.lane, 0)],
                       "args": {"transfers": b.items, "busy_s": round_sig(b.busy)}})
    for pc, row in () if huge else zip(pieces, piece_rows):
        e = graph.edges[pc.edge]
        tr = xfer[pc.edge]
        events.append(
            {
                "name": f"{graph.tasks[e.src].name} -> {graph.tasks[e.dst].name}",
                "cat": "transfer",
                "ph": "X",
                "ts": _us(pc.start),
                "dur": _dur(pc.start, pc.end),
                "pid": link_pid,
                "tid": tid[(pc.track, row)],
                "args": {
                    "edge": pc.edge,
                    "bytes": round_sig(e.bytes),
                    "from": devs[tr.src_device].name,
                    "to": devs[tr.dst_device].name,
                    "critical": PathStep("transfer", pc.edge) in crit,
                },
            }
        )
    for tr in () if huge else sorted(sched.transfers, key=lambda x: x.edge):
        e = graph.edges[tr.edge]
        src, dst = sched.slots[e.src], sched.slots[e.dst]
        common = {"name": "transfer", "cat": "transfer", "id": tr.edge + 1}
        # flow ends at slice midpoints: unambiguously inside the producing and
        # consuming slices even when a neighbour ends exactly where they start
        events.append({**common, "ph": "s", "ts": _mid(src.start, src.end), "pid": src.device + 1, "tid": TASK_TID})
        events.append(
            {**common, "ph": "f", "bp": "e", "ts": _mid(dst.start, dst.end), "pid": dst.device + 1, "tid": TASK_TID}
        )
    for r in rows:
        if r.actual is None:
            continue
        events.append(
            {
                "name": graph.tasks[r.task].name,
                "cat": "run",
                "ph": "X",
                "ts": _us(r.predicted_start),
                "dur": _us(r.actual),
                "pid": r.device + 1,
                "tid": RUN_TID,
                "args": {
                    "task": r.task,
                    "predicted": round_sig(r.predicted),
                    "measured": round_sig(r.measured) if r.measured is not None else None,
                    "modelled": round_sig(r.modelled) if r.modelled is not None else None,
                    **({"worker": r.worker} if r.worker is not None else {}),
                },
            }
        )
    events.sort(key=lambda ev: (ev["pid"], ev["tid"], ev["ts"], _PHASE_ORDER[ev["ph"]], -ev.get("dur", 0.0),
                                ev.get("id", 0), ev["name"]))  # fmt: skip
    return meta + events


def to_chrome_trace(result: MapResult, run=None) -> dict:
    """The whole trace object: ``traceEvents`` plus ``otherData`` about the mapping."""
    sched = result.schedule
    return {
        "traceEvents": trace_events(result, run),
        "displayTimeUnit": "ms",
        "otherData": {
            "graph": sched.cost.graph.name,
            "platform": sched.cost.platform.name,
            "mapper": result.mapper,
            "status": result.status,
            "makespan_s": round_sig(sched.makespan),
            **({"aggregated": {"tasks": len(sched.slots), "limit": blocks.DETAIL_LIMIT, "gap_s": round_sig(
                TRACE_GAP * sched.makespan), "note": blocks.note(sched, "trace", GAP_TEXT)}}
               if blocks.aggregated(sched) else {}),
        },
    }


def write_chrome_trace(result: MapResult, path: str | os.PathLike, *, run=None) -> None:
    """Write the trace JSON to ``path`` atomically (open it in Perfetto)."""
    atomic_write(path, to_chrome_trace_json(result, run))


def to_chrome_trace_json(result: MapResult, run=None) -> str:
    """The trace as JSON text, one event per line (diff-friendly, deterministic)."""
    obj = to_chrome_trace(result, run)
    dump = lambda x: json.dumps(x, ensure_ascii=False, allow_nan=False)  # noqa: E731
    events = ",\n".join(dump(ev) for ev in obj.pop("traceEvents"))
    rest = "".join(f",\n{dump(k)}: {dump(v)}" for k, v in obj.items())
    return '{"traceEvents": [\n' + events + "\n]" + rest + "}\n"

"""The report's deadline and response-time figures: per-task lateness, whether every
deadline is met, the misses (violations under ``--objective deadline``, else notes), and
the response-time bound of :mod:`mapper.mapping.response_bound` beside the makespan."""

from __future__ import annotations

from mapper.core.units import fmt_time
from mapper.engine.validate import deadline_misses
from mapper.mapping.base import MapResult
from mapper.mapping.response_bound import response_bound


def deadline_section(result: MapResult) -> dict:
    """``deadlines_met``, ``max_lateness`` and ``violations`` when a task has a deadline
    (nothing otherwise), and ``response_bound``; for the JSON report."""
    sched = result.schedule
    out: dict = {}
    if any(t.deadline is not None for t in sched.cost.graph.tasks):
        misses = deadline_misses(sched)
        late = [sl.end - dl for sl in sched.slots if (dl := sched.cost.graph.tasks[sl.task].deadline) is not None]
        out["deadlines_met"] = not misses
        out["max_lateness"] = max(late)
        if result.objective == "deadline":
            out["violations"] = [{"kind": v.kind, "message": v.message} for v in misses]
    out["response_bound"] = response_bound(sched)
    return out


def deadline_notes(result: MapResult) -> tuple[str, ...]:
    """Missed deadlines as lines: for the notes (or, under ``--objective deadline``, as violations)."""
    misses = deadline_misses(result.schedule)
    if not misses:
        return ()
    head = "deadline violation" if result.objective == "deadline" else "deadline missed"
    return tuple(f"{head}: {v.message}" for v in misses)


def bound_line(result: MapResult) -> str:
    """The response-time bound in words, for the text report."""
    b = response_bound(result.schedule)
    who = "Graham" if b["method"] == "graham" else "Han et al."
    return f"{fmt_time(b['bound'])} (any work-conserving run of this mapping; {who})"

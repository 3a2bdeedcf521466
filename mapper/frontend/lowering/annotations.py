"""Task annotations: placement (``@gpu``, ``@!fpga``, merged with an
enclosing template call's), ``work { ... }``, ``cost { ... }``, ``parallel``,
``streamable``, ``memory``, ``colocate``, ``backward`` and ``deadline``, checked and turned
into task fields."""

from __future__ import annotations

from typing import Any

from mapper.errors import SourceSpan
from mapper.frontend import syntax as S
from mapper.frontend.lowering.values import (
    BYTE_UNITS,
    MAX_WORK,
    TIME_UNITS,
    ErrorAt,
    Evaluator,
    hint,
    literal_seconds,
)

_WORK_KEYS = ("flops", "bytes", "bytes_read", "bytes_written")
_ANN_WORD = {S.Work: "work", S.Cost: "cost", S.Parallel: "parallel", S.Streamable: "streamable",
             S.Memory: "memory", S.Colocate: "colocate", S.Backward: "backward", S.Deadline: "deadline"}


class Annotator:
    """Applies annotations; values through ``ev``, errors through ``err``."""

    __slots__ = ("ev", "err")

    def __init__(self, ev: Evaluator, err: ErrorAt) -> None:
        self.ev = ev
        self.err = err

    def annotate(self, annotations: tuple[S.Annotation, ...], values: dict[str, Any], fields: dict[str, Any],
                 allow: tuple[str, ...], deny: tuple[str, ...],
                 ) -> tuple[dict[str, Any], tuple[str, ...], tuple[str, ...]]:
        """The task fields, allowed and denied devices after ``annotations``."""
        seen: dict[type, SourceSpan] = {}
        for ann in annotations:
            kind = type(ann)
            if isinstance(ann, S.Place):
                continue
            if kind in seen:
                raise self.err(f"'{_ANN_WORD[kind]}' is given twice", ann.span, f"first at {seen[kind]}")
            seen[kind] = ann.span
            if isinstance(ann, S.Work):
                fields.update(self.work(ann, values))
            elif isinstance(ann, S.Cost):
                fields["explicit_cost"] = self.cost(ann, values)
            elif isinstance(ann, S.Parallel):
                p = self.ev.number(ann.value, values, "parallel")
                if p > 1:
                    raise self.err(f"parallel must be between 0 and 1, got {p!r}", ann.value.span)
                fields["parallel"] = p
            elif isinstance(ann, S.Streamable):
                fields["streamable"] = self.ev.integer(ann.value, values, "streamable", low=1)
            elif isinstance(ann, S.Memory):
                size = self.ev.unit(self.ev.number(ann.value, values, "memory"), ann.unit, ann.unit_span,
                                    BYTE_UNITS, "size")
                fields["memory"] = self.ev.at_most(size, MAX_WORK, "memory", ann.value.span)
            elif isinstance(ann, S.Colocate):
                fields["colocate"] = ann.name
            elif isinstance(ann, S.Deadline):
                fields["deadline"] = self.deadline(ann, values)
            else:
                fields["backward"] = True
        if any(type(a) is S.Place for a in annotations):
            allow, deny = self.placement(annotations, allow, deny)
        return fields, allow, deny

    def placement(self, annotations: tuple[S.Annotation, ...], outer_allow: tuple[str, ...],
                   outer_deny: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Merge this call's ``@`` annotations with the placement of the enclosing instance."""
        allow: list[str] = []
        deny: list[str] = list(outer_deny)
        places = [a for a in annotations if isinstance(a, S.Place)]
        if not places:
            return tuple(outer_allow), tuple(outer_deny)
        first = places[0]
        for a in places:
            target = deny if a.deny else allow
            if a.target in (deny[len(outer_deny):] if a.deny else allow):
                raise self.err(f"'{a.target}' appears twice in the placement", a.span)
            if a.target not in target:
                target.append(a.target)
        if outer_allow and allow:
            both = [x for x in allow if x in outer_allow]
            if not both:
                raise self.err("this placement excludes every device the template call allows", first.span,
                               "the call allows " + " ".join("@" + x for x in outer_allow))
            allow = both
        elif outer_allow:
            allow = list(outer_allow)
        clash = [x for x in allow if x in deny]
        if clash:
            raise self.err(f"'{clash[0]}' is both allowed and denied", first.span)
        return tuple(allow), tuple(deny)

    def work(self, w: S.Work, values: dict[str, Any]) -> dict[str, float]:
        got: dict[str, float] = {}
        for m in w.items:
            if m.key not in _WORK_KEYS:
                raise self.err(f"unknown work key '{m.key}'", m.span,
                               hint(m.key, _WORK_KEYS) or "keys: " + ", ".join(_WORK_KEYS))
            if m.key in got:
                raise self.err(f"'{m.key}' is given twice", m.span)
            v = self.ev.number(m.value, values, m.key)
            if m.key == "flops":
                if m.unit is not None:
                    raise self.err("flops take no unit", m.unit_span)
            else:
                v = self.ev.unit(v, m.unit, m.unit_span, BYTE_UNITS, "size")
            got[m.key] = self.ev.at_most(v, MAX_WORK, m.key, m.value.span)
        if "bytes" in got and ("bytes_read" in got or "bytes_written" in got):
            raise self.err("give either bytes or bytes_read/bytes_written", w.span)
        out: dict[str, float] = {}
        if "flops" in got:
            out["flops"] = got["flops"]
        if "bytes" in got:
            out["bytes_read"], out["bytes_written"] = got["bytes"], 0.0
        for k in ("bytes_read", "bytes_written"):
            if k in got:
                out[k] = got[k]
        return out

    def cost(self, c: S.Cost, values: dict[str, Any]) -> tuple[tuple[str, float], ...]:
        got: dict[str, float] = {}
        for m in c.items:
            if m.key in got:
                raise self.err(f"device '{m.key}' is given twice", m.span)
            value = m.value
            seconds = literal_seconds(value, m.unit)
            if seconds is not None:
                got[m.key] = seconds
                continue
            t = self.ev.number(value, values, "a time")
            seconds = self.ev.unit(t, m.unit, m.unit_span, TIME_UNITS, "time")
            got[m.key] = self.ev.time(seconds, "a time (s)", m.value.span)
        return tuple(sorted(got.items()))

    def deadline(self, d: S.Deadline, values: dict[str, Any]) -> float:
        """``deadline T unit`` in seconds: positive, finite and with a time unit."""
        if d.unit is None:
            raise self.err("a deadline needs a time unit", d.value.span, "e.g. deadline 5 ms (units: "
                           + ", ".join(TIME_UNITS) + ")")
        t = self.ev.number(d.value, values, "deadline")
        seconds = self.ev.unit(t, d.unit, d.unit_span, TIME_UNITS, "time")
        if not seconds > 0:
            raise self.err(f"a deadline must be positive, got {t!r} {d.unit}", d.value.span)
        return self.ev.time(seconds, "a deadline (s)", d.value.span)

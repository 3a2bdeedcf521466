"""The JSON report's task and transfer rows written straight as text.

At a million tasks a dict per row, walked by the encoder, was most of the
report's time. Here each row is one string formatted from its fields: names
encoded once (the C string encoder), each distinct number rounded and
written once, the key lines and indents fixed (rows stand at depth 2, as in
:func:`mapper.report.json_report.to_json_dict`'s report). The text is the one
``json.dumps(report, indent=2, ensure_ascii=False)`` writes for those dicts, byte for
byte (a test holds it so).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence

from mapper.engine.schedule import Schedule

#: Rows per piece handed to the writer.
BATCH = 4096
_SPEC = ".12g"  # round_sig's 12 significant digits (a test holds the two equal)
_encode_str: Callable[[str], str] = json.encoder.encode_basestring


class Numbers(dict):
    """A number's JSON text after :func:`~mapper.report.common.round_sig` (``null`` when not finite),
    each distinct number once (its steps inline: a call less per number)."""

    def __missing__(self, x: float) -> str:
        if x - x == 0.0:  # finite (inf - inf and nan - nan are nan)
            out = float.__repr__(float(format(x, _SPEC)) + 0.0)
        else:
            out = "null"
        self[x] = out
        return out


class _Strings(dict):
    """A string's JSON text (``null`` for None), each distinct string once."""

    def __missing__(self, s: str | None) -> str:
        self[s] = out = "null" if s is None else _encode_str(s)
        return out


def _names(sched: Schedule) -> list[str]:
    return [_encode_str(t.name) for t in sched.cost.graph.tasks]


def task_rows(sched: Schedule, num: Numbers, names: Sequence[str]) -> Iterator[list[str]]:
    """The ``tasks`` rows in task order, :data:`BATCH` to a list."""
    tasks = sched.cost.graph.tasks
    devs = [_encode_str(d.name) for d in sched.cost.platform.devices]
    ops = _Strings()
    slots = sorted(sched.slots, key=lambda s: s.task)
    for lo in range(0, len(slots), BATCH):
        out = []
        for s in slots[lo:lo + BATCH]:
            t = tasks[s.task]
            dl = t.deadline
            late = "" if dl is None else (f',\n      "deadline": {num[dl]},\n      "lateness": {num[s.end - dl]}')
            out.append(f'{{\n      "name": {names[s.task]},\n      "device": {devs[s.device]},\n      '
                       f'"start": {num[s.start]},\n      "end": {num[s.end]},\n      "op": {ops[t.op]},\n      '
                       f'"flops": {num[t.flops]},\n      "bytes": {num[t.bytes_read + t.bytes_written]}{late}\n    }}')
        yield out


def transfer_rows(sched: Schedule, num: Numbers, names: Sequence[str], link_names: Sequence[str]
                  ) -> Iterator[list[str]]:
    """The ``transfers`` rows in edge order, :data:`BATCH` to a list."""
    edges = sched.cost.graph.edges
    devs = [_encode_str(d.name) for d in sched.cost.platform.devices]
    links: dict[tuple[int, ...], str] = {(): "[]"}
    transfers = sorted(sched.transfers, key=lambda t: t.edge)
    for lo in range(0, len(transfers), BATCH):
        out = []
        for tr in transfers[lo:lo + BATCH]:
            e = edges[tr.edge]
            route = links.get(tr.links)
            if route is None:
                inner = ",\n        ".join(_encode_str(link_names[k]) for k in tr.links)
                route = links[tr.links] = f"[\n        {inner}\n      ]"
            out.append(f'{{\n      "edge": {int.__repr__(tr.edge)},\n      "src": {names[e.src]},\n      '
                       f'"dst": {names[e.dst]},\n      "from": {devs[tr.src_device]},\n      '
                       f'"to": {devs[tr.dst_device]},\n      "start": {num[tr.start]},\n      '
                       f'"end": {num[tr.end]},\n      "bytes": {num[e.bytes]},\n      "links": {route}\n    }}')
        yield out


def rows(sched: Schedule, link_names: Sequence[str]) -> tuple[Callable[[], Iterator[list[str]]],
                                                                Callable[[], Iterator[list[str]]]]:
    """Makers of the task rows and of the transfer rows, sharing the encoded names and numbers."""
    num = Numbers()
    names: list[list[str]] = []

    def encoded() -> list[str]:
        if not names:
            names.append(_names(sched))
        return names[0]

    return (lambda: task_rows(sched, num, encoded()),
            lambda: transfer_rows(sched, num, encoded(), link_names))

"""``mapper cost FILE --platform P``: what each task costs on each device.

Prints the task x device time table with a marker for what bounds each entry,
the infeasible entries with their reasons, and the per-edge transfer times;
``--json`` prints the same as JSON (``inf`` as ``null``).
"""

from __future__ import annotations

import json
import math
import sys

from mapper.cli import (
    add_file_argument,
    add_fuse_option,
    add_groups,
    add_platform_options,
    add_train_options,
    platform_arg,
    train_option,
)
from mapper.cli.model_options import add_model_options, source
from mapper.core.units import fmt_bytes, fmt_time
from mapper.costing.cost import CostTable, build_cost_table
from mapper.costing.fusion import fuse_for
from mapper.costing.precision import check_precision, require_format, with_precision
from mapper.costing.training import training_step
from mapper.platform.cluster import flat_platform
from mapper.platform.loader import load_platform

#: One-letter marker per bound.
MARKS = {"compute": "C", "memory": "M", "launch": "L", "serial": "S", "explicit": "E", "infeasible": "-"}
#: Rows printed per table unless ``--all``.
ROW_LIMIT = 60
#: Above this many ordered device pairs the transfer table shows min/max only.
PAIR_LIMIT = 6


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "cost", help="show the cost table of a graph on a platform",
        description="Show what each task costs on each device (C compute, M memory, L launch, "
                    "S serial, E explicit, - infeasible), why entries are infeasible, and what "
                    "each edge costs between devices.",
    )
    g = add_groups(p, "input", "platform", "mapping", "training", "reports")
    add_file_argument(g["input"])
    add_model_options(g["input"])
    add_platform_options(g["platform"])
    add_fuse_option(g["mapping"])
    add_train_options(g["training"])
    g["reports"].add_argument("--json", action="store_true", help="print the cost table as JSON")
    g["reports"].add_argument("--all", action="store_true", help=f"print every row (default: the first {ROW_LIMIT})")
    p.set_defaults(func=run)


def run(args) -> int:
    from mapper.frontend.load import load_graph

    plat = platform_arg(args)
    platform = flat_platform(load_platform(plat) if isinstance(plat, str) else plat)
    graph = load_graph(source(args))
    if check_precision(args.precision, forward=not args.train) is not None:
        require_format(platform, args.precision)
        graph = with_precision(graph, args.precision)
    graph = fuse_for(graph, platform, args.fuse)
    optimizer = train_option(args)
    if optimizer is not None:
        graph = training_step(graph, optimizer)
    cost = build_cost_table(graph, platform)
    if args.json:
        json.dump(to_json_dict(cost), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(cost, all_rows=args.all))
    return 0


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def to_json_dict(cost: CostTable) -> dict:
    """The cost table as plain JSON data; infinities become ``None``."""
    g, p = cost.graph, cost.platform
    nd = cost.n_devices
    return {
        "graph": g.name,
        "platform": p.name,
        "devices": [{"name": d.name, "kind": d.kind} for d in p.devices],
        "tasks": [
            {
                "name": t.name,
                "op": t.op,
                "time": [_num(x) for x in cost.time[t.index]],
                "bound": list(cost.bound[t.index]),
                "energy": [_num(x) for x in cost.energy[t.index]],
                "area": list(cost.area[t.index]),
                "footprint": cost.footprint[t.index],
            }
            for t in g.tasks
        ],
        "infeasible": [
            {"task": g.tasks[t].name, "device": p.devices[d].name, "reason": why} for t, d, why in cost.reasons
        ],
        "routes": [
            [
                {
                    "links": list(cost.routes[a][b]),
                    "latency": _num(cost.route_latency[a][b]),
                    "sec_per_byte": _num(cost.route_sec_per_byte[a][b]),
                }
                for b in range(nd)
            ]
            for a in range(nd)
        ],
        "edges": [
            {
                "src": g.tasks[e.src].name,
                "dst": g.tasks[e.dst].name,
                "bytes": e.bytes,
                "comm": [[_num(cost.comm(e.index, a, b)) for b in range(nd)] for a in range(nd)],
            }
            for e in g.edges
        ],
    }


def _time(x: float) -> str:
    return "-" if not math.isfinite(x) else fmt_time(x, 3)


def _cell(seconds: float, bound: str) -> str:
    return "-" if bound == "infeasible" else f"{_time(seconds)} {MARKS[bound]}"


def _grid(header: list[str], rows: list[list[str]], right_from: int) -> list[str]:
    """Aligned columns: the first ``right_from`` left-aligned, the rest right-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    out = []
    for r in [header, *rows]:
        cells = [c.ljust(w) if i < right_from else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))]
        out.append("  ".join(cells).rstrip())
    return out


def _limit(n: int, all_rows: bool) -> int:
    return n if all_rows else min(n, ROW_LIMIT)


def _more(shown: int, n: int, what: str) -> list[str]:
    return [f"({n - shown} more {what} not shown; --all prints every row)"] if shown < n else []


def render(cost: CostTable, all_rows: bool = False) -> str:
    """The readable report of ``mapper cost``."""
    g, p = cost.graph, cost.platform
    devs = p.devices
    lines = [
        f"cost of {g.name} ({len(g.tasks)} tasks, {len(g.edges)} edges) on {p.name} "
        f"({', '.join(f'{d.name} {d.kind}' for d in devs)})",
        "",
    ]
    n = _limit(len(g.tasks), all_rows)
    rows = [
        [t.name, t.op, *(_cell(x, b) for x, b in zip(cost.time[t.index], cost.bound[t.index]))]
        for t in g.tasks[:n]
    ]
    lines += _grid(["task", "op", *(d.name for d in devs)], rows, 2)
    lines += _more(n, len(g.tasks), "tasks")
    lines.append("bound: C compute, M memory, L launch, S serial, E explicit, - infeasible")
    if cost.reasons:
        lines += ["", f"infeasible ({len(cost.reasons)}):"]
        n = _limit(len(cost.reasons), all_rows)
        lines += [f"  {g.tasks[t].name} on {devs[d].name}: {why}" for t, d, why in cost.reasons[:n]]
        lines += _more(n, len(cost.reasons), "infeasible entries")
    lines += ["", *_transfers(cost, all_rows)]
    return "\n".join(lines) + "\n"


def _transfers(cost: CostTable, all_rows: bool) -> list[str]:
    g, devs = cost.graph, cost.platform.devices
    if not g.edges:
        return ["transfers: the graph has no edges"]
    pairs = [(a, b) for a in range(len(devs)) for b in range(len(devs)) if a != b]
    if not pairs:
        return ["transfers: one device, every edge costs 0"]
    full = len(pairs) <= PAIR_LIMIT
    head = ["edge", "bytes"]
    head += [f"{devs[a].name}>{devs[b].name}" for a, b in pairs] if full else ["min", "max", "no route"]
    rows = []
    n = _limit(len(g.edges), all_rows)
    for e in g.edges[:n]:
        times = [cost.comm(e.index, a, b) for a, b in pairs]
        row = [f"{g.tasks[e.src].name} -> {g.tasks[e.dst].name}", fmt_bytes(e.bytes)]
        if full:
            row += [_time(x) for x in times]
        else:
            finite = [x for x in times if math.isfinite(x)]
            row += [
                _time(min(finite)) if finite else "-",
                _time(max(finite)) if finite else "-",
                str(len(times) - len(finite)),
            ]
        rows.append(row)
    note = "" if full else f" (min/max over the {len(pairs)} ordered device pairs)"
    out = [f"transfers ({len(g.edges)} edges; time from the producer's device to the consumer's{note}):"]
    out += ["  " + line for line in _grid(head, rows, 1)]
    out += _more(n, len(g.edges), "edges")
    if any(not cost.has_route(a, b) for a, b in pairs):
        missing = [f"{devs[a].name}>{devs[b].name}" for a, b in pairs if not cost.has_route(a, b)]
        out.append(f"no route (an edge between these needs an explicit comm): {', '.join(missing)}")
    return out

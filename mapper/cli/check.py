"""``mapper check FILE [--json | --dump]``: parse and lower a program, print its summary.

The summary: graph name, task and edge counts, total FLOPs and bytes, the op
histogram, and the critical path by FLOPs (the chain of dependent tasks with
the most FLOPs in total).
"""

from __future__ import annotations

import json
import sys
from collections import Counter

from mapper.cli import add_file_argument, add_groups
from mapper.cli.model_options import add_model_options, source
from mapper.core.graph import TaskGraph
from mapper.core.units import fmt_bytes
from mapper.costing.fusion import FUSE_MODES, fuse
from mapper.dump import dump_graph
from mapper.frontend.load import load_graph


def register(subparsers) -> None:
    p = subparsers.add_parser("check", help="parse and lower a program; print a summary",
                              description="Parse and lower a DSL program (or import an ONNX model) and "
                                          "print tasks, edges, total FLOPs and bytes, the op histogram and the "
                                          "critical path by FLOPs.")
    g = add_groups(p, "input", "reports")
    add_file_argument(g["input"])
    add_model_options(g["input"])
    g["reports"].add_argument("--fuse", choices=FUSE_MODES, default="auto",
                   help="list the fused kernels a device that fuses (GPUs by default) runs (default auto; "
                        "none: no list)")
    out = g["reports"].add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the summary as JSON")
    out.add_argument("--dump", action="store_true",
                     help="print the lowered graph, one line per input, task, edge and output")
    p.set_defaults(func=run)


def critical_path_flops(g: TaskGraph) -> tuple[tuple[int, ...], float]:
    """The path with the most FLOPs (task indices, FLOPs); ties go to the smaller index.

    The longest path of a DAG by dynamic programming over a topological order
    (the critical-path method, Kelley and Walker, 1959), node weights = FLOPs.
    """
    best = [0.0] * len(g.tasks)
    parent = [-1] * len(g.tasks)
    for i in g.topo_order:
        p, top = -1, 0.0
        for s in sorted(g.pred_tasks(i)):
            if p < 0 or best[s] > top:
                p, top = s, best[s]
        best[i] = top + g.tasks[i].flops
        parent[i] = p
    end = max(range(len(best)), key=lambda i: (best[i], -i))
    path = [end]
    while parent[path[-1]] >= 0:
        path.append(parent[path[-1]])
    return tuple(reversed(path)), best[end]


def summary(g: TaskGraph, fused: bool = True) -> dict:
    """The ``check`` summary as a JSON-ready dict (keys in a fixed order);
    with ``fused``, ``fused`` lists the fused tasks a device that fuses runs
    (:mod:`mapper.costing.fusion`: name, ops, tasks) and ``fused_tasks`` their count
    with the unfused tasks."""
    hist = Counter(t.op for t in g.tasks)
    path, flops = critical_path_flops(g)
    out: dict = {
        "graph": g.name,
        "tasks": len(g.tasks),
        "edges": len(g.edges),
        "inputs": len(g.inputs),
        "outputs": list(g.outputs),
        "flops": g.total_flops,
        "bytes": g.total_bytes,
        "ops": dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))),
        "critical_path": {"tasks": [g.tasks[i].name for i in path], "flops": flops},
    }
    if fused:
        f = fuse(g)
        out["fused_tasks"] = len(f.tasks)
        out["fused"] = [{"name": t.name, "ops": [p.op for p in t.parts], "tasks": [p.name for p in t.parts]}
                        for t in f.tasks if t.parts]
    return out


def _gflop(x: float) -> str:
    return f"{x / 1e9:,.3f} GFLOP"


def _bytes(x: float) -> str:
    return fmt_bytes(x)


def run(args) -> int:
    g = load_graph(source(args))
    if args.dump:
        sys.stdout.write(dump_graph(g))
        return 0
    s = summary(g, args.fuse == "auto")
    if args.json:
        json.dump(s, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    cp = s["critical_path"]
    shown = cp["tasks"] if len(cp["tasks"]) <= 12 else cp["tasks"][:5] + ["..."] + cp["tasks"][-5:]
    out = [
        f"graph    {s['graph']}",
        f"tasks    {s['tasks']}",
        f"edges    {s['edges']}",
        f"inputs   {s['inputs']}",
        f"outputs  {', '.join(s['outputs']) or '-'}",
        f"flops    {_gflop(s['flops'])}",
        f"bytes    {_bytes(s['bytes'])}",
        "ops      " + ", ".join(f"{op} {n}" for op, n in s["ops"].items()),
        f"critical path by FLOPs: {len(cp['tasks'])} tasks, {_gflop(cp['flops'])}",
        "  " + " -> ".join(shown),
    ]
    if s.get("fused"):
        n, before, after = len(s["fused"]), s["tasks"], s["fused_tasks"]
        out.append(f"fused    {n} kernels on devices that fuse ({before} -> {after} tasks):")
        out += [f"  {f['name']}: {' + '.join(f['ops'])}" for f in s["fused"]]
    print("\n".join(out))
    return 0

"""``mapper import wfcommons FILE.json [-o OUT.tg]``: a WfCommons instance as DSL.

Reads a WfFormat file (schema 1.4 to 1.6), builds its task graph
(docs/importers.md) and writes it as DSL text: one ``task`` with ``work`` per
WfCommons task, one edge with ``bytes`` per parent/child pair.
"""

from __future__ import annotations

import os
import sys

from mapper.errors import InputError, OptionsError
from mapper.files import STDOUT, atomic_write, check_outputs, existing
from mapper.importers.dsl_writer import graph_to_dsl
from mapper.importers.wfcommons import ReferenceMachine, read_wfformat, workflow_graph

FORMATS = ("wfcommons",)


def register(subparsers) -> None:
    p = subparsers.add_parser("import", help="convert another tool's workflow file to the DSL",
                              description="Convert a WfCommons WfFormat instance (JSON) into a DSL "
                                          "program of kernel-less tasks with work and edges with bytes.")
    p.add_argument("format", choices=FORMATS, help="the input format")
    p.add_argument("file", metavar="FILE", help="the input file (WfFormat JSON)")
    p.add_argument("-o", "--output", metavar="OUT", help="write the DSL here (default: stdout)")
    ref = ReferenceMachine()
    p.add_argument("--gflops-per-core", type=float, default=ref.gflops_per_core, metavar="R",
                   help=f"reference core rate in GFLOP/s (default {ref.gflops_per_core})")
    p.add_argument("--parallel", type=float, default=ref.default_parallel, metavar="P",
                   help="parallel fraction where the record does not give one "
                        f"(default {ref.default_parallel})")
    p.set_defaults(func=run)


def run(args) -> int:
    check_outputs({"--output": args.output}, existing(args.file))
    try:
        ref = ReferenceMachine(gflops_per_core=args.gflops_per_core, default_parallel=args.parallel)
    except InputError as err:
        option = {"default_parallel": "--parallel", "gflops_per_core": "--gflops-per-core"}.get(err.obj or "", err.obj)
        raise OptionsError(err.message, obj=option) from None
    wf = read_wfformat(args.file)
    graph = workflow_graph(wf, ref)
    header = [
        f"{os.path.basename(args.file)}: WfCommons instance {wf.name!r} (schema {wf.schema or '?'}), "
        f"{len(graph.tasks)} tasks, {len(graph.edges)} edges",
        f"imported by `mapper import wfcommons`: flops = runtime x {ref.gflops_per_core:g} GFLOP/s / "
        f"((1 - p) + p / cores), bytes = file sizes; default p {ref.default_parallel:g} (docs/importers.md)",
    ]
    text = graph_to_dsl(graph, header)
    if args.output and args.output != STDOUT:
        atomic_write(args.output, text, "--output")
        print(f"wrote {args.output}: {len(graph.tasks)} tasks, {len(graph.edges)} edges")
    else:
        sys.stdout.write(text)
    return 0

"""``mapper run FILE --platform P``: compile, execute with the kernels, and
print predicted against measured (CPU) or modelled (accelerator) times."""

from __future__ import annotations

import argparse
import json
import sys

from mapper.errors import OptionsError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run",
        help="compile, then execute with the kernels; predicted vs measured times",
        description="Compile FILE for a platform, run every task with the Numba kernels "
        "(accelerator tasks run on the CPU for their values and keep their modelled time), "
        "and report predicted against measured-or-modelled times.",
    )
    p.add_argument("file", metavar="FILE", help="a task-graph DSL file")
    p.add_argument("--platform", required=True, help="a shipped platform name or a TOML path")
    p.add_argument("--mapper", default="heft", help="mapping algorithm (default: heft)")
    p.add_argument("--time-limit", type=float, default=30.0, help="seconds for exact mappers (default 30)")
    p.add_argument("--repeats", type=int, default=5, help="timed passes over the schedule after a warm-up pass; per task the median (default 5)")
    p.add_argument("--seed", type=int, default=0, help="seed of the input and weight tensors (default 0)")
    p.add_argument("--backend", choices=("numba", "numpy"), default="numba", help="kernels to run (default numba)")
    p.add_argument("--no-check", action="store_true", help="skip comparing outputs with the NumPy reference")
    p.add_argument("--workers", type=int, default=None, help="at most this many threads (default: one per device)")
    p.add_argument("--top", type=int, default=25, help="table rows: the longest tasks (0: all; default 25)")
    p.add_argument("--json", metavar="OUT", help="write the trace as JSON")
    p.add_argument("--html", metavar="OUT", help="write an HTML report with the run")
    p.add_argument("--trace", metavar="OUT", help="write a Chrome trace with the run")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mapper.execute import check_options, execute, refuse_kernel_less
    from mapper.lower import load_graph
    from mapper.mapping.base import MapOptions
    from mapper.pipeline import compile_graph
    from mapper.report.common import atomic_write
    from mapper.trace import format_trace

    if args.time_limit <= 0:
        raise OptionsError(f"--time-limit must be positive, got {args.time_limit:g}", obj="--time-limit")
    check_options(backend=args.backend, repeats=args.repeats, max_workers=args.workers)
    graph = load_graph(args.file)
    refuse_kernel_less(graph)  # before mapping: such a graph can't be run at all
    compiled = compile_graph(
        graph, args.platform, mapper=args.mapper, options=MapOptions(time_limit=args.time_limit, seed=args.seed)
    )
    trace = execute(
        compiled.result, seed=args.seed, repeats=args.repeats, check=not args.no_check,
        backend=args.backend, max_workers=args.workers,
    )
    sys.stdout.write(format_trace(trace, top=args.top) + "\n")
    if args.json:
        atomic_write(args.json, json.dumps(trace.to_json_dict(), indent=2) + "\n")
    if args.html:
        from mapper.report.html import write_html

        write_html(compiled.result, args.html, run=trace.report_records())
    if args.trace:
        from mapper.report.chrome_trace import write_chrome_trace

        write_chrome_trace(compiled.result, args.trace, run=trace.report_records())
    return 0

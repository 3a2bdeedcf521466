"""``mapper run FILE --platform P``: compile, execute with the kernels, and
print predicted against measured (CPU) or modelled (accelerator) times.

With ``--calibrate`` the CPU is calibrated during the run
(:func:`mapper.run.calibrated_run.calibrated_run`).
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import nullcontext
from dataclasses import replace
from typing import Any

from mapper.cli import (
    add_file_argument,
    add_fuse_option,
    add_groups,
    add_parallel_option,
    add_platform_options,
    add_precision_option,
    platform_arg,
    status_line,
)
from mapper.cli.model_options import add_model_options, source
from mapper.core.progress import Progress
from mapper.errors import OptionsError
from mapper.mapping.base import DEFAULT_MAPPER, DEFAULT_TIME_LIMIT


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run",
        help="compile, then execute with the kernels; predicted vs measured times",
        description="Compile FILE for a platform, run every task with the Numba kernels "
        "(accelerator tasks run on the CPU for their values and keep their modelled time), "
        "and report predicted against measured-or-modelled times.",
    )
    g = add_groups(p, "input", "platform", "mapping", "execution", "reports")
    add_file_argument(g["input"])
    add_model_options(g["input"])
    add_platform_options(g["platform"])
    m = g["mapping"]
    m.add_argument("--mapper", default=DEFAULT_MAPPER, help=f"mapping algorithm (default: {DEFAULT_MAPPER})")
    m.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT, metavar="S",
                   help=f"seconds for exact and search-based mappers (default {DEFAULT_TIME_LIMIT:g})")
    add_fuse_option(m)
    add_precision_option(m)
    add_parallel_option(m, help="split ops across devices, a MODE: data (the batch), tensor (Megatron-style GEMM "
                                "pairs, attention heads, conv channels), pipeline (stages and micro-batches) or "
                                "auto (the best plan that fits in memory); default none: the graph as written. "
                                "Layouts (text with '=') and cluster platforms are plans of a training step, "
                                "which `mapper compile --train` shows")
    x = g["execution"]
    x.add_argument("--repeats", type=int, default=5, help="timed passes over the schedule after a warm-up pass; "
                                                          "per task the median (default 5)")
    x.add_argument("--seed", type=int, default=0, help="seed of the input and weight tensors (default 0)")
    x.add_argument("--backend", choices=("numba", "numpy"), default="numba", help="kernels to run (default numba)")
    x.add_argument("--no-check", action="store_true", help="skip comparing outputs with the NumPy reference")
    x.add_argument("--workers", type=int, default=None, help="at most this many threads (default: one per device)")
    x.add_argument("--engine", choices=("local", "dask"), default="local",
                   help="local: one thread lane per device in this process (default); dask: Dask distributed, one "
                        "worker per device (needs mapper[dask])")
    x.add_argument("--scheduler", metavar="ADDRESS",
                   help="with --engine dask: the scheduler of an existing cluster (tcp://HOST:PORT); a worker "
                        "serves device D when its name is D or it offers the resource D=1 (default: start a "
                        "cluster on 127.0.0.1)")
    x.add_argument("--retries", type=int, default=0, metavar="N",
                   help="with --engine dask: survive up to N worker losses, waiting for a worker of the same "
                        "device to come back (default 0: a lost worker ends the run)")
    x.add_argument("--calibrate", action="store_true",
                   help="calibrate this CPU during the run, a timed pass after each calibration round and probe "
                   "pass, and predict the CPU tasks with that calibration (numba backend)")
    x.add_argument("--quick-calibration", action="store_true",
                   help="with --calibrate: the quick calibration (small sizes, no probes: 5 timed passes)")
    r = g["reports"]
    r.add_argument("--top", type=int, default=25, help="table rows: the longest tasks (0: all; default 25)")
    r.add_argument("--json", metavar="OUT", help="write the trace as JSON")
    r.add_argument("--html", metavar="OUT", help="write an HTML report with the run")
    r.add_argument("--trace", metavar="OUT", help="write a Chrome trace with the run")
    r.add_argument("--calibration-out", metavar="FILE", help="with --calibrate: write the calibration's platform file")
    r.add_argument("-q", "--quiet", action="store_true", help="no status line on stderr while mapping and running")
    p.set_defaults(func=run)


def _check_engine_options(args: argparse.Namespace) -> None:
    """--scheduler and --retries need --engine dask, which runs the numba kernels without --calibrate."""
    if args.engine != "dask":
        for name, value in (("--scheduler", args.scheduler), ("--retries", args.retries or None)):
            if value is not None:
                raise OptionsError(f"{name} applies only with --engine dask", obj=name)
        return
    if args.retries < 0:
        raise OptionsError(f"--retries must be >= 0, got {args.retries}", obj="--retries")
    for name, bad in (("--calibrate", args.calibrate), ("--backend numpy", args.backend != "numba"),
                      ("--workers", args.workers is not None)):
        if bad:
            raise OptionsError(f"{name} applies only with --engine local", obj=name)
    if args.scheduler is not None and not args.scheduler.strip():
        raise OptionsError("--scheduler needs an address such as tcp://127.0.0.1:8786", obj="--scheduler")
    if args.scheduler is not None:  # before anything is compiled
        from mapper.run.dask_engine import check_address

        check_address(args.scheduler)


def run(args: argparse.Namespace) -> int:
    from mapper.core.files import check_outputs, existing, outputs_together
    from mapper.frontend.load import load_graph
    from mapper.mapping.base import MapOptions
    from mapper.mapping.base import check_options as check_map_options
    from mapper.options import CompileOptions
    from mapper.pipeline import compile_graph
    from mapper.run.calibrated_run import CalibratedRun, calibrated_run, calibration_settings
    from mapper.run.execute import check_options, refuse_kernel_less
    from mapper.run.trace import format_trace

    outputs = {"--json": args.json, "--html": args.html, "--trace": args.trace,
               "--calibration-out": args.calibration_out}
    check_outputs(outputs, existing(args.file, args.platform))
    map_options = MapOptions(time_limit=args.time_limit, seed=args.seed)
    check_map_options(map_options)
    check_options(backend=args.backend, repeats=args.repeats, max_workers=args.workers)
    _check_calibration_options(args)
    _check_engine_options(args)
    graph = load_graph(source(args))
    refuse_kernel_less(graph)  # before mapping: such a graph can't be run at all
    platform: Any = platform_arg(args)
    if args.calibrate:  # refuse a platform without a CPU before mapping and running
        from mapper.platform.loader import load_platform
        from mapper.run.recost import first_cpu

        if isinstance(platform, str):
            platform = load_platform(platform)
        first_cpu(platform)
    from mapper.parallel.layout import is_layout

    if args.parallel != "none" and isinstance(platform, str):
        from mapper.platform.loader import load_platform

        platform = load_platform(platform)
    if is_layout(args.parallel) or (args.parallel != "none" and platform.cluster is not None):
        raise OptionsError("a cluster layout is a model of a training step on many GPUs, not a graph this machine "
                           "can run: see it with `mapper compile --train` (run takes --parallel with a mode, on a "
                           "platform that is not a cluster)", obj="--parallel")
    status = status_line(args)
    map_options = replace(map_options, progress=status)
    with status or nullcontext():
        compiled = compile_graph(graph, platform, CompileOptions(mapper=args.mapper, mapping=map_options,
                                                                 fuse=args.fuse, parallel=args.parallel,
                                                                 precision=args.precision))
        if status is not None and not args.calibrate:
            status(Progress(0.0, None, None, f"running the kernels ({args.repeats} timed passes after a warm-up)"))
        trace = None if args.calibrate else _execute(compiled.result, args)
    result = compiled.result
    extra: CalibratedRun | None = None
    if args.calibrate:  # it prints its own progress lines
        extra = calibrated_run(
            result, calibration_settings(args.quick_calibration), repeats=args.repeats, seed=args.seed,
            check=not args.no_check, max_workers=args.workers,
            log=_calibration_log,
        )
        trace, result = extra.trace, extra.result
    assert trace is not None
    table = format_trace(trace, top=args.top)
    if compiled.parallel is not None:
        table = "\n".join((table, *compiled.parallel.notes(), _split_check(graph, compiled, trace, args)))
    if extra is not None:
        table = f"{extra.header()}\n{table}\n{extra.footer()}"
    sys.stdout.write(table + "\n")
    with outputs_together(outputs):  # all or none
        _write_outputs(args, trace, result, extra)
    return 0


def _write_outputs(args: argparse.Namespace, trace: Any, result: Any, extra: Any) -> None:
    from mapper.core.files import atomic_write

    if args.json:
        doc = trace.to_json_dict()
        if extra is not None:
            doc["calibration"] = extra.to_json_dict(args.calibration_out)
        atomic_write(args.json, json.dumps(doc, indent=2) + "\n")
    if args.html:
        from mapper.report.html import write_html

        write_html(result, args.html, run=trace.report_records())
    if args.trace:
        from mapper.report.chrome_trace import write_chrome_trace

        write_chrome_trace(result, args.trace, run=trace.report_records())
    if extra is not None and args.calibration_out:
        from mapper.run.calibration.writer import platform_toml

        atomic_write(args.calibration_out, platform_toml(extra.calibration))


def _execute(result: Any, args: argparse.Namespace) -> Any:
    """The trace of ``result`` run on the engine ``args`` name."""
    if args.engine == "dask":
        from mapper.run.dask_engine import execute_dask

        return execute_dask(result, seed=args.seed, repeats=args.repeats, check=not args.no_check,
                            scheduler=args.scheduler, retries=args.retries)
    from mapper.run.execute import execute

    return execute(result, seed=args.seed, repeats=args.repeats, check=not args.no_check, backend=args.backend,
                   max_workers=args.workers)


def _split_check(graph: Any, compiled: Any, trace: Any, args: argparse.Namespace) -> str:
    """The line that says the split run's outputs equal the unsplit graph's (or why not compared)."""
    if args.no_check:
        return "split plan: outputs not compared with the unsplit graph's (--no-check)"
    if not compiled.parallel.split.exact:
        return "split plan: outputs not compared (batch norm statistics are per replica)"
    from mapper.parallel.check import compare_outputs

    return compare_outputs(graph, trace.outputs, args.seed, args.backend).line()


def _check_calibration_options(args: argparse.Namespace) -> None:
    """Raise :class:`OptionsError` for calibration options that can't apply."""
    if not args.calibrate:
        given_by_flag = (("--calibration-out", args.calibration_out), ("--quick-calibration", args.quick_calibration))
        for flag, given in given_by_flag:
            if given:
                raise OptionsError(f"{flag} needs --calibrate", obj=flag)
        return
    if args.backend != "numba":
        raise OptionsError(
            f"--calibrate measures the Numba kernels, so the run must use them too; got --backend {args.backend}",
            obj="--backend",
        )


def _calibration_log(line: str) -> None:
    sys.stderr.write(f"calibrate: {line}\n")

"""``mapper compile FILE --platform P``: map a task graph and write its reports.

Prints the per-device summary and the mapping's quality (makespan, lower
bound, gap, status, solve time); writes the JSON contract, HTML, Chrome trace,
DOT and PNG reports on request. Every output file is written atomically.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from contextlib import nullcontext
from typing import Any

from mapper.cli import (
    add_file_argument,
    add_fuse_option,
    add_groups,
    add_parallel_option,
    add_platform_options,
    add_train_options,
    reduced_platform,
    status_line,
    train_option,
)
from mapper.cli.model_options import add_model_options, source
from mapper.core.files import check_outputs, existing, outputs_together
from mapper.core.progress import erase_status
from mapper.core.units import fmt_objective, fmt_pct, fmt_time
from mapper.engine.schedule import ScheduleOptions
from mapper.errors import OptionsError
from mapper.mapping.base import (
    COARSENINGS,
    DEFAULT_MAPPER,
    DEFAULT_TIME_LIMIT,
    MULTILEVEL_MIN_TASKS,
    OBJECTIVES,
    MapOptions,
    Progress,
)
from mapper.options import CompileOptions
from mapper.pipeline import STAGES, StoppedAfter, compile_graph
from mapper.platform.schema import THROUGHPUT_MODELS

EXAMPLES = """\
examples:
  mapper compile examples/heft_paper.tg --platform heft3 --mapper heft
  mapper compile examples/bert_base.tg --platform cpu-gpu-fpga --time-limit 20 --html bert.html
  mapper compile examples/resnet50.tg --platform workstation --compare heft,peft,milp --json out.json
  mapper compile examples/jacobi2d.tg --platform cpu-gpu-fpga --objective energy --trace trace.json
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "compile",
        help="map a task graph onto a platform and report the schedule",
        description="Parse FILE, build the cost table for the platform, map tasks to devices, "
        "validate the schedule and report it.",
        epilog=EXAMPLES,
    )
    g = add_groups(p, "input", "platform", "mapping", "limits", "parallel", "inference", "reports")
    add_file_argument(g["input"])
    add_model_options(g["input"])
    add_platform_options(g["platform"])
    m = g["mapping"]
    m.add_argument("--mapper", default=DEFAULT_MAPPER,
                   help=f"mapping algorithm (default: {DEFAULT_MAPPER}; see `mapper mappers`)")
    m.add_argument("--delegate", choices=("greedy", "mapped"),
                   help="delegate to the platform's NPU or DLA: greedy as the runtimes do (every supported task "
                        "there, the rest on the fallback), mapped chosen with the delegation costs "
                        "(docs/platforms.md, Delegation)")
    m.add_argument("--objective", choices=OBJECTIVES, default="makespan", help="what to minimise (default makespan)")
    m.add_argument("--throughput-model", choices=THROUGHPUT_MODELS,
                   help="with --objective throughput: how a period is priced (default: the platform's "
                        "throughput_model, else device-load; docs/guide.md)")
    m.add_argument("--micro-batches", type=int, metavar="M",
                   help="with the 1f1b throughput model: micro-batches per iteration (default: the platform's "
                        "micro_batches, else 8)")
    m.add_argument("--contiguous", action="store_true",
                   help="with the max-load throughput model: each device's forward tasks form a contiguous set")
    m.add_argument("--seed", type=int, default=0, help="seed for randomised mappers (default 0)")
    m.add_argument("--coarsen", choices=COARSENINGS, default="auto",
                   help="how the milp mapper shrinks big graphs: chains (fuse linear chains), multilevel "
                        "(hypergraph partition, docs/huge.md), auto (multilevel past "
                        f"{MULTILEVEL_MIN_TASKS:,} tasks or on a platform with max_tasks/max_inbound)")
    m.add_argument("--compare", metavar="M1,M2", default="",
                   help="also run these mappers and compare them in the reports")
    m.add_argument("--contention", action="store_true", help="serialise transfers that share a link")
    m.add_argument("--streaming", action="store_true", help="pipeline chains of streamable tasks on an FPGA")
    add_fuse_option(m)
    lim = g["limits"]
    lim.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT, metavar="S",
                     help=f"seconds for exact and search-based mappers (default {DEFAULT_TIME_LIMIT:g})")
    lim.add_argument("--makespan-bound", type=float, metavar="S",
                     help="with --objective energy: the schedule must finish within S seconds")
    lim.add_argument("--memory", action="store_true", help="enforce each device's memory capacity")
    lim.add_argument("--area", action="store_true", help="enforce each FPGA's area")
    add_train_options(g["parallel"])
    add_parallel_option(g["parallel"])
    inf = g["inference"]
    inf.add_argument("--inference", metavar="prefill=S_IN[,decode=S_OUT][,batch=B|auto]",
                     help="price a generation request of a model with params SEQ, BATCH and CACHE: the prefill, "
                          "then S_OUT decode steps against a growing KV cache; --parallel chooses the serving "
                          "layout; batch=auto the batch of most tokens/s that fits and meets the bounds")
    inf.add_argument("--runtime", choices=("graph", "eager"), default="graph",
                     help="with --inference: graph (CUDA graphs, TensorRT, C++ runtimes: launches only; default) "
                          "or eager (PyTorch eager: a CPU dispatch per framework op)")
    inf.add_argument("--max-tpot", type=float, metavar="S",
                     help="with --inference: seconds per output token at most; the layout of most tokens/s "
                          "meets it")
    inf.add_argument("--max-ttft", type=float, metavar="S",
                     help="with --inference: seconds to the first token at most")
    r = g["reports"]
    r.add_argument("--json", metavar="OUT", help="write the schedule as JSON (the contract)")
    r.add_argument("--html", metavar="OUT", help="write a self-contained HTML report")
    r.add_argument("--trace", metavar="OUT", help="write a Chrome/Perfetto trace")
    r.add_argument("--dot", metavar="OUT", help="write the task graph as Graphviz DOT")
    r.add_argument("--png", metavar="OUT", help="write a Gantt chart PNG (needs mapper[plot])")
    r.add_argument("--timings", action="store_true",
                   help="add solve times to the JSON and HTML reports (which then differ from run to run)")
    r.add_argument("--dump-after", choices=STAGES, metavar="STAGE",
                   help=f"print the product of a stage and stop ({', '.join(STAGES)})")
    loud = r.add_mutually_exclusive_group()
    loud.add_argument("-q", "--quiet", action="store_true",
                      help="print nothing but errors (no status line while searching)")
    loud.add_argument("-v", "--verbose", action="store_true", help="also print the schedule and stage times")
    p.set_defaults(func=run)


def _stage_printer(stream):
    """An ``on_stage`` callback for ``--verbose``: one line per finished stage."""

    def show(stage: str, seconds: float) -> None:
        stream.write(f"{stage} done in {seconds * 1e3:.1f} ms\n")
        stream.flush()

    return show


def describer(objective: str):
    """How the status line shows a search's figures: the best value found, the bound, the gap
    (:mod:`mapper.core.progress`)."""

    def describe(p: Progress) -> str:
        parts = []
        if p.incumbent is not None:
            parts.append(f"best {fmt_objective(p.incumbent, objective)}")
        if p.bound is not None:
            gap = ""
            if p.incumbent and p.incumbent > 0:
                gap = f" (gap {fmt_pct(max(0.0, (p.incumbent - p.bound) / p.incumbent))})"
            parts.append(f"bound {fmt_objective(p.bound, objective)}{gap}")
        return ", ".join(parts)

    return describe


class Interrupt:
    """Ctrl-C while mapping: the first asks the mapper to stop and keep its best
    schedule (``MapOptions.stop``); a second one aborts."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None  # the SIGINT handler to restore

    def __enter__(self) -> Interrupt:
        self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        erase_status()
        sys.stderr.write("interrupted: stopping the search and keeping the best schedule "
                         "(Ctrl-C again to abort)\n")

    def __call__(self) -> bool:
        return self.requested


def _dump(stage: str, product) -> str:
    """Text for ``--dump-after STAGE``."""
    if stage == "parse":
        return f"parsed {product.file}: {len(product.items)} top-level items\n"
    if stage in ("lower", "fuse", "train", "split"):
        from mapper.dump import dump_graph

        return dump_graph(product.graph if stage == "split" else product)
    if stage == "platform":
        lines = [f"platform {product.name}: {product.summary()}"]
        lines += [f"  {d.name} ({d.kind})" for d in product.devices]
        return "\n".join(lines) + "\n"
    if stage == "cost":
        from mapper.cli.cost import render

        return render(product)
    from mapper.report.text import schedule_table, summary_table

    result = product[0]  # map and validate: the mapper's result, then the compared ones
    return summary_table(result) + "\n" + schedule_table(result)


def _outputs(args: argparse.Namespace) -> dict[str, str | None]:
    return {"--json": args.json, "--html": args.html, "--trace": args.trace, "--dot": args.dot, "--png": args.png}


def run(args: argparse.Namespace) -> int:
    check_outputs(_outputs(args), existing(args.file, args.platform))
    for flag, given in (("--throughput-model", args.throughput_model is not None),
                        ("--micro-batches", args.micro_batches is not None), ("--contiguous", args.contiguous)):
        if given and args.objective != "throughput":
            raise OptionsError(f"{flag} applies only with --objective throughput", obj=flag)
    if args.makespan_bound is not None and args.objective != "energy":
        raise OptionsError("--makespan-bound applies only with --objective energy", obj="--makespan-bound")
    serving = None
    if args.inference is not None:
        from mapper.serving.driver import Serving

        serving = Serving.parse(args.inference, args.runtime, args.max_tpot, args.max_ttft)
    else:
        for flag, given in (("--runtime", args.runtime != "graph"), ("--max-tpot", args.max_tpot is not None),
                            ("--max-ttft", args.max_ttft is not None)):
            if given:
                raise OptionsError(f"{flag} applies only with --inference", obj=flag)
    if args.delegate is not None:
        if args.mapper != DEFAULT_MAPPER:
            raise OptionsError("--delegate chooses the mapper; leave out --mapper", obj="--delegate")
        args.mapper = f"delegate-{args.delegate}"
    status = status_line(args, describer(args.objective))
    interrupt = Interrupt()
    mapping = MapOptions(
        objective=args.objective,
        time_limit=args.time_limit,
        seed=args.seed,
        schedule=ScheduleOptions(
            contention=args.contention, streaming=args.streaming, memory=args.memory, area=args.area
        ),
        makespan_bound=args.makespan_bound,
        contiguous=args.contiguous,
        coarsen=args.coarsen,
        progress=status,
        stop=interrupt,
    )
    options = CompileOptions(mapper=args.mapper, mapping=mapping, compare=args.compare, fuse=args.fuse,
                             throughput_model=args.throughput_model, micro_batches=args.micro_batches,
                             train=train_option(args), parallel=args.parallel, precision=args.precision,
                             serving=serving)
    t0 = time.perf_counter()
    full, reduced = reduced_platform(args)
    apps, program = _workload(args)
    shared = _on_slices(args, reduced, apps, program)
    if shared is not None:
        program = shared.graph
    try:
        with interrupt, status or nullcontext():
            compiled = compile_graph(program, reduced, options, dump_after=args.dump_after,
                                     on_stage=_stage_printer(sys.stderr) if args.verbose else None)
    except StoppedAfter as stop:
        sys.stdout.write(_dump(stop.stage, stop.product))
        return 0
    if args.without is not None and compiled.parallel is not None and hasattr(compiled.parallel, "kind"):
        compiled = _replanned(args, compiled, full)
    result = compiled.result
    _write_reports(args, compiled, apps, shared)
    if not args.quiet:
        from mapper.report.text import compare_table, schedule_table, summary_table

        out = [summary_table(result, compiled.plan_facts())]
        if shared is not None:
            from mapper.report.apps import latencies, sharing_table

            out.append(sharing_table(shared.to_json(apps, compiled.platform, latencies(result.schedule, apps))))
        if compiled.compare:
            out.append(compare_table((result, *compiled.compare)))
        if args.verbose:
            out.append(schedule_table(result))
            stages = "  ".join(f"{name} {secs * 1e3:.1f} ms" for name, secs in compiled.stage_times)
            out.append(f"stages: {stages}  (total {time.perf_counter() - t0:.2f} s)\n")
        sys.stdout.write("\n".join(out))
    return 0


def _replanned(args: argparse.Namespace, compiled, full):
    """``compiled`` with a note on what leaving out ``--without`` changed: the layout planned on
    the whole platform beside the one on what is left (:mod:`mapper.cluster`)."""
    from dataclasses import replace

    from mapper.cluster.search import plan_cluster
    from mapper.costing.fusion import fuse_for
    from mapper.frontend.load import load_graph
    from mapper.parallel.layout import requested

    graph = load_graph(source(args))
    given = requested(args.parallel)

    def prepare(g):
        return fuse_for(g, full) if args.fuse == "auto" else g

    from mapper.costing.precision import with_precision

    graph = with_precision(graph, args.precision)
    before = plan_cluster(graph, full, given, train_option(args) or "sgd", prepare, precision=args.precision)
    now = compiled.parallel
    change = "the same layout" if before.best.layout == now.best.layout else f"was {before.best.layout.label()}"
    where = {"": "", "mixed": " over several node kinds"}.get(before.kind, f" on the {before.kind} nodes")
    note = (f"parallel: re-planned without {args.without}: {now.gpus} GPUs, step {fmt_time(now.best.step)} "
            f"({change}{where}, step {fmt_time(before.best.step)} on {before.gpus} GPUs)")
    choice = replace(now, previous=(before.best.layout.label(), before.best.step, before.gpus, before.kind))
    result = replace(compiled.result, notes=(*compiled.result.notes, note))
    return replace(compiled, result=result, parallel=choice)


def _workload(args: argparse.Namespace):
    """For a workload file (``apps.json``), its models and the one graph holding them
    (:mod:`mapper.frontend.workload`); else no models and the program to read."""
    from mapper.frontend.workload import is_workload

    if not is_workload(args.file):
        return None, source(args)
    from mapper.frontend.load import load_graph
    from mapper.frontend.workload import merge, read_workload

    apps = read_workload(args.file)
    return apps, merge([(a.label, load_graph(a.path)) for a in apps], "apps", [a.slo for a in apps])


def _on_slices(args: argparse.Namespace, platform, apps, graph):
    """For a jobs file on a platform with MIG slices or MPS shares, each job placed on one slice
    (:mod:`mapper.serving.sharing`); else None."""
    if apps is None:
        return None
    from mapper.platform.loader import load_platform
    from mapper.serving.sharing import plan_on_slices, slice_devices

    plat = platform if not isinstance(platform, str) else load_platform(platform)
    if not slice_devices(plat):
        return None
    for flag, given in (("--train", args.train), ("--parallel", args.parallel != "none"),
                        ("--inference", args.inference is not None)):
        if given:
            raise OptionsError(f"jobs on slices are inference requests placed whole on a slice; leave out {flag}",
                               obj=flag)
    return plan_on_slices(graph, plat, apps, args.fuse, args.precision)


def _write_reports(args: argparse.Namespace, compiled, apps=None, shared=None) -> None:
    """Every report asked for, written all or none (:func:`mapper.core.files.outputs_together`)."""
    with outputs_together(_outputs(args)):
        _each_report(args, compiled, apps, shared)


def _each_report(args: argparse.Namespace, compiled, apps=None, shared=None) -> None:
    result = compiled.result
    if args.dot or args.png:  # before any report is written
        from mapper.report.blocks import refuse_drawing

        for flag, fmt in ((args.dot, "DOT"), (args.png, "PNG")):
            if flag:
                refuse_drawing(result.schedule, fmt)
    if args.json:
        from mapper.report.json_report import write_json

        parallel = compiled.parallel.to_json() if compiled.parallel is not None else None
        inference = None
        if compiled.serving is not None:
            parallel, inference = compiled.serving.parallel_json(), compiled.serving.to_json()
        workload = None
        if apps is not None:
            from mapper.report.apps import apps_json

            workload = apps_json(result.schedule, apps)
            if shared is not None:
                workload["sharing"] = shared.to_json(apps, compiled.platform,
                                                     [m["latency"] for m in workload["models"]])
        write_json(result, args.json, timings=args.timings, parallel=parallel, inference=inference, apps=workload)
    if args.html:
        from mapper.report.html import write_html

        served = compiled.serving
        extra: tuple = ()
        if served is not None and served.step is not None:
            extra = ((f"One {'decode step' if served.request.decode else 'prefill'} per GPU", served.step),)
        write_html(result, args.html, compare=compiled.compare, timings=args.timings, extra=extra,
                   plan=compiled.plan_facts())
    if args.trace:
        from mapper.report.chrome_trace import write_chrome_trace

        write_chrome_trace(result, args.trace)
    if args.dot:
        from mapper.report.dot import write_dot

        write_dot(result, args.dot)
    if args.png:
        from mapper.report.png import write_png

        write_png(result, args.png)

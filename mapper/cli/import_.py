"""``mapper import FORMAT FILE [-o OUT.tg]``: another tool's file as DSL (docs/importers.md).

``wfcommons``: a WfFormat instance (schema 1.4 to 1.6) as one ``task`` with
``work`` per WfCommons task and one edge with ``bytes`` per parent/child
pair. ``onnx``: an ONNX model as op calls (``--dim NAME=SIZE`` sets a
dynamic dimension such as the batch). ``dnn-partitioning``: an input of
Tarnawski et al.'s msr-fiddle/dnn-partitioning as explicit-cost tasks, plus
its devices as a platform file (``--platform-out``). ``dot``, ``gxl``: a task
graph with node and edge weights as optimal-scheduling benchmarks write it
(:mod:`mapper.frontend.importers.task_formats`), plus ``--procs N`` identical, fully
connected processors as a platform file (``--platform-out``).
"""

from __future__ import annotations

import os
import sys

from mapper.cli.model_options import add_model_options
from mapper.core.files import STDOUT, atomic_write, check_outputs, existing, outputs_together
from mapper.errors import InputError, OptionsError
from mapper.frontend.importers.dsl_writer import graph_to_dsl
from mapper.frontend.importers.wfcommons import ReferenceMachine, read_wfformat, workflow_graph
from mapper.frontend.load import graph_from_text
from mapper.frontend.sources import parse_dims, parse_input_shapes, parse_input_values
from mapper.platform.loader import parse_platform

FORMATS = ("wfcommons", "onnx", "dnn-partitioning", "dot", "gxl")


def register(subparsers) -> None:
    p = subparsers.add_parser("import", help="convert another tool's workflow or model file to the DSL",
                              description="Convert a WfCommons WfFormat instance (JSON) into a DSL program of "
                                          "kernel-less tasks with work and edges with bytes, or an ONNX model "
                                          "into a DSL program of op calls, or a dnn-partitioning instance "
                                          "(Tarnawski et al., NeurIPS 2020) into explicit-cost tasks and a "
                                          "platform, or a weighted task graph (DOT or GXL, as the benchmarks of "
                                          "optimal scheduling with communication delays write them) into "
                                          "explicit-cost tasks and N identical processors.")
    p.add_argument("format", choices=FORMATS, help="the input format")
    p.add_argument("file", metavar="FILE",
                   help="the input file (WfFormat JSON, an .onnx model, dnn-partitioning JSON, DOT or GXL)")
    add_model_options(p, params=False)
    p.add_argument("-o", "--output", metavar="OUT", help="write the DSL here (default: stdout)")
    p.add_argument("--platform-out", metavar="OUT.toml",
                   help="dnn-partitioning: write the instance's devices here as a platform file; dot, gxl: "
                        "write --procs identical processors here")
    p.add_argument("--procs", type=int, default=None, metavar="N",
                   help="dot, gxl: the number of identical, fully connected processors of --platform-out")
    ref = ReferenceMachine()
    p.add_argument("--gflops-per-core", type=float, default=ref.gflops_per_core, metavar="R",
                   help=f"reference core rate in GFLOP/s (default {ref.gflops_per_core})")
    p.add_argument("--parallel", type=float, default=ref.default_parallel, metavar="P",
                   help="parallel fraction where the record does not give one "
                        f"(default {ref.default_parallel})")
    p.set_defaults(func=run)


def _outputs(args) -> dict[str, str | None]:
    return {"--output": args.output, "--platform-out": args.platform_out}


def run(args) -> int:
    check_outputs(_outputs(args), existing(args.file))
    if args.platform_out is not None and args.format not in ("dnn-partitioning", "dot", "gxl"):
        raise OptionsError("--platform-out applies to dnn-partitioning, dot and gxl imports only",
                           obj="--platform-out")
    if args.format in ("dot", "gxl"):
        return _run_weighted(args)
    if args.procs is not None:
        raise OptionsError("--procs applies to dot and gxl imports only", obj="--procs")
    if args.format == "onnx":
        return _run_onnx(args)
    if args.format == "dnn-partitioning":
        return _run_dnn_partitioning(args)
    _no_model_options(args)
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


def _no_model_options(args) -> None:
    for flag, given in (("--dim", args.dim), ("--input-shape", args.input_shape), ("--input-value", args.input_value)):
        if given:
            raise OptionsError(f"{flag} applies to onnx imports only", obj=flag)


def _run_dnn_partitioning(args) -> int:
    from mapper.frontend.importers.dnn_partitioning import instance_dsl, instance_platform, read_instance

    _no_model_options(args)
    inst = read_instance(args.file)
    text, platform = instance_dsl(inst), instance_platform(inst)
    graph_from_text(text, args.file)  # both outputs read back before either is written
    parse_platform(platform, args.file)
    with outputs_together(_outputs(args)):  # all or none
        if args.platform_out is not None:
            atomic_write(args.platform_out, platform, "--platform-out")
        if args.output and args.output != STDOUT:
            atomic_write(args.output, text, "--output")
    if args.output and args.output != STDOUT:
        g = inst.graph
        cores = f"{inst.cpus} CPU core{'' if inst.cpus == 1 else 's'}"
        print(f"wrote {args.output}: {len(g.tasks)} tasks, {len(g.edges)} edges"
              + (f"; {args.platform_out}: {inst.accelerators} accelerators, {cores}"
                 if args.platform_out is not None and args.platform_out != STDOUT else ""))
    else:
        sys.stdout.write(text)
    return 0


def _run_weighted(args) -> int:
    from mapper.frontend.importers.task_formats import MAX_PROCS, procs_platform, read_weighted, weighted_dsl

    _no_model_options(args)
    if (args.procs is None) != (args.platform_out is None):
        raise OptionsError("--procs and --platform-out go together: the processors, and where to write them",
                           obj="--procs" if args.procs is not None else "--platform-out")
    if args.procs is not None and not 1 <= args.procs <= MAX_PROCS:
        raise OptionsError(f"expected a processor count from 1 to {MAX_PROCS}, got {args.procs}", obj="--procs")
    g = read_weighted(args.file, args.format)
    text = weighted_dsl(g)
    graph_from_text(text, args.file)  # both outputs read back before either is written
    platform = procs_platform(args.procs, os.path.basename(args.file)) if args.procs is not None else None
    if platform is not None:
        parse_platform(platform, args.file)
    with outputs_together(_outputs(args)):  # all or none
        if platform is not None:
            atomic_write(args.platform_out, platform, "--platform-out")
        if args.output and args.output != STDOUT:
            atomic_write(args.output, text, "--output")
    if args.output and args.output != STDOUT:
        print(f"wrote {args.output}: {len(g.nodes)} tasks, {len(g.edges)} edges"
              + (f"; {args.platform_out}: {args.procs} processors"
                 if platform is not None and args.platform_out != STDOUT else ""))
    else:
        sys.stdout.write(text)
    return 0


def _run_onnx(args) -> int:
    from mapper.frontend.importers.onnx_dsl import import_onnx

    imported = import_onnx(args.file, dict(parse_dims(args.dim)), dict(parse_input_shapes(args.input_shape)),
                           dict(parse_input_values(args.input_value)))
    with imported.blame():  # never write a program that check would refuse
        graph_from_text(imported.text, imported.file)
    warning = imported.warning()
    if warning:
        sys.stderr.write(f"warning: {warning}\n")
    if args.output and args.output != STDOUT:
        atomic_write(args.output, imported.text, "--output")
        fused = ", ".join(f"{k} x{v}" for k, v in sorted(imported.fused.items()))
        print(f"wrote {args.output}: {imported.tasks} tasks from {imported.nodes} ONNX nodes "
              f"({imported.folded} folded into constants{'; fused: ' + fused if fused else ''})")
    else:
        sys.stdout.write(imported.text)
    return 0

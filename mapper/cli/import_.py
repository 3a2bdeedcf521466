"""``mapper import FORMAT FILE [-o OUT.tg]``: another tool's file as DSL (docs/importers.md).

``wfcommons``: a WfFormat instance (schema 1.4 to 1.6) as one ``task`` with
``work`` per WfCommons task and one edge with ``bytes`` per parent/child
pair. ``onnx``: an ONNX model as op calls (``--dim NAME=SIZE`` sets a
dynamic dimension such as the batch). ``dnn-partitioning``: an input of
Tarnawski et al.'s msr-fiddle/dnn-partitioning as explicit-cost tasks, plus
its devices as a platform file (``--platform-out``). ``dot``, ``gxl``: a task
graph with node and edge weights as optimal-scheduling benchmarks write it
(:mod:`mapper.frontend.importers.task_formats`), plus ``--procs N`` identical, fully
connected processors as a platform file (``--platform-out``). ``snn``: a spiking
network's populations and projections as one task per neuron
(:mod:`mapper.frontend.importers.snn`).
"""

from __future__ import annotations

import argparse
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

FORMATS = ("wfcommons", "onnx", "dnn-partitioning", "dot", "gxl", "snn")


#: Each format: (what it reads, what it writes, what FILE is, the options it takes beyond -o).
_FORMATS = {
    "wfcommons": ("a WfCommons WfFormat instance (JSON, schema 1.4 to 1.6)",
                  "kernel-less tasks with work and edges with bytes", "a WfFormat JSON file", ("reference",)),
    "onnx": ("an ONNX model", "op calls (docs/importers.md)", "an ONNX model (.onnx)", ("model",)),
    "dnn-partitioning": ("an instance of Tarnawski et al.'s dnn-partitioning (NeurIPS 2020)",
                         "explicit-cost tasks, and its devices into a platform file", "a dnn-partitioning JSON file",
                         ("platform-out",)),
    "dot": ("a weighted task graph in DOT (as the benchmarks of optimal scheduling with communication delays "
            "write it)", "explicit-cost tasks, and N identical processors into a platform file", "a DOT file",
            ("procs",)),
    "gxl": ("a weighted task graph in GXL (as the benchmarks of optimal scheduling with communication delays "
            "write it)", "explicit-cost tasks, and N identical processors into a platform file", "a GXL file",
            ("procs",)),
    "snn": ("a spiking network's populations and projections (JSON, docs/huge.md)",
            "one explicit-cost task per neuron and one edge per synapse", "a network JSON file", ()),
}


def register(subparsers) -> None:
    p = subparsers.add_parser("import", help="convert another tool's workflow or model file to the DSL",
                              description="Convert another tool's file into a DSL program. "
                                          "`mapper import FORMAT --help` lists the options of one format.")
    sub = p.add_subparsers(dest="format", metavar="FORMAT", required=True, parser_class=type(p))
    for name, (source, into, what, extra) in _FORMATS.items():
        _register_format(sub, name, f"{source} into {into}", what, extra)


def _register_format(sub, name: str, text: str, what: str, extra: tuple[str, ...]) -> None:
    """``mapper import NAME``: its own options shown, the others' hidden (refused with a message when given)."""
    f = sub.add_parser(name, help=text, description=f"Convert {text}.")
    f.add_argument("file", metavar="FILE", help=f"the input file: {what}")
    f.add_argument("-o", "--output", metavar="OUT", help="write the DSL here (default: stdout)")

    def shown(key: str, help: str) -> str:
        return help if key in extra else argparse.SUPPRESS

    if "model" in extra:
        add_model_options(f, params=False)
    else:
        for flag in ("--dim", "--input-shape", "--input-value"):
            f.add_argument(flag, action="append", default=[], help=argparse.SUPPRESS)
    f.add_argument("--platform-out", metavar="OUT.toml",
                   help=shown("platform-out", "write the instance's devices here as a platform file")
                   if name == "dnn-partitioning" else shown("procs", "write --procs identical processors here "
                                                                      "as a platform file"))
    f.add_argument("--procs", type=int, default=None, metavar="N",
                   help=shown("procs", "the number of identical, fully connected processors of --platform-out"))
    ref = ReferenceMachine()
    f.add_argument("--gflops-per-core", type=float, default=None, metavar="R",
                   help=shown("reference", f"reference core rate in GFLOP/s (default {ref.gflops_per_core})"))
    f.add_argument("--parallel", type=float, default=None, metavar="P",
                   help=shown("reference", "the parallel fraction p of a task's runtime (Amdahl's law) where "
                                           "the record does not give one "
                                           f"(default {ref.default_parallel})"))
    f.set_defaults(func=run)


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
    if args.format != "wfcommons":
        for flag, value in (("--gflops-per-core", args.gflops_per_core), ("--parallel", args.parallel)):
            if value is not None:
                raise OptionsError(f"{flag} applies to wfcommons imports only", obj=flag)
    if args.format == "onnx":
        return _run_onnx(args)
    if args.format == "dnn-partitioning":
        return _run_dnn_partitioning(args)
    _no_model_options(args)
    if args.format == "snn":
        return _run_snn(args)
    default = ReferenceMachine()
    try:
        ref = ReferenceMachine(
            gflops_per_core=default.gflops_per_core if args.gflops_per_core is None else args.gflops_per_core,
            default_parallel=default.default_parallel if args.parallel is None else args.parallel)
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
    return _emit(args, graph, header)


def _run_snn(args) -> int:
    from mapper.frontend.importers.snn import network_graph, read_network

    net = read_network(args.file)
    graph = network_graph(net)
    header = [f"{os.path.basename(args.file)}: spiking network {net.name!r}, {len(graph.tasks)} neurons, "
              f"{len(graph.edges)} synapses, by mapper import snn (docs/huge.md)"]
    return _emit(args, graph, header)


def _emit(args, graph, header) -> int:
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

"""The ``mapper`` command line: one module per subcommand.

Each module in :data:`COMMANDS` defines ``register(subparsers)``, which adds
its parser and sets ``func(args) -> int``. Errors become exit codes here:
bad input 2, infeasible 3, internal 1 (see docs/architecture.md).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import textwrap
import traceback
import warnings
from collections.abc import Callable
from typing import Any

from mapper import __version__
from mapper.core.files import recording
from mapper.core.heap import one_shot
from mapper.core.progress import Progress, StatusLine, erase_status
from mapper.core.terminal import EscapingStream
from mapper.costing.fusion import FUSE_MODES
from mapper.errors import InputWarning, MapperError, format_error

#: Subcommand modules under ``mapper.cli``, in ``--help`` order.
COMMANDS: tuple[str, ...] = ("compile", "mappers", "cost", "platforms", "check", "run", "calibrate", "import_", "serve")


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help, wrapped between words only (never inside ``--input-shape`` or
    ``micro-batch``), and text with line breaks of its own (the examples) kept as written."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False, break_long_words=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text.strip():
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent, subsequent_indent=indent,
                             break_on_hyphens=False, break_long_words=False)


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad options as ``error:`` with exit code 2, with :class:`HelpFormatter`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # pragma: no cover - argparse path
        self.print_usage(sys.stderr)
        sys.stderr.write(f"error: {message}\n")
        raise SystemExit(2)


#: Option groups, in the order ``--help`` lists them: key -> (title, description).
GROUPS = {
    "input": ("input", "the program, and the sizes and params it is read with"),
    "platform": ("platform", None),
    "mapping": ("mapping", "how tasks are placed on devices and what is minimised"),
    "limits": ("limits", "what the schedule must respect, and how long a search may take"),
    "parallel": ("parallel and training", None),
    "training": ("training", None),
    "inference": ("inference", "price a generation request instead of one pass (docs/inference.md)"),
    "execution": ("execution", "how the kernels run"),
    "reports": ("reports", "what is printed and which files are written (never over an input)"),
}


def add_groups(p: argparse.ArgumentParser, *keys: str) -> dict[str, Any]:
    """Argument groups of ``p`` for ``keys`` (:data:`GROUPS`), created in that order."""
    return {k: p.add_argument_group(*GROUPS[k]) for k in keys}


def add_file_argument(p: Any, model: bool = True) -> None:
    """The program positional: a DSL file, or (``model``) an ONNX model too."""
    p.add_argument("file", metavar="FILE",
                   help="a task-graph DSL program (.tg)" + (", or an ONNX model (.onnx; sized with --dim, "
                                                           "--input-shape, --input-value)" if model else ""))


def add_fuse_option(p: Any) -> None:
    """``--fuse auto|none``, as ``compile``, ``run`` and ``cost`` take it (mapper.costing.fusion)."""
    p.add_argument("--fuse", choices=FUSE_MODES, default="auto",
                   help="fuse ops into one kernel on devices that fuse (GPUs by default): conv+batchnorm+relu, "
                        "GEMM+bias+activation, elementwise chains (default auto; none: as written)")


#: ``--parallel``'s help: a mode or a layout, told apart by '='.
PARALLEL_HELP = (
    "how to split the work over several devices; a MODE when the text has no '=', a LAYOUT when it has. "
    "MODE: none (default: the graph as written), data (split the batch), tensor (Megatron-style GEMM pairs, "
    "attention heads, conv channels), pipeline (stages and micro-batches) or auto (the fastest plan that fits "
    "in memory). LAYOUT: KEY=VALUE items joined by commas, keys tensor=T, pipeline=P, data=D, micro_batch=B, "
    "interleave=V, recompute=none|selective|full|MODULE+MODULE (Megatron-Core's recompute_modules: core_attn, "
    "mlp, moe, moe_act, layernorm, mla_up_proj, shared_experts), zero=0|1|2|3, sequence=on|off, grad=fp32|bf16 "
    "(the gradient buffer's format), first=N and last=N (Transformer layers of the first and last pipeline "
    "chunks; the others get equal shares), overlap=none|a2a|tp|p2p, joined by + (communication hidden under "
    "computation; "
    "none unless given), expert=E, expert_tensor=ET, context=C (each sequence cut over C ranks), "
    "cp=ring|allgather|a2a|a2a+p2p (how context ranks share keys and values: a ring, an all-gather, Ulysses' "
    "all-to-alls of Q, K, V and the output, or all-to-alls over cp_a2a=K of the ranks and a ring over the "
    "rest, Megatron-Core's hierarchical context parallelism; ring unless given), "
    "allocator=caching|expandable (PyTorch's caching allocator: its default mode, whose fragmentation "
    "is counted, or expandable segments, the default here), attn=NAME (the attention kernel the GPUs run, one "
    "the platform declares: cudnn or fa2 on Hopper; its default unless given), fsdp=deepspeed|megatron (with "
    "zero=3: whose sharded gathers and scatters are priced, DeepSpeed's ZeRO-3 unless given, or Megatron-FSDP), "
    "fp8_param=on|off with --precision fp8|mxfp8 and fp4_param=on|off with nvfp4 (Megatron-Core's "
    "--fp8-param-gather: the quantised GEMMs' weights held and all-gathered in their format, on unless given; "
    "off: 16-bit weights beside Transformer Engine's cached copies); "
    "keys left out are chosen. "
    "A layout, or a mode on a cluster platform, plans a training step of many GPUs (docs/parallel.md)")


def add_parallel_option(p: Any, help: str = PARALLEL_HELP) -> None:
    """``--parallel``, as ``compile`` and ``run`` take it (mapper.parallel)."""
    p.add_argument("--parallel", default="none", metavar="MODE|LAYOUT", help=help)


def add_platform_options(p: Any) -> None:
    """``--platform``, ``--nodes`` and ``--without``, as ``compile``, ``cost`` and ``run`` take them."""
    p.add_argument("--platform", required=True, metavar="P", help="a shipped platform name or a TOML path")
    p.add_argument("--nodes", default=None, metavar="N|KIND=N,...",
                   help="a cluster platform: the number of nodes; a fleet: each kind's (0 leaves a kind out; "
                        "default: the file's)")
    p.add_argument("--without", default=None, metavar="KIND|KIND=N|N,...",
                   help="a cluster platform: leave out a node kind, or N nodes (of a kind); with --parallel, "
                        "compile re-plans on what is left and says what changed")


def status_line(args: argparse.Namespace, describe: Callable[[Progress], str] | None = None) -> StatusLine | None:
    """The status line a command shows its searches on (:mod:`mapper.core.progress`); None with ``-q``.
    With ``--verbose`` and stderr not a terminal, it prints a line per search phase instead."""
    if getattr(args, "quiet", False):
        return None
    return StatusLine(sys.stderr, describe or (lambda report: ""), lines=getattr(args, "verbose", False))


def platform_arg(args: argparse.Namespace) -> Any:
    """The platform a command runs on: the name as given, or with ``--nodes`` the loaded cluster
    platform with that many nodes (:func:`mapper.platform.cluster.with_nodes`)."""
    return reduced_platform(args)[1]


def reduced_platform(args: argparse.Namespace) -> tuple[Any, Any]:
    """The platform with ``--nodes`` applied, and the same less ``--without`` (both the name as
    given when neither option is)."""
    if args.nodes is None and args.without is None:
        return args.platform, args.platform
    from mapper.platform.cluster import parse_nodes, with_nodes, without
    from mapper.platform.loader import load_platform

    nodes = parse_nodes(args.nodes) if args.nodes is not None else None  # refused before the file is read
    full = with_nodes(load_platform(args.platform), nodes)
    return full, (without(full, args.without) if args.without is not None else full)


def add_train_options(p: Any) -> None:
    """``--train`` and ``--optimizer``, as ``compile`` and ``cost`` take them (mapper.costing.training)."""
    p.add_argument("--train", action="store_true",
                   help="map a training step: backward tasks per op, optimizer updates, activations kept "
                        "for the backward pass (docs/ops.md, Training)")
    p.add_argument("--optimizer", choices=("sgd", "adam"), default=None,
                   help="with --train: the optimizer step (default sgd, with momentum)")
    add_precision_option(p)


def add_precision_option(p: Any) -> None:
    """``--precision``, as ``compile``, ``cost`` and ``run`` take it (mapper.costing.precision)."""
    p.add_argument("--precision", default=None, metavar="FORMAT",
                   help="the format the linear layers' GEMMs run in: bf16, fp8, mxfp8 or nvfp4 (attention, "
                        "norms, router, embeddings, LM head, master weights and optimizer states stay in "
                        "16/32-bit; a GPU without the format exits 2; docs/parallel.md, Precision); compile "
                        "--inference also takes int4_awq (4-bit AWQ weights, 16-bit GEMMs), a forward pass "
                        "int8 (statically scaled INT8 GEMMs, TensorRT's)")


def train_option(args: argparse.Namespace) -> str | None:
    """The optimizer ``--train`` asks for (None without ``--train``); ``--optimizer`` alone is an error."""
    if args.optimizer is not None and not args.train:
        from mapper.errors import OptionsError

        raise OptionsError("--optimizer applies only with --train", obj="--optimizer")
    return (args.optimizer or "sgd") if args.train else None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mapper",
        description="Map task graphs onto heterogeneous CPU/GPU/FPGA platforms.",
    )
    parser.add_argument("--version", action="version", version=f"mapper {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"mapper.cli.{name}").register(sub)
    return parser


#: API parameter names in messages -> the options that set them on the command line.
FLAGS = {"time_limit": "--time-limit", "makespan_bound": "--makespan-bound", "objective": "--objective",
         "seed": "--seed", "mapper": "--mapper", "compare": "--compare"}


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM ends the command as Ctrl-C does: outputs half-written are removed."""
    raise SystemExit(128 + signum)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings for the user (:class:`~mapper.errors.InputWarning`) as one line; others as Python shows them."""
    erase_status()  # a warning mid-search starts on a line of its own
    if issubclass(category, InputWarning):
        sys.stderr.write(f"warning: {message}\n")
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def main(argv: list[str] | None = None) -> int:
    """Run one command; every error ends as a message and an exit code (docs/architecture.md)."""
    one_shot()  # a huge graph's heap may be frozen (mapper.core.heap)
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = EscapingStream(stdout), EscapingStream(stderr)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread: leave signals alone
        previous = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", InputWarning)
            warnings.showwarning = _show_warning
            return _main(argv)
    finally:
        sys.stdout.flush()
        sys.stdout, sys.stderr = stdout, stderr
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        with recording():  # outputs are refused over every file the command reads
            return int(args.func(args) or 0)
    except MapperError as err:
        if err.obj in FLAGS:
            err.obj = FLAGS[err.obj]
        sys.stderr.write(format_error(err) + "\n")
        return err.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
    except MemoryError:
        sys.stderr.write("error: out of memory: the input is too large for this machine\n")
        return 2
    except RecursionError:
        sys.stderr.write("error: the input is nested too deeply\n")
        return 2
    except Exception as err:  # a bug: say so, without a traceback unless asked
        if os.environ.get("MAPPER_TRACEBACK"):
            traceback.print_exc()
        else:
            sys.stderr.write(f"internal error: {type(err).__name__}: {err}\n"
                             "this is a bug in mapper; set MAPPER_TRACEBACK=1 to see where it happened\n")
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

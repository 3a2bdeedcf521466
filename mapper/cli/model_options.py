"""``--dim``, ``--input-shape`` and ``--input-value`` (the sizes and mode inputs of a model file's open dimensions,
docs/importers.md) and ``--param`` (a DSL program's top-level params, docs/dsl.md), on every
command that reads a program."""

from __future__ import annotations

import argparse
from typing import Any

from mapper.frontend.sources import ModelFile, program_source


def add_model_options(p: Any, params: bool = True) -> None:
    """Add --param (unless ``params`` is false), then --dim, --input-shape and --input-value to a command's
    parser or argument group: a DSL program's option first, the ONNX model's after."""
    if params:
        p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                       help="a DSL program: the value of a top-level param, replacing the file's "
                            "(repeat for several)")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                   help="an ONNX model: the size of a named dynamic dimension (repeat for several)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D1,D2,...",
                   help="an ONNX model: the whole shape of an input whose dimensions are unnamed or -1")
    p.add_argument("--input-value", action="append", default=[], metavar="NAME=V1,V2,...",
                   help="an ONNX model: the value of an input that selects a mode (a sample rate): it "
                        "becomes a constant, and the branches that test it are taken")


def source(args: argparse.Namespace) -> str | ModelFile:
    """What the command reads: ``args.file``, with the model options when it is a model file."""
    return program_source(args.file, args.dim, args.input_shape, args.param, args.input_value)

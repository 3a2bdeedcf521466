"""The ``mapper`` command line: one module per subcommand.

Each module in :data:`COMMANDS` defines ``register(subparsers)``, which adds
its parser and sets ``func(args) -> int``. Errors become exit codes here:
bad input 2, infeasible 3, internal 1 (see docs/architecture.md).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from mapper import __version__
from mapper.errors import MapperError, format_error

#: Subcommand modules under ``mapper.cli``, in ``--help`` order.
COMMANDS: tuple[str, ...] = ("compile", "mappers", "cost", "platforms", "check", "run", "calibrate", "import_")


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad options as ``error:`` with exit code 2."""

    def error(self, message: str):  # pragma: no cover - argparse path
        self.print_usage(sys.stderr)
        sys.stderr.write(f"error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mapper",
        description="Map task graphs onto heterogeneous CPU/GPU/FPGA platforms.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"mapper {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"mapper.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except MapperError as err:
        sys.stderr.write(format_error(err) + "\n")
        return err.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""``mapper calibrate [-o FILE] [--quick]``: measure this CPU and write a platform file."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="measure this CPU (GFLOP/s, bandwidth, launch overhead) and write a platform file",
        description="Measure this machine's CPU with the project's kernels (matmul GFLOP/s per dtype, "
        "single-thread rate, memory bandwidth, kernel-call overhead, and probes of every op class "
        "fitted to per-op efficiencies and Hockney fixed times or half-performance lengths) and write a "
        "platform TOML file that loads with --platform.",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write the platform file here (default: print it)")
    p.add_argument("--name", default="host", help="platform name in the file (default: host)")
    p.add_argument("--quick", action="store_true", help="small sizes, no probes: under about 5 s")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mapper.core.files import atomic_write, check_outputs
    from mapper.run.calibrate import calibrate
    from mapper.run.calibration.records import Settings
    from mapper.run.calibration.writer import calibrated_platform, platform_toml

    check_outputs({"--output": args.output})

    def log(line: str) -> None:
        if not args.quiet:
            sys.stderr.write(line + "\n")

    cal = calibrate(Settings.quick() if args.quick else Settings(), name=args.name, log=log)
    calibrated_platform(cal)  # the file must load: check before writing
    text = platform_toml(cal)
    if args.output:
        atomic_write(args.output, text)
        if not args.quiet:
            log(f"wrote {args.output} ({cal.seconds:.1f} s)")
    else:
        sys.stdout.write(text)
    return 0

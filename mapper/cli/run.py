"""``mapper run FILE --platform P``: compile, execute with the kernels, and
print predicted against measured (CPU) or modelled (accelerator) times.

With ``--calibrate`` the CPU is calibrated during the run
(:func:`calibrated_run`): one timed pass of the schedule runs after every
calibration round and probe pass, so that the calibration and the timed
passes see the machine at the same times, and the same schedule is then
re-priced with the calibrated CPU model (:mod:`mapper.recost`).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable

from mapper.errors import OptionsError

if TYPE_CHECKING:
    from mapper.calibrate import Calibration, Settings
    from mapper.execute import Execution
    from mapper.mapping.base import MapResult
    from mapper.trace import Trace

#: Rate rounds of a calibration during the run, at least: with a timed pass
#: after each round (and each of the 9 probe passes of a full calibration),
#: the run gets 14 timed passes (quick: 5), at least the default ``--repeats``.
MIN_ROUNDS = 5


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
    p.add_argument("--calibrate", action="store_true",
                   help="calibrate this CPU during the run, a timed pass after each calibration round and probe "
                   "pass, and predict the CPU tasks with that calibration (numba backend)")
    p.add_argument("--calibration-out", metavar="FILE", help="with --calibrate: write the calibration's platform file")
    p.add_argument("--quick-calibration", action="store_true",
                   help="with --calibrate: the quick calibration (small sizes, no probes: 5 timed passes)")
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
    _check_calibration_options(args)
    graph = load_graph(args.file)
    refuse_kernel_less(graph)  # before mapping: such a graph can't be run at all
    platform: Any = args.platform
    if args.calibrate:  # refuse a platform without a CPU before mapping and running
        from mapper.platform import load_platform
        from mapper.recost import first_cpu

        platform = load_platform(args.platform)
        first_cpu(platform)
    compiled = compile_graph(
        graph, platform, mapper=args.mapper, options=MapOptions(time_limit=args.time_limit, seed=args.seed)
    )
    result = compiled.result
    extra: CalibratedRun | None = None
    if args.calibrate:
        extra = calibrated_run(
            result, calibration_settings(args.quick_calibration), repeats=args.repeats, seed=args.seed,
            check=not args.no_check, max_workers=args.workers, log=lambda line: sys.stderr.write(f"calibrate: {line}\n"),
        )
        trace, result = extra.trace, extra.result
    else:
        trace = execute(
            compiled.result, seed=args.seed, repeats=args.repeats, check=not args.no_check,
            backend=args.backend, max_workers=args.workers,
        )
    table = format_trace(trace, top=args.top)
    if extra is not None:
        table = f"{extra.header()}\n{table}\n{extra.footer()}"
    sys.stdout.write(table + "\n")
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
        from mapper.calibrate import platform_toml

        atomic_write(args.calibration_out, platform_toml(extra.calibration))
    return 0


def _check_calibration_options(args: argparse.Namespace) -> None:
    """Raise :class:`OptionsError` for calibration options that can't apply."""
    if not args.calibrate:
        for flag, given in (("--calibration-out", args.calibration_out), ("--quick-calibration", args.quick_calibration)):
            if given:
                raise OptionsError(f"{flag} needs --calibrate", obj=flag)
        return
    if args.backend != "numba":
        raise OptionsError(
            f"--calibrate measures the Numba kernels, so the run must use them too; got --backend {args.backend}",
            obj="--backend",
        )


def calibration_settings(quick: bool) -> Settings:
    """The calibration of ``mapper run --calibrate``: the full one
    (:class:`mapper.calibrate.Settings`) or, with ``quick``, ``Settings.quick()``,
    with at least :data:`MIN_ROUNDS` rate rounds."""
    from mapper.calibrate import Settings

    base = Settings.quick() if quick else Settings()
    return replace(base, rounds=max(base.rounds, MIN_ROUNDS))


@dataclass(frozen=True, slots=True)
class CalibratedRun:
    """A run with a calibration made during it (:func:`calibrated_run`).

    ``trace`` has the predictions of ``result``, the schedule re-priced with
    the calibrated CPU model; ``uncalibrated`` is the trace of the same
    passes with the predictions of the mapping platform's own model;
    ``interleaved`` timed passes ran between the calibration's measurements
    and ``after`` more after it (up to ``repeats``).
    """

    trace: Trace
    result: MapResult
    calibration: Calibration
    uncalibrated: Trace
    interleaved: int
    after: int

    def header(self) -> str:
        """The line above the table: where the predictions come from."""
        cal = self.calibration
        return (f"predictions: CPU model calibrated during this run ({cal.when}, {cal.seconds:.1f} s, "
                f"{self.interleaved} timed passes interleaved with it, {self.after} after); "
                f"other devices as in {self.uncalibrated.platform}")

    def footer(self) -> str:
        """The line below the table: the same passes against the platform's own model."""
        u = self.uncalibrated
        e = u.errors
        err = (f"median {e.median * 100:.1f}%, p90 {e.p90 * 100:.1f}%, max {e.max * 100:.1f}%" if e.count
               else f"no CPU task ran longer than {e.min_seconds * 1e3:g} ms")
        return (f"with {u.platform}'s own CPU model: predicted makespan {u.predicted_makespan * 1e3:.3f} ms; "
                f"prediction error, {e.count} CPU tasks: {err}")

    def to_json_dict(self, platform_file: str | None = None) -> dict[str, Any]:
        """The ``calibration`` field of ``mapper run --calibrate --json``."""
        cal = self.calibration
        return {
            "during_run": True,
            "when": cal.when,
            "seconds": cal.seconds,
            "probes": len(cal.probes),
            "interleaved_passes": self.interleaved,
            "passes_after": self.after,
            "platform_file": platform_file,
            "uncalibrated": {
                "platform": self.uncalibrated.platform,
                "predicted_makespan": self.uncalibrated.predicted_makespan,
                "errors": self.uncalibrated.errors.to_json_dict(),
            },
        }


def calibrated_run(
    result: MapResult, settings: Settings, *, repeats: int = 5, seed: int = 0, check: bool = True,
    max_workers: int | None = None, log: Callable[[str], None] | None = None,
) -> CalibratedRun:
    """Run ``result``'s schedule with a calibration of this CPU interleaved.

    After the warm-up pass, :func:`mapper.calibrate.calibrate` runs with
    ``between`` set to one timed pass of the schedule (after every rate
    round and probe pass); when that gives fewer than ``repeats`` passes,
    the missing ones run after it. The schedule is then re-priced on the
    mapping platform with the calibrated CPU model
    (:func:`mapper.recost.with_cpu_model`, :func:`mapper.recost.reprice`),
    and the trace takes its predictions from there.

    Raises
    ------
    OptionsError
        The mapping platform has no CPU device.
    ExecutionError
        A task failed or disagreed with the reference.
    """
    from mapper.calibrate import calibrate
    from mapper.execute import Execution, check_options
    from mapper.heap import steady_heap
    from mapper.recost import first_cpu, reprice, with_cpu_model

    check_options(repeats=repeats, max_workers=max_workers)
    platform = result.schedule.cost.platform
    first_cpu(platform)
    run = Execution(result, seed=seed, check=check, max_workers=max_workers)
    with steady_heap():  # one heap policy over the run and the calibration (mapper.heap)
        run.warm_up()
        cal = calibrate(settings, log=log, between=run.timed_pass)
        interleaved = run.passes
        for _ in range(repeats - interleaved):
            run.timed_pass()
    if log is not None:
        log(f"{interleaved} timed passes interleaved, {run.passes - interleaved} after; {cal.seconds:.1f} s")
    repriced = reprice(result, with_cpu_model(platform, cal.platform()))
    return CalibratedRun(run.trace(repriced), repriced, cal, run.trace(), interleaved, run.passes - interleaved)

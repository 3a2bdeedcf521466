"""A run of a schedule with a calibration of this CPU interleaved
(``mapper run --calibrate``).

One timed pass of the schedule runs after every calibration round and
probe pass, so that the calibration and the timed passes see the machine
at the same times (this project's development VM moved by 20-30 % between
runs a minute apart), and the same schedule is then re-priced with the
calibrated CPU model (:mod:`mapper.run.recost`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mapper.mapping.base import MapResult
    from mapper.run.calibration.records import Calibration, Settings
    from mapper.run.trace import Trace

#: Rate rounds of a calibration during the run, at least: with a timed pass
#: after each round (and each of the 9 probe passes of a full calibration),
#: the run gets 14 timed passes (quick: 5), at least the default ``--repeats``.
MIN_ROUNDS = 5


def calibration_settings(quick: bool) -> Settings:
    """The calibration of ``mapper run --calibrate``: the full one
    (:class:`mapper.run.calibration.records.Settings`) or, with ``quick``, ``Settings.quick()``,
    with at least :data:`MIN_ROUNDS` rate rounds."""
    from mapper.run.calibration.records import Settings

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
        err = (f"median {(e.median or 0.0) * 100:.1f}%, p90 {(e.p90 or 0.0) * 100:.1f}%, "
               f"max {(e.max or 0.0) * 100:.1f}%" if e.count
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

    After the warm-up pass, :func:`mapper.run.calibrate.calibrate` runs with
    ``between`` set to one timed pass of the schedule (after every rate
    round and probe pass); when that gives fewer than ``repeats`` passes,
    the missing ones run after it. The schedule is then re-priced on the
    mapping platform with the calibrated CPU model
    (:func:`mapper.run.recost.with_cpu_model`, :func:`mapper.run.recost.reprice`),
    and the trace takes its predictions from there.

    Raises
    ------
    OptionsError
        The mapping platform has no CPU device.
    ExecutionError
        A task failed or disagreed with the reference.
    """
    from mapper.run.calibrate import calibrate
    from mapper.run.calibration.writer import calibrated_platform
    from mapper.run.execute import Execution, check_options
    from mapper.run.heap import steady_heap
    from mapper.run.recost import first_cpu, reprice, with_cpu_model

    check_options(repeats=repeats, max_workers=max_workers)
    platform = result.schedule.cost.platform
    first_cpu(platform)
    run = Execution(result, seed=seed, check=check, max_workers=max_workers)
    with steady_heap():  # one heap policy over the run and the calibration (mapper.run.heap)
        run.warm_up()
        cal = calibrate(settings, log=log, between=run.timed_pass)
        interleaved = run.passes
        for _ in range(repeats - interleaved):
            run.timed_pass()
    if log is not None:
        log(f"{interleaved} timed passes interleaved, {run.passes - interleaved} after; {cal.seconds:.1f} s")
    repriced = reprice(result, with_cpu_model(platform, calibrated_platform(cal)))
    return CalibratedRun(run.trace(repriced), repriced, cal, run.trace(), interleaved, run.passes - interleaved)

"""The one interface every mapper implements, and the result it returns."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

from mapper.core.progress import Progress as Progress  # the searches' reports (re-exported)
from mapper.costing.cost import CostTable
from mapper.engine.schedule import Schedule, ScheduleOptions
from mapper.errors import OptionsError

OBJECTIVES = ("makespan", "energy", "throughput", "deadline")
#: ``--coarsen``: ``auto`` (chains past the exact size, multilevel past :data:`MULTILEVEL_MIN_TASKS`),
#: ``chains`` (never multilevel) or ``multilevel`` (:mod:`mapper.mapping.multilevel`, any size).
COARSENINGS = ("auto", "chains", "multilevel")
#: ``--coarsen auto`` maps graphs above this many tasks multilevel: past it the heuristics alone, run on
#: the whole graph, take longer than a default time limit (benchmarks/huge.py).
MULTILEVEL_MIN_TASKS = 10_000
#: The defaults of every entry point (``mapper compile``, ``mapper run``, :class:`MapOptions`).
DEFAULT_MAPPER = "milp"
DEFAULT_TIME_LIMIT = 10.0
STATUSES = ("optimal", "feasible", "heuristic")


@dataclass(frozen=True, slots=True)
class MapOptions:
    """How to map: the objective, limits, schedule options and callbacks.

    ``progress`` is called now and then by search-based mappers; ``stop``
    is polled by them, and when it returns True they end the search and
    return the best schedule found so far (the CLI sets it on Ctrl-C).
    """

    objective: str = "makespan"
    time_limit: float = DEFAULT_TIME_LIMIT  # seconds, for exact and search-based mappers
    seed: int = 0
    schedule: ScheduleOptions = ScheduleOptions()
    makespan_bound: float | None = None  # with objective="energy"
    coarsen: str = "auto"  # auto | chains | multilevel (see COARSENINGS)
    contiguous: bool = False  # max-load throughput: each device's forward tasks form a contiguous set
    progress: Callable[[Progress], None] | None = field(default=None, compare=False)
    stop: Callable[[], bool] | None = field(default=None, compare=False)

    def should_stop(self) -> bool:
        return self.stop is not None and self.stop()


def check_options(options: MapOptions) -> None:
    """Raise :class:`OptionsError` for options no mapper can honour (one check for all of them)."""
    if options.objective not in OBJECTIVES:
        raise OptionsError(
            f"unknown objective {options.objective!r}; choose one of {', '.join(OBJECTIVES)}", obj="objective"
        )
    if options.coarsen not in COARSENINGS:
        raise OptionsError(f"unknown coarsening {options.coarsen!r}; choose one of {', '.join(COARSENINGS)}",
                           obj="--coarsen")
    limit = options.time_limit
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not (limit > 0 and math.isfinite(limit)):
        raise OptionsError(f"the time limit must be a positive number of seconds, got {limit}", obj="time_limit")
    bound = options.makespan_bound
    if bound is not None and (isinstance(bound, bool) or not isinstance(bound, (int, float))
                              or not (bound > 0 and math.isfinite(bound))):
        raise OptionsError(f"the makespan bound must be a positive number of seconds, got {bound}",
                           obj="makespan_bound")
    seed = options.seed
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise OptionsError(f"the seed must be an integer from 0 to 2**63 - 1, got {seed}", obj="seed")


@dataclass(frozen=True, slots=True, repr=False)
class MapResult:
    """A validated-able schedule plus what the mapper knows about its quality."""

    schedule: Schedule
    mapper: str
    status: str  # optimal | feasible | heuristic
    objective: str
    objective_value: float
    lower_bound: float | None = None
    gap: float | None = None  # (value - bound) / value
    solve_time: float = 0.0
    notes: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return (f"MapResult({self.mapper!r}, {self.status}, {self.objective} {self.objective_value:.6g}, "
                f"lower bound {self.lower_bound if self.lower_bound is None else format(self.lower_bound, '.6g')}, "
                f"{self.schedule!r})")


class Mapper(ABC):
    """Assigns tasks to devices and orders them. One subclass per algorithm."""

    name: str = ""
    summary: str = ""

    @abstractmethod
    def map(self, cost: CostTable, options: MapOptions = MapOptions()) -> MapResult:
        """Return a schedule for ``cost`` under ``options``."""

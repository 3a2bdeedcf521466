"""What one compilation is asked to do: :class:`CompileOptions`, the options of
:func:`mapper.pipeline.compile_graph` (``mapper compile``'s options, less the input, the
platform and the reports), each checked before any work."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mapper.costing.fusion import check_fuse
from mapper.costing.precision import check_precision
from mapper.errors import OptionsError
from mapper.mapping import get_mapper
from mapper.mapping.base import DEFAULT_MAPPER, MapOptions, check_options
from mapper.parallel.plan import check_parallel
from mapper.platform.schema import MAX_MICRO_BATCHES, THROUGHPUT_MODELS

if TYPE_CHECKING:
    from mapper.serving.driver import Serving


@dataclass(frozen=True, slots=True)
class CompileOptions:
    """How to compile, by concern.

    Mapping: ``mapper`` (whose schedule is the result), ``mapping`` (its objective, time limit,
    seed, schedule options and callbacks), ``compare`` (further mappers run on the same cost
    table), ``fuse`` (``auto`` fuses ops on devices that run fused kernels, ``none`` never),
    ``throughput_model`` and ``micro_batches`` (how ``objective="throughput"`` prices a period;
    None keeps the platform's).

    Parallel and training: ``train`` (an optimizer, ``sgd`` or ``adam``: map the training step;
    None maps the graph as it is), ``parallel`` (``none``; a mode, ``auto``, ``data``,
    ``tensor``, ``pipeline``; or a layout, text with ``=``: docs/parallel.md) and ``precision``
    (the format the linear layers' GEMMs run in, :mod:`mapper.costing.precision`; None keeps the
    graph's dtypes).

    Inference: ``serving`` (a generation request to price, :class:`mapper.serving.driver.Serving`).
    """

    mapper: str = DEFAULT_MAPPER
    mapping: MapOptions = field(default_factory=MapOptions)
    compare: Sequence[str] = ()
    fuse: str = "auto"
    throughput_model: str | None = None
    micro_batches: int | None = None
    train: str | None = None
    parallel: str = "none"
    precision: str | None = None
    serving: Serving | None = None

    def __post_init__(self) -> None:
        if isinstance(self.compare, str):  # "heft,peft" as the command line writes it
            object.__setattr__(self, "compare", tuple(m.strip() for m in self.compare.split(",") if m.strip()))
        else:
            object.__setattr__(self, "compare", tuple(self.compare))

    def check(self) -> None:
        """Raise :class:`OptionsError` for options no compilation can honour (before any work)."""
        check_options(self.mapping)
        check_fuse(self.fuse)
        if self.throughput_model is not None and self.throughput_model not in THROUGHPUT_MODELS:
            raise OptionsError(f"unknown throughput model {self.throughput_model!r}; choose one of "
                               f"{', '.join(THROUGHPUT_MODELS)}", obj="--throughput-model")
        mb = self.micro_batches
        if mb is not None and (isinstance(mb, bool) or not isinstance(mb, int) or not 1 <= mb <= MAX_MICRO_BATCHES):
            raise OptionsError(f"the micro-batch count must be an integer from 1 to {MAX_MICRO_BATCHES}, "
                               f"got {mb!r}", obj="--micro-batches")
        get_mapper(self.mapper)  # unknown names fail before any work
        for name in self.compare:
            get_mapper(name, "--compare")
        check_parallel(self.parallel)
        check_precision(self.precision, self.serving is not None, self.serving is None and self.train is None)
        if self.serving is not None:
            if self.train is not None:
                raise OptionsError("--inference prices generation; --train prices a training step: give one",
                                   obj="--inference")
            if self.mapping.objective != "makespan":
                raise OptionsError("--inference minimises the request's latency: --objective makespan only",
                                   obj="--objective")

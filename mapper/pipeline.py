"""The compiler pipeline: parse -> lower -> platform -> fuse -> train -> split -> cost -> map -> validate.

Each stage is a function from one frozen type to the next (docs/architecture.md).
:func:`compile_graph` calls them in order, times each stage, and can stop
after any stage (``dump_after``: it raises :class:`StoppedAfter`, which
carries the stage's product).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapper.core.graph import TaskGraph
from mapper.core.heap import settle
from mapper.core.progress import Progress
from mapper.costing.cost import CostTable, build_cost_table
from mapper.costing.fusion import fuse_for
from mapper.costing.precision import require_format, with_precision
from mapper.engine.validate import require_valid
from mapper.errors import OptionsError
from mapper.frontend.sources import ModelFile, is_model
from mapper.mapping import get_mapper
from mapper.mapping.base import MapOptions, MapResult
from mapper.mapping.fit import fitting, oversized
from mapper.mapping.shared_bound import share_bounds
from mapper.options import CompileOptions
from mapper.parallel.layout import is_layout
from mapper.platform.cluster import flat_platform
from mapper.platform.loader import Platform, load_platform

if TYPE_CHECKING:  # the split and the training step load only when asked for
    from mapper.cluster.search import ClusterChoice
    from mapper.parallel.burst_graph import BurstChoice
    from mapper.parallel.hybrid import HybridChoice
    from mapper.parallel.search import Choice
    from mapper.serving.search import ServingChoice

#: Stage names, in order; ``dump_after`` takes one of them.
STAGES = ("parse", "lower", "platform", "fuse", "train", "split", "cost", "map", "validate")
#: What the status line says while a stage runs (:mod:`mapper.core.progress`).
STAGE_WORDS = {"parse": "parsing", "lower": "lowering", "platform": "loading the platform", "fuse": "fusing ops",
               "train": "building the training step", "split": "choosing a parallel layout",
               "cost": "pricing every task on every device", "map": "mapping", "validate": "validating the schedule"}


@dataclass(frozen=True, slots=True, repr=False)
class CompileResult:
    """Everything one compilation produced, with per-stage wall times."""

    graph: TaskGraph
    platform: Platform
    cost: CostTable
    result: MapResult
    compare: tuple[MapResult, ...] = ()
    stage_times: tuple[tuple[str, float], ...] = ()
    # the split plan or cluster layout kept (--parallel)
    parallel: Choice | ClusterChoice | HybridChoice | BurstChoice | None = None
    serving: ServingChoice | None = None  # the serving layout and the request's figures (--inference)

    def __repr__(self) -> str:
        return f"CompileResult({self.result!r}, compared with {len(self.compare)} more)"

    def plan_facts(self) -> tuple[tuple[str, str], ...]:
        """The plan kept (layout, stages, groups, batch) as the reports' plan section shows it; () for none."""
        chosen: Any = self.serving if self.serving is not None else self.parallel
        return chosen.plan_facts() if chosen is not None else ()


class StoppedAfter(Exception):
    """Raised internally when ``dump_after`` names a stage; carries its product."""

    def __init__(self, stage: str, product: Any) -> None:
        super().__init__(stage)
        self.stage = stage
        self.product = product


def compile_graph(
    source: str | Path | ModelFile | TaskGraph,
    platform: str | Path | Platform,
    options: CompileOptions | MapOptions | None = None,
    *,
    dump_after: str | None = None,
    on_stage: Callable[[str, float], None] | None = None,
    **fields: Any,
) -> CompileResult:
    """Compile ``source`` for ``platform`` as ``options`` ask.

    Parameters
    ----------
    source : a DSL or model file path (a :class:`~mapper.frontend.sources.ModelFile` with the sizes of a
        model's open dimensions), or an already lowered TaskGraph.
    platform : a shipped platform name, a TOML path, or a Platform.
    options : a :class:`~mapper.options.CompileOptions` (the mapper, its options, the mappers to
        compare, fusion, the training step, ``parallel``, ``serving``); a
        :class:`~mapper.mapping.base.MapOptions` alone is ``CompileOptions(mapping=options)``.
    dump_after : stop after this stage and raise :class:`StoppedAfter` with its product.
    on_stage : called with (stage name, seconds) after each stage.
    fields : :class:`~mapper.options.CompileOptions` fields, a shorthand:
        ``compile_graph(src, plat, mapper="heft", fuse="none")`` is
        ``compile_graph(src, plat, CompileOptions(mapper="heft", fuse="none"))``; given with
        ``options``, they replace its fields.

    With ``parallel`` other than ``none``, the ``split`` stage chooses a plan and does the fusion
    and the training step of the split graph itself; with ``serving``, it lowers the model at the
    request's sizes, chooses a serving layout and maps the request's task graph, whose makespan is
    the request's latency.

    Raises
    ------
    MapperError
        On bad input (exit 2), infeasibility (exit 3) or an invalid schedule.
    """
    if isinstance(options, MapOptions):
        options = CompileOptions(mapping=options)
    elif options is not None and not isinstance(options, CompileOptions):
        raise OptionsError(f"options must be a CompileOptions or a MapOptions, not {type(options).__name__}")
    unknown = sorted(set(fields) - set(CompileOptions.__dataclass_fields__))
    if unknown:
        raise OptionsError(f"unknown compile option {unknown[0]!r}; the options are "
                           f"{', '.join(CompileOptions.__dataclass_fields__)}")
    opts = replace(options or CompileOptions(), **fields)
    opts.check()
    mapper, compare, fuse, train, parallel, serving = (opts.mapper, opts.compare, opts.fuse, opts.train,
                                                       opts.parallel, opts.serving)
    map_options = opts.mapping
    if dump_after is not None and dump_after not in STAGES:
        raise OptionsError(f"unknown stage {dump_after!r}; choose one of {', '.join(STAGES)}")
    if dump_after == "train" and train is None:
        raise OptionsError("the train stage runs only with --train", obj="--dump-after")
    if parallel != "none" and dump_after in ("fuse", "train"):
        raise OptionsError(f"with --parallel the {dump_after} stage runs inside the split stage; "
                           "use --dump-after split", obj="--dump-after")
    if dump_after == "split" and parallel == "none" and serving is None:
        raise OptionsError("the split stage runs only with --parallel", obj="--dump-after")
    if serving is not None:
        from mapper.serving.driver import check_source

        check_source(source)
        if dump_after in ("fuse", "train"):
            raise OptionsError(f"with --inference the {dump_after} stage runs inside the split stage; "
                               "use --dump-after split", obj="--dump-after")
    times: list[tuple[str, float]] = []
    size: list[int] = []  # the graph's task count, once lowered (mapper.core.heap)

    def stage(name: str, fn: Callable[[], Any]) -> Any:
        if map_options.progress is not None:  # what the status line says until a search reports
            map_options.progress(Progress(0.0, None, None, STAGE_WORDS[name]))
        t0 = time.perf_counter()
        product = fn()
        if size:
            settle(size[0])
        dt = time.perf_counter() - t0
        times.append((name, dt))
        if on_stage is not None:
            on_stage(name, dt)
        if dump_after == name:
            raise StoppedAfter(name, product)
        return product

    imported = None
    if serving is not None and not isinstance(source, TaskGraph):
        from mapper.serving.driver import model_lower

        imported = model_lower(source)
    if isinstance(source, TaskGraph):
        graph = source
    elif imported is not None and serving is not None:  # an exported decoder, imported at the request's sizes
        first = imported
        request = serving.request
        graph = stage("lower", lambda: first(request.prefill, max(request.batch, 1), 0))
    else:
        from mapper.frontend.direct import direct_graph
        from mapper.frontend.load import read_with_sources, without_spans
        from mapper.frontend.lowering.program import lower
        from mapper.frontend.parse import parse

        path = os.fspath(source)
        text, blame, sources = read_with_sources(source)
        params = dict(source.params) if isinstance(source, ModelFile) else None
        with blame:
            # a plain explicit-cost program is read straight to its graph, with no syntax tree
            # (mapper.frontend.direct), unless the tree itself is asked for
            def read() -> TaskGraph | Any:
                direct = None if params or dump_after == "parse" else direct_graph(text, path)
                return direct if direct is not None else parse(text, path)

            program = stage("parse", read)
            graph = stage("lower", lambda: program if isinstance(program, TaskGraph) else lower(program, params))
        if is_model(path):
            graph = without_spans(graph, sources)
    size.append(len(graph.tasks))
    settle(size[0])
    plat = platform if isinstance(platform, Platform) else stage("platform", lambda: load_platform(platform))
    if opts.precision is not None:
        require_format(plat, opts.precision)
        graph = with_precision(graph, opts.precision)
    if opts.throughput_model is not None:
        plat = replace(plat, throughput_model=opts.throughput_model)
    if opts.micro_batches is not None:
        plat = replace(plat, micro_batches=opts.micro_batches)
    if map_options.objective == "deadline" and not any(t.deadline is not None for t in graph.tasks):
        raise OptionsError("--objective deadline needs a deadline: give a task or the graph one "
                           "('deadline 5 ms', docs/dsl.md)", obj="--objective")
    if (map_options.objective == "throughput" and plat.throughput_model == "max-load"
            and not map_options.schedule.memory):
        # the max-load model has a memory knapsack per device: --memory is part of it
        map_options = replace(map_options, schedule=replace(map_options.schedule, memory=True))
    choice: Any = None
    served: Any = None
    cluster_planner = (parallel != "none" and not parallel.startswith("burst")
                       and (is_layout(parallel) or plat.cluster is not None))

    def prepare(g: TaskGraph) -> TaskGraph:
        """The fusion the split stages apply to the graphs they build."""
        return fuse_for(g, plat) if fuse == "auto" else g

    if parallel == "hybrid":
        from mapper.parallel.hybrid import plan_hybrid

        if train is None or isinstance(source, TaskGraph):
            raise OptionsError("--parallel hybrid plans a training step of a model file with a BATCH param: "
                               "give --train", obj="--parallel")
        given = dict(source.params) if isinstance(source, ModelFile) else {}

        def relower(batch: int) -> TaskGraph:
            with blame:
                return lower(program, {**given, "BATCH": batch})

        plat = flat_platform(plat)  # a cluster: every node's GPUs
        choice = stage("split", lambda: plan_hybrid(graph, plat, train, relower, prepare))
        graph = choice.graph
    elif parallel.startswith("burst"):
        from mapper.parallel.burst import parse_burst
        from mapper.parallel.burst_graph import plan_model

        if train is None or isinstance(source, TaskGraph):
            raise OptionsError("--parallel burst plans a training step of a model file with a BATCH or N param: "
                               "give --train", obj="--parallel")
        key = next((k for k in ("BATCH", "N") if re.search(rf"^\s*param\s+{k}\b", text, re.M)), None)
        if key is None:
            raise OptionsError("--parallel burst relowers the model per GPU count: it needs a BATCH or N param",
                               obj="--parallel")
        given_b = dict(source.params) if isinstance(source, ModelFile) else {}

        def relower_b(batch: int) -> TaskGraph:
            with blame:
                return lower(program, {**given_b, key: batch})

        plat = flat_platform(plat)
        choice = stage("split", lambda: plan_model(graph, plat, train, parse_burst(parallel), relower_b,
                                                   prepare))
        graph = choice.graph
    elif serving is not None:
        from mapper.serving.driver import plan_request

        assert not isinstance(source, TaskGraph)  # check_source refused it
        def marked(g: TaskGraph) -> TaskGraph:
            """The request's graphs with the linear layers' GEMMs in --precision's format, then fused."""
            return prepare(with_precision(g, opts.precision) if opts.precision is not None else g)

        requested = stage("split", lambda: plan_request(None if imported else program, None if imported else blame,
                                                        source, plat, parallel, serving, marked,
                                                        map_options.progress, opts.precision, imported))
        served, graph, plat = requested.choice, requested.graph, requested.platform
        if opts.precision is not None:
            served = replace(served, precision=opts.precision)
    elif cluster_planner:
        from mapper.cluster.driver import plan_step

        planned = stage("split", lambda: plan_step(graph, plat, parallel, train, prepare, map_options.progress,
                                                   opts.precision))
        choice, graph, plat = planned.choice, planned.graph, planned.platform
    elif parallel != "none":  # one machine (a cluster's layouts went to the cluster planner)
        from mapper.costing.training import training_step
        from mapper.parallel.search import choose_plan

        choice = stage("split", lambda: choose_plan(graph, plat, parallel, prepare=prepare, train=train,
                                                    step=lambda g: training_step(g, train or "sgd"),
                                                    progress=map_options.progress))
        graph = choice.graph
    else:
        if not isinstance(source, TaskGraph):  # no stage relowers: the text and syntax tree go, and
            del text, program                  # a huge graph's later stages reuse their memory
        if plat.cluster is not None:  # mapped task by task: every node's devices
            plat = flat_platform(plat)
        if fuse == "auto":
            graph = stage("fuse", lambda: fuse_for(graph, plat))
        if train is not None:
            from mapper.costing.training import training_step

            graph = stage("train", lambda: training_step(graph, train))
    kept = getattr(choice, "cost", None)  # --parallel priced the plan it kept on this platform
    cost = stage("cost", lambda: kept if kept is not None and kept.graph is graph and kept.platform is plat
                 else build_cost_table(graph, plat))

    def map_all() -> tuple[MapResult, ...]:
        others = tuple(m for m in dict.fromkeys(compare) if m != mapper)
        mappers = (get_mapper(mapper), *(get_mapper(m, "--compare") for m in others))
        # a result is declared only when its devices hold it (mapper.mapping.fit); compared
        # results share the best bound any of them knows (mapper.mapping.shared_bound)
        return share_bounds(tuple(oversized(fitting(m.map(cost, map_options), m, cost, map_options))
                                  for m in mappers))

    results = stage("map", map_all)

    def check() -> tuple[MapResult, ...]:
        return tuple(require_valid(r) for r in results)

    if choice is not None:
        results = tuple(replace(r, notes=(*r.notes, *choice.notes())) for r in results)
    if served is not None:
        from mapper.serving.driver import measured

        served = measured(served, results[0])
        results = tuple(replace(r, notes=(*r.notes, *served.notes())) for r in results)
    stage("validate", check)
    return CompileResult(graph, plat, cost, results[0], results[1:], tuple(times), choice, served)

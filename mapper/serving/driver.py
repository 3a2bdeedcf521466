"""``--inference`` through the compiler: lower the model at the request's sizes, choose a serving
layout, build the request's task graph (:mod:`mapper.serving`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mapper.cluster.plan_graph import replica_platform
from mapper.cluster.profile import BlockCost
from mapper.core.graph import TaskGraph
from mapper.errors import InfeasibleError, OptionsError
from mapper.frontend.sources import ModelFile, is_model
from mapper.frontend.syntax import ParamDecl, Program
from mapper.mapping.base import MapResult, Progress
from mapper.parallel.collectives import Network, network
from mapper.parallel.layout import FREE, LayoutSpec, requested
from mapper.platform.devices import Platform
from mapper.serving.batch import search_batch
from mapper.serving.decode_step import decode_step
from mapper.serving.model import ServingLayout, ServingModel
from mapper.serving.request import Request, check_runtime, parse_inference
from mapper.serving.request_graph import request_graph
from mapper.serving.search import Bounds, ServingChoice, choose

#: The params ``--inference`` sets in the model (docs/inference.md).
SIZES = ("SEQ", "BATCH", "CACHE")


@dataclass(frozen=True, slots=True)
class Serving:
    """What ``--inference``, ``--runtime``, ``--max-tpot`` and ``--max-ttft`` ask for."""

    request: Request
    runtime: str = "graph"
    bounds: Bounds = Bounds()

    @classmethod
    def parse(cls, inference: str, runtime: str = "graph", max_tpot: float | None = None,
              max_ttft: float | None = None) -> Serving:
        for flag, value in (("--max-tpot", max_tpot), ("--max-ttft", max_ttft)):
            if value is not None and not (value > 0 and value < float("inf")):
                raise OptionsError(f"{flag} must be a positive number of seconds, got {value!r}", obj=flag)
        return cls(parse_inference(inference), check_runtime(runtime), Bounds(max_tpot, max_ttft))


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    choice: ServingChoice
    graph: TaskGraph
    platform: Platform


def check_source(source: Any) -> None:
    """OptionsError unless ``source`` is a file: a DSL model or an exported decoder (``--inference``
    lowers it at the request's sizes)."""
    if isinstance(source, TaskGraph):
        raise OptionsError("--inference lowers the model at the request's sizes: give a DSL file or an "
                           "exported decoder, not a lowered graph", obj="--inference")


def model_lower(source: str | os.PathLike[str] | ModelFile) -> Callable[[int, int, int], TaskGraph] | None:
    """The exported decoder ``source`` imported at each size (:func:`mapper.frontend.load.model_lowerer`),
    or None for a DSL file."""
    from mapper.frontend.load import model_lowerer

    path = os.fspath(source)
    if not is_model(path):
        return None
    return model_lowerer(source if isinstance(source, ModelFile) else ModelFile(path), "--inference")


def lowerer(program: Program, blame: AbstractContextManager[None], source: str | os.PathLike[str] | ModelFile,
             decode: bool, command: str = "--inference") -> Callable[[int, int, int], TaskGraph]:
    """``(seq, batch, cache) -> graph``: ``program`` (read from ``source``) lowered with those params;
    ``command`` (``--inference`` or ``serve``) is named in the errors."""
    from mapper.frontend.lowering.program import lower

    path = os.fspath(source)
    base = dict(source.params) if isinstance(source, ModelFile) else {}
    clash = [n for n in SIZES if n in base]
    inference = command == "--inference"
    if clash:
        how = "as prefill=S_IN,decode=S_OUT,batch=B" if inference else "with --workload or --trace"
        raise OptionsError(f"--param {', '.join(clash)}: {command} sets {', '.join(SIZES)} itself; give the "
                           f"sizes {how}", obj="--param")
    names = {b.name for item in program.items if isinstance(item, ParamDecl) for b in item.binds}
    need = SIZES if decode else SIZES[:2]
    missing = [n for n in need if n not in names]
    if missing:
        doc = "docs/inference.md" if inference else "docs/serving.md"
        raise OptionsError(f"{command} sets the model's params {', '.join(need)}, and {path} has no top-level "
                           f"{', '.join(missing)}: declare them ({doc})", obj=command if inference else "MODEL")

    def at(seq: int, batch: int, cache: int) -> TaskGraph:
        sizes: dict[str, Any] = {"SEQ": seq, "BATCH": batch}
        if decode:
            sizes["CACHE"] = cache
        with blame:
            return lower(program, {**base, **sizes})

    return at


def plan_request(program: Program | None, blame: AbstractContextManager[None] | None, source: str | Path | ModelFile,
                 platform: Platform, parallel: str, serving: Serving,
                 prepare: Callable[[TaskGraph], TaskGraph],
                 progress: Callable[[Progress], None] | None = None,
                 precision: str | None = None,
                 imported: Callable[[int, int, int], TaskGraph] | None = None) -> PlannedRequest:
    """The serving layout of ``serving``'s request on ``platform`` and its request graph; ``program``
    is ``source`` parsed (``blame``: the context its errors are raised in); ``progress`` hears how
    a ``batch=auto`` search goes; ``precision``: the weights' format ``prepare`` marks (--precision);
    ``imported``: an exported decoder's lowerer (:func:`model_lower`), used instead of ``program``."""
    if parallel == "none":
        given = LayoutSpec(tensor=1, pipeline=1, data=1)
    else:
        given = requested(parallel)
    if serving.request.auto_batch and given.micro_batch is not None:
        raise OptionsError("micro_batch fixes the sequences of a micro-batch; with batch=auto the batch is "
                           "searched: give batch=B instead", obj="--parallel")
    if imported is not None:
        lower = imported
    else:
        assert program is not None and blame is not None
        lower = lowerer(program, blame, source, serving.request.decode > 0)
    fleet = platform.fleet
    kinds = [(k.kind, k.platform) for k in fleet.kinds] if fleet is not None else [("", platform)]
    best: tuple[ServingChoice, ServingModel, Platform] | None = None
    errors: list[Exception] = []
    for kind, where in kinds:  # a fleet serves on the kind of node that does it best
        net = network(where)
        prices: dict[tuple[str, int, int, int], BlockCost] = {}  # shared by the batches of a batch=auto search

        def make(batch: int, where: Platform = where, net: Network = net,
                 prices: dict[tuple[str, int, int, int], BlockCost] = prices) -> ServingModel:
            return ServingModel(lower, replace(serving.request, batch=batch), where, prepare, net, serving.runtime,
                                prices, precision)

        def pick(model: ServingModel, keys: LayoutSpec = FREE, skip: Callable[[ServingLayout], bool] | None = None,
                 kind: str = kind, net: Network = net) -> ServingChoice:
            return replace(choose(model, len(model.peers) * net.nodes, replace(given, **keys.fixed()), serving.bounds,
                                  serving.runtime, skip), kind=kind)

        try:
            if serving.request.auto_batch:
                choice, model = search_batch(make, pick, progress)
            else:
                model = make(serving.request.batch)
                choice = pick(model)
        except (OptionsError, InfeasibleError) as err:
            errors.append(err)
            continue
        if best is None or _better(choice, best[0], serving):
            best = (choice, model, where)
    if best is None:
        raise errors[0]
    choice, model, where = best
    step, why = decode_step(model, choice.best, where, prepare)
    choice = replace(choice, step=step, step_note=why)
    graph = request_graph(choice.best, serving.request.decode, model.graphs["prefill"].name)
    replica = replica_platform(where, model.gpu.name, choice.best.layout.pipeline, platform.name)
    return PlannedRequest(choice, graph, replica)


def _better(a: ServingChoice, b: ServingChoice, serving: Serving) -> bool:
    """``a`` beats ``b`` as :mod:`mapper.serving.search` ranks layouts (both fit)."""
    if serving.bounds.any or serving.request.auto_batch:
        return a.tokens_per_s > b.tokens_per_s
    return a.best.latency < b.best.latency


def measured(choice: ServingChoice, result: MapResult) -> ServingChoice:
    """``choice`` with the latency and first token of the scheduled request graph."""
    graph = result.schedule.cost.graph
    ttft = max(s.end for s in result.schedule.slots if graph.tasks[s.task].name.startswith("prefill."))
    return replace(choice, latency=result.schedule.makespan, ttft=ttft)

"""mapper: a task-graph mapping compiler for heterogeneous CPU/GPU/FPGA systems.

The Python API mirrors the CLI; every name below is imported on first use,
so ``import mapper`` stays cheap (no solver, no Numba). Names that would
clash with a submodule (``mapper.frontend.parse``, ``mapper.engine.validate``, ...) are
exported under longer names (``parse_program``, ``validate_schedule``, ``run``)::

    import mapper
    graph = mapper.load_graph("examples/heft_paper.tg")         # parse + lower
    cost = mapper.build_cost_table(graph, mapper.load_platform("heft3"))
    result = mapper.get_mapper("milp").map(cost, mapper.MapOptions(time_limit=10))
    assert mapper.validate_schedule(result.schedule) == []
    mapper.write_report(result, "heft.html")

See docs/api.md.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

#: public name -> "module:attribute"
_API: dict[str, str] = {
    "parse_program": "mapper.frontend.parse:parse",
    "lower_program": "mapper.frontend.lowering.program:lower",
    "graph_from_text": "mapper.frontend.load:graph_from_text",
    "load_graph": "mapper.frontend.load:load_graph",
    "load_platform": "mapper.platform.loader:load_platform",
    "list_platforms": "mapper.platform.loader:list_platforms",
    "build_cost_table": "mapper.costing.cost:build_cost_table",
    "get_mapper": "mapper.mapping:get_mapper",
    "available_mappers": "mapper.mapping:available_mappers",
    "MapOptions": "mapper.mapping.base:MapOptions",
    "MapResult": "mapper.mapping.base:MapResult",
    "ScheduleOptions": "mapper.engine.schedule:ScheduleOptions",
    "Assignment": "mapper.engine.schedule:Assignment",
    "build_schedule": "mapper.engine.schedule:build_schedule",
    "validate_schedule": "mapper.engine.validate:validate",
    "compile_graph": "mapper.pipeline:compile_graph",
    "CompileOptions": "mapper.options:CompileOptions",
    "run": "mapper.run.execute:execute",
    "write_report": "mapper.report:write_report",
    "TaskGraph": "mapper.core.graph:TaskGraph",
    "MapperError": "mapper.errors:MapperError",
    "format_error": "mapper.errors:format_error",
}

__all__ = sorted(_API)


def __getattr__(name: str):
    target = _API.get(name)
    if target is None:
        raise AttributeError(f"module 'mapper' has no attribute {name!r}")
    module, attr = target.split(":")
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))

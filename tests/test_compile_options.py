"""compile_graph's options object (mapper.options.CompileOptions) and the planners' typed layout."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import mapper
from mapper.errors import OptionsError
from mapper.mapping.base import MapOptions
from mapper.options import CompileOptions
from mapper.parallel.layout import MODES, LayoutSpec, requested
from mapper.pipeline import compile_graph

HEFT = "examples/heft_paper.tg"


def test_compile_graph_takes_one_options_object():
    params = inspect.signature(compile_graph).parameters
    named = [p for p in params.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    assert [p.name for p in named] == ["source", "platform", "options", "dump_after", "on_stage"]
    assert dataclasses.is_dataclass(CompileOptions) and CompileOptions.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert mapper.CompileOptions is CompileOptions


def test_options_object_shorthand_and_map_options_agree():
    opts = CompileOptions(mapper="heft", compare="peft, heft", fuse="none")
    assert opts.compare == ("peft", "heft")
    a = compile_graph(HEFT, "heft3", opts)
    b = compile_graph(HEFT, "heft3", mapper="heft", compare=("peft",), fuse="none")
    c = compile_graph(HEFT, "heft3", MapOptions(time_limit=5), mapper="heft", compare=("peft",), fuse="none")
    for x in (b, c):
        assert x.result.schedule.makespan == a.result.schedule.makespan == 80.0
        assert [r.mapper for r in x.compare] == [r.mapper for r in a.compare] == ["peft"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.mapper = "milp"  # type: ignore[misc]


@pytest.mark.parametrize("kwargs, words", [
    ({"mapper": "nope"}, "unknown mapper"),
    ({"fuse": "all"}, "--fuse"),
    ({"parallel": "tensor=0"}, "tensor=0"),
    ({"micro_batches": 0}, "micro-batch count"),
    ({"throughput_model": "x"}, "throughput model"),
])
def test_bad_options_are_refused_before_any_work(kwargs, words):
    with pytest.raises(OptionsError, match=words):
        CompileOptions(**kwargs).check()
    with pytest.raises(OptionsError, match=words):
        compile_graph("no/such/file.tg", "heft3", **kwargs)  # refused before the file is read


def test_unknown_fields_and_misplaced_map_options_are_refused():
    with pytest.raises(OptionsError, match="unknown compile option 'mapperr'"):
        compile_graph(HEFT, "heft3", mapperr="heft")
    with pytest.raises(OptionsError, match="a CompileOptions or a MapOptions, not dict"):
        compile_graph(HEFT, "heft3", {"mapper": "heft"})  # type: ignore[arg-type]


def test_the_layout_a_planner_gets_is_typed():
    assert requested("auto") == LayoutSpec() == MODES["auto"]
    assert requested("data") == LayoutSpec(tensor=1, pipeline=1)
    spec = requested("tensor=4,zero=1,sequence=off")
    assert spec == LayoutSpec(tensor=4, zero=1, sequence=False)
    assert spec.text() == "tensor=4, zero=1, sequence=off"
    with pytest.raises(OptionsError, match="not a mode"):
        requested("none")

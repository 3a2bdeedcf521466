"""Training steps (mapper.costing.training) and memory over time (mapper.engine.memory)."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from mapper.cli import main
from mapper.costing.cost import build_cost_table
from mapper.costing.efficiency import op_class
from mapper.costing.fusion import fuse_for
from mapper.costing.training import training_step
from mapper.engine.memory import peak_memory
from mapper.engine.schedule import Assignment, ScheduleOptions, build_schedule
from mapper.engine.validate import validate
from mapper.errors import OptionsError
from mapper.frontend.load import graph_from_text, load_graph
from mapper.mapping import get_mapper
from mapper.mapping.base import MapOptions
from mapper.pipeline import compile_graph
from mapper.platform.loader import load_platform, parse_platform

ROOT = Path(__file__).resolve().parent.parent
RESNET = str(ROOT / "examples" / "resnet50.tg")
BERT = str(ROOT / "examples" / "bert_base.tg")
ONNX_RESNET = str(Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_resnet50.onnx")


@pytest.fixture(scope="module")
def resnet():
    platform = load_platform("dgx-a100")
    forward = fuse_for(load_graph(RESNET), platform)
    return forward, training_step(forward, "adam")


def test_every_op_gets_its_gradients_and_every_weighted_op_an_update(resnet):
    forward, step = resnet
    n = len(forward.tasks)
    assert step.tasks[:n] == forward.tasks  # the forward pass is unchanged
    names = {t.name for t in step.tasks}
    for t in forward.tasks:
        weighted = any(o.kind == "weight" for o in t.operands)
        main = t.parts[0] if t.parts else t
        if weighted and op_class(main.op) in ("gemm", "conv"):
            assert {f"{t.name}.dgrad", f"{t.name}.wgrad"} <= names
        else:
            assert f"{t.name}.grad" in names
        assert (f"{t.name}.update" in names) == weighted
    for t in step.tasks[n:]:
        assert t.backward and t.colocate  # colocated with its forward task
        assert step.tasks[step.task_index(t.name.rsplit(".", 1)[0])].name == t.colocate


def test_gemm_and_conv_gradients_cost_twice_the_forward_flops(resnet):
    forward, step = resnet
    by_name = {t.name: t for t in step.tasks}
    for t in forward.tasks:
        if f"{t.name}.dgrad" in by_name:
            main = t.parts[0] if t.parts else t
            assert by_name[f"{t.name}.dgrad"].flops + by_name[f"{t.name}.wgrad"].flops == 2 * main.flops


def test_gradients_flow_backwards_and_stashed_activations_reach_the_backward_pass(resnet):
    forward, step = resnet
    index = {t.name: t.index for t in step.tasks}
    n = len(forward.tasks)

    def input_grad(name: str) -> int:  # the task that writes the gradients of an op's inputs
        return index.get(f"{name}.dgrad", index.get(f"{name}.grad"))

    edges = {(e.src, e.dst) for e in step.edges}
    for e in forward.edges:  # dY of u comes from the consumer v's input gradient
        u, v = forward.tasks[e.src].name, forward.tasks[e.dst].name
        first = index.get(f"{u}.grad", index.get(f"{u}.dgrad"))
        assert (input_grad(v), first) in edges, (u, v)
    stash = [e for e in step.edges if e.src < n and e.dst >= n]
    assert stash and all(step.tasks[e.dst].backward for e in stash)
    # a weight gradient reads the activation its forward op read
    for t in forward.tasks:
        if f"{t.name}.wgrad" in index:
            for o in t.operands:
                if o.kind == "task":
                    assert (o.producer, index[f"{t.name}.wgrad"]) in edges


def test_resnet50_training_step_costs_three_times_inference_and_its_memory_is_checked(tmp_path):
    runs = {}
    for train in ((), ("--train",)):
        out = tmp_path / f"r{len(train)}.json"
        assert main(["compile", RESNET, "--platform", "dgx-a100", "--mapper", "heft", "--memory", "-q",
                     "--json", str(out), *train]) == 0
        runs[bool(train)] = json.loads(out.read_text())
    ratio = runs[True]["makespan"] / runs[False]["makespan"]
    assert 2.5 <= ratio <= 4.0
    weights = 25.6e6 * 4
    # weights, their gradients, momentum and the stashed activations
    assert max(d["peak_memory"] for d in runs[True]["devices"]) > 2 * weights
    assert max(d["peak_memory"] for d in runs[False]["devices"]) < max(d["peak_memory"] for d in runs[True]["devices"])


@pytest.mark.slow
@pytest.mark.parametrize("source", [BERT, ONNX_RESNET])
def test_dsl_programs_and_onnx_imports_train_with_both_optimizers(source):
    for optimizer in ("sgd", "adam"):
        result = compile_graph(source, "cpu-gpu-fpga", mapper="heft", train=optimizer,
                               options=MapOptions(schedule=ScheduleOptions(memory=True))).result
        assert not validate(result.schedule)
        assert sum(t.backward for t in result.schedule.cost.graph.tasks) > len(result.schedule.cost.graph.tasks) / 2


def test_train_options_are_checked(capsys):
    assert main(["compile", RESNET, "--platform", "dgx-a100", "--optimizer", "adam"]) == 2
    assert "--optimizer applies only with --train" in capsys.readouterr().err
    with pytest.raises(OptionsError, match="unknown optimizer"):
        training_step(load_graph(RESNET), "lion")
    with pytest.raises(OptionsError, match="already has backward"):
        training_step(training_step(load_graph(RESNET)))
    assert main(["cost", RESNET, "--platform", "dgx-a100", "--train"]) == 0
    assert ".wgrad" in capsys.readouterr().out


PLATFORM = """
name = "two"
[[device]]
name = "a"
kind = "cpu"
peak_gflops = {f32 = 100}
mem_bandwidth_gbs = 100
memory_gib = 1
[[device]]
name = "b"
kind = "cpu"
peak_gflops = {f32 = 100}
mem_bandwidth_gbs = 100
memory_gib = 1
[[link]]
from = "a"
to = "b"
bandwidth_gbs = 1
latency_us = 0
"""


def test_peak_memory_follows_tensor_lifetimes():
    g = graph_from_text("""graph g {
      input x : f32[1024]
      a = relu(x)
      b = relu(a)
      c = add(a, b)
      output c
    }""")
    cost = build_cost_table(g, parse_platform(PLATFORM))
    one = build_schedule(cost, Assignment((0, 0, 0), None))
    kib4 = 4096.0
    # a lives until c ends, b from its start to c's end, c (an output) to the end: all three at c's start
    assert peak_memory(one)[0].bytes == 3 * kib4 and peak_memory(one)[1].bytes == 0
    split = build_schedule(cost, Assignment((0, 1, 1), None))
    peaks = peak_memory(split)
    assert peaks[0].bytes == kib4  # a, until its copy has left for b
    assert peaks[1].bytes == 3 * kib4  # a's copy, b and c


def test_the_validator_checks_the_peak_and_never_contradicts_the_static_check():
    g = graph_from_text("""graph g {
      input x : f32[1024]
      a = relu(x)
      b = relu(a)
      output b
    }""")
    tiny = PLATFORM.replace("memory_gib = 1", "memory_gib = 0.000008")  # 8.4 KiB: one task each
    cost = build_cost_table(g, parse_platform(tiny))
    sched = build_schedule(cost, Assignment((0, 1), None), ScheduleOptions(memory=True))
    assert not validate(sched)
    for d, peak in enumerate(peak_memory(sched)):
        assert peak.bytes <= sum(cost.footprint[t] for t in range(2) if sched.device_of[t] == d)
    result = get_mapper("heft").map(cost, MapOptions(schedule=ScheduleOptions(memory=True)))
    assert not validate(result.schedule)


def test_dump_after_train_shows_the_backward_tasks(capsys):
    assert main(["compile", RESNET, "--platform", "dgx-a100", "--train", "--dump-after", "train"]) == 0
    out = capsys.readouterr().out
    assert ".wgrad = conv2d(" in out and "backward" in out and "colocate" in out
    assert main(["compile", RESNET, "--platform", "dgx-a100", "--dump-after", "train"]) == 2
    assert "the train stage runs only with --train" in capsys.readouterr().err

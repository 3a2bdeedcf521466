"""Burst parallelism (DeepPool): the plan against brute force, its task graph, transfers, bad options."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest

from mapper.engine.validate import require_valid
from mapper.errors import OptionsError
from mapper.frontend.sources import ModelFile
from mapper.parallel.burst import (
    Fabric,
    Layer,
    allowed,
    background_seconds,
    evaluate,
    parse_burst,
    plan_burst,
    read_profile,
    transfer,
    utilisation,
    widths_for,
)
from mapper.pipeline import compile_graph

FAB = Fabric(5e-6, 1 / 25e9)


def _chain() -> list[Layer]:
    # a layer that scales, one that does not, one that scales again (times in seconds)
    return [Layer("a", ((1, 1e-3), (2, 1.1e-3), (4, 1.3e-3), (8, 2e-3)), 4e5, 1e6),
            Layer("b", ((1, 2e-3), (2, 2e-3), (4, 2.1e-3), (8, 2.2e-3)), 1e3, 1e4),
            Layer("c", ((1, 0.5e-3), (2, 0.9e-3), (4, 1.7e-3), (8, 3.3e-3)), 2e5, 4e6)]


@pytest.mark.parametrize("limit", [1.0, 1.5, 2.0, 8.0])
def test_plan_matches_brute_force(limit: float) -> None:
    layers, batch, gpus = _chain(), 8, 8
    options = [allowed(x, batch, widths_for(batch, gpus), FAB, limit) for x in layers]
    best = min(evaluate(layers, ws, batch, gpus, FAB).time for ws in itertools.product(*options))
    plan = plan_burst(layers, batch, gpus, FAB, limit)
    assert plan.time == pytest.approx(best, rel=1e-12)
    assert all(w in o for w, o in zip(plan.widths, options))


def test_background_by_hand() -> None:
    # layer a: 1 ms at 1 sample, 1.5 ms at 2 (best 1333/s: 75 % busy at 1 sample); layer b: 2 ms at 1 or 2
    a = Layer("a", ((1, 1e-3), (2, 1.5e-3)), 0.0, 0.0)
    b = Layer("b", ((1, 2e-3), (2, 2e-3)), 0.0, 0.0)
    assert utilisation(a, 1) == pytest.approx(0.75) and utilisation(b, 2) == pytest.approx(1.0)
    plan = evaluate([a, b], [2, 1], 2, 2, FAB)
    # a on both GPUs leaves 25 % of 1 ms on each; b leaves GPU 1 idle for 2 ms; nothing beside transfers
    assert background_seconds([a, b], plan) == pytest.approx(2 * 0.25e-3 + 2e-3)
    assert background_seconds([a, b], plan, multiplex=False) == pytest.approx(2e-3)


@pytest.mark.parametrize("widths", [(8, 1, 8), (1, 1, 1), (2, 4, 8), (8, 8, 8)])
def test_idle_background_is_the_lent_time(widths) -> None:
    plan = evaluate(_chain(), widths, 8, 8, FAB)
    assert background_seconds(_chain(), plan, multiplex=False) == pytest.approx(plan.lent, rel=1e-12)
    assert background_seconds(_chain(), plan) >= plan.lent * (1 - 1e-12)


def test_width_change_prices_scatter_gather() -> None:
    x = _chain()[0]
    assert transfer(x, 8, 4, 4, FAB) == 0.0
    # 8 samples of 4e5 bytes gathered from 8 GPUs onto 2: groups of 4 exchange 4 samples, forward and back
    n = 8 / 2 * 4e5
    assert transfer(x, 8, 8, 2, FAB) == pytest.approx(2 * min(3 * (5e-6 + n / 4 / 25e9),
                                                              2 * 5e-6 + 3 / 4 * n / 25e9))
    assert transfer(x, 8, 2, 8, FAB) == transfer(x, 8, 8, 2, FAB)
    plan = evaluate(_chain(), [8, 1, 8], 8, 8, FAB)
    assert plan.transfers[1] > 0 and plan.transfers[2] > 0
    assert plan.time == pytest.approx(sum(plan.layer_times) + sum(plan.transfers))


def test_read_profile() -> None:
    text = ("#config  avg(ms) p50 p90 p99\n"
            'conv2d{"in_channels":3,"kernel_size":3,"out_channels":8,"padding":0,"stride":1}[2][3,4,4]   2.0 2 2 2\n'
            'linear{"bias":true,"in_features":8,"out_features":2}[2]8   1.0 1 1 1\n'
            "SUM(avg)  3.0\n"
            'conv2d{"in_channels":3,"kernel_size":3,"out_channels":8,"padding":0,"stride":1}[1][3,4,4]   1.5 2 2 2\n'
            'linear{"bias":true,"in_features":8,"out_features":2}[1]8   0.75 1 1 1\n')
    conv, lin = read_profile(text)
    assert conv.times == ((1, 1.5e-3), (2, 2e-3)) and conv.act_bytes == 4 * 48 and conv.weight_bytes == 4 * 216
    assert lin.weight_bytes == 4 * 18 and lin.time(4) == pytest.approx(2e-3)
    with pytest.raises(OptionsError):
        read_profile("nothing here")


@pytest.mark.parametrize("bad", ["burst,amplification=0.5", "burst,amplification=x", "burst,width=2",
                                 "burst,amplification"])
def test_bad_options(bad: str) -> None:
    with pytest.raises(OptionsError):
        parse_burst(bad)
    run = subprocess.run([sys.executable, "-m", "mapper", "compile", "examples/resnet50.tg", "--platform",
                          "dgx-a100", "--train", "--parallel", bad], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr and "--parallel" in run.stderr


@pytest.mark.parametrize("args", [["examples/resnet50.tg", "--parallel", "burst"],
                                  ["examples/heft_paper.tg", "--train", "--parallel", "burst"],
                                  ["examples/resnet50.tg", "--train", "--param", "N=3", "--parallel", "burst"]])
def test_burst_needs_a_batched_training_step(args: list[str]) -> None:
    run = subprocess.run([sys.executable, "-m", "mapper", "compile", *args, "--platform", "dgx-a100"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr


def test_model_plan_is_a_valid_graph() -> None:
    res = compile_graph(ModelFile("examples/resnet50.tg", params=(("N", 16),)), "dgx-a100", train="sgd",
                        parallel="burst,amplification=1.5")
    choice = res.parallel
    assert choice is not None and choice.to_json()["mode"] == "burst"
    doc = choice.to_json()
    assert doc["background_gpu_seconds"] >= doc["lent_gpu_seconds"] * (1 - 1e-12)
    require_valid(res.result)
    assert res.result.schedule.makespan == pytest.approx(choice.plan.time, rel=1e-9)  # type: ignore[union-attr]
    changes = len(set(choice.plan.widths)) > 1  # type: ignore[union-attr]
    assert any(t.name.endswith(".scatter_gather") for t in res.graph.tasks) == changes


def test_published_profiles_read_whole() -> None:
    # each batch's block ends with DeepPool's own SUM(avg) line; the layers read must add up to it
    from pathlib import Path

    path = Path(__file__).parent / "data" / "deeppool" / "inceptionLayerGpuProfileA100.txt"
    text = path.read_text()
    layers = read_profile(text)
    sums = [float(line.split()[-1]) for line in text.splitlines() if "SUM(avg)" in line]
    batches = [b for b, _ in layers[0].times]
    assert batches == [1, 2, 4, 8, 16, 32, 64, 128] and len(layers) == 125
    for b, total in zip(sorted(batches, reverse=True), sums):  # the file lists batch 128 first
        assert sum(x.time(b) for x in layers) * 1e3 == pytest.approx(total, abs=len(layers) * 5e-4)  # each line rounds to 1 us

"""The same schedule priced on another platform: the CPU-model merge and the re-timing."""

from __future__ import annotations

import dataclasses
from functools import cache

import pytest

from mapper.costing.cost import build_cost_table
from mapper.engine.validate import validate
from mapper.errors import OptionsError
from mapper.frontend.load import graph_from_text
from mapper.pipeline import compile_graph
from mapper.platform.loader import Device, load_platform, parse_platform
from mapper.run.execute import Execution
from mapper.run.recost import KEPT_FIELDS, MODEL_FIELDS, device_order, first_cpu, reprice, with_cpu_model

#: A calibration-like platform: one CPU with distinctive model numbers.
CALIBRATED = """
name = "cal"
[[device]]
name = "cpu0"
kind = "cpu"
peak_gflops = { f32 = 10.0, f64 = 5.0 }
serial_gflops = 2.0
mem_bandwidth_gbs = 3.0
memory_gib = 1.5
launch_us = 50.0
cache_mib = 8.0
cache_bandwidth_gbs = 12.0
efficiency = { gemm = 0.5, activation = 0.25 }
memory_efficiency = { elementwise = 0.75 }
overhead_us = { activation = 7.0 }
gemm_pack_ns = { a = 0.1, b = 0.2, c = 0.3 }
im2col_gbs = 4.0
"""

#: Tasks pinned to each kind, so that the schedule uses every device.
GRAPH = """
graph mixed {
  input x : f32[64, 64]
  a = matmul(x, weight f32[64, 64]) @cpu
  b = gelu(a) @cpu
  c = matmul(b, weight f32[64, 64]) @gpu
  d = add(c, x) @fpga
  e = add(d, b) @cpu
  output e
}
"""


def calibrated():
    return parse_platform(CALIBRATED, "cal.toml")


@cache
def mapped():
    return compile_graph(graph_from_text(GRAPH, "mixed.tg"), "cpu-gpu-fpga", mapper="heft").result


def test_device_fields_are_kept_or_model_numbers():
    names = [f.name for f in dataclasses.fields(Device)]
    assert sorted(KEPT_FIELDS + MODEL_FIELDS) == sorted(names)
    for key in ("peak_gflops", "serial_gflops", "mem_bandwidth_gbs", "launch_us", "efficiency", "memory_efficiency",
                "memory_efficiency_ops", "cache_mib", "cache_bandwidth_gbs", "overhead_us", "overhead_us_per_mib",
                "half_length", "gemm_half_lengths", "gemm_pack_ns", "gemm_pack_cold_ns", "im2col_gbs"):
        assert key in MODEL_FIELDS, key


def test_merge_takes_the_cpu_model_and_keeps_everything_else():
    plat, cal = load_platform("cpu-gpu-fpga"), calibrated()
    merged = with_cpu_model(plat, cal)
    model = cal.devices[0]
    assert (merged.name, merged.links, merged.host, merged.description, merged.source) == \
        (plat.name, plat.links, plat.host, plat.description, plat.source)
    assert [(d.index, d.name, d.kind) for d in merged.devices] == [(d.index, d.name, d.kind) for d in plat.devices]
    for old, new in zip(plat.devices, merged.devices):
        if old.kind != "cpu":
            assert new == old
            continue
        for key in KEPT_FIELDS:
            assert getattr(new, key) == getattr(old, key), key
        for key in MODEL_FIELDS:
            assert getattr(new, key) == getattr(model, key), key
        assert new.memory_gib == 256 and new.power_active_w == 280.0  # the platform's, not the calibration's
        assert new.peak("f32") == 10.0 and new.launch_us == 50.0 and new.gemm_pack_ns == (0.1, 0.2, 0.3)
        assert new.memory_efficiency_ops == (("elementwise", 0.75),) and new.im2col_gbs == 4.0
        assert new.mem_bandwidth_gbs != old.mem_bandwidth_gbs


def test_merge_replaces_absent_keys_too_and_every_cpu():
    plat = load_platform("heft3")  # three CPUs without rates
    merged = with_cpu_model(plat, calibrated())
    assert [d.name for d in merged.devices] == ["p1", "p2", "p3"]
    assert all(d.peak("f64") == 5.0 and d.cache_mib == 8.0 and d.memory_gib is None for d in merged.devices)
    bare = with_cpu_model(load_platform("cpu-gpu-fpga"), plat)  # a model without numbers is taken whole
    assert bare.devices[0].peak_gflops == () and bare.devices[0].mem_bandwidth_gbs is None
    assert bare.devices[1] == load_platform("cpu-gpu-fpga").devices[1]


def test_no_cpu_device_is_an_options_error_naming_the_platform():
    gpus = parse_platform('name = "gpus"\n[[device]]\nname = "g0"\nkind = "gpu"\n', "gpus.toml")
    for args in ((gpus, calibrated()), (load_platform("cpu-gpu-fpga"), gpus)):
        with pytest.raises(OptionsError, match="platform 'gpus' has no CPU device") as err:
            with_cpu_model(*args)
        assert err.value.obj == "gpus"
    assert first_cpu(load_platform("cpu-gpu-fpga")).name == "cpu0"


def test_reprice_keeps_assignment_and_order_and_passes_the_validator():
    result = mapped()
    old = result.schedule
    merged = with_cpu_model(old.cost.platform, calibrated())
    new = reprice(result, merged)
    s = new.schedule
    assert validate(s) == []
    assert s.device_of == old.device_of and s.order == old.order and s.options == old.options
    assert {old.cost.platform.devices[d].kind for d in old.device_of} == {"cpu", "gpu", "fpga"}
    cost = build_cost_table(old.cost.graph, merged)
    for slot, before in zip(s.slots, old.slots):
        kind = merged.devices[slot.device].kind
        assert slot.end - slot.start == pytest.approx(cost.time[slot.task][slot.device], rel=1e-12)
        if kind == "cpu":  # the slow calibrated CPU: 10 GFLOP/s, 3 GB/s, 50 us per call
            assert slot.end - slot.start > before.end - before.start
        else:
            assert slot.end - slot.start == pytest.approx(before.end - before.start, rel=1e-12)
    assert s.makespan > old.makespan
    assert new.objective_value == s.makespan and new.objective == result.objective
    assert new.lower_bound is None and new.gap is None and new.mapper == result.mapper
    assert new.notes[-1] == "re-priced on platform 'cpu-gpu-fpga' (same assignment and order)"


def test_reprice_on_the_same_platform_gives_the_same_schedule():
    result = mapped()
    again = reprice(result, result.schedule.cost.platform)
    assert again.schedule.slots == result.schedule.slots and again.schedule.transfers == result.schedule.transfers


def test_reprice_refuses_other_devices():
    with pytest.raises(OptionsError, match="does not have the devices of 'cpu-gpu-fpga'"):
        reprice(mapped(), calibrated())


def test_order_of_a_schedule_without_one_comes_from_its_slots():
    s = mapped().schedule
    assert device_order(dataclasses.replace(s, order=())) == s.order


def test_execution_trace_takes_the_repriced_predictions():
    result = mapped()
    new = reprice(result, with_cpu_model(result.schedule.cost.platform, calibrated()))
    run = Execution(result, backend="numpy", check=False)
    run.warm_up()
    run.timed_pass()
    plain, priced = run.trace(), run.trace(new)
    for a, b, slot in zip(plain.records, priced.records, new.schedule.slots):
        assert a.measured == b.measured and (b.predicted_start, b.predicted_end) == (slot.start, slot.end)
    assert priced.predicted_makespan == new.schedule.makespan != plain.predicted_makespan
    assert plain.predicted_makespan == result.schedule.makespan
    moved = reprice(compile_graph(graph_from_text(GRAPH.replace("@gpu", "@fpga"), "m.tg"), "cpu-gpu-fpga",
                                  mapper="heft").result, result.schedule.cost.platform)
    with pytest.raises(OptionsError, match="another assignment"):
        run.trace(moved)

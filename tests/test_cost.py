"""The device-latency model, transfers and streaming, against hand-computed values."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mapper.core.graph import Edge, Placement, Task, TaskGraph, TensorType
from mapper.costing.cost import INF, build_cost_table, stream_chain_times
from mapper.errors import InfeasibleError, InputError, OptionsError
from mapper.platform.loader import load_platform, parse_platform

# Round numbers so every expectation below can be checked by hand.
# Efficiencies used (docs/cost_model.md): cpu gemm 0.90, stencil 0.50, memory 0.80;
# gpu gemm 0.90, activation 0.50, memory 0.90; fpga stencil 0.70, memory 0.90; task 1.00.
PLATFORM = """
name = "test3"
[[device]]
name = "cpu0"
kind = "cpu"
peak_gflops = { f32 = 100.0, f64 = 50.0 }
mem_bandwidth_gbs = 10.0
memory_gib = 1
launch_us = 1.0
serial_gflops = 1.0
power_active_w = 100.0
[[device]]
name = "gpu0"
kind = "gpu"
peak_gflops = { f32 = 1000.0 }
mem_bandwidth_gbs = 100.0
memory_gib = 1
launch_us = 10.0
serial_gflops = 0.5
[[device]]
name = "fpga0"
kind = "fpga"
peak_gflops = { f32 = 200.0 }
mem_bandwidth_gbs = 50.0
launch_us = 20.0
area = 1000
clock_mhz = 200
streaming = true
[[link]]
from = "cpu0"
to = "gpu0"
bidirectional = true
bandwidth_gbs = 10.0
latency_us = 5.0
[[link]]
from = "cpu0"
to = "fpga0"
bidirectional = true
bandwidth_gbs = 5.0
latency_us = 10.0
"""
CPU, GPU, FPGA = 0, 1, 2


def _platform():
    return parse_platform(PLATFORM, "test3.toml")


def _cpu0_with(keys: str) -> str:
    """PLATFORM with ``keys`` (TOML lines) added to the cpu0 device."""
    head = 'name = "cpu0"\nkind = "cpu"'
    return PLATFORM.replace(head, f"{head}\n{keys}", 1)


def _task(i, name, op, *, flops=0.0, read=0.0, written=0.0, dtype="f32", **kw):
    return Task(index=i, name=name, op=op, output=TensorType(dtype, (1,)), flops=flops,
                bytes_read=read, bytes_written=written, **kw)


def _table(*tasks, edges=()):
    return build_cost_table(TaskGraph("g", tuple(tasks), tuple(edges)), _platform())


N = 1024
MATMUL = dict(flops=2.0 * N**3, read=2 * N * N * 4.0, written=N * N * 4.0)
STENCIL = dict(flops=1e8, read=6.4e7, written=6.4e7)


def test_compute_bound_matmul_on_gpu():
    c = _table(_task(0, "mm", "matmul", **MATMUL))
    # launch 10 us + 2 N^3 / (0.78 * 1000 GFLOP/s); memory 12.6 MB / 90 GB/s is smaller
    assert c.time[0][GPU] == pytest.approx(10e-6 + 2 * 1024**3 / 0.78e12)
    assert c.bound[0][GPU] == "compute"
    assert c.time[0][CPU] == pytest.approx(1e-6 + 2 * 1024**3 / 0.9e11)


def test_memory_bound_stencil_on_cpu():
    c = _table(_task(0, "st", "stencil", **STENCIL))
    # compute 1e8 / (0.5 * 100e9) = 2 ms < memory 1.28e8 / (0.8 * 10e9) = 16 ms
    assert c.time[0][CPU] == pytest.approx(1e-6 + 0.016)
    assert c.bound[0][CPU] == "memory"
    assert c.footprint[0] == 1.28e8


def test_launch_bound_tiny_op_on_gpu():
    c = _table(_task(0, "r", "relu", flops=16, read=64, written=64))
    assert c.bound[0][GPU] == "launch"
    assert c.time[0][GPU] == pytest.approx(10e-6 + 128 / 0.9e11)


def test_zero_work_task_costs_the_launch():
    c = _table(_task(0, "v", "reshape"))
    assert c.time[0] == (1e-6, 10e-6, 20e-6)
    assert c.bound[0] == ("launch", "launch", "launch")


def test_serial_task_on_gpu_follows_amdahl():
    c = _table(_task(0, "s", "task", flops=1e9, parallel=0.1))
    # gpu: 0.1e9 / 1e12 (task eff 1.0) + 0.9e9 / 0.5e9 serial
    assert c.time[0][GPU] == pytest.approx(10e-6 + 1e-4 + 1.8)
    assert c.bound[0][GPU] == "serial"
    # cpu: 0.1e9 / 100e9 + 0.9e9 / 1e9: the CPU wins for serial work
    assert c.time[0][CPU] == pytest.approx(1e-6 + 1e-3 + 0.9)
    assert c.time[0][CPU] < c.time[0][GPU]


def test_energy_is_active_power_times_time():
    c = _table(_task(0, "st", "stencil", **STENCIL))
    assert c.energy[0][CPU] == pytest.approx(100.0 * c.time[0][CPU])
    assert c.energy[0][GPU] == 0.0  # no power given


def test_explicit_costs_override_the_model():
    t = _task(0, "n1", "task", flops=1e12, explicit_cost=(("cpu0", 0.5), ("gpu", 0.25)))
    c = _table(t)
    assert c.time[0] == (0.5, 0.25, INF)
    assert c.bound[0] == ("explicit", "explicit", "infeasible")
    assert c.reason(0, FPGA) == "no cost given"
    assert c.feasible_devices(0) == (CPU, GPU)


def test_explicit_cost_naming_an_unknown_device_is_an_input_error():
    with pytest.raises(InputError, match="'p9'"):
        _table(_task(0, "n1", "task", explicit_cost=(("p9", 1.0),)))


def test_placement_makes_entries_infeasible_with_a_reason():
    c = _table(_task(0, "mm", "matmul", placement=Placement(allow=("gpu",)), **MATMUL))
    assert c.feasible_devices(0) == (GPU,)
    assert c.reason(0, CPU) == "placement @gpu excludes cpu0 (cpu)"
    assert (0, FPGA, "placement @gpu excludes fpga0 (fpga)") in c.reasons
    c = _table(_task(0, "mm", "matmul", placement=Placement(deny=("gpu0",)), **MATMUL))
    assert c.feasible_devices(0) == (CPU, FPGA)


def test_dtype_rates_and_fallbacks():
    c = _table(
        _task(0, "a", "matmul", dtype="f64", **MATMUL),
        _task(1, "b", "matmul", dtype="bf16", **MATMUL),
        _task(2, "f", "fft", dtype="c64", flops=1e9),
    )
    assert c.reason(0, GPU) == "no f64 rate in peak_gflops"
    assert c.time[0][CPU] == pytest.approx(1e-6 + 2 * 1024**3 / (0.9 * 50e9))
    # bf16 on a CPU without a bf16 rate runs at the f32 rate; the FPGA has none
    assert c.time[1][CPU] == pytest.approx(1e-6 + 2 * 1024**3 / 0.9e11)
    assert c.reason(1, FPGA) == "no bf16 rate in peak_gflops"
    # complex FLOPs use the component type's rate (fft efficiency 0.30 on gpu)
    assert c.time[2][GPU] == pytest.approx(10e-6 + 1e9 / (0.3 * 1e12))


def test_unsupported_op_on_fpga():
    c = _table(_task(0, "y", "spmv", flops=2e6, read=1.2e7, written=4e6))
    assert c.time[0][FPGA] == INF
    assert "spmv (sparse) has no fpga implementation" in c.reason(0, FPGA)


def test_footprint_larger_than_memory_is_infeasible():
    c = _table(_task(0, "big", "add", flops=1e9, read=1.5 * 2**30, written=0.5 * 2**30))
    assert c.time[0][CPU] == INF
    assert c.reason(0, CPU) == "footprint 2 GiB exceeds memory 1 GiB"
    assert c.time[0][FPGA] < INF  # no memory_gib: capacity unknown
    assert c.memory_capacity == (2.0**30, 2.0**30, INF)


def test_fpga_area_model():
    c = _table(
        _task(0, "st", "stencil", streamable=4, **STENCIL),
        _task(1, "st2", "stencil", **STENCIL),
        _task(2, "mm", "matmul", streamable=4, **MATMUL),
    )
    # DSP share that keeps pace with memory: Tp / Tm = (1e8 / 0.7 / 200e9) / (1.28e8 / 0.9 / 50e9)
    share = (1e8 / (0.7 * 200e9)) / (1.28e8 / (0.9 * 50e9))
    assert c.area[0][FPGA] == pytest.approx(1000 * share)
    assert c.area[1][FPGA] == 1000.0  # not streamable: the whole kernel area
    assert c.area[2][FPGA] == 1000.0  # compute-bound: capped at the whole area
    assert c.area[0][CPU] == 0.0
    assert c.area_capacity == (INF, INF, 1000.0)


def test_device_without_rates_reports_no_rates():
    g = TaskGraph("g", (_task(0, "w", "task", flops=1e9),))
    c = build_cost_table(g, load_platform("heft3"))
    assert c.time[0] == (INF, INF, INF)
    assert c.reason(0, 0).startswith("no rates")
    # a platform that cannot price the graph at all is bad input (exit 2), not an infeasible mapping
    with pytest.raises(InputError, match="platform heft3 cannot price task w") as err:
        c.require_feasible()
    assert not isinstance(err.value, InfeasibleError) and err.value.exit_code == 2


def test_routes_direct_and_via_host_and_their_times():
    tasks = (_task(0, "a", "task"), _task(1, "b", "task"))
    c = _table(*tasks, edges=(Edge(0, 0, 1, bytes=1e6),))
    p = c.platform
    link = {(lk.src, lk.dst): lk.index for lk in p.links}
    assert c.routes[GPU][CPU] == (link["gpu0", "cpu0"],)
    assert c.routes[GPU][FPGA] == (link["gpu0", "cpu0"], link["cpu0", "fpga0"])
    assert c.routes[GPU][GPU] == ()
    # direct: 5 us + 1e6 / 10 GB/s
    assert c.comm(0, CPU, GPU) == pytest.approx(5e-6 + 1e-4)
    # via host, store and forward: (5 + 10) us + 1e6 / 10 GB/s + 1e6 / 5 GB/s
    assert c.route_latency[GPU][FPGA] == pytest.approx(15e-6)
    assert c.route_sec_per_byte[GPU][FPGA] == pytest.approx(1e-10 + 2e-10)
    assert c.comm(0, GPU, FPGA) == pytest.approx(15e-6 + 3e-4)
    assert c.comm(0, FPGA, FPGA) == 0.0


def test_missing_route_is_marked_and_explained():
    text = PLATFORM.split("[[link]]")[0] + (
        '[[link]]\nfrom = "cpu0"\nto = "gpu0"\nbandwidth_gbs = 10.0\n'
    )
    p = parse_platform(text, "oneway.toml")
    g = TaskGraph("g", (_task(0, "a", "task"), _task(1, "b", "task")),
                  (Edge(0, 0, 1, bytes=8.0), Edge(1, 0, 1, bytes=8.0, comm=0.5)))
    c = build_cost_table(g, p)
    assert c.has_route(CPU, GPU) and not c.has_route(GPU, CPU)
    assert not c.has_route(GPU, FPGA)  # no gpu0 -> cpu0 link: nothing via the host
    assert c.comm(0, GPU, CPU) == INF and c.routes[GPU][CPU] == ()
    assert c.comm(1, GPU, CPU) == 0.5  # an explicit comm needs no route
    err = c.route_error(0, GPU, FPGA)
    assert isinstance(err, InfeasibleError)
    assert "no link gpu0 -> fpga0 or via host cpu0" in str(err)


def _recurrence(times, chunks):
    n = len(times)
    f = [[0.0] * chunks for _ in range(n)]
    for i in range(n):
        for c in range(chunks):
            prev_stage = f[i - 1][c] if i else 0.0
            prev_chunk = f[i][c - 1] if c else 0.0
            f[i][c] = max(prev_stage, prev_chunk) + times[i] / chunks
    return [((f[i - 1][0] if i else 0.0), f[i][chunks - 1]) for i in range(n)]


def test_stream_chain_by_hand():
    # f(0,.) = 2, 4; f(1,.) = 3, 5; f(2,.) = 6, 9: slowest stage 6 plus fill 2 + 1
    assert stream_chain_times([4.0, 2.0, 6.0], 2) == ((0.0, 4.0), (2.0, 5.0), (3.0, 9.0))
    assert stream_chain_times([5.0], 1) == ((0.0, 5.0),)
    assert stream_chain_times([], 3) == ()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=6), st.integers(1, 12))
def test_stream_chain_matches_the_recurrence(times, chunks):
    got = stream_chain_times(times, chunks)
    for (a, b), (x, y) in zip(got, _recurrence(times, chunks)):
        assert a == pytest.approx(x, abs=1e-9) and b == pytest.approx(y, abs=1e-9)
    assert got[-1][1] <= sum(times) + 1e-9  # never slower than running the stages one by one


def test_a_streamed_chain_pays_each_launch_once():
    # three launch-only kernels of 50 us streamed in 50 chunks: 150 us, not 50 us / 50 per chunk
    assert stream_chain_times([50e-6] * 3, 50, [50e-6] * 3)[-1][1] == pytest.approx(150e-6)
    # bodies of 4, 2, 6 s after launches of 1 s: the launch-free offsets, shifted by the launches so far
    assert stream_chain_times([5.0, 3.0, 7.0], 2, [1.0, 1.0, 1.0]) == ((0.0, 5.0), (3.0, 7.0), (5.0, 12.0))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100, allow_nan=False), st.floats(0, 10, allow_nan=False)), min_size=1,
                max_size=6), st.integers(1, 12))
def test_stream_chain_with_launches_is_between_the_pipeline_and_the_serial_chain(stages, chunks):
    times = [t + launch for t, launch in stages]
    launches = [launch for _, launch in stages]
    got = stream_chain_times(times, chunks, launches)[-1][1]
    assert got <= sum(times) + 1e-9
    assert got >= stream_chain_times(times, chunks)[-1][1] - 1e-9 or chunks == 1


@pytest.mark.parametrize("args", [([1.0], 0), ([1.0], 2.5), ([-1.0], 2), ([math.inf], 2)])
def test_stream_chain_rejects_bad_arguments(args):
    with pytest.raises(OptionsError):
        stream_chain_times(*args)


def test_shipped_platform_cost_table_is_deterministic():
    g = TaskGraph("g", (_task(0, "mm", "matmul", **MATMUL), _task(1, "st", "stencil", streamable=2, **STENCIL)),
                  (Edge(0, 0, 1, bytes=4e6),))
    a = build_cost_table(g, load_platform("cpu-gpu-fpga"))
    b = build_cost_table(g, load_platform("cpu-gpu-fpga"))
    assert a == b
    assert json.dumps([a.time, a.bound, a.area]) == json.dumps([b.time, b.bound, b.area])
    # A100 f32 runs on TF32 tensor cores (f32_matmul = "tf32"): 2 N^3 / (0.78 * 156 TF), blended with
    # its memory time (overlap_exponent = 1.5), + the 3 us launch (counted work without shapes: no tile or
    # pipeline-fill terms)
    tc, tm = 2 * 1024**3 / (0.78 * 156e12), 3 * 1024 * 1024 * 4 / (0.9 * 1555e9)
    assert a.time[0][1] == pytest.approx(3e-6 + (tc**1.5 + tm**1.5) ** (1 / 1.5))


# -- mapper cost ---------------------------------------------------------------

HEFT_TG = """graph heft_mini {
  task n1 cost { p1: 14, p2: 16 ms, p3: 9 us }
  task n2 cost { p1: 13, p2: 19 } @!p1
  n1 -> n2 comm 18
}
"""


def test_cli_cost_table_markers_reasons_and_transfers(tmp_path, capsys):
    from mapper.cli import main

    src = tmp_path / "mini.tg"
    src.write_text(HEFT_TG)
    assert main(["cost", str(src), "--platform", "heft3"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "cost of heft_mini (2 tasks, 1 edges) on heft3 (p1 cpu, p2 cpu, p3 cpu)"
    row1 = next(ln for ln in lines if ln.startswith("n1 "))
    assert row1.split() == ["n1", "task", "14", "s", "E", "16", "ms", "E", "9", "us", "E"]
    row2 = next(ln for ln in lines if ln.startswith("n2 "))
    assert row2.split() == ["n2", "task", "-", "19", "s", "E", "-"]
    assert "  n2 on p1: placement @!p1 excludes p1 (cpu)" in lines
    assert "  n2 on p3: no cost given" in lines
    edge = next(ln for ln in lines if ln.lstrip().startswith("n1 -> n2"))
    assert edge.split()[3:] == ["0", "B", *["18", "s"] * 6]
    assert "no route" not in out  # identical processors without links share memory (docs/platforms.md, Routes)


def test_cli_cost_json(tmp_path, capsys):
    from mapper.cli import main

    src = tmp_path / "mini.tg"
    src.write_text(HEFT_TG)
    assert main(["cost", str(src), "--platform", "heft3", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["tasks"][0]["time"] == [14.0, 0.016, 9e-06]
    assert data["tasks"][1]["time"] == [None, 19.0, None]
    assert data["tasks"][1]["bound"] == ["infeasible", "explicit", "infeasible"]
    assert {"task": "n2", "device": "p3", "reason": "no cost given"} in data["infeasible"]
    assert data["edges"][0]["comm"][0] == [0.0, 18.0, 18.0]
    assert data["routes"][0][1] == {"links": [], "latency": 0.0, "sec_per_byte": 0}


def test_render_limits_large_graphs_to_sixty_rows():
    from mapper.cli.cost import render

    tasks = tuple(_task(i, f"t{i}", "add", flops=1e3, read=8e3, written=4e3) for i in range(65))
    edges = tuple(Edge(i, i, i + 1, bytes=4e3) for i in range(64))
    c = build_cost_table(TaskGraph("big", tasks, edges), load_platform("dgx-a100"))
    short = render(c)
    rows = [ln.split()[0] for ln in short.splitlines() if ln[:1] == "t" and ln.split()[0][1:].isdigit()]
    assert rows[-1] == "t59" and "t60" not in rows
    assert "(5 more tasks not shown; --all prints every row)" in short
    assert "(4 more edges not shown; --all prints every row)" in short
    assert "min/max over the 72 ordered device pairs" in short
    full = render(c, all_rows=True)
    assert "\nt64 " in full and "more tasks not shown" not in full


def test_unknown_op_is_an_input_error():
    with pytest.raises(InputError, match="unknown op 'frobnicate'"):
        _table(_task(0, "x", "frobnicate", flops=1.0))


def test_cli_cost_on_the_bert_example(capsys):
    from pathlib import Path

    from mapper.cli import main

    example = Path(__file__).resolve().parent.parent / "examples" / "bert_base.tg"
    if not example.exists():
        pytest.skip("examples/bert_base.tg is not there")
    assert main(["cost", str(example), "--platform", "cpu-gpu-fpga"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cost of bert")
    assert "on fpga0: op embedding (embedding) has no fpga implementation in the model" in out
    assert "cpu0>gpu0" in out and "gpu0>fpga0" in out


def test_device_efficiency_overrides_the_model_table():
    text = _cpu0_with(
        'efficiency = { gemm = 0.45 }\nmemory_efficiency = 0.4')
    assert text != PLATFORM
    c = build_cost_table(
        TaskGraph("g", (_task(0, "mm", "matmul", **MATMUL), _task(1, "st", "stencil", **STENCIL))),
        parse_platform(text, "eff.toml"),
    )
    # gemm at 0.45 of the 100 GFLOP/s peak instead of 0.9; stencil memory at 0.4 of 10 GB/s
    assert c.time[0][CPU] == pytest.approx(1e-6 + 2 * 1024**3 / 0.45e11)
    assert c.time[1][CPU] == pytest.approx(1e-6 + 1.28e8 / 0.4e10)
    # the GPU keeps the model's factors
    assert c.time[0][GPU] == pytest.approx(10e-6 + 2 * 1024**3 / 0.78e12)


def test_cache_roofline_uses_the_cache_bandwidth_for_working_sets_that_fit():
    text = _cpu0_with(
        'cache_mib = 64\ncache_bandwidth_gbs = 40.0')
    small = dict(flops=1e6, read=2 * 2**24, written=2**24)  # 48 MiB <= 64 MiB: in cache
    edge = dict(flops=1e6, read=2**25, written=2**25)  # exactly 64 MiB: still in cache
    large = dict(flops=1e6, read=2**26, written=2**26)  # 128 MiB: from memory
    c = build_cost_table(
        TaskGraph("g", (_task(0, "s", "add", **small), _task(1, "e", "add", **edge), _task(2, "l", "add", **large))),
        parse_platform(text, "cache.toml"),
    )
    # in cache: 3 * 2^24 B / (0.8 * 40 GB/s) = 1.572864 ms; + 1 us launch
    assert c.time[0][CPU] == pytest.approx(1e-6 + 3 * 2**24 / 32e9)
    assert c.time[1][CPU] == pytest.approx(1e-6 + 2**26 / 32e9)
    # beyond the cache: 2^27 B / (0.8 * 10 GB/s) = 16.777 ms
    assert c.time[2][CPU] == pytest.approx(1e-6 + 2**27 / 8e9)
    assert c.bound[0][CPU] == c.bound[2][CPU] == "memory"
    # a device without cache keys (the GPU here) is unchanged: 3 * 2^24 / (0.9 * 100 GB/s)
    assert c.time[0][GPU] == pytest.approx(10e-6 + 3 * 2**24 / 90e9)


def test_cache_roofline_keeps_compute_bound_tasks_compute_bound():
    from mapper.costing.latency import estimate

    dev = parse_platform(_cpu0_with(
        'cache_mib = 64\ncache_bandwidth_gbs = 40.0'), "cache.toml").devices[CPU]
    est = estimate(_task(0, "mm", "matmul", **MATMUL), "gemm", dev)
    # 12 MiB fits: memory 12.58 MB / 32 GB/s = 0.39 ms < compute 2 N^3 / 90 GFLOP/s = 23.9 ms
    assert est.cached and est.bound == "compute"
    assert est.t_memory == pytest.approx(3 * N * N * 4.0 / 32e9)
    assert est.time == pytest.approx(1e-6 + 2 * 1024**3 / 0.9e11)


def test_working_set_counts_distinct_tensors_not_iterated_traffic():
    from mapper.costing.latency import estimate
    from mapper.costing.work import working_set
    from mapper.frontend.load import graph_from_text

    graph = graph_from_text(
        "graph g {\n  input u : f64[1024, 1024]\n  s = stencil(u, points = 5, steps = 9)\n"
        "  d = sub(s, s)\n  output d\n}\n", "ws.tg")
    st, sub = graph.tasks
    # the stencil touches u and s (8 MiB each) though its 9 sweeps move far more than 64 MiB
    assert working_set(st) == 2 * 2**23 and st.bytes > 64 * 2**20
    # sub reads s twice: one tensor, plus its output
    assert working_set(sub) == 2 * 2**23
    dev = parse_platform(_cpu0_with(
        'cache_mib = 64\ncache_bandwidth_gbs = 40.0'), "cache.toml").devices[CPU]
    est = estimate(st, "stencil", dev)
    assert est.cached and est.bound == "memory"
    # all 9 sweeps' bytes at 0.8 x 40 GB/s, but the first read of the graph input u from memory
    cold = 2**23
    assert est.time == pytest.approx(1e-6 + ((st.bytes - cold) / 40e9 + cold / (dev.mem_bandwidth_gbs * 1e9)) / 0.8)


def test_an_op_s_own_efficiency_wins_over_its_class_s():
    text = _cpu0_with(
        'efficiency = { norm = 0.5, batchnorm = 0.1 }')
    work = dict(flops=1e9, read=8.0, written=8.0)
    c = build_cost_table(TaskGraph("g", (_task(0, "bn", "batchnorm", **work), _task(1, "ln", "layernorm", **work))),
                         parse_platform(text, "op.toml"))
    assert c.time[0][CPU] == pytest.approx(1e-6 + 1e9 / (0.1 * 100e9))  # batchnorm: its own 0.1
    assert c.time[1][CPU] == pytest.approx(1e-6 + 1e9 / (0.5 * 100e9))  # layernorm: the class's 0.5


def test_overhead_and_variant_entries_by_hand():
    from mapper.costing.latency import estimate
    from mapper.frontend.load import graph_from_text

    text = _cpu0_with(
        'efficiency = { reduction = 0.5, "reduce.max" = 0.05 }\n'
        'overhead_us = { reduction = 20.0, "reduce.max" = 300.0, stencil = 3000.0 }')
    dev = parse_platform(text, "t0.toml").devices[CPU]
    graph = graph_from_text(
        "graph g {\n  input g2 : f64[256, 256]\n  input x : f32[1048576]\n  m = reduce(x, kind = \"max\")\n"
        "  s = reduce(x)\n  u = stencil(g2, points = 5, steps = 1)\n  output m, s, u\n}\n", "v.tg")
    mx, sm, st = graph.tasks
    # reduce.max: its variant's e = 0.05 and t0 = 300 us win over the class's
    e_max = estimate(mx, "reduction", dev)
    assert e_max.t_overhead == pytest.approx(300e-6)
    assert e_max.time == pytest.approx(1e-6 + 300e-6 + max(mx.flops / (0.05 * 100e9), mx.bytes / 8e9))
    # reduce (kind sum by default): the class's e = 0.5 and t0 = 20 us
    e_sum = estimate(sm, "reduction", dev)
    assert e_sum.time == pytest.approx(1e-6 + 20e-6 + max(sm.flops / 50e9, sm.bytes / 8e9))
    # stencil: the class's default efficiency and its t0; a one-sweep 256 x 256 grid is overhead-dominated
    e_st = estimate(st, "stencil", dev)
    assert e_st.time == pytest.approx(1e-6 + 3e-3 + max(st.flops / (0.5 * 50e9), st.bytes / 8e9))
    assert e_st.bound == "launch"  # launch + t0 exceed the roofline body
    # another device (the GPU) has no entries: no overhead
    assert estimate(st, "stencil", parse_platform(text, "t0.toml").devices[GPU]).t_overhead == 0.0


def test_causal_attention_costs_the_kernel_s_half_of_the_scores():
    from mapper.costing.latency import estimate
    from mapper.costing.work import kernel_flops
    from mapper.frontend.load import graph_from_text

    graph = graph_from_text(
        "graph g {\n  input x : f32[1024, 2304]\n  a = attention(x, heads = 12, seq = 1024)\n"
        "  c = attention(x, heads = 12, seq = 1024, causal = 1)\n  output a, c\n}\n", "att.tg")
    full, causal = graph.tasks
    assert full.flops == causal.flops  # the catalogue counts the full score matrix
    assert kernel_flops(full) == full.flops
    assert kernel_flops(causal) == pytest.approx(full.flops * 1025 / 2048)
    dev = _platform().devices[CPU]
    # compute-bound at cpu attention efficiency 0.5 of 100 GFLOP/s
    assert estimate(causal, "attention", dev).t_parallel == pytest.approx(full.flops * 1025 / 2048 / 50e9)


def test_causal_attention_has_its_own_variant_key():
    from mapper.costing.efficiency import model_keys
    from mapper.costing.latency import estimate
    from mapper.frontend.load import graph_from_text

    graph = graph_from_text(
        "graph g {\n  input x : f32[512, 2304]\n  a = attention(x, heads = 12, seq = 512)\n"
        "  c = attention(x, heads = 12, seq = 512, causal = 1)\n  output a, c\n}\n", "att.tg")
    full, causal = graph.tasks
    assert model_keys(full, "attention") == ("attention:f32", "attention", "attention:f32", "attention")
    assert model_keys(causal, "attention")[:2] == ("attention.causal:f32", "attention.causal")
    dev = parse_platform(_cpu0_with('efficiency = { attention = 0.5, "attention.causal" = 0.25 }'),
                         "att.toml").devices[CPU]
    assert estimate(full, "attention", dev).t_parallel == pytest.approx(full.flops / 50e9)
    assert estimate(causal, "attention", dev).t_parallel == pytest.approx(full.flops * 513 / 1024 / 25e9)


def test_dtype_keys_win_over_plain_ones_for_their_dtype_only():
    from mapper.costing.efficiency import model_keys
    from mapper.costing.latency import estimate
    from mapper.frontend.load import graph_from_text

    text = _cpu0_with(
        'efficiency = { elementwise = 0.001, "elementwise:f64" = 0.004, '
        '"reduce.max:f64" = 0.002 }\noverhead_us = { "sub:f64" = 100.0 }')
    dev = parse_platform(text, "dt.toml").devices[CPU]
    graph = graph_from_text(
        "graph g {\n  input a : f32[1048576]\n  input b : f64[1048576]\n  x = sub(a, a)\n  y = sub(b, b)\n"
        "  m = reduce(b, kind = \"max\")\n  output x, y, m\n}\n", "dt.tg")
    x, y, m = graph.tasks
    assert model_keys(m, "reduction") == ("reduce.max:f64", "reduce.max", "reduce:f64", "reduce",
                                          "reduction:f64", "reduction")
    # f32: the class's 0.001 of the 100 GFLOP/s f32 peak, no fixed time
    assert estimate(x, "elementwise", dev).time == pytest.approx(1e-6 + x.flops / (0.001 * 100e9))
    # f64: the class's f64 entry 0.004 of the 50 GFLOP/s f64 peak, and sub's f64 fixed time
    assert estimate(y, "elementwise", dev).time == pytest.approx(1e-6 + 100e-6 + y.flops / (0.004 * 50e9))
    assert estimate(m, "reduction", dev).time == pytest.approx(1e-6 + m.flops / (0.002 * 50e9))


def test_overhead_per_mib_scales_with_the_working_set():
    from mapper.costing.latency import estimate
    from mapper.costing.work import working_set
    from mapper.frontend.load import graph_from_text

    text = _cpu0_with(
        'overhead_us_per_mib = { stencil = 200.0 }')
    dev = parse_platform(text, "pm.toml").devices[CPU]
    graph = graph_from_text("graph g {\n  input u : f64[1024, 1024]\n  s = stencil(u, points = 5, steps = 1)\n"
                            "  output s\n}\n", "pm.tg")
    (st,) = graph.tasks
    # u and s, 8 MiB each: 16 MiB x 200 us = 3.2 ms on top of the roofline
    assert working_set(st) == 16 * 2**20
    est = estimate(st, "stencil", dev)
    assert est.t_overhead == pytest.approx(3.2e-3)
    assert est.time == pytest.approx(1e-6 + 3.2e-3 + max(est.t_parallel + est.t_serial, est.t_memory))


def test_half_length_scales_the_efficiency_by_the_vector_length():
    from mapper.costing.latency import estimate
    from mapper.costing.work import vector_length
    from mapper.frontend.load import graph_from_text

    text = _cpu0_with(
        'efficiency = { conv = 0.8 }\nhalf_length = { conv = 64.0 }')
    dev = parse_platform(text, "hl.toml").devices[CPU]
    graph = graph_from_text(
        "graph g {\n  input x : f32[1, 64, 32, 32]\n  a = conv2d(x, weight f32[64, 64, 3, 3], padding = 1)\n"
        "  b = conv2d(x, weight f32[256, 64, 3, 3], padding = 1)\n  m = matmul(x, weight f32[32, 8])\n"
        "  output a, b, m\n}\n", "hl.tg")
    a, b, m = graph.tasks
    # the smallest GEMM dimension: conv a min(64, 576, 1024), b min(256, 576, 1024); matmul min(2048, 8, 32)
    assert (vector_length(a), vector_length(b), vector_length(m)) == (64, 256, 8)
    # 64 output channels: 0.8 x 64 / 128 = 0.4 of the 100 GFLOP/s peak; 256: 0.8 x 256 / 320 = 0.64
    assert estimate(a, "conv", dev).t_parallel == pytest.approx(a.flops / 40e9)
    assert estimate(b, "conv", dev).t_parallel == pytest.approx(b.flops / 64e9)


def test_a_pool_s_vector_length_is_its_output_row():
    from mapper.costing.latency import estimate
    from mapper.costing.work import vector_length
    from mapper.frontend.load import graph_from_text

    dev = parse_platform(_cpu0_with('efficiency = { pool = 0.5 }\nhalf_length = { pool = 10.0 }'),
                         "p.toml").devices[CPU]
    graph = graph_from_text(
        "graph g {\n  input x : f32[1, 16, 224, 224]\n  input y : f32[16, 64, 28, 28]\n"
        "  a = maxpool(x, kernel = 3, stride = 2, padding = 1)\n  b = avgpool(y, kernel = 2)\n"
        "  output a, b\n}\n", "p.tg")
    a, b = graph.tasks
    assert (vector_length(a), vector_length(b)) == (112, 14)
    # rows of 112 outputs: 0.5 x 112 / 122 of the 100 GFLOP/s peak; rows of 14: 0.5 x 14 / 24
    assert estimate(a, "pool", dev).t_parallel == pytest.approx(a.flops / (50e9 * 112 / 122))
    assert estimate(b, "pool", dev).t_parallel == pytest.approx(b.flops / (50e9 * 14 / 24))


def test_gemm_shape_model_prices_matmul_and_the_im2col_conv():
    from dataclasses import replace

    from mapper.costing.work import IM2COL_MIN, gemm_dims, gemm_shape_factor, im2col_bytes
    from mapper.frontend.load import graph_from_text
    from mapper.kernels.conv import IM2COL_MIN as KERNEL_IM2COL_MIN

    assert IM2COL_MIN == KERNEL_IM2COL_MIN  # the model follows the kernel's choice of path
    g = graph_from_text(
        "graph g {\n  input a : f32[4, 96, 384]\n  input x : f32[2, 64, 56, 56]\n"
        "  y = matmul(a, weight f32[384, 1536])\n"
        "  z = matmul(a, weight f32[4, 384, 32])\n"
        "  c3 = conv2d(x, weight f32[128, 64, 3, 3], padding = 1)\n"
        "  c1 = conv2d(x, weight f32[256, 64, 1, 1])\n"
        "  c1s = conv2d(x, weight f32[256, 64, 1, 1], stride = 2)\n"
        "  dw = conv2d(x, weight f32[64, 1, 3, 3], padding = 1, groups = 64)\n"
        "  output y, z, c3, c1, c1s, dw\n}\n")
    y, z, c3, c1, c1s, dw = (t for t in g.tasks if t.op in ("matmul", "conv2d"))
    assert gemm_dims(y) == (1, 4 * 96, 1536, 384)  # a 2-D right operand: the batch folds into the rows
    assert gemm_dims(z) == (4, 96, 32, 384)
    assert gemm_dims(c3) == (2, 128, 56 * 56, 64 * 9)
    assert gemm_dims(c1) == (2, 256, 56 * 56, 64) and im2col_bytes(c1) == 0.0  # the input is the matrix
    assert im2col_bytes(c3) == 2 * 56 * 56 * 64 * 9 * 4 * (1 + 1)  # the matrix written, the input read
    assert im2col_bytes(c1s) == 2 * 28 * 28 * 64 * 4 * (1 + 2)  # a strided copy reads at stride 2
    assert gemm_dims(dw) is None  # depthwise: the direct loop, priced by the class model
    from mapper.costing.work import gemm_cold

    # A, B from memory? matmul: the weight B; conv2d: the filter A, and B only for a 1x1 filter
    # without im2col whose input is a weight (here inputs and task outputs count as in cache)
    assert gemm_cold(y) == (False, True) and gemm_cold(c3) == (True, False) and gemm_cold(c1) == (True, False)
    assert gemm_shape_factor((1, 64, 32, 16), (64.0, 32.0, 16.0)) == pytest.approx(0.125)
    base = load_platform("dev-vm")
    dev = replace(base.devices[0], gemm_half_lengths=(64.0, 32.0, 16.0), im2col_gbs=4.0,
                  efficiency=(("gemm", 0.8),), overhead_us=(), overhead_us_per_mib=(), half_length=(),
                  cache_mib=None, cache_bandwidth_gbs=None, gemm_pack_ns=None, gemm_pack_cold_ns=None,
                  memory_efficiency_ops=())
    plat = replace(base, devices=(dev,))
    table = build_cost_table(g, plat)
    peak = dev.peak("f32") * 1e9
    for task in (y, z, c3, c1):
        rate = 0.8 * peak * gemm_shape_factor(gemm_dims(task), (64.0, 32.0, 16.0))
        body = max(task.flops / rate + im2col_bytes(task) / 4e9, task.bytes / (0.8 * dev.mem_bandwidth_gbs * 1e9))
        assert table.time[task.index][0] == pytest.approx(dev.launch_us * 1e-6 + body, rel=1e-9), task.name
    # without gemm_half_lengths the class model applies (conv's own efficiency)
    plain = build_cost_table(g, base)
    assert plain.time[c3.index][0] != table.time[c3.index][0]


def test_a_broadcast_operand_costs_a_full_one_in_cache():
    from dataclasses import replace

    from mapper.costing.work import in_cache_bytes
    from mapper.frontend.load import graph_from_text

    g = graph_from_text("graph g {\n  input x0 : f32[1024, 768]\n  input y0 : f32[1024, 768]\n"
                        "  x = relu(x0)\n  y = relu(y0)\n"  # task outputs: in the cache, as the model counts them
                        "  b = add(x, weight f32[768])\n  r = add(x, y)\n  output b, r\n}\n")
    bias, res = g.tasks[2:]
    assert in_cache_bytes(bias) == in_cache_bytes(res) == 3 * 1024 * 768 * 4
    assert bias.bytes < res.bytes  # the distinct bytes: the bias once
    base = load_platform("dev-vm")
    dev = replace(base.devices[0], cache_mib=64.0, cache_bandwidth_gbs=40.0, memory_efficiency_ops=(),
                  overhead_us=(), overhead_us_per_mib=())
    cached = build_cost_table(g, replace(base, devices=(dev,)))
    # in cache: loads and stores (the bias's 3 KB come from memory, a weight)
    assert cached.time[2][0] == pytest.approx(cached.time[3][0], rel=1e-3)
    uncached = build_cost_table(g, replace(base, devices=(replace(dev, cache_mib=None, cache_bandwidth_gbs=None),)))
    assert uncached.time[2][0] < uncached.time[3][0]  # from memory: the distinct bytes


def test_a_fixed_time_goes_with_the_rate_it_was_fitted_with():
    from dataclasses import replace

    from mapper.frontend.load import graph_from_text

    g = graph_from_text("graph g {\n  input x : c64[64, 1024]\n  f = fft(x)\n  i = ifft(x)\n  output f, i\n}\n")
    base = load_platform("dev-vm")
    dev = replace(base.devices[0], efficiency=(("fft", 0.5), ("ifft", 0.25)), overhead_us=(("fft", 300.0),),
                  overhead_us_per_mib=(), half_length=(), memory_efficiency_ops=())
    table = build_cost_table(g, replace(base, devices=(dev,)))
    no_t0 = build_cost_table(g, replace(base, devices=(replace(dev, overhead_us=()),)))
    assert table.time[0][0] == pytest.approx(no_t0.time[0][0] + 300e-6)  # fft: its rate with its t0
    assert table.time[1][0] == no_t0.time[1][0]  # ifft: its own rate, fitted without a t0
    # a task priced by the class's defaults still takes the class's fixed time
    plain = replace(dev, efficiency=())
    assert build_cost_table(g, replace(base, devices=(plain,))).time[1][0] == pytest.approx(
        build_cost_table(g, replace(base, devices=(replace(plain, overhead_us=()),))).time[1][0] + 300e-6)


def test_weights_and_inputs_come_from_memory_and_a_matrix_vector_product_is_not_packed():
    from dataclasses import replace

    from mapper.costing.work import cold_bytes, gemm_dims
    from mapper.frontend.load import graph_from_text

    g = graph_from_text("graph g {\n  input v : f32[1, 2048]\n  input a : f32[64, 2048]\n  input ids : i32[128]\n"
                        "  y = matmul(v, weight f32[2048, 1000])\n  z = matmul(a, weight f32[2048, 1000])\n"
                        "  e = embedding(ids, weight f32[30000, 256])\n  r = relu(e)\n  output y, z, r\n}\n")
    gemv, gemm, emb, relu = g.tasks
    assert gemm_dims(gemv) is None and gemm_dims(gemm) == (1, 64, 1000, 2048)
    assert cold_bytes(gemv) == 2048 * 1000 * 4 + 2048 * 4  # the weight and the graph input
    assert cold_bytes(emb) == 128 * 4 + 128 * 256 * 4  # the ids and the gathered rows, not the table
    assert cold_bytes(relu) == 0.0  # a task's output: just written, in the cache
    base = load_platform("dev-vm")
    dev = replace(base.devices[0], cache_mib=64.0, cache_bandwidth_gbs=40.0, mem_bandwidth_gbs=10.0,
                  memory_efficiency=0.5, memory_efficiency_ops=(), efficiency=(), overhead_us=(),
                  overhead_us_per_mib=(), half_length=())
    table = build_cost_table(g, replace(base, devices=(dev,)))
    # the GEMV is memory-bound: its 8 MB weight and its input at 0.5 x 10 GB/s, its output at 0.5 x 40 GB/s
    rest = gemv.bytes - cold_bytes(gemv)
    want = dev.launch_us * 1e-6 + (cold_bytes(gemv) / 10e9 + rest / 40e9) / 0.5
    assert table.bound[0][0] == "memory" and table.time[0][0] == pytest.approx(want, rel=1e-9)


def test_an_attention_s_vector_length_is_the_keys_a_query_attends():
    """A decode's one query over a 2,048-token cache is a long kernel: Blackwell's attention
    half-length (3,640 keys) must not price it as a length-1 one."""
    from mapper.costing.work import vector_length
    from mapper.frontend.load import graph_from_text

    graph = graph_from_text(
        "graph g {\n  input q : f16[16, 9216]\n  input p : f16[2048, 9216]\n"
        "  d = attention(q, heads = 24, seq = 1, cache = 2048, causal = 1)\n"
        "  f = attention(p, heads = 24, seq = 2048, causal = 1)\n  output d, f\n}\n", "att.tg")
    d, f = graph.tasks
    assert (vector_length(d), vector_length(f)) == (2049, 2048)

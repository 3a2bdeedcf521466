"""Executing mapped schedules with the kernels: results, failures, freeing, concurrency, CLI."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from randdag import round_robin

from mapper.cli import main
from mapper.costing.fusion import fuse
from mapper.errors import InputError, OptionsError
from mapper.frontend.load import graph_from_text
from mapper.kernels import registry
from mapper.pipeline import compile_graph
from mapper.platform.loader import load_platform
from mapper.run.execute import Execution, ExecutionError, execute, make_plan, retime
from mapper.run.trace import ErrorSummary, TaskRecord, format_trace

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

#: Small sizes for every kernel example (the examples' own ``param`` lines, shrunk).
SMALL = {
    "bert_base": "param B = 1, S = 16, H = 64, A = 4, F = 256, L = 2, V = 100",
    "gpt2_block": "param S = 32, D = 64, HEADS = 4",
    "jacobi2d": "param N = 64, K = 3, R = 2",
    "cg": "param n = 16, N = n*n",
    "fft_conv": "param B = 4, L = 256",
}

#: A small ResNet-style conv net: stem, pool, a projection and an identity bottleneck, head.
RESNET_SMALL = """
graph resnet_small {
  input image : f32[2, 3, 16, 16]
  template conv_bn_relu(x, cin = 8, cout = 8, k = 1, stride = 1, pad = 0) {
    y = relu(batchnorm(conv2d(x, weight f32[cout, cin, k, k], stride = stride, padding = pad)))
    return y
  }
  stem = conv_bn_relu(image, cin = 3, cout = 8, k = 3, stride = 2, pad = 1)
  pool = maxpool(stem, kernel = 2)
  a = conv_bn_relu(pool, cin = 8, cout = 4)
  b = conv_bn_relu(a, cin = 4, cout = 4, k = 3, pad = 1)
  c = batchnorm(conv2d(b, weight f32[16, 4, 1, 1]))
  sc = batchnorm(conv2d(pool, weight f32[16, 8, 1, 1]))
  blk = relu(add(c, sc))
  gap = avgpool(blk, kernel = 4)
  flat = reshape(gap, shape = [2, 16])
  logits = add(matmul(flat, weight f32[16, 10]), weight f32[10])
  output logits
}
"""


@cache
def small_source(name: str) -> str:
    if name == "resnet_small":
        return RESNET_SMALL
    text = (EXAMPLES / f"{name}.tg").read_text()
    new, n = re.subn(r"^param .*$", SMALL[name], text, count=1, flags=re.M)
    assert n == 1, name
    return new


@cache
def compiled(name: str, platform: str = "dev-vm", fuse: str = "auto"):
    graph = graph_from_text(small_source(name), f"{name}_small.tg")
    return compile_graph(graph, platform, mapper="heft", fuse=fuse)


def assert_same_outputs(a, b, exact: bool = False) -> None:
    assert [n for n, _ in a.outputs] == [n for n, _ in b.outputs]
    assert a.outputs, "no outputs kept"
    for (name, x), (_, y) in zip(a.outputs, b.outputs):
        assert x.shape == y.shape, name
        if exact:
            assert np.array_equal(x, y), name
        else:
            rtol, atol = registry.tolerance(x.dtype)
            np.testing.assert_allclose(x, y, rtol=max(rtol, 1e-4), atol=max(atol, 1e-4), err_msg=name)


@pytest.mark.parametrize("name", ["bert_base", "resnet_small", "gpt2_block", "jacobi2d", "cg", "fft_conv"])
def test_numba_run_equals_numpy_run(name):
    res = compiled(name).result
    graph = res.schedule.cost.graph
    fast = execute(res, repeats=1, check=True)
    ref = execute(res, repeats=1, backend="numpy")
    assert fast.checked and not ref.checked
    assert_same_outputs(fast, ref)
    assert [r.name for r in fast.records] == [t.name for t in graph.tasks]
    assert all(r.measured is not None and 0 < r.best <= r.measured for r in fast.records)
    assert all(r.modelled is None and r.error is not None for r in fast.records)  # host: CPU only
    assert fast.predicted_makespan == res.schedule.makespan
    # one device: the re-timed makespan is the sum of the measured times
    assert fast.makespan == pytest.approx(sum(r.measured for r in fast.records), rel=1e-9)
    assert fast.peak_live < fast.tensors_total  # tensors are freed after their last consumer


def test_same_seed_same_values_other_seed_other_values():
    res = compiled("gpt2_block").result
    a = execute(res, repeats=1, seed=3, check=False)
    b = execute(res, repeats=1, seed=3, check=False)
    c = execute(res, repeats=1, seed=4, check=False)
    assert_same_outputs(a, b, exact=True)
    assert not np.array_equal(a.outputs[0][1], c.outputs[0][1])


def test_concurrency_across_devices_keeps_results():
    res = round_robin(compiled("bert_base", "cpu-gpu-fpga").result)
    kinds = {res.schedule.cost.platform.devices[s.device].kind for s in res.schedule.slots}
    assert kinds == {"cpu", "gpu", "fpga"}
    par = execute(res, repeats=1, check=True)
    one = execute(res, repeats=1, check=False, max_workers=1)
    assert par.workers == 3 and one.workers == 1
    assert_same_outputs(par, one, exact=True)
    cost = res.schedule.cost
    for r in par.records:
        assert r.measured is not None  # every task ran on this CPU for its values
        if r.device_kind == "cpu":
            assert r.modelled is None and r.error is not None
        else:  # accelerators keep the cost model's time
            assert r.modelled == cost.time[r.task][r.device] and r.error is None
            assert r.actual == r.modelled
    # the reports see accelerator tasks with their modelled time only
    from mapper.report.common import resolve_run

    rows = resolve_run(res.schedule, par.report_records())
    assert [row.task for row in rows] == [r.task for r in par.records]
    for row, r in zip(rows, par.records):
        assert row.actual == (r.measured if r.device_kind == "cpu" else r.modelled)


def test_retime_with_predicted_durations_reproduces_the_schedule():
    sched = round_robin(compiled("gpt2_block", "cpu-gpu-fpga").result).schedule
    plan = make_plan(sched)
    again = retime(sched, [s.end - s.start for s in sched.slots], plan.device_order)
    assert again.makespan == pytest.approx(sched.makespan, rel=1e-12)
    for s, t in zip(sched.slots, again.slots):
        assert (t.start, t.end) == pytest.approx((s.start, s.end), rel=1e-12, abs=1e-15)


def test_plan_lanes_follow_one_topological_order():
    sched = round_robin(compiled("bert_base", "cpu-gpu-fpga").result).schedule
    graph = sched.cost.graph
    for workers in (None, 1, 2):
        plan = make_plan(sched, workers)
        pos = {t: i for i, t in enumerate(plan.order)}
        assert sorted(plan.order) == list(range(len(graph.tasks)))
        assert all(pos[e.src] < pos[e.dst] for e in graph.edges)
        assert sorted(t for lane in plan.lanes for t in lane) == list(range(len(graph.tasks)))
        for lane in plan.lanes:
            assert list(lane) == sorted(lane, key=pos.get)
    assert len(make_plan(sched, 1).lanes) == 1
    with pytest.raises(OptionsError):
        make_plan(sched, 0)


def fail_kernel(monkeypatch, failing: str) -> list[str]:
    """Make every ``failing`` kernel call raise ``ValueError("boom")``; the ops called, in order."""
    calls: list[str] = []
    real = registry.run_kernel

    def flaky(op, inputs, attrs):
        calls.append(op)
        if op == failing:
            raise ValueError("boom")
        return real(op, inputs, attrs)

    monkeypatch.setattr(registry, "run_kernel", flaky)
    return calls


def test_a_failing_part_of_a_fused_task_names_the_fused_task(monkeypatch):
    res = round_robin(compiled("bert_base", "cpu-gpu-fpga").result)
    victim = next(t for t in res.schedule.cost.graph.tasks if t.parts and t.parts[-1].op == "gelu")
    fail_kernel(monkeypatch, "gelu")
    with pytest.raises(ExecutionError) as info:
        execute(res, repeats=1, check=False)
    assert f"task {victim.name!r} (matmul+add+gelu) failed: ValueError: boom" in str(info.value)


@pytest.mark.parametrize("name", ["bert_base", "resnet_small"])
def test_fused_tasks_run_their_parts_and_match_the_unfused_run(name):
    fused, plain = compiled(name, "cpu-gpu-fpga"), compiled(name, "cpu-gpu-fpga", fuse="none")
    assert len(fused.graph.tasks) < len(plain.graph.tasks)
    a, b = execute(fused.result, repeats=1), execute(plain.result, repeats=1)  # each part checked against NumPy
    assert [n.split("+")[-1] for n, _ in a.outputs] == [n for n, _ in b.outputs]
    for (_, x), (_, y) in zip(a.outputs, b.outputs):
        np.testing.assert_array_equal(x, y)


def test_failing_task_is_named_and_the_run_stops(monkeypatch):
    res = round_robin(compiled("bert_base", "cpu-gpu-fpga", fuse="none").result)
    graph = res.schedule.cost.graph
    victim = next(t for t in graph.tasks if t.op == "gelu")
    calls = fail_kernel(monkeypatch, "gelu")
    with pytest.raises(ExecutionError) as info:
        execute(res, repeats=1, check=False)
    assert f"task {victim.name!r} (gelu) failed: ValueError: boom" in str(info.value)
    assert info.value.obj == victim.name
    # the failure (in the warm-up pass) stopped every worker: of the layernorms,
    # exactly the victim's ancestors ran, once each; its descendants never did
    ancestors: set[int] = set()
    todo = [victim.index]
    while todo:
        for p in graph.pred_tasks(todo.pop()):
            if p not in ancestors:
                ancestors.add(p)
                todo.append(p)
    norms = [t.index for t in graph.tasks if t.op == "layernorm"]
    assert 0 < len(ancestors & set(norms)) < len(norms)
    assert calls.count("layernorm") == len(ancestors & set(norms))


def test_timed_calls_are_whole_passes_over_the_schedule(monkeypatch):
    res = compiled("cg", "dev-vm").result
    graph = res.schedule.cost.graph
    calls: list[int] = []
    real = registry.run_kernel

    def counting(op, inputs, attrs):
        calls.append(op)
        return real(op, inputs, attrs)

    monkeypatch.setattr(registry, "run_kernel", counting)
    trace = execute(res, repeats=3, check=False)
    n = len(graph.tasks)
    # a warm-up pass, then 3 timed passes, each calling every task once in the plan's order
    order = [graph.tasks[t].op for t in make_plan(res.schedule).order]
    assert calls == order * 4
    assert trace.repeats == 3
    assert all(r.measured is not None and r.best <= r.measured for r in trace.records)
    assert len(trace.records) == n


def test_the_first_lane_runs_on_the_calling_thread(monkeypatch):
    """Its buffers then come from the calling thread's heap, which keeps its
    memory between passes (a new thread's arena gave it back every pass)."""
    import threading

    res = round_robin(compiled("bert_base", "cpu-gpu-fpga").result)
    plan = make_plan(res.schedule)
    assert len(plan.lanes) == 3
    seen: dict[int, set[int]] = {}
    lane_of = {t: w for w, lane in enumerate(plan.lanes) for t in lane}
    import mapper.run.execute as ex

    run_task = ex._Pass.run_task

    def spy(self, t):
        seen.setdefault(lane_of[t], set()).add(threading.get_ident())
        return run_task(self, t)

    monkeypatch.setattr(ex._Pass, "run_task", spy)
    execute(res, repeats=2, check=False)
    assert seen[0] == {threading.get_ident()}
    assert all(threading.get_ident() not in seen[w] for w in (1, 2))


def test_executions_interleave_their_passes():
    a = Execution(compiled("cg", "dev-vm").result, check=True)
    b = Execution(compiled("fft_conv", "dev-vm").result, check=False)
    for _ in range(2):
        a.timed_pass()  # the first call warms up (and checks) first
        b.timed_pass()
    ta, tb = a.trace(), b.trace()
    assert ta.repeats == tb.repeats == 2 and ta.checked and not tb.checked
    assert all(len(s) == 2 for s in a.samples + b.samples)
    assert ta.outputs and tb.outputs


def test_wrong_result_is_named_with_its_error(monkeypatch):
    res = compiled("gpt2_block").result
    real = registry.run_kernel
    monkeypatch.setattr(
        registry, "run_kernel", lambda op, xs, at: real(op, xs, at) + (0.5 if op == "gelu" else 0.0)
    )
    with pytest.raises(ExecutionError, match=r"task 'fc' \(gelu\) differs from the NumPy reference: max abs error 0.5"):
        execute(res, repeats=1)
    execute(res, repeats=1, check=False)  # without the check the run completes


def test_explicit_cost_graph_is_refused(capsys):
    heft = str(EXAMPLES / "heft_paper.tg")
    res = compile_graph(graph_from_text(Path(heft).read_text(), heft), "heft3", mapper="heft").result
    with pytest.raises(InputError, match="explicit-cost tasks without a kernel"):
        execute(res)
    assert main(["run", heft, "--platform", "heft3"]) == 2
    assert "can't be run" in capsys.readouterr().err


def test_bad_options_are_input_errors():
    res = compiled("cg").result
    with pytest.raises(OptionsError, match="backend"):
        execute(res, backend="cuda")
    with pytest.raises(OptionsError, match="repeats"):
        execute(res, repeats=0)


def test_cli_run_writes_json_html_and_trace(tmp_path, capsys):
    src = tmp_path / "jacobi_small.tg"
    src.write_text(small_source("jacobi2d"))
    out_json, out_html, out_trace = tmp_path / "run.json", tmp_path / "run.html", tmp_path / "run.trace.json"
    code = main(["run", str(src), "--platform", "cpu-gpu-fpga", "--repeats", "2", "--top", "3",
                 "--json", str(out_json), "--html", str(out_html), "--trace", str(out_trace)])
    assert code == 0
    text = capsys.readouterr().out
    assert "measured-or-modelled makespan" in text and "more tasks (shown: the 3 longest)" in text
    doc = json.loads(out_json.read_text())
    graph = fuse(graph_from_text(small_source("jacobi2d")))  # the platform has a GPU: ops are fused
    assert [t["name"] for t in doc["tasks"]] == [t.name for t in graph.tasks]
    assert "res0.sub+res0.elementwise" in [t["name"] for t in doc["tasks"]]
    assert doc["repeats"] == 2 and doc["checked"] is True and doc["graph"] == "jacobi2d"
    assert set(doc["errors"]) == {"count", "median", "p90", "max", "min_seconds"}
    assert doc["tensors"]["peak_live"] < doc["tensors"]["total"]
    assert out_html.read_text().lstrip().lower().startswith("<!doctype html")
    assert "traceEvents" in json.loads(out_trace.read_text())


def rec(task: int, measured: float, predicted: float, kind: str = "cpu") -> TaskRecord:
    err = (predicted - measured) / measured if kind == "cpu" else None
    return TaskRecord(task, f"t{task}", "add", 0, "cpu0", kind, 0.0, predicted, predicted, measured,
                      None if kind == "cpu" else predicted, err)


def test_error_summary_counts_cpu_tasks_over_a_millisecond():
    recs = (
        rec(0, 0.010, 0.011),  # +10 %
        rec(1, 0.002, 0.001),  # -50 %
        rec(2, 0.004, 0.005),  # +25 %
        rec(3, 0.0005, 0.005),  # too short: left out
        rec(4, 0.010, 0.100, kind="gpu"),  # modelled: left out
    )
    s = ErrorSummary.of(recs)
    assert s.count == 3
    assert s.median == pytest.approx(0.25)
    assert s.p90 == pytest.approx(0.5) and s.max == pytest.approx(0.5)
    assert ErrorSummary.of(recs[3:]).count == 0 and ErrorSummary.of(recs[3:]).median is None


def test_text_table_lists_the_longest_tasks_first():
    trace = execute(compiled("cg").result, repeats=1)
    text = format_trace(trace, top=2)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["task", "op", "device"]
    longest = sorted(trace.records, key=lambda r: (-r.actual, r.task))[:2]
    assert [ln.split()[0] for ln in lines[2:4]] == [r.name for r in longest]
    assert f"{len(trace.records) - 2} more tasks" in text
    assert len(format_trace(trace, top=0).splitlines()) > len(trace.records)


def test_log_sqrt_inputs_are_positive_and_infinities_compare_equal():
    src = """graph g {
  input x : f32[64]
  input y : f32[64]
  c = add(elementwise(x, fn = "log"), elementwise(y, fn = "sqrt"))
  d = div(c, elementwise(c, fn = "scale", alpha = 0.0))
  output c, d
}"""
    res = compile_graph(graph_from_text(src), "dev-vm", mapper="heft").result
    trace = execute(res, repeats=1, check=True)
    assert np.isfinite(trace.output("c")).all()
    assert np.isinf(trace.output("d")).all()


def test_matmul_and_conv_weights_are_scaled_by_a_power_of_two_near_one_over_sqrt_fan_in():
    from mapper.run.execute import TensorStore

    src = """graph g {
  input x : f32[8, 64]
  input img : f32[1, 8, 6, 6]
  y = matmul(x, weight f32[64, 16])
  c = conv2d(img, weight f32[4, 8, 3, 3])
  output y, c
}"""
    graph = graph_from_text(src)
    store = TensorStore(graph, 0, registry)
    x, w = store.operands(graph.tasks[0])
    img, k = store.operands(graph.tasks[1])
    plain = registry.make_tensor("f32", (64, 16), np.random.default_rng(0))
    assert np.std(x) == pytest.approx(1.0, rel=0.1)  # inputs: standard normal
    assert np.std(w) == pytest.approx(1 / 8, rel=0.15)  # fan-in 64: 2**-3
    assert np.std(k) == pytest.approx(1 / 8, rel=0.15)  # fan-in 8*3*3 = 72: 2**-3
    assert np.std(plain) == pytest.approx(1.0, rel=0.15)


def test_cli_checks_options_before_compiling(capsys):
    assert main(["run", str(EXAMPLES / "cg.tg"), "--platform", "dev-vm", "--repeats", "0"]) == 2
    assert "repeats must be at least 1" in capsys.readouterr().err


def test_wrong_dtype_is_named(monkeypatch):
    res = compiled("gpt2_block").result
    real = registry.run_kernel

    def widen(op, xs, at):
        out = real(op, xs, at)
        return out.astype(np.float64) if op == "gelu" else out

    monkeypatch.setattr(registry, "run_kernel", widen)
    with pytest.raises(ExecutionError, match=r"task 'fc' \(gelu\) returned dtype float64, declared f32"):
        execute(res, repeats=1)


@pytest.mark.parametrize("name", ["bert_base", "resnet_small", "gpt2_block", "jacobi2d", "cg", "fft_conv"])
def test_cli_run_on_every_small_example(name, tmp_path, capsys):
    src = tmp_path / f"{name}_small.tg"
    src.write_text(small_source(name))
    out = tmp_path / "run.json"
    assert main(["run", str(src), "--platform", "dev-vm", "--repeats", "1", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert len(doc["tasks"]) == len(graph_from_text(small_source(name)).tasks)
    assert doc["checked"] is True and all(t["measured"] is not None for t in doc["tasks"])
    assert "predicted makespan" in capsys.readouterr().out


def test_blas_pool_is_limited_while_tasks_run():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from mapper.run.execute import BLAS_THREADS, one_compute_pool

    with one_compute_pool() as blas:
        pools = [p for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
        assert blas == BLAS_THREADS == 1
        assert pools and all(p["num_threads"] == 1 for p in pools)
    trace = execute(compile_graph(graph_from_text(
        "graph g {\n  input a : f32[64, 64]\n  y = matmul(a, weight f32[64, 64])\n  output y\n}\n", "g.tg"),
        load_platform("dev-vm"), mapper="heft").result, repeats=1)
    assert trace.blas_threads == 1 and trace.numba_threads >= 1
    assert trace.to_json_dict()["threads"] == {"numba": trace.numba_threads, "blas": 1}
    assert "BLAS pool limited to 1" in format_trace(trace, 5)

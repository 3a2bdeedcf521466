"""``mapper run --calibrate``: a calibration interleaved with the timed passes prices the run."""

from __future__ import annotations

import json

import pytest

from mapper.cli import main
from mapper.costing.cost import build_cost_table
from mapper.frontend.load import graph_from_text
from mapper.pipeline import compile_graph
from mapper.platform.loader import load_platform
from mapper.run.calibrated_run import MIN_ROUNDS, calibrated_run, calibration_settings
from mapper.run.calibration.records import Settings
from mapper.run.recost import with_cpu_model

TINY = """
graph tiny {
  input x : f32[128, 128]
  a = matmul(x, weight f32[128, 128])
  b = gelu(a)
  c = add(b, x)
  output c
}
"""

#: The smallest calibration that still measures every rate (well under a second).
TINY_SETTINGS = Settings(rounds=1, gemm_sizes=(64,), gemm_budget=0.02, measure_serial=False, stream_mib=8,
                         stream_budget=0.02, launch_calls=20, probes=False, cache_sizes_mib=(1,), cache_budget=0.02)


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.tg"
    path.write_text(TINY)
    return path


@pytest.mark.slow
def test_cli_calibrates_during_the_run_and_prices_with_it(tiny, tmp_path, capsys):
    out, cal = tmp_path / "run.json", tmp_path / "cal.toml"
    code = main(["run", str(tiny), "--platform", "dev-vm", "--calibrate", "--quick-calibration", "--top", "0",
                 "--json", str(out), "--calibration-out", str(cal)])
    std = capsys.readouterr()
    assert code == 0, std.err
    lines = std.out.splitlines()
    assert lines[0].startswith("predictions: CPU model calibrated during this run (")
    assert "5 timed passes interleaved with it, 0 after); other devices as in dev-vm" in lines[0]
    assert lines[1].split()[:3] == ["task", "op", "device"]
    assert lines[-1].startswith("with dev-vm's own CPU model: predicted makespan ")
    assert "graph tiny on dev-vm (milp, backend numba, 5 repeats, seed 0, checked)" in std.out
    assert "calibrate:" not in std.out  # progress goes to stderr
    assert "calibrate: round 1/5:" in std.err and "calibrate: round 5/5:" in std.err
    doc = json.loads(out.read_text())
    info = doc["calibration"]
    assert info["during_run"] is True and (info["interleaved_passes"], info["passes_after"]) == (5, 0)
    assert info["platform_file"] == str(cal) and info["uncalibrated"]["platform"] == "dev-vm"
    assert doc["repeats"] == 5
    # the predictions are the written calibration's CPU model on the host platform's schedule
    calibrated = load_platform(str(cal))
    merged = with_cpu_model(load_platform("dev-vm"), calibrated)
    cost = build_cost_table(graph_from_text(TINY, str(tiny)), merged)
    names = [t.name for t in cost.graph.tasks]
    for rec in doc["tasks"]:
        assert rec["predicted"] == pytest.approx(cost.time[names.index(rec["name"])][0], rel=1e-9)
        assert rec["measured"] > 0
    host = build_cost_table(cost.graph, load_platform("dev-vm"))
    assert info["uncalibrated"]["predicted_makespan"] == pytest.approx(sum(r[0] for r in host.time), rel=1e-9)


def test_api_runs_the_missing_passes_after_the_calibration():
    result = compile_graph(graph_from_text(TINY, "tiny.tg"), "dev-vm", mapper="heft").result
    lines: list[str] = []
    run = calibrated_run(result, TINY_SETTINGS, repeats=3, check=False, log=lines.append)
    assert (run.interleaved, run.after) == (1, 2) and run.trace.repeats == 3
    assert lines[0].startswith("round 1/1:") and lines[-1].startswith("1 timed passes interleaved, 2 after")
    assert run.trace.predicted_makespan == run.result.schedule.makespan
    assert run.uncalibrated.predicted_makespan == result.schedule.makespan
    assert [r.measured for r in run.trace.records] == [r.measured for r in run.uncalibrated.records]
    assert run.result.schedule.device_of == result.schedule.device_of
    assert run.to_json_dict()["platform_file"] is None


def test_settings_give_at_least_the_default_repeats():
    quick, full = calibration_settings(True), calibration_settings(False)
    assert quick.rounds == full.rounds == MIN_ROUNDS >= 5 and not quick.probes
    assert full.rounds + full.probe_passes >= 5 and full.probes


def _fails(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    std = capsys.readouterr()
    assert "Traceback" not in std.err and std.out == ""
    return std.err


def test_numpy_backend_is_refused(tiny, tmp_path, capsys):
    out = tmp_path / "run.json"
    err = _fails(capsys, ["run", str(tiny), "--platform", "dev-vm", "--calibrate", "--backend", "numpy",
                          "--json", str(out), "--calibration-out", str(tmp_path / "c.toml")])
    assert "--calibrate measures the Numba kernels" in err and "--backend numpy" in err
    assert list(tmp_path.iterdir()) == [tiny]


def test_platform_without_cpu_is_refused(tiny, tmp_path, capsys):
    plat = tmp_path / "gpus.toml"
    plat.write_text('name = "gpus"\n[[device]]\nname = "g0"\nkind = "gpu"\npeak_gflops = { f32 = 1000.0 }\n'
                    "mem_bandwidth_gbs = 100.0\n")
    out = tmp_path / "cal.toml"
    err = _fails(capsys, ["run", str(tiny), "--platform", str(plat), "--calibrate", "--calibration-out", str(out)])
    assert "platform 'gpus' has no CPU device" in err
    assert not out.exists()


def test_calibration_options_need_calibrate(tiny, tmp_path, capsys):
    err = _fails(capsys, ["run", str(tiny), "--platform", "dev-vm", "--calibration-out", str(tmp_path / "c.toml")])
    assert "--calibration-out needs --calibrate" in err
    err = _fails(capsys, ["run", str(tiny), "--platform", "dev-vm", "--quick-calibration"])
    assert "--quick-calibration needs --calibrate" in err


def test_without_calibrate_the_run_is_as_before(tiny, tmp_path, capsys):
    out = tmp_path / "run.json"
    assert main(["run", str(tiny), "--platform", "dev-vm", "--backend", "numpy", "--repeats", "1",
                 "--json", str(out)]) == 0
    std = capsys.readouterr()
    assert std.out.splitlines()[0].split()[:3] == ["task", "op", "device"]
    assert "predictions:" not in std.out and std.err == ""
    assert "calibration" not in json.loads(out.read_text())

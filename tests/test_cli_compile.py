"""`mapper compile`: the CLI contract of docs/architecture.md, end to end."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mapping_signals import signal_while_mapping
from randdag import slow_to_prove_dsl

from mapper.cli import main

ROOT = Path(__file__).resolve().parent.parent
HEFT = str(ROOT / "examples" / "heft_paper.tg")
# The schedule printed in the HEFT paper (Topcuoglu et al. 2002, Fig. 3(a)).
PAPER = {
    "n1": ("p3", 0, 9), "n3": ("p3", 9, 28), "n4": ("p2", 18, 26), "n2": ("p1", 27, 40),
    "n5": ("p3", 28, 38), "n6": ("p2", 26, 42), "n9": ("p2", 56, 68), "n7": ("p3", 38, 49),
    "n8": ("p1", 57, 62), "n10": ("p2", 73, 80),
}


def compile_json(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "out.json"
    assert main(["compile", *args, "--json", str(out), "--quiet"]) == 0
    return json.loads(out.read_text())


def test_heft_reproduces_the_paper(tmp_path):
    data = compile_json(tmp_path, HEFT, "--platform", "heft3", "--mapper", "heft")
    assert data["makespan"] == 80
    assert data["mapper"] == "heft" and data["status"] == "heuristic"
    got = {t["name"]: (t["device"], t["start"], t["end"]) for t in data["tasks"]}
    assert got == PAPER
    for key in ("makespan", "mapper", "status", "lower_bound", "gap", "tasks", "transfers", "devices"):
        assert key in data


def test_milp_proves_an_optimum_no_worse_than_heft(tmp_path):
    data = compile_json(tmp_path, HEFT, "--platform", "heft3", "--mapper", "milp", "--time-limit", "20")
    assert data["status"] == "optimal"
    assert data["makespan"] <= 80
    assert data["gap"] == pytest.approx(0.0, abs=1e-6)
    assert data["lower_bound"] == pytest.approx(data["makespan"], rel=1e-6)


def test_output_is_byte_identical_across_runs(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for out in (a, b):
        assert main(["compile", HEFT, "--platform", "heft3", "--mapper", "peft", "--json", str(out), "-q"]) == 0
    assert a.read_bytes() == b.read_bytes()


def test_summary_and_comparison_are_printed(capsys):
    assert main(["compile", HEFT, "--platform", "heft3", "--mapper", "heft", "--compare", "cpop,peft"]) == 0
    out = capsys.readouterr().out
    assert "makespan" in out and "lower bound" in out and "status" in out
    for name in ("heft", "cpop", "peft"):
        assert name in out


def test_reports_are_written(tmp_path):
    files = {ext: tmp_path / f"r.{ext}" for ext in ("html", "trace", "dot")}
    assert main([
        "compile", HEFT, "--platform", "heft3", "--mapper", "heft", "-q",
        "--html", str(files["html"]), "--trace", str(files["trace"]), "--dot", str(files["dot"]),
    ]) == 0
    assert "<svg" in files["html"].read_text()
    assert json.loads(files["trace"].read_text())["traceEvents"]
    assert files["dot"].read_text().startswith("digraph")


def test_dump_after_lower_prints_the_graph_and_stops(capsys, tmp_path):
    out = tmp_path / "never.json"
    assert main(["compile", HEFT, "--platform", "heft3", "--dump-after", "lower", "--json", str(out)]) == 0
    assert "n10" in capsys.readouterr().out
    assert not out.exists()


@pytest.mark.parametrize(
    "stage, needle",
    [("parse", "top-level items"), ("lower", "n10"), ("platform", "p3 (cpu)"),
     ("cost", "cost of heft_paper"), ("map", "makespan"), ("validate", "makespan")],
)
def test_dump_after_every_stage(stage, needle, capsys):
    args = ["compile", HEFT, "--platform", "heft3", "--mapper", "heft", "--compare", "peft"]
    assert main([*args, "--dump-after", stage]) == 0
    assert needle in capsys.readouterr().out


def test_infeasible_pin_exits_3_naming_the_constraint(tmp_path):
    src = tmp_path / "pinned.tg"
    src.write_text("graph g {\n  task a cost { p1: 1, p2: 2 } @p3\n}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "mapper", "compile", str(src), "--platform", "heft3", "--mapper", "heft"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "'a'" in proc.stderr or " a " in proc.stderr


SMALL_GPU = """
name = "small-gpu"
[[device]]
name = "cpu0"
kind = "cpu"
peak_gflops = { f32 = 1000.0 }  # test value
mem_bandwidth_gbs = 100.0  # test value
[[device]]
name = "gpu0"
kind = "gpu"
peak_gflops = { f32 = 10000.0 }  # test value
mem_bandwidth_gbs = 1000.0  # test value
memory_gib = 1  # test value
[[link]]
from = "cpu0"
to = "gpu0"
bandwidth_gbs = 16.0  # test value
bidirectional = true
"""


@pytest.mark.parametrize("mapper", ["heft", "milp"])
def test_gpu_too_small_for_a_pinned_task_exits_3(mapper, tmp_path, capsys):
    (tmp_path / "small.toml").write_text(SMALL_GPU)
    src = tmp_path / "big.tg"
    src.write_text("param N = 16384\ngraph big {\n  input a : f32[N, N]\n"
                   "  c = matmul(a, weight f32[N, N]) @gpu\n  output c\n}\n")
    code = main(["compile", str(src), "--platform", str(tmp_path / "small.toml"), "--mapper", mapper])
    err = capsys.readouterr().err
    assert code == 3
    assert "big.tg:4:7: error: task c can run on no device" in err
    assert "footprint 3 GiB exceeds memory 1 GiB" in err and "placement @gpu excludes cpu0" in err


@pytest.mark.parametrize(
    "args, needle",
    [
        (["nope.tg", "--platform", "heft3"], "nope.tg"),
        ([HEFT, "--platform", "no-such-platform"], "no-such-platform"),
        ([HEFT, "--platform", "heft3", "--mapper", "nonsense"], "nonsense"),
        ([HEFT, "--platform", "heft3", "--time-limit", "-1"], "--time-limit"),
    ],
)
def test_bad_input_exits_2_without_traceback(args, needle, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "mapper", "compile", *args], capture_output=True, text=True, timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert needle in proc.stderr


def test_ctrl_c_keeps_the_best_incumbent(tmp_path):
    """SIGINT during a long exact search ends it; the report is written."""
    out = tmp_path / "out.json"
    src = tmp_path / "slow.tg"
    src.write_text(slow_to_prove_dsl(n=100))
    proc = subprocess.Popen(
        [sys.executable, "-m", "mapper", "compile", str(src),
         "--platform", "cpu-gpu-fpga", "--time-limit", "300", "--json", str(out), "--verbose"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        signal_while_mapping(proc, signal.SIGINT)  # delivered while mapping, however fast the machine
        t0 = time.monotonic()
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    assert time.monotonic() - t0 < 60
    data = json.loads(out.read_text())
    assert any("interrupted" in n for n in data["notes"])
    assert data["status"] in ("feasible", "heuristic", "optimal")
    assert len(data["tasks"]) == 100
    assert "Traceback" not in stderr

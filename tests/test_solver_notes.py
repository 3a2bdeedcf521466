"""Solver notes in the user's words, and a shipped example whose best mapping uses more than one
kind of device (README.md, "A mapping that uses several kinds of device")."""

from __future__ import annotations

import re
from pathlib import Path

from mapper.core.units import fmt_time
from mapper.engine.schedule import ScheduleOptions
from mapper.engine.validate import validate
from mapper.mapping.base import MapOptions
from mapper.options import CompileOptions
from mapper.pipeline import compile_graph

ROOT = Path(__file__).resolve().parent.parent
STREAMING = MapOptions(schedule=ScheduleOptions(streaming=True))
#: Solver jargon the notes no longer use.
JARGON = ("binaries", " rows", "literals", "NOT taken", "warm start", "returning", "was not needed", "hint from")


def _notes(result) -> str:
    return "\n".join(result.notes)


def test_a_streamed_chain_has_no_contradictory_notes():
    r = compile_graph(str(ROOT / "examples/stream_stencil.tg"), "cpu-gpu-fpga", STREAMING).result
    text = _notes(r)
    assert "infeasible" not in text  # CP-SAT is bounded by the warm start in its own model, not the streamed one
    assert not any(word in text for word in JARGON), text
    # the MILP started from the heuristic's schedule, valued in the MILP's model (the delay model)
    assert re.search(r"^MILP: .*; started from \w+'s schedule \(5\.387 ms in its model\)", text, re.M), text
    assert "not proven optimal with streaming, and its gap is to a lower bound that allows it" in text
    assert r.status == "feasible" and not validate(r.schedule)


def test_the_default_mapper_says_why_the_milp_did_not_run():
    r = compile_graph(str(ROOT / "examples/heft_paper.tg"), "heft3").result
    assert r.status == "optimal"
    assert r.notes[-1].startswith("CP-SAT proved this schedule optimal, so the MILP did not run (this mapper runs "
                                  "CP-SAT first, then the MILP when CP-SAT has not proved it)")
    assert not any(word in _notes(r) for word in JARGON), r.notes


def _kinds(result) -> set[str]:
    plat = result.schedule.cost.platform
    return {plat.devices[s.device].kind for s in result.schedule.slots}


def test_sensor_fusion_uses_the_fpga_and_the_gpu_and_beats_one_device():
    path = str(ROOT / "examples/sensor_fusion.tg")
    compiled = compile_graph(path, "cpu-gpu-fpga", CompileOptions(mapping=STREAMING, compare=("single",)))
    best, single = compiled.result, compiled.compare[0]
    assert _kinds(best) == {"gpu", "fpga"} and not validate(best.schedule)
    plat = best.schedule.cost.platform
    names = {t.name: plat.devices[s.device].kind for t, s in zip(best.schedule.cost.graph.tasks, best.schedule.slots)}
    assert {k for n, k in names.items() if n.startswith("s")} == {"fpga"}  # the streamed chain
    assert {k for n, k in names.items() if n.startswith("y")} == {"gpu"}  # the GEMM
    assert best.schedule.makespan < 0.6 * single.schedule.makespan  # 1.8x (README)
    # without streaming the FPGA does not pay: everything on the GPU, proven
    plain = compile_graph(path, "cpu-gpu-fpga").result
    assert _kinds(plain) == {"gpu"} and plain.status == "optimal"
    # the README shows these figures
    readme = (ROOT / "README.md").read_text()
    for figure in (best.schedule.makespan, single.schedule.makespan):
        assert fmt_time(figure) in readme, fmt_time(figure)
    assert f"{single.schedule.makespan / best.schedule.makespan:.2f}x" in readme
    assert "mapper compile examples/sensor_fusion.tg --platform cpu-gpu-fpga --streaming --compare single" in readme

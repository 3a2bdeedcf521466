"""What a new user reads: exit 3 when nothing fits, summaries that agree with their notes,
units, readable numbers, one bound for a comparison, and the plan in a section of its own."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mapper.cli import main
from mapper.core import units
from mapper.engine.memory import peak_memory
from mapper.engine.validate import validate
from mapper.frontend.sources import ModelFile
from mapper.mapping.base import MapOptions
from mapper.pipeline import compile_graph
from mapper.serving.driver import Serving

ROOT = Path(__file__).resolve().parent.parent
GPT = str(ROOT / "examples" / "gpt.tg")
LLAMA = str(ROOT / "examples" / "llama.tg")
HEFT = str(ROOT / "examples" / "heft_paper.tg")
JACOBI = str(ROOT / "examples" / "jacobi2d.tg")
SMALL_GPT = ["--param", "LAYERS=4", "--param", "HIDDEN=1024", "--param", "HEADS=16", "--param", "BATCH=64"]
MID = (("LAYERS", 8), ("HIDDEN", 4096), ("HEADS", 32), ("VOCAB", 51200))
GIB = 2.0**30

TWO = """
name = "two"
[[device]]
name = "d0"
kind = "cpu"
memory_gib = 1  # test value
[[device]]
name = "d1"
kind = "cpu"
memory_gib = 1  # test value
"""


def _graph(n: int) -> str:
    """``n`` independent tasks of 600 MiB each, five times faster on d0 than on d1."""
    body = "".join(f"  task t{i} cost {{ d0: 1, d1: 5 }} memory 600 MiB\n" for i in range(n))
    return f"graph g{n} {{\n{body}}}\n"


# -- 1. nothing fits: exit 3 with the device and the bytes ---------------------------------
def test_a_training_step_no_plan_fits_exits_3_naming_the_device_and_bytes(capsys):
    code = main(["compile", LLAMA, "--param", "LAYERS=2", "--platform", "dgx-a100", "--train", "--parallel", "auto"])
    err = capsys.readouterr().err
    assert code == 3, err
    assert "no plan of llama fits the devices' memory" in err and "on cpu0, which has 2 TiB" in err
    assert re.search(r"needs [\d.]+ TiB on cpu0", err)
    assert "gpu0" in err and "exceeds memory 80 GiB" in err  # why the GPUs were left out
    assert "Traceback" not in err


def test_tasks_too_big_for_the_gpus_are_said_to_be_so(capsys):
    assert main(["compile", LLAMA, "--param", "LAYERS=2", "--platform", "dgx-a100", "--mapper", "heft"]) == 0
    text = capsys.readouterr().out
    note = next(line for line in text.splitlines() if "too big for" in line)
    assert "the 8 devices gpu0 .. gpu7" in note and "memory 80 GiB) ran on cpu0" in note


def test_a_mapping_whose_static_footprints_overflow_but_whose_peak_fits_is_repaired():
    """HEFT's delay-model mapping of this step holds 80.98 GiB on an 80 GiB GPU, and no mapping's
    summed static footprints fit: the repair keeps tasks off the full GPU until the peak fits."""
    got = compile_graph(ModelFile(LLAMA, params=(("LAYERS", 2),)), "dgx-a100", mapper="heft")
    sched = got.result.schedule
    assert all(p.bytes <= c for p, c in zip(peak_memory(sched), sched.cost.memory_capacity))
    assert validate(sched) == [] and sched.cost is got.cost
    assert any("kept off full devices" in n for n in got.result.notes)
    assert got.result.lower_bound is not None and got.result.lower_bound <= got.result.objective_value


@pytest.mark.parametrize("mapper", ["heft", "milp"])
def test_a_mapping_the_devices_cannot_hold_is_remapped_or_exits_3(mapper, tmp_path, capsys):
    (tmp_path / "two.toml").write_text(TWO)
    (tmp_path / "two.tg").write_text(_graph(2))
    (tmp_path / "three.tg").write_text(_graph(3))
    out = tmp_path / "two.json"
    assert main(["compile", str(tmp_path / "two.tg"), "--platform", str(tmp_path / "two.toml"), "--mapper", mapper,
                 "--json", str(out), "-q"]) == 0
    doc = json.loads(out.read_text())
    assert sorted(t["device"] for t in doc["tasks"]) == ["d0", "d1"]  # the delay model wanted both on d0
    assert any("mapped again with each device's memory enforced" in n for n in doc["notes"])
    code = main(["compile", str(tmp_path / "three.tg"), "--platform", str(tmp_path / "two.toml"), "--mapper", mapper])
    err = capsys.readouterr().err
    assert code == 3
    assert "fits the devices' memory" in err and "1.758 GiB on d0, which has 1 GiB" in err


def test_every_declared_result_fits_its_devices(tmp_path):
    (tmp_path / "two.toml").write_text(TWO)
    (tmp_path / "two.tg").write_text(_graph(2))
    got = compile_graph(tmp_path / "two.tg", tmp_path / "two.toml", mapper="heft", compare=("cpop", "peft"))
    for r in (got.result, *got.compare):
        caps = r.schedule.cost.memory_capacity
        assert all(p.bytes <= c for p, c in zip(peak_memory(r.schedule), caps))
        assert validate(r.schedule) == []


# -- 3. summaries agree with their notes ------------------------------------------------------
def _peak_column(text: str) -> list[str]:
    rows = text.split("\n\n")[0].splitlines()[2:]
    return [" ".join(r.split()[-2:]) for r in rows]


def test_a_cluster_plan_s_device_table_shows_the_plan_s_memory(tmp_path, capsys):
    html = tmp_path / "c.html"
    assert main(["compile", GPT, *SMALL_GPT, "--platform", "selene", "--nodes", "2", "--train", "--optimizer",
                 "adam", "--parallel", "auto", "--html", str(html)]) == 0
    text = capsys.readouterr().out
    note = next(line for line in text.splitlines() if "parallel: peak memory" in line)
    per_gpu = note.split("peak memory ")[1].split(" per GPU")[0]
    peaks = _peak_column(text)
    assert per_gpu in peaks and "0 B" not in peaks
    page = html.read_text()
    assert "0 FLOP, 0 B" not in page
    assert re.search(r'data-key="work"><td>work</td><td>[\d.]+ [TPE]FLOP per step', page)


def test_an_inference_request_s_device_table_shows_the_layout_s_memory(capsys):
    assert main(["compile", GPT, "--param", "LAYERS=2", "--param", "HIDDEN=256", "--param", "HEADS=4",
                 "--param", "VOCAB=1000", "--platform", "dgx-a100", "--inference", "prefill=64,decode=4",
                 "--parallel", "auto"]) == 0
    text = capsys.readouterr().out
    note = next(line for line in text.splitlines() if "inference: memory" in line)
    per_gpu = note.split("inference: memory ")[1].split(" per GPU")[0]
    assert per_gpu in _peak_column(text) and "0 B" not in _peak_column(text)


# -- 4. units -------------------------------------------------------------------------------
def test_an_energy_bound_is_in_joules_in_the_terminal_and_the_html(tmp_path, capsys):
    html = tmp_path / "e.html"
    assert main(["compile", JACOBI, "--platform", "cpu-gpu-fpga", "--objective", "energy", "--html", str(html)]) == 0
    text = capsys.readouterr().out
    bound = next(line for line in text.splitlines() if line.startswith("lower bound"))
    assert bound.rstrip().endswith("J") and not bound.rstrip().endswith(" s")
    page = html.read_text()
    cell = re.search(r'data-key="lower bound"><td>lower bound</td><td>([^<]*)<', page)
    assert cell is not None and cell.group(1).endswith("J")


# -- 5. readable numbers ----------------------------------------------------------------------
def test_numbers_are_read_at_a_readable_scale():
    assert units.fmt_pct(3.9e-8) == "< 0.001 %" and "e" not in units.fmt_pct(2.6e-7)
    assert units.fmt_rate(1.725e5, "tokens/s") == "172,500 tokens/s"
    assert units.fmt_rate(19.27, "tokens/s") == "19.27 tokens/s"
    held, has = units.fmt_bytes_pair(80 * GIB + 2**20, 80 * GIB)
    assert held != has and has == "80 GiB"
    assert units.fmt_time(5674.0).endswith(" h") and units.fmt_time(3.436 * 3600).endswith(" h")
    assert units.fmt_energy(0.0235) == "23.5 mJ" and units.fmt_count(3.388e18, "FLOP") == "3.388 EFLOP"
    assert units.fmt_n(1, "micro-batch") == "1 micro-batch" and units.fmt_n(24, "micro-batch") == "24 micro-batches"


def test_a_cluster_report_has_no_exponents(capsys):
    assert main(["compile", GPT, *SMALL_GPT, "--platform", "selene", "--nodes", "2", "--train", "--optimizer",
                 "adam", "--parallel", "auto"]) == 0
    text = capsys.readouterr().out
    assert not re.search(r"\d[eE][+-]\d", text), text


# -- 6. one bound for a comparison ----------------------------------------------------------
def test_compare_measures_every_row_against_the_best_bound(capsys):
    assert main(["compile", HEFT, "--platform", "heft3", "--compare", "heft,cpop,peft"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()
            if line.split() and line.split()[0] in ("milp", "heft", "cpop", "peft") and "x" in line}
    assert rows["milp"][1] == "optimal"
    assert rows["heft"][-4:-2] == ["8.8", "%"]  # 80 against the proven 73
    bounds = {r[-6] + r[-5] for r in rows.values()}
    assert bounds == {"73s"}


# -- 7. the plan in its own section --------------------------------------------------------
def test_the_plan_has_its_own_section_in_text_and_html(tmp_path, capsys):
    html, out = tmp_path / "p.html", tmp_path / "p.json"
    assert main(["compile", LLAMA, "--param", "LAYERS=2", "--platform", "dgx-a100", "--inference",
                 "prefill=128,decode=16,batch=8", "--parallel", "auto", "--html", str(html), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "\nplan\n  layout" in text and "on gpu0" not in text
    plan = text.split("\nplan\n")[1]
    assert re.search(r"  GPUs +\d+ of 8 GPUs", plan) and re.search(r"  batch +8 sequences", plan)
    page = html.read_text()
    assert '<section id="plan"><h2>Plan</h2>' in page and 'data-key="layout"' in page
    doc = json.loads(out.read_text())
    assert doc["inference"]["batch"] == 8 and "plan" in doc["parallel"]  # the contract keeps its keys
    # the decode step's Gantt folds its nearly empty link lanes into one
    lanes = re.findall(r'<g class="lane link-lane" data-link="([^"]*)"', page)
    assert len(lanes) <= 8 and len(lanes) == len(set(lanes))


def test_runners_up_never_carry_the_chosen_plan_s_name(capsys):
    assert main(["compile", LLAMA, "--param", "LAYERS=4", "--platform", "fleet-a100-v100", "--nodes",
                 "a100=2,v100=2", "--train", "--parallel", "auto"]) == 0
    text = capsys.readouterr().out
    layout = re.search(r"\n  layout +(.*)\n", text)
    assert layout is not None
    runners = next(line for line in text.splitlines() if "runners-up" in line).split("runners-up ")[1]
    names = [re.sub(r" [\d.,]+ (ms|s|h)( \(too big\))?$", "", r) for r in runners.split("; ")]
    assert layout.group(1) not in names


def test_batch_auto_names_one_largest_batch():
    got = compile_graph(ModelFile(GPT, params=MID), "dgx-a100", mapper="heft", options=MapOptions(),
                        parallel="auto", serving=Serving.parse("prefill=64,decode=8,batch=auto", "graph"))
    notes = " ".join(got.result.notes)
    assert "the largest that fits:" not in notes and "largest batch that fits:" not in notes
    assert "this layout holds at most" in notes

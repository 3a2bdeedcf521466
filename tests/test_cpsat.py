"""The `cpsat` mapper (OR-Tools CP-SAT) agrees with the MILP where both prove optima."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from randdag import heft_paper_example, random_instance

from mapper.cli import main
from mapper.mapping import get_mapper
from mapper.mapping.base import MapOptions
from mapper.schedule import ScheduleOptions
from mapper.validate import validate

HEFT = str(Path(__file__).resolve().parent.parent / "examples" / "heft_paper.tg")


def both(cost, options: MapOptions):
    out = []
    for name in ("cpsat", "milp"):
        result = get_mapper(name).map(cost, options)
        assert not validate(result.schedule), name
        assert result.mapper == name
        out.append(result)
    return out


def test_the_heft_paper_example_is_solved_to_the_milp_optimum():
    cp, milp = both(heft_paper_example(), MapOptions(time_limit=20))
    assert cp.status == milp.status == "optimal"
    assert cp.objective_value == pytest.approx(milp.objective_value, rel=1e-6)
    assert cp.lower_bound == pytest.approx(cp.objective_value, rel=1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_random_instances_match_the_milp(seed):
    cost = random_instance(seed, 6 + seed % 3, n_devices=3, explicit_comm=seed % 2 == 0)
    cp, milp = both(cost, MapOptions(time_limit=20, seed=seed))
    assert cp.status == "optimal" and milp.status == "optimal"
    assert cp.objective_value == pytest.approx(milp.objective_value, rel=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_budgets_are_kept(seed):
    cost = random_instance(seed + 10, 8, n_devices=3, budgets=True)
    options = MapOptions(time_limit=20, schedule=ScheduleOptions(memory=True, area=True))
    cp, milp = both(cost, options)
    assert cp.objective_value == pytest.approx(milp.objective_value, rel=1e-6)


@pytest.mark.parametrize("model", ["device-load", "1f1b"])
def test_throughput_models(model):
    cost = random_instance(3, 7, n_devices=3)
    cost = replace(cost, platform=replace(cost.platform, throughput_model=model, micro_batches=4))
    cp, milp = both(cost, MapOptions(objective="throughput", time_limit=20))
    assert cp.status == milp.status == "optimal"
    assert cp.objective_value == pytest.approx(milp.objective_value, rel=1e-6)


def test_energy_under_a_makespan_bound():
    cost = random_instance(5, 7, n_devices=3)
    fastest = get_mapper("milp").map(cost, MapOptions(time_limit=20)).objective_value
    options = MapOptions(objective="energy", makespan_bound=1.3 * fastest, time_limit=20)
    cp, milp = both(cost, options)
    assert cp.schedule.makespan <= 1.3 * fastest * (1 + 1e-9)
    assert cp.objective_value == pytest.approx(milp.objective_value, rel=1e-6)


def test_the_cli_lists_and_runs_it(capsys, tmp_path):
    assert main(["mappers"]) == 0
    assert "cpsat" in capsys.readouterr().out
    assert main(["compile", HEFT, "--platform", "heft3", "--mapper", "cpsat", "-q",
                 "--json", str(tmp_path / "r.json")]) == 0


def _sigint_of_a_new_process() -> str:
    import subprocess
    import sys

    code = ("import signal; print(signal.getsignal(signal.SIGINT)); print(''.join(l for l in "
            "open('/proc/self/status') if l.startswith(('SigBlk', 'SigIgn'))))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout


def test_ctrl_c_stays_with_the_caller():
    """CP-SAT's own SIGINT handling is off: a solve (the CLI's way, with its interrupt
    handler) changes neither this process's Ctrl-C nor that of a process started later."""
    import signal

    before, child_before = signal.getsignal(signal.SIGINT), _sigint_of_a_new_process()
    assert main(["compile", HEFT, "--platform", "heft3", "--mapper", "cpsat", "-q"]) == 0
    assert signal.getsignal(signal.SIGINT) is before
    assert _sigint_of_a_new_process() == child_before

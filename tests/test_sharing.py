"""Jobs on GPU slices (mapper.serving.sharing): the exact placement against brute force, a jobs
file on MIG slices end to end, MPS shares said to be upper bounds, and bad jobs files."""

from __future__ import annotations

import json
import math
import random
from importlib import resources

import pytest

from mapper.cli import main
from mapper.platform.loader import load_platform
from mapper.serving.sharing import Jobs, brute_force, greedy, slice_devices, solve, used

SMALL = """
graph {name} {{
  input x : f32[{n}, 512]
  h = relu(matmul(x, weight f32[512, 512]))
  y = softmax(matmul(h, weight f32[512, 64]))
  output y
}}
"""
HUGE = """
graph huge {
  input x : f32[1, 120000]
  y = matmul(x, weight f32[120000, 120000])
  output y
}
"""


def _random_jobs(rng: random.Random, n: int, m: int) -> Jobs:
    speed = [rng.uniform(0.5, 4.0) for _ in range(m)]
    work = [rng.uniform(0.1, 2.0) for _ in range(n)]
    times = tuple(tuple(math.inf if rng.random() < 0.1 else w / s * rng.uniform(0.8, 1.25) for s in speed)
                  for w in work)
    return Jobs(tuple(rng.uniform(1.0, 10.0) for _ in range(n)), times,
                tuple(rng.uniform(1.0, 4.0) for _ in range(n)), tuple(rng.uniform(3.0, 9.0) for _ in range(m)))


@pytest.mark.parametrize("seed", range(12))
def test_placement_matches_brute_force(seed):
    rng = random.Random(seed)
    jobs = _random_jobs(rng, rng.randint(2, 6), rng.randint(2, 4))
    best = brute_force(jobs)
    got = solve(jobs)
    if best is None:
        assert got is None
        return
    assert got is not None and jobs.fits(got.assign)
    assert max(jobs.loads(got.assign)) == pytest.approx(best.load, rel=1e-6)
    assert got.load == pytest.approx(best.load, rel=1e-6) and got.status == "optimal"
    assert used(got.assign) == used(best.assign)
    assert got.bound <= got.load * (1 + 1e-6)
    start = greedy(jobs)
    assert start is None or start.load >= best.load * (1 - 1e-9)


def test_hand_case_loads():
    # two slices, the second twice as fast; three jobs at 1 request/s
    jobs = Jobs((1.0, 1.0, 1.0), ((0.4, 0.2), (0.4, 0.2), (0.2, 0.1)), (1.0, 1.0, 1.0), (10.0, 10.0))
    plan = solve(jobs)
    assert plan is not None and plan.load == pytest.approx(0.4)  # one 0.4 job on the slow slice, the rest fast
    assert sorted(jobs.loads(plan.assign)) == pytest.approx([0.3, 0.4]) or \
        sorted(jobs.loads(plan.assign)) == pytest.approx([0.4, 0.4])


@pytest.fixture
def jobdir(tmp_path):
    (tmp_path / "a.tg").write_text(SMALL.format(name="a", n=1))
    (tmp_path / "b.tg").write_text(SMALL.format(name="b", n=64))
    (tmp_path / "huge.tg").write_text(HUGE)
    return tmp_path


def _jobs(where, doc) -> str:
    path = where / "jobs.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_jobs_on_mig_slices_end_to_end(jobdir, capsys):
    jobs = _jobs(jobdir, {"jobs": [{"file": "a.tg", "rate": 1000}, {"file": "b.tg", "period_ms": 2},
                                   {"file": "a.tg", "rate": 500, "slo_ms": 50}]})
    out = jobdir / "out.json"
    assert main(["compile", jobs, "--platform", "a100-mig", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "jobs on slices" in text and "MIG slices are isolated" in text
    d = json.loads(out.read_text())
    share = d["apps"]["sharing"]
    assert share["status"] == "optimal" and [j["name"] for j in share["jobs"]] == ["a", "b", "a_2"]
    names = {s["name"] for s in share["slices"]}
    for job in share["jobs"]:
        assert job["slice"] in names and job["throughput"] >= job["rate"] * share["scale"] * (1 - 1e-9)
    # every task of a job runs on its slice in the schedule
    where = {j["name"]: j["slice"] for j in share["jobs"]}
    for t in d["tasks"]:
        assert t["device"] == where[t["name"].split(".")[0]]
    assert [m["slo_ms"] for m in d["apps"]["models"]] == [None, None, 50.0]
    assert [j["latency"] for j in share["jobs"]] == [m["latency"] for m in d["apps"]["models"]]
    assert all(j["latency"] >= j["request_s"] * (1 - 1e-9) for j in share["jobs"])
    assert max(s["load"] for s in share["slices"]) == pytest.approx(share["load"])


def test_mps_shares_are_said_to_be_upper_bounds(jobdir, capsys):
    text = (resources.files("mapper.platforms") / "a100-mig.toml").read_text(encoding="utf-8")
    plat = jobdir / "mps.toml"
    lines = [ln for ln in text.splitlines() if not ln.startswith("mig = ")]
    out = "\n".join(lines).replace('kind = "gpu"', 'kind = "gpu"\nmps_percent = 25').replace("a100-mig", "a100-mps")
    plat.write_text(out)
    assert {load_platform(str(plat)).devices[d].mps_percent for d in slice_devices(load_platform(str(plat)))} == {25}
    jobs = _jobs(jobdir, {"jobs": [{"file": "a.tg", "rate": 100}, {"file": "b.tg", "rate": 100}]})
    assert main(["compile", jobs, "--platform", str(plat)]) == 0
    assert "interference is not modelled" in capsys.readouterr().out


def test_job_too_big_for_every_slice_exits_3(jobdir, capsys):
    jobs = _jobs(jobdir, {"jobs": [{"file": "a.tg", "rate": 10}, {"file": "huge.tg", "rate": 1}]})
    assert main(["compile", jobs, "--platform", "a100-mig", "-q"]) == 3
    err = capsys.readouterr().err
    assert "'huge'" in err and "Traceback" not in err


@pytest.mark.parametrize("doc, where, says", [
    ({"jobs": [{"file": "a.tg"}]}, "$.jobs[0]", "period_ms or its rate"),
    ({"jobs": [{"file": "a.tg", "rate": 5, "period_ms": 3}]}, "$.jobs[0]", "period_ms or its rate"),
    ({"jobs": [{"file": "a.tg", "rate": -5}]}, "$.jobs[0].rate", "expected a finite number"),
    ({"jobs": [{"file": "a.tg", "rate": "5"}]}, "$.jobs[0].rate", "expected a number"),
    ({"jobs": [{"file": "a.tg", "rate": 5, "slo_ms": 0}]}, "$.jobs[0].slo_ms", "positive number of milliseconds"),
    ({"jobs": [], "models": []}, "$", "\"models\" or \"jobs\""),
    ({"jobs": [{"file": "a.tg", "rate": 5, "gpu": "x"}]}, "$.jobs[0].gpu", "unknown key 'gpu'"),
])
def test_bad_jobs_file_exits_2_naming_the_place(jobdir, capsys, doc, where, says):
    path = _jobs(jobdir, doc)
    assert main(["compile", path, "--platform", "a100-mig", "-q"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: {where}" in err and says in err and "Traceback" not in err


def test_a_label_that_prefixes_another_keeps_its_own_tasks(jobdir):
    (jobdir / "a.b.tg").write_text(SMALL.format(name="ab", n=64))
    jobs = _jobs(jobdir, {"jobs": [{"file": "a.tg", "rate": 10}, {"file": "a.b.tg", "rate": 10}]})
    out = jobdir / "out.json"
    assert main(["compile", jobs, "--platform", "h100-mig", "-q", "--json", str(out)]) == 0
    share = json.loads(out.read_text())["apps"]["sharing"]
    assert [j["name"] for j in share["jobs"]] == ["a", "a.b"]
    assert share["jobs"][0]["request_s"] < share["jobs"][1]["request_s"]  # batch 1 against batch 64
    assert share["jobs"][0]["slice"] != share["jobs"][1]["slice"]


def test_jobs_on_slices_refuse_training(jobdir, capsys):
    jobs = _jobs(jobdir, {"jobs": [{"file": "a.tg", "rate": 10}]})
    assert main(["compile", jobs, "--platform", "a100-mig", "--train", "-q"]) == 2
    assert "--train" in capsys.readouterr().err
